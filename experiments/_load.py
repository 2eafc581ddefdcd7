"""Loading recorded runs from Python, without Sacred: `experiments.load_run`.

Importing this module imports neither Sacred nor JAX; loading imports JAX.
"""

import io
import json
from pathlib import Path
from typing import Any

from experiments.record.folder import Header, RunFolder


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


def _load(path: Path) -> tuple[Any, Any, Any, Header]:
    import equinox as eqx

    import runners
    from experiments import _config

    state_file, header_file = RunFolder(path).saved_state()
    header = Header.read(header_file)
    env = _config.make_env(header.env, header.env_params)
    config = header.config
    agent = _config.make_agent(
        header.agent,
        header.hp,
        env,
        config.get("sharing"),
        config.get("agent_id", False),
        config.get("per_agent"),
    )
    like = runners.state_template(
        agent,
        env,
        num_envs=header.num_envs,
        total_steps=header.total_steps,
        num_seeds=header.runs,
    )
    if state_file.name == runners.STATE_FILE:
        state, _ = runners.load_checkpoint(state_file.parent, like)
    else:
        # A run's final state: a copy of its last checkpoint, with its meta.
        data = state_file.read_bytes()
        runners.check_state_bytes(state_file, json.loads(header_file.read_text()), data)
        state = eqx.tree_deserialise_leaves(io.BytesIO(data), like)
    return agent, state, env, header
