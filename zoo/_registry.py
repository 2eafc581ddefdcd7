"""`zoo.make`: agents by name, as `zoo.register` named them (each agent's
module registers its class; importing `zoo` imports them all)."""

import dataclasses
import difflib
from typing import Any

from ._agent import AGENTS, DEFAULT_ENVS, AbstractAgent


def names() -> list[str]:
    """The names `zoo.make` accepts, sorted."""
    return sorted(AGENTS)


def default_env(name: str) -> str:
    """The env agent `name` trains on when a config names none (its
    `zoo.register(..., default_env=...)`)."""
    _lookup(name)
    return DEFAULT_ENVS[name.lower()]


def hyperparameters(name: str) -> dict[str, Any]:
    """The hyperparameters of agent `name` with their defaults."""
    cls = _lookup(name)
    return {f.name: f.default for f in dataclasses.fields(cls)}


def _lookup(name: str) -> type[AbstractAgent]:
    cls = AGENTS.get(name.lower())
    if cls is None:
        close = difflib.get_close_matches(name.lower(), AGENTS, n=2, cutoff=0.4)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown agent {name!r}.{hint} Valid agents: {names()}")
    return cls


def make(name: str, **hparams: Any) -> AbstractAgent:
    """Build agent `name` (one of `names()`) with hyperparameter overrides.

    **Raises:** `ValueError` for an unknown agent or hyperparameter (listing the
    valid ones), or an invalid value.
    """
    cls = _lookup(name)
    valid = hyperparameters(name)
    unknown = sorted(set(hparams) - set(valid))
    if unknown:
        close = {
            k: difflib.get_close_matches(k, valid, n=1, cutoff=0.6) for k in unknown
        }
        hints = "".join(
            f" ({k!r}: did you mean {v[0]!r}?)" for k, v in close.items() if v
        )
        raise ValueError(
            f"unknown hyperparameter(s) {unknown} for agent {name!r}.{hints} "
            f"Valid ones: {sorted(valid)}"
        )
    for key, value in hparams.items():
        default = valid[key]
        if isinstance(default, tuple) and isinstance(value, list):
            hparams[key] = value = tuple(value)
        if not _type_ok(default, value):
            raise ValueError(
                f"hyperparameter {key!r} of agent {name!r} must be "
                f"{_expected(default)}, got {value!r} ({type(value).__name__})"
            )
        if _is_bounds(default):
            hparams[key] = tuple(float(v) for v in value)
    return cls(**hparams)


def _type_ok(default: Any, value: Any) -> bool:
    if default is None:  # an optional integer (sequence_length)
        return value is None or _type_ok(1, value)
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(default, tuple):
        if not isinstance(value, tuple):
            return False
        if _is_bounds(default):
            return len(value) == len(default) and all(_type_ok(0.0, v) for v in value)
        return all(_type_ok(1, v) and v > 0 for v in value)
    return isinstance(value, type(default))


def _is_bounds(default: Any) -> bool:
    """A tuple of floats of fixed length (e.g. log-std bounds), unlike a tuple of
    positive ints of any length (layer sizes)."""
    return (
        isinstance(default, tuple)
        and bool(default)
        and all(isinstance(d, float) for d in default)
    )


def _expected(default: Any) -> str:
    if default is None:
        return "an integer or null"
    if _is_bounds(default):
        return f"a list of {len(default)} numbers"
    if isinstance(default, tuple):
        return "a list of positive integers"
    return type(default).__name__
