"""The tuned configs from Python: `experiments.tuned("dqn", "CartPole-v1")`."""

import copy
import dataclasses
from typing import Any

from . import configs


@dataclasses.dataclass(frozen=True)
class Tuned:
    """A tuned block: what `python -m experiments.run with agent=<agent>
    env=<env>` trains with.

    - `hp`: the hyperparameters the block sets, for `zoo.make(agent, **hp)` (the
      agent's defaults fill the rest).
    - `run`: keyword arguments of `runners.run`: `total_steps`, `num_envs`,
      `eval_every`, `eval_episodes`.
    - `env_params`: keyword arguments of `envs.make(env, **env_params)` (the
      MinAtar blocks' `sticky_prob`); empty for most blocks.
    """

    agent: str
    env: str
    hp: dict[str, Any]
    run: dict[str, Any]
    env_params: dict[str, Any] = dataclasses.field(default_factory=dict)

    def make_env(self) -> Any:
        """`envs.make(env, **env_params)`: the env the block was tuned on."""
        import envs

        return envs.make(self.env, **self.env_params)


def tuned(agent: str, env: str) -> Tuned:
    """The tuned hyperparameters and run settings of `agent` on `env`, as the CLI
    uses them:

    ```python
    t = experiments.tuned("dqn", "CartPole-v1")
    agent = zoo.make("dqn", **t.hp)
    result = runners.run(agent, t.make_env(), key=key, **t.run)
    ```

    **Raises:** `ValueError` naming the tuned envs of `agent` (or the agents with
    tuned configs) when the pair has none.
    """
    if agent not in configs.agents():
        raise ValueError(
            f"no tuned configs for agent {agent!r}; agents with tuned configs: "
            f"{configs.agents()}"
        )
    block = configs.tuned(agent, env)
    if block is None:
        raise ValueError(
            f"no tuned config for {agent} on {env!r}; {agent} is tuned on "
            f"{sorted(configs.blocks(agent))}"
        )
    configs.check_block(agent, env, block)
    block = copy.deepcopy(block)
    total = configs.run_setting(block, "total_steps")
    keys = ("total_steps", "num_envs", "eval_every", "eval_episodes")
    run = {k: configs.run_setting(block, k, total) for k in keys}
    return Tuned(agent, env, block.get("hp") or {}, run, block.get("env_params") or {})


def pairs() -> list[tuple[str, str]]:
    """Every `(agent, env)` with a tuned config."""
    return [(a, e) for a in configs.agents() for e in configs.blocks(a)]
