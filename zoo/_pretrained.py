"""Pretrained agents shipped with the package: `zoo.pretrained("ppo", "CartPole-v1")`.

Each shipped agent is two files in `zoo/pretrained/`: `<agent>__<env>.eqx` (what
`zoo.save` writes: the agent's hyperparameters and learnt state, no replay
buffer) and `<agent>__<env>.json` (its provenance). `index.json` lists every
pair `python -m experiments.publish` tried, shipped or not. Loading reads no code
from the files (see `zoo.load`).
"""

import json
from pathlib import Path
from typing import Any

from jaxtyping import PyTree

from ._agent import AbstractAgent

PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"
"""The folder of the shipped agents (`python -m experiments.publish` writes it)."""
PRETRAINED_INDEX = "index.json"
"""The name of the file in `PRETRAINED_DIR` that lists what it holds."""


def pretrained_stem(agent: str, env: str) -> str:
    """The name, without extension, of the files of `agent` on `env` in
    `zoo.PRETRAINED_DIR`."""
    return f"{agent}__{env.replace('/', '_')}"


def _index(folder: Path = PRETRAINED_DIR) -> dict[str, Any]:
    path = folder / PRETRAINED_INDEX
    if not path.is_file():
        return {}
    return json.loads(path.read_text())


def available(folder: Path = PRETRAINED_DIR) -> list[tuple[str, str]]:
    """The `(agent, env)` pairs shipped, sorted."""
    return sorted(
        (entry["agent"], entry["env"])
        for entry in _index(folder).values()
        if entry.get("shipped")
    )


def _unknown(agent: str, env: str, folder: Path) -> str:
    entry = _index(folder).get(f"{agent}:{env}")
    have = ", ".join(f"{a}:{e}" for a, e in available(folder)) or "none"
    if entry is not None and not entry.get("shipped"):
        return (
            f"no pretrained {agent} on {env}: {entry['reason']}. Pretrained agents: "
            f"{have}"
        )
    return f"no pretrained {agent} on {env!r}; pretrained agents (agent:env): {have}"


def provenance(
    agent: str, env: str, *, folder: Path = PRETRAINED_DIR
) -> dict[str, Any]:
    """How the pretrained `agent` on `env` was made: the command that trained it,
    its seed, commit, library versions, and its greedy return over the recorded
    number of episodes with the recorded evaluation key.

    **Raises:** `ValueError` naming the available pairs for an unknown pair.
    """
    path = folder / f"{pretrained_stem(agent, env)}.json"
    if (agent, env) not in available(folder) or not path.is_file():
        raise ValueError(_unknown(agent, env, folder))
    return json.loads(path.read_text())


def pretrained(
    agent: str | None = None, env: str | None = None, *, folder: Path = PRETRAINED_DIR
) -> Any:
    """A trained agent from the zoo, ready to act.

    ```python
    agent, state = zoo.pretrained("ppo", "CartPole-v1")
    action, _ = agent.act(state, obs, key=key, greedy=True)
    zoo.pretrained()  # [("a2c", "Acrobot-v1"), ...]: what is shipped
    ```

    A recurrent agent (`agent.recurrent`, e.g. PPO on StatelessCartPole-v1)
    acts with `agent.act_step(state, carry, obs, ...)` from
    `agent.initial_carry()`; `runners.evaluate` does that for you.

    **Arguments:** `agent`, `env`: a pair from `zoo.pretrained()`; both omitted:
    list the pairs. `folder`: where to look (default: the files shipped in the
    package).

    **Returns:** `(agent, agent_state)`; with no arguments, the list of
    `(agent, env)` pairs. `zoo.provenance(agent, env)` tells how each was trained,
    including the env parameters to make its env with (`"env_params"`: sticky
    actions on MinAtar).

    **Raises:** `ValueError` naming the available pairs for an unknown pair (and,
    for a pair that was trained but not shipped, why: its return fell short of the
    target, or its benchmark row failed the held-out check).
    """
    if agent is None and env is None:
        return available(folder)
    if agent is None or env is None:
        raise ValueError(
            "pass both agent and env, e.g. zoo.pretrained('ppo', 'CartPole-v1'), or "
            "neither to list the pretrained agents"
        )
    provenance(agent, env, folder=folder)  # raises for an unknown pair
    from ._serialise import load

    loaded: tuple[AbstractAgent, PyTree] = load(
        folder / f"{pretrained_stem(agent, env)}.eqx"
    )
    return loaded
