"""Loading recorded runs from Python, without Sacred: `experiments.load_run`.

Importing this module imports neither Sacred nor JAX; loading imports JAX.
"""

import json
from pathlib import Path
from typing import Any

FINAL_STATE = "final_state.eqx"
FINAL_META = "final_state.json"


def where(path: Path) -> tuple[Path, Path]:
    """`(state file, header file)` of a run folder's final state, else of its
    newest checkpoint; or of the checkpoint folder `path`."""
    import runners

    if (path / runners.META_FILE).is_file():
        return path / runners.STATE_FILE, path / runners.META_FILE
    if (path / FINAL_META).is_file() and (path / FINAL_STATE).is_file():
        return path / FINAL_STATE, path / FINAL_META
    latest = runners.latest_checkpoint(path / "checkpoints")
    if latest is not None:
        return latest / runners.STATE_FILE, latest / runners.META_FILE
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such run folder or checkpoint")
    raise FileNotFoundError(
        f"{path}: no final state ({FINAL_STATE}) and no checkpoint: the run was "
        "stopped before its first checkpoint, or is not an equizoo run folder"
    )


def load_state(path: str | Path) -> Any:
    """Load a recorded `TrainState` (with its leading seed or run axis).

    **Arguments:**

    - `path`: a run folder (e.g. `runs/3`): its final state (the
      `final_state.eqx` and `final_state.json` artifacts), else its newest
      checkpoint; or one checkpoint (e.g. `runs/3/checkpoints/50000`).

    **Returns:** the `runners.TrainState`; `state.agent_state` is the agent's.

    **Raises:** `FileNotFoundError` for a folder with nothing to load.
    """
    agent, state, _, _ = _load(Path(path))
    return state


def load_run(path: str | Path, seed: int = 0) -> tuple[Any, Any, Any]:
    """One seed of a recorded run, ready to act: `(agent, agent_state, env)`.

    ```python
    agent, state, env = experiments.load_run("runs/3", seed=0)
    obs, env_state = env.reset(jr.PRNGKey(0))
    action, _ = agent.act(state, obs, key=jr.PRNGKey(1), greedy=True)
    ```

    **Arguments:** `path` as for `load_state`; `seed`: which seed (in a sweep,
    which run: member `m`, seed `s` is `m * num_seeds + s`).

    **Raises:** `FileNotFoundError` for a folder with nothing to load;
    `IndexError` for a seed the run did not train.
    """
    import runners

    agent, state, env, header = _load(Path(path))
    num_runs = int(state.iteration.shape[0])
    if type(seed) is not int or not 0 <= seed < num_runs:
        raise IndexError(
            f"seed {seed!r}: {path} trained {num_runs} run(s), 0 to {num_runs - 1}"
        )
    return agent, runners.seed_state(state, seed).agent_state, env


def _load(path: Path) -> tuple[Any, Any, Any, dict[str, Any]]:
    import equinox as eqx

    import runners
    from experiments import _config

    state_file, header_file = where(path)
    header = json.loads(header_file.read_text())
    env = _config.make_env(header["env"], header.get("env_params", {}))
    config = header.get("config", {})
    agent = _config.make_agent(
        header["agent"],
        header["hp"],
        env,
        config.get("sharing"),
        config.get("agent_id", False),
        config.get("per_agent"),
    )
    like = runners.state_template(
        agent,
        env,
        num_envs=header["num_envs"],
        total_steps=header["total_steps"],
        num_seeds=header.get("num_runs") or header["num_seeds"],
    )
    if state_file.name == runners.STATE_FILE:
        state, _ = runners.load_checkpoint(state_file.parent, like)
    else:
        state = eqx.tree_deserialise_leaves(state_file, like)
    return agent, state, env, header
