"""Pure wrappers: each is a final module holding the wrapped `env`."""

from typing import Any, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._env import AbstractEnv, Action, Observation
from ._spaces import Box, Space


@final
class EpisodeStatisticsState(eqx.Module):
    env_state: Any
    episode_return: Float[Array, ""]
    episode_length: Int[Array, ""]


@final
class EpisodeStatistics(AbstractEnv[EpisodeStatisticsState]):
    """Tracks the return and length of the running episode.

    When an episode ends, `info["episode_return"]` and `info["episode_length"]` hold
    its undiscounted return and length, and `info["episode_done"]` is true; on other
    steps they hold the running values and `episode_done` is false.
    """

    env: AbstractEnv

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def observation_space(self) -> Space:
        return self.env.observation_space

    @property
    def action_space(self) -> Space:
        return self.env.action_space

    def reset_env(
        self, key: PRNGKeyArray
    ) -> tuple[Observation, EpisodeStatisticsState]:
        obs, state = self.env.reset_env(key)
        return obs, EpisodeStatisticsState(state, jnp.array(0.0), jnp.array(0))

    def step_env(
        self, key: PRNGKeyArray, state: EpisodeStatisticsState, action: Action
    ):
        obs, env_state, reward, terminated, truncated, info = self.env.step_env(
            key, state.env_state, action
        )
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        info = {
            **info,
            "episode_return": episode_return,
            "episode_length": episode_length,
            "episode_done": terminated | truncated,
        }
        state = EpisodeStatisticsState(env_state, episode_return, episode_length)
        return obs, state, reward, terminated, truncated, info

    def step(self, key: PRNGKeyArray, state: EpisodeStatisticsState, action: Action):
        # Auto-reset happens in the wrapped env, so that wrappers below this one that
        # carry state across episodes (observation statistics) are not reset with it.
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
        state = EpisodeStatisticsState(
            env_state,
            jnp.where(done, 0.0, episode_return),
            jnp.where(done, 0, episode_length),
        )
        return obs, state, reward, terminated, truncated, info


@final
class FlattenObservation(AbstractEnv[Any]):
    """Flattens observations to one float32 vector (MinAtar grids, bsuite boards)."""

    env: AbstractEnv

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def observation_space(self) -> Box:
        space = self.env.observation_space
        size = int(np.prod(space.shape))
        if isinstance(space, Box):
            return Box(space.low.reshape(-1), space.high.reshape(-1), (size,))
        return Box(0.0, float(space.n - 1), (size,))

    @property
    def action_space(self) -> Space:
        return self.env.action_space

    def reset_env(self, key: PRNGKeyArray):
        obs, state = self.env.reset_env(key)
        return _flat(obs), state

    def step_env(self, key: PRNGKeyArray, state: Any, action: Action):
        obs, state, reward, terminated, truncated, info = self.env.step_env(
            key, state, action
        )
        return _flat(obs), state, reward, terminated, truncated, info


def _flat(obs: Observation) -> Float[Array, " n"]:
    return jnp.ravel(obs).astype(jnp.float32)


@final
class NormalizeObservationState(eqx.Module):
    env_state: Any
    mean: Float[Array, "..."]
    var: Float[Array, "..."]
    count: Float[Array, ""]


@final
class NormalizeObservation(AbstractEnv[NormalizeObservationState]):
    """Normalises observations by running mean and variance carried in the state.

    Statistics are updated on every observation the env emits (Welford/Chan update),
    so they are part of the env state: they are vmapped, checkpointed and resumed
    with it. Normalised observations are clipped to `[-clip, clip]`.
    """

    env: AbstractEnv
    clip: float = 10.0
    epsilon: float = 1e-8

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def observation_space(self) -> Box:
        shape = self.env.observation_space.shape
        return Box(-self.clip, self.clip, shape)

    @property
    def action_space(self) -> Space:
        return self.env.action_space

    def _update(self, s: NormalizeObservationState, obs) -> NormalizeObservationState:
        obs = obs.astype(jnp.float32)
        count = s.count + 1.0
        delta = obs - s.mean
        mean = s.mean + delta / count
        var = (s.var * s.count + delta * (obs - mean)) / count
        return NormalizeObservationState(s.env_state, mean, var, count)

    def _normalize(self, s: NormalizeObservationState, obs):
        z = (obs - s.mean) / jnp.sqrt(s.var + self.epsilon)
        return jnp.clip(z, -self.clip, self.clip)

    def reset_env(self, key: PRNGKeyArray):
        obs, env_state = self.env.reset_env(key)
        shape = self.env.observation_space.shape
        s = NormalizeObservationState(
            env_state, jnp.zeros(shape), jnp.ones(shape), jnp.array(0.0)
        )
        s = self._update(s, obs)
        return self._normalize(s, obs), s

    def step_env(
        self, key: PRNGKeyArray, state: NormalizeObservationState, action: Action
    ):
        obs, env_state, reward, terminated, truncated, info = self.env.step_env(
            key, state.env_state, action
        )
        s = self._update(
            NormalizeObservationState(env_state, state.mean, state.var, state.count),
            obs,
        )
        return self._normalize(s, obs), s, reward, terminated, truncated, info

    def step(self, key: PRNGKeyArray, state: NormalizeObservationState, action: Action):
        # The statistics must survive episode ends, so auto-reset happens in the
        # wrapped env and the statistics are updated around it.
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, state.env_state, action
        )
        s = self._update(
            NormalizeObservationState(env_state, state.mean, state.var, state.count),
            obs,
        )
        final = self._normalize(s, info["final_observation"])
        info = {**info, "final_observation": final}
        return self._normalize(s, obs), s, reward, terminated, truncated, info


@final
class ClipAction(AbstractEnv[Any]):
    """Clips continuous actions to the bounds of the action space."""

    env: AbstractEnv

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def observation_space(self) -> Space:
        return self.env.observation_space

    @property
    def action_space(self) -> Space:
        return self.env.action_space

    def reset_env(self, key: PRNGKeyArray):
        return self.env.reset_env(key)

    def step_env(self, key: PRNGKeyArray, state: Any, action: Action):
        space = self.env.action_space
        assert isinstance(space, Box), "ClipAction needs a Box action space"
        return self.env.step_env(key, state, jnp.clip(action, space.low, space.high))
