"""Saving and loading a trained agent: one file, a JSON header then the leaves.

Loading never executes code from the file: the header is JSON, the leaves are read
with `eqx.tree_deserialise_leaves` (NumPy arrays, no pickle) into a template built
from the header by `agent.init`.
"""

import dataclasses
import json
from pathlib import Path
from typing import Any

import equinox as eqx
import jax.random as jr
import numpy as np
from jaxtyping import PyTree

from envs import Box, Discrete, Space

from ._agent import AbstractAgent
from ._registry import AGENTS, make

FORMAT = "equizoo-agent"
VERSION = 1


def space_to_json(space: Space) -> dict[str, Any]:
    if isinstance(space, Discrete):
        return {"type": "Discrete", "n": space.n}
    return {
        "type": "Box",
        "shape": list(space.shape),
        "low": space.low.ravel().tolist(),
        "high": space.high.ravel().tolist(),
    }


def space_from_json(data: dict[str, Any]) -> Space:
    if data["type"] == "Discrete":
        return Discrete(int(data["n"]))
    shape = tuple(data["shape"])
    return Box(np.reshape(data["low"], shape), np.reshape(data["high"], shape), shape)


def agent_name(agent: AbstractAgent) -> str:
    for name, cls in AGENTS.items():
        if type(agent) is cls:
            return name
    raise ValueError(
        f"{type(agent).__name__} is not a registered agent: decorate its class "
        "with @zoo.register('<name>') to save it"
    )


def hparams_of(agent: AbstractAgent) -> dict[str, Any]:
    """The agent's hyperparameters as JSON-friendly Python values."""
    out = {}
    for field in dataclasses.fields(agent):
        value = getattr(agent, field.name)
        out[field.name] = list(value) if isinstance(value, tuple) else value
    return out


def save(
    path: str | Path,
    agent: AbstractAgent,
    state: PyTree,
    obs_space: Space,
    action_space: Space,
) -> None:
    """Write `agent` (its name and hyperparameters) and its learnt `state`.

    The file is written under a temporary name and renamed, so an interrupted save
    never leaves a truncated file behind.
    """
    header = {
        "format": FORMAT,
        "version": VERSION,
        "agent": agent_name(agent),
        # Where the class is defined: loading an agent registered outside the
        # package names the module to import first.
        "module": type(agent).__module__,
        "hparams": hparams_of(agent),
        "obs_space": space_to_json(obs_space),
        "action_space": space_to_json(action_space),
    }
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(json.dumps(header).encode() + b"\n")
        eqx.tree_serialise_leaves(f, state)
    tmp.replace(path)


def load(path: str | Path) -> tuple[AbstractAgent, PyTree]:
    """Read what `save` wrote. **Returns:** `(agent, state)`.

    **Raises:** `ValueError` if the file is not an equizoo agent file or does not
    match the structure its header describes (e.g. it is truncated).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no agent file at {str(path)!r}")
    with path.open("rb") as f:
        try:
            header = json.loads(f.readline())
            if header.get("format") != FORMAT:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"{str(path)!r} is not an equizoo agent file (no valid header)"
            ) from None
        if header["version"] > VERSION:
            raise ValueError(
                f"{str(path)!r} was written by a newer equizoo (format version "
                f"{header['version']}); upgrade equizoo to read it"
            )
        hparams = {
            k: tuple(v) if isinstance(v, list) else v
            for k, v in header["hparams"].items()
        }
        if header["agent"] not in AGENTS:
            # An agent of the user's names its module; one of the zoo's that
            # this equizoo lacks came from another version.
            where = header.get("module", "")
            fix = (
                f"import the module that registers it (`import {where}`) first"
                if where and not where.startswith("zoo.")
                else f"this equizoo's agents are {sorted(AGENTS)}"
            )
            raise ValueError(
                f"{str(path)!r} holds agent {header['agent']!r}, which is not "
                f"registered: {fix}"
            )
        agent = make(header["agent"], **hparams)
        template = eqx.filter_eval_shape(
            agent.init,
            space_from_json(header["obs_space"]),
            space_from_json(header["action_space"]),
            key=jr.PRNGKey(0),
            num_envs=1,
            total_steps=1,
        )
        try:
            state = eqx.tree_deserialise_leaves(f, template)
        except Exception as error:
            raise ValueError(
                f"{str(path)!r} is damaged or truncated: its data does not match "
                f"the {header['agent']} state its header describes ({error})"
            ) from None
    return agent, state
