"""Pure wrappers: each is a final `AbstractWrapper` holding the wrapped `env`.

Each one transforms the wrapped env's auto-resetting `reset` and `step` (see
`AbstractWrapper`), so wrappers stack in any order.
"""

from typing import Any, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._env import AbstractEnv, AbstractWrapper, Action, Observation, StepResult
from ._spaces import Box


@final
class EpisodeStatisticsState(eqx.Module):
    """The wrapped env's state, and the return and length of the episode so
    far."""

    env_state: Any
    episode_return: Float[Array, ""]
    episode_length: Int[Array, ""]


@final
class EpisodeStatistics(AbstractWrapper[EpisodeStatisticsState]):
    """Tracks the return and length of the running episode.

    When an episode ends, `info["episode_return"]` and `info["episode_length"]` hold
    its undiscounted return and length, and `info["episode_done"]` is true; on other
    steps they hold the running values and `episode_done` is false.
    """

    env: AbstractEnv

    def reset_env(
        self, key: PRNGKeyArray
    ) -> tuple[Observation, EpisodeStatisticsState]:
        obs, state = self.env.reset(key)
        return obs, EpisodeStatisticsState(state, jnp.array(0.0), jnp.array(0))

    def step_env(
        self, key: PRNGKeyArray, state: EpisodeStatisticsState, action: Action
    ) -> StepResult:
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, state.env_state, action
        )
        done = terminated | truncated
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        info = {
            **info,
            "episode_return": episode_return,
            "episode_length": episode_length,
            "episode_done": done,
        }
        # `env` has already started the next episode: its counts start at zero.
        state = EpisodeStatisticsState(
            env_state,
            jnp.where(done, 0.0, episode_return),
            jnp.where(done, 0, episode_length),
        )
        return obs, state, reward, terminated, truncated, info


@final
class FlattenObservation(AbstractWrapper[Any]):
    """Flattens observations to one float32 vector (MinAtar grids, bsuite boards),
    `info["final_observation"]` included."""

    env: AbstractEnv

    @property
    def observation_space(self) -> Box:
        space = self.env.observation_space
        size = int(np.prod(space.shape))
        if isinstance(space, Box):
            return Box(space.low.reshape(-1), space.high.reshape(-1), (size,))
        return Box(0.0, float(space.n - 1), (size,))

    def reset_env(self, key: PRNGKeyArray) -> tuple[Observation, Any]:
        obs, state = self.env.reset(key)
        return _flat(obs), state

    def step_env(self, key: PRNGKeyArray, state: Any, action: Action) -> StepResult:
        obs, state, reward, terminated, truncated, info = self.env.step(
            key, state, action
        )
        info = {**info, "final_observation": _flat(info["final_observation"])}
        return _flat(obs), state, reward, terminated, truncated, info


def _flat(obs: Observation) -> Float[Array, " n"]:
    return jnp.ravel(obs).astype(jnp.float32)


@final
class ClipAction(AbstractWrapper[Any]):
    """Clips continuous actions to the bounds of the action space.

    **Raises:** `ValueError` when created around an env whose action space is not
    a `Box`.
    """

    env: AbstractEnv

    def __check_init__(self):
        if not isinstance(self.env.action_space, Box):
            raise ValueError(
                f"ClipAction needs a Box action space; {self.env.name} has "
                f"{self.env.action_space}"
            )

    def reset_env(self, key: PRNGKeyArray) -> tuple[Observation, Any]:
        return self.env.reset(key)

    def step_env(self, key: PRNGKeyArray, state: Any, action: Action) -> StepResult:
        space = self.env.action_space
        assert isinstance(space, Box)  # checked in `__check_init__`
        return self.env.step(key, state, jnp.clip(action, space.low, space.high))
