"""Adapter that makes every gymnax environment an `AbstractEnv`."""

from typing import Any, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray

from ._env import AbstractEnv, Action, Observation
from ._spaces import Box, Discrete, Space

# Environments whose constructor downloads a data set; nothing outside the machine
# can be assumed reachable, so they are not offered.
NEEDS_DOWNLOAD = frozenset({"MNISTBandit-bsuite"})


def gymnax_names() -> list[str]:
    import gymnax

    return [n for n in gymnax.registered_envs if n not in NEEDS_DOWNLOAD]


def _convert_space(space: Any, what: str, env_id: str) -> Space:
    kind = type(space).__name__
    if kind == "Discrete":
        return Discrete(int(space.n))
    if kind == "Box":
        return Box(np.asarray(space.low), np.asarray(space.high), tuple(space.shape))
    raise ValueError(
        f"gymnax env {env_id!r} has a {kind} {what} space, which equizoo does not "
        "support (only Discrete and Box)."
    )


@final
class GymnaxEnv(AbstractEnv[Any]):
    """Any registered gymnax environment, with its parameters held in the module.

    **Arguments:**

    - `env_id`: a gymnax name, e.g. `"Acrobot-v1"` or `"Breakout-MinAtar"`.
    - `**env_params`: overrides of the gymnax `EnvParams` fields.
    """

    env: Any = eqx.field(static=True)
    params: Any
    env_id: str = eqx.field(static=True)
    _observation_space: Space
    _action_space: Space

    def __init__(self, env_id: str, **env_params: Any):
        import gymnax

        if env_id in NEEDS_DOWNLOAD:
            raise ValueError(
                f"{env_id!r} downloads a data set when created; not offered."
            )
        env, params = gymnax.make(env_id)
        if env_params:
            fields = set(params.__dataclass_fields__)
            unknown = sorted(set(env_params) - fields)
            if unknown:
                raise ValueError(
                    f"unknown parameter(s) {unknown} for {env_id!r}; "
                    f"valid ones: {sorted(fields)}"
                )
            params = params.replace(**env_params)
        self.env = env
        self.params = params
        self.env_id = env_id
        self._observation_space = _convert_space(
            env.observation_space(params), "observation", env_id
        )
        self._action_space = _convert_space(env.action_space(params), "action", env_id)

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def observation_space(self) -> Space:
        return self._observation_space

    @property
    def action_space(self) -> Space:
        return self._action_space

    def reset_env(self, key: PRNGKeyArray) -> tuple[Observation, Any]:
        return self.env.reset_env(key, self.params)

    def step_env(self, key: PRNGKeyArray, state: Any, action: Action):
        obs, state, reward, terminated, info = self.env.step_env(
            key, state, action, self.params
        )
        truncated = self.env.is_truncated(state, self.params)
        return obs, state, jnp.asarray(reward), terminated, truncated, info
