"""Pure wrappers: each is a final `AbstractWrapper` holding the wrapped `env`.

Each one transforms the wrapped env's auto-resetting `reset` and `step` (see
`AbstractWrapper`), so wrappers stack in any order.
"""

from typing import Any, final

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray, Shaped

from ._env import (
    AbstractEnv,
    AbstractTransparentWrapper,
    AbstractWrapper,
    Action,
    Observation,
    StepResult,
)
from ._spaces import Box, Discrete


@final
class EpisodeStatisticsState(eqx.Module):
    """The wrapped env's state, and the return and length of the episode so
    far."""

    env_state: Any
    episode_return: Float[Array, ""]
    episode_length: Int[Array, ""]


@final
class EpisodeStatistics(AbstractTransparentWrapper[EpisodeStatisticsState]):
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
    def name(self) -> str:
        return self.env.name

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
class ClipAction(AbstractTransparentWrapper[Any]):
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


@final
class StickyActionsState(eqx.Module):
    """The wrapped env's state and the action it executed last (zero at the start
    of an episode)."""

    env_state: Any
    last_action: Shaped[Array, "..."]


@final
class StickyActions(AbstractTransparentWrapper[StickyActionsState]):
    """With probability `prob`, the env executes the previous action instead of
    the one given: MinAtar's sticky actions (Young & Tian, 2019), the protocol of
    the MinAtar paper's figures (`prob=0.1`).

    The executed action becomes the previous action of the next step, and each
    episode starts with action 0 as the previous one (MinAtar's no-op), as in the
    original MinAtar. The draw uses its own key, split from the step's key, so a
    run is deterministic given its key. `envs.make(name, sticky_prob=p)` wraps any
    env with it (`env_params.sticky_prob=0.1` from the command line).

    **Raises:** `ValueError` unless `0 <= prob < 1`.
    """

    env: AbstractEnv
    prob: float = 0.1

    def __check_init__(self):
        if not 0.0 <= self.prob < 1.0:
            raise ValueError(
                f"StickyActions: prob must be in [0, 1), got {self.prob}; the "
                "MinAtar paper's protocol is 0.1"
            )

    def _no_action(self) -> Shaped[Array, "..."]:
        space = self.env.action_space
        if isinstance(space, Discrete):
            return jnp.array(0, jnp.int32)
        return jnp.zeros(space.shape, jnp.float32)

    def reset_env(self, key: PRNGKeyArray) -> tuple[Observation, StickyActionsState]:
        obs, state = self.env.reset(key)
        return obs, StickyActionsState(state, self._no_action())

    def step_env(
        self, key: PRNGKeyArray, state: StickyActionsState, action: Action
    ) -> StepResult:
        key_stick, key_env = jr.split(key)
        stick = jr.uniform(key_stick) < self.prob
        action = jnp.asarray(action, state.last_action.dtype)
        executed = jnp.where(stick, state.last_action, action)
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key_env, state.env_state, executed
        )
        done = terminated | truncated
        last = jnp.where(done, self._no_action(), executed)
        info = {**info, "executed_action": executed}
        state = StickyActionsState(env_state, last)
        return obs, state, reward, terminated, truncated, info


@final
class MaskObservation(AbstractWrapper[Any]):
    """Keeps only the observation dimensions `keep` (indices of a flat `Box`
    observation), hiding the others: a partially observable version of the env,
    which a memoryless policy cannot solve when what is hidden matters (the
    velocities of CartPole). `info["final_observation"]` is masked alike.

    `label` names the result (`StatelessCartPole-v1`, popgym's name, keeps
    CartPole's positions and drops its velocities); by default it is the env's
    name with the dimensions kept.

    **Raises:** `ValueError` for an observation space that is not a flat `Box`,
    or indices out of range, repeated or none.
    """

    env: AbstractEnv
    keep: tuple[int, ...]
    label: str | None = None

    def __check_init__(self):
        space = self.env.observation_space
        if not isinstance(space, Box) or len(space.shape) != 1:
            raise ValueError(
                f"MaskObservation needs a flat Box observation space; {self.env.name} "
                f"has {space}"
            )
        n = space.shape[0]
        keep = self.keep
        bad = [i for i in keep if type(i) is not int or not 0 <= i < n]
        if not keep or bad or len(set(keep)) != len(keep):
            raise ValueError(
                f"MaskObservation: keep must be distinct indices in [0, {n}) of "
                f"{self.env.name}'s {n} observation dimensions, got {keep!r}"
            )

    @property
    def name(self) -> str:
        return self.label or f"{self.env.name}[{','.join(map(str, self.keep))}]"

    @property
    def observation_space(self) -> Box:
        space = self.env.observation_space
        assert isinstance(space, Box)  # checked in `__check_init__`
        index = np.asarray(self.keep)
        return Box(space.low[index], space.high[index], (len(self.keep),))

    def _mask(self, obs: Observation) -> Observation:
        return obs[jnp.asarray(self.keep)]

    def reset_env(self, key: PRNGKeyArray) -> tuple[Observation, Any]:
        obs, state = self.env.reset(key)
        return self._mask(obs), state

    def step_env(self, key: PRNGKeyArray, state: Any, action: Action) -> StepResult:
        obs, state, reward, terminated, truncated, info = self.env.step(
            key, state, action
        )
        info = {**info, "final_observation": self._mask(info["final_observation"])}
        return self._mask(obs), state, reward, terminated, truncated, info
