"""The environment protocol: pure `reset` and `step` with auto-reset."""

import abc
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray, PyTree, Shaped

from ._spaces import Space

StateT = TypeVar("StateT")

Observation = Shaped[Array, "..."]
Action = Shaped[ArrayLike, "..."]
Info = dict[str, Any]
StepResult = tuple[
    Observation, Any, Float[Array, ""], Bool[Array, ""], Bool[Array, ""], Info
]


class AbstractEnv(eqx.Module, Generic[StateT]):
    """A pure, gymnax-style environment whose parameters are fields of the module.

    Subclasses implement `reset_env`, `step_env` (which report `terminated` and
    `truncated` separately), `observation_space` and `action_space`. The concrete
    `reset` and `step` are written once, here: `step` auto-resets a finished episode
    and stores the last observation of the finished episode in
    `info["final_observation"]`, so that learners can bootstrap through truncation.

    Keys are split exactly as gymnax splits them, so an adapted gymnax environment
    gives the same trajectories as gymnax itself.
    """

    @abc.abstractmethod
    def reset_env(self, key: PRNGKeyArray) -> tuple[Observation, StateT]:
        """Start an episode."""

    @abc.abstractmethod
    def step_env(
        self, key: PRNGKeyArray, state: StateT, action: Action
    ) -> tuple[
        Observation, StateT, Float[Array, ""], Bool[Array, ""], Bool[Array, ""], Info
    ]:
        """One transition without auto-reset:
        `(obs, state, reward, terminated, truncated, info)`."""

    @property
    @abc.abstractmethod
    def observation_space(self) -> Space: ...

    @property
    @abc.abstractmethod
    def action_space(self) -> Space: ...

    @property
    def name(self) -> str:
        return type(self).__name__

    def reset(self, key: PRNGKeyArray) -> tuple[Observation, StateT]:
        """**Returns:** `(obs, state)` for a new episode."""
        return self.reset_env(key)

    def step(self, key: PRNGKeyArray, state: StateT, action: Action) -> StepResult:
        """Advance one step, starting a new episode when this one ends.

        **Returns:** `(obs, state, reward, terminated, truncated, info)`. When the
        episode ended, `obs` and `state` already belong to the next episode and
        `info["final_observation"]` holds the observation the episode ended on.
        """
        key_step, key_reset = jr.split(key)
        obs_st, state_st, reward, terminated, truncated, info = self.step_env(
            key_step, state, action
        )
        terminated = jnp.asarray(terminated, dtype=bool)
        truncated = jnp.asarray(truncated, dtype=bool)
        done = terminated | truncated
        obs_re, state_re = self.reset_env(key_reset)
        state = _select(done, state_re, state_st)
        obs = _select(done, obs_re, obs_st)
        info = {**info, "final_observation": obs_st}
        return (
            obs,
            state,
            jnp.asarray(reward, dtype=jnp.float32),
            terminated,
            truncated,
            info,
        )


def _select(pred: Bool[Array, ""], on_true: PyTree, on_false: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jax.lax.select(pred, a, b), on_true, on_false)
