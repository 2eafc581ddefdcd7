"""Hyperparameter sweeps in one program: float hyperparameters as array leaves.

An agent's float hyperparameters are plain (non-static) fields of its module, so
one agent can stand for many: `with_hparams` puts traced scalars in their place
inside a `vmap` over runs, and every member of a sweep trains in the same compiled
program. Hyperparameters that set shapes or Python control flow (hidden sizes,
`num_steps`, booleans, names) are static fields and need a program each.
"""

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float

from zoo import AbstractAgent

T = TypeVar("T")

# Values are checked by `check_sweep` (a clear error), not by annotations.
Sweep = Mapping[str, Any]


def sweepable(agent: AbstractAgent) -> tuple[str, ...]:
    """The hyperparameters of `agent` that a sweep can vary in one program: its
    float fields that are not static."""
    names = []
    for field in dataclasses.fields(agent):
        if field.metadata.get("static", False):
            continue
        value = getattr(agent, field.name, None)
        if isinstance(value, float):
            names.append(field.name)
    return tuple(names)


def check_sweep(agent: Any, sweep: Sweep) -> int:
    """The number of members of `sweep` (`{name: [value per member]}`).

    **Raises:** `ValueError`, naming the problem and the fix, for an empty sweep,
    an unknown or non-sweepable hyperparameter, an empty or non-numeric list of
    values, or lists of different lengths.
    """
    if not isinstance(sweep, Mapping) or not sweep:
        raise ValueError(
            "sweep must map hyperparameter names to lists of values, e.g. "
            "{'learning_rate': [1e-3, 3e-3]}; got " + repr(sweep)
        )
    if not isinstance(agent, AbstractAgent):
        raise ValueError(
            f"sweep: a sweep varies one zoo agent's hyperparameters, not those of "
            f"{type(agent).__name__} learners; train one run per value"
        )
    allowed = sweepable(agent)
    fields = {f.name for f in dataclasses.fields(agent)}
    agent_name = type(agent).__name__
    lengths = {}
    for name, values in sweep.items():
        if name not in fields:
            raise ValueError(
                f"sweep: {agent_name} has no hyperparameter {name!r}; the ones a "
                f"sweep can vary in one program: {', '.join(allowed)}"
            )
        if name not in allowed:
            raise ValueError(
                f"sweep: {agent_name}.{name} is not a float hyperparameter, so it "
                "sets shapes or control flow and cannot vary inside one program; "
                "train one run per value (experiments.run groups such values into "
                f"one program each). Sweepable in one program: {', '.join(allowed)}"
            )
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise ValueError(f"sweep: {name} needs a list of values, got {values!r}")
        if len(values) == 0:
            raise ValueError(f"sweep: the list of values for {name} is empty")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ValueError(f"sweep: {name} takes numbers, got {v!r}")
            if not math.isfinite(v):
                raise ValueError(f"sweep: {name} takes finite numbers, got {v!r}")
        lengths[name] = len(values)
    if len(set(lengths.values())) != 1:
        raise ValueError(
            "sweep: every hyperparameter needs one value per member, got lists of "
            f"lengths {lengths}; use runners.grid(...) for every combination"
        )
    return next(iter(lengths.values()))


def grid(**values: Sequence[float]) -> dict[str, list[float]]:
    """Every combination of `values` as a sweep, the last name varying fastest:
    `grid(learning_rate=[1e-3, 3e-3], gamma=[0.98, 0.99])` has 4 members."""
    names = list(values)
    members = list(itertools.product(*(values[n] for n in names)))
    return {n: [float(m[i]) for m in members] for i, n in enumerate(names)}


def run_hparams(
    sweep: Sweep | None, num_seeds: int, num_runs: int
) -> dict[str, Float[np.ndarray, " runs"]]:
    """Each run's values: run `m * num_seeds + s` is member `m`, seed `s`;
    runs past the last (padding to a multiple of the devices) repeat it."""
    if not sweep:
        return {}
    out = {}
    for name, values in sweep.items():
        per_run = np.repeat(np.asarray(values, np.float32), num_seeds)
        pad = num_runs - per_run.size
        out[name] = np.concatenate([per_run, np.repeat(per_run[-1:], pad)])
    return out


def with_hparams(agent: T, hparams: Mapping[str, Float[Array, ""] | Any]) -> T:
    """`agent` with the hyperparameters named in `hparams` replaced by its values
    (traced scalars inside a `vmap` over runs). Nothing when `hparams` is empty."""
    if not hparams:
        return agent
    names = list(hparams)
    return eqx.tree_at(
        lambda a: [getattr(a, n) for n in names], agent, [hparams[n] for n in names]
    )
