"""The environment protocol: pure `reset` and `step` with auto-reset."""

import abc
from typing import Any, ClassVar, Generic, TypeVar, final

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

    Subclasses implement `reset_env`, `step_env`, `observation_space` and
    `action_space`. The concrete `reset` and `step` are written once, here, and
    overridden nowhere; what `step` does with `step_env` depends on the kind of env:

    - A base env's `step_env` is one transition without auto-reset, reporting
      `terminated` and `truncated` separately. `step` auto-resets around it: when
      the episode ends it returns the first observation and state of the next
      episode and stores the observation the finished episode ended on in
      `info["final_observation"]`, so that learners can bootstrap through
      truncation.
    - A wrapper (`AbstractWrapper`) implements `reset_env` and `step_env` as
      transforms of its inner env's outer `reset` and `step`, which have already
      auto-reset; `reset` and `step` return them unchanged.

    Keys are split exactly as gymnax splits them, so an adapted gymnax environment
    gives the same trajectories as gymnax itself.
    """

    @abc.abstractmethod
    def reset_env(self, key: PRNGKeyArray) -> tuple[Observation, StateT]:
        """Start an episode. A wrapper transforms `self.env.reset(key)`."""

    @abc.abstractmethod
    def step_env(
        self, key: PRNGKeyArray, state: StateT, action: Action
    ) -> tuple[
        Observation, StateT, Float[Array, ""], Bool[Array, ""], Bool[Array, ""], Info
    ]:
        """`(obs, state, reward, terminated, truncated, info)`.

        A base env makes one transition without auto-reset. A wrapper transforms
        `self.env.step(...)`, the inner env's auto-resetting step, and returns its
        `info["final_observation"]` transformed as it transforms observations.
        """

    @property
    @abc.abstractmethod
    def observation_space(self) -> Space: ...

    @property
    @abc.abstractmethod
    def action_space(self) -> Space: ...

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The env's name, as `envs.make` knows it (a custom env: any label)."""

    # Whether `step` auto-resets around `step_env`: a base env's does; a
    # wrapper's `step_env` is built on its inner env's `step`, which has.
    auto_resets: ClassVar[bool] = True

    def reset(self, key: PRNGKeyArray) -> tuple[Observation, StateT]:
        """**Returns:** `(obs, state)` for a new episode."""
        return self.reset_env(key)

    def step(self, key: PRNGKeyArray, state: StateT, action: Action) -> StepResult:
        """Advance one step, starting a new episode when this one ends.

        **Returns:** `(obs, state, reward, terminated, truncated, info)`. When the
        episode ended, `obs` and `state` already belong to the next episode and
        `info["final_observation"]` holds the observation the episode ended on.
        """
        if not self.auto_resets:
            # Built on the inner env's `step`: the episode has been reset below,
            # once, and state the wrapper keeps across episodes is left alone.
            return self.step_env(key, state, action)
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


class AbstractWrapper(AbstractEnv[StateT]):
    """An env built on another one, `env`, by composition.

    **The contract.** A wrapper implements `reset_env` as a transform of
    `self.env.reset(key)` and `step_env` as a transform of
    `self.env.step(key, inner_state, action)`: the inner env's outer,
    auto-resetting functions, never its `reset_env` or `step_env`. So however
    deep the stack, the base env at its bottom auto-resets once per episode end;
    a wrapper sees the end through `terminated | truncated` (and
    `info["final_observation"]`, which it transforms as it transforms
    observations), and what it keeps across episodes survives the reset. Its
    own state, if any, holds the inner env's state as a field. `AbstractEnv.step`
    returns what the wrapper's `step_env` returns.

    **Forwarding.** `action_space` is that of `env` (no wrapper changes it);
    `name` and `observation_space` are implemented by each wrapper, or
    forwarded by subclassing `AbstractTransparentWrapper`. `reset` and `step`
    are never overridden.

    Concrete wrappers are final and declare `env: AbstractEnv` as a field.
    """

    env: eqx.AbstractVar[AbstractEnv]
    auto_resets: ClassVar[bool] = False

    @property
    @final
    def action_space(self) -> Space:
        return self.env.action_space


class AbstractTransparentWrapper(AbstractWrapper[StateT]):
    """A wrapper that keeps its env's name and observation space, changing only
    what happens in `reset_env` and `step_env` (`EpisodeStatistics`,
    `ClipAction`, `StickyActions`)."""

    @property
    @final
    def name(self) -> str:
        return self.env.name

    @property
    @final
    def observation_space(self) -> Space:
        return self.env.observation_space


def _select(pred: Bool[Array, ""], on_true: PyTree, on_false: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jax.lax.select(pred, a, b), on_true, on_false)
