"""Tuned defaults per agent and env: `experiments/configs/<agent>.yaml`.

Each file holds one block per env name, like rl-baselines3-zoo's hyperparameter
files:

```yaml
CartPole-v1:
  total_steps: 100000   # run settings (RUN_KEYS)
  num_envs: 10
  hp:                   # passed to zoo.make("<agent>", **hp)
    learning_rate: 1.0e-3
  env_params:           # passed to envs.make("<env>", **env_params)
    sticky_prob: 0.1
```

This module reads the files only (no JAX; `default_env` alone asks the zoo), so
that a config can be resolved and printed quickly; `experiments._config` checks
blocks against the zoo.
"""

from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).parent

# The env the config falls back on for an agent the zoo does not have (its
# name is then refused with the valid ones).
FALLBACK_ENV = "CartPole-v1"

# Run settings for a pair with no tuned block (or a block that leaves one out),
# and about how many evaluations a run makes when its block sets no eval_every.
FALLBACK_RUN = {"total_steps": 100_000, "num_envs": 8, "eval_episodes": 32}
NUM_EVALS = 10

# Run settings a block may set next to `hp`, with their types.
RUN_KEYS: dict[str, type] = {
    "total_steps": int,
    "num_envs": int,
    "eval_every": int,
    "eval_episodes": int,
}

# The benchmark table's held-out seeds split from jax.random.PRNGKey(HELD_OUT_KEY)
# (`benchmarks/table.py`): no tuning may use this key, so `benchmarks/speed.py`
# refuses it as `--seed`.
HELD_OUT_KEY = 20_261_202

# Mappings a block may set: the agent's hyperparameters and the env's parameters.
MAPPINGS = ("hp", "env_params")


def agents() -> list[str]:
    """Agents with a tuned-config file."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


_READ: set[Path] = set()


def files_read() -> list[Path]:
    """The config files `blocks` has read in this process (a run records them)."""
    return sorted(_READ)


def blocks(agent: str) -> dict[str, dict[str, Any]]:
    """Every tuned block of `agent`, by env name (empty if it has no file)."""
    path = CONFIG_DIR / f"{agent}.yaml"
    if not path.exists():
        return {}
    _READ.add(path.resolve())
    loaded = yaml.safe_load(path.read_text()) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping from env names to blocks")
    return loaded


def tuned(agent: str, env: str) -> dict[str, Any] | None:
    """The tuned block for `agent` on `env` (`total_steps`, `num_envs`, `hp`,
    `env_params`), or `None` when that pair has none."""
    return blocks(agent).get(env)


def default_env(agent: str) -> str:
    """The env an agent trains on when the config names none: the one its
    `zoo.register` names (this imports the zoo, and so JAX); `FALLBACK_ENV`
    for an unknown agent, which the config's checks then name."""
    import zoo

    return zoo.default_env(agent) if agent in zoo.names() else FALLBACK_ENV


def run_setting(block: dict[str, Any], key: str, total_steps: Any = None) -> Any:
    """Run setting `key` of a tuned block, else the fallback (`FALLBACK_RUN`);
    `eval_every` without one is about `NUM_EVALS` evaluations of `total_steps`
    (`None` when that is not a positive integer)."""
    if block.get(key) is not None:
        return block[key]
    if key != "eval_every":
        return FALLBACK_RUN.get(key)
    if type(total_steps) is not int or total_steps <= 0:
        return None
    return max(total_steps // NUM_EVALS, 1)


def check_block(agent: str, env: str, block: Any) -> None:
    """Raise `ValueError` if a block's structure is wrong: unknown keys, a
    non-mapping `hp`, or run settings of the wrong type. (Hyperparameter names and
    values are the zoo's to check.)"""
    where = f"experiments/configs/{agent}.yaml, block {env!r}"
    if not isinstance(block, dict):
        raise ValueError(f"{where}: expected a mapping, got {block!r}")
    unknown = sorted(set(block) - set(RUN_KEYS) - set(MAPPINGS))
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {unknown}; valid: {[*RUN_KEYS, *MAPPINGS]}"
        )
    for key in MAPPINGS:
        if not isinstance(block.get(key, {}), dict):
            raise ValueError(f"{where}: {key!r} must be a mapping, got {block[key]!r}")
    for key, kind in RUN_KEYS.items():
        value = block.get(key)
        if value is not None and (type(value) is not kind or value <= 0):
            raise ValueError(
                f"{where}: {key!r} must be a positive {kind.__name__}, got {value!r}"
            )
