"""The agent protocol."""

import abc
from typing import Generic, TypeVar

import equinox as eqx
import jax.numpy as jnp
import optax
from jaxtyping import Array, Int, PRNGKeyArray, PyTree, Shaped

from envs import Space

from ._memory import AbstractMemory, Transition
from ._normalize import RunningStats

Extras = dict[str, Array]
Metrics = dict[str, Array]


class AbstractState(eqx.Module):
    """What every agent's state holds besides its own learnt parts: the running
    observation statistics (used when the agent has `normalize_obs=True`)."""

    obs_stats: eqx.AbstractVar[RunningStats]


S = TypeVar("S", bound=AbstractState)


class AbstractAgent(eqx.Module, Generic[S]):
    """An agent holds hyperparameters and architecture, never parameters.

    Its learnable state (networks, optimizer state, counters) is the separate pytree
    returned by `init`, so one agent serves every seed and is static under
    `eqx.filter_jit`. The runner collects `num_steps` steps from each env per
    iteration, adds them to `memory`, calls `update` (which returns the memory
    too, e.g. with new priorities), then `observe`.

    With `normalize_obs`, observations are normalised by running statistics kept
    in the state (`state.obs_stats`): `observe` updates them in training only, so
    evaluation and a loaded agent see observations as the agent last trained on.
    """

    memory: eqx.AbstractVar[AbstractMemory]
    num_steps: eqx.AbstractVar[int]
    normalize_obs: eqx.AbstractVar[bool]

    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        """Raise `ValueError` if this agent cannot train on these spaces with
        `num_envs` parallel envs. Called before anything is compiled."""

    @abc.abstractmethod
    def init(
        self,
        obs_space: Space,
        action_space: Space,
        *,
        key: PRNGKeyArray,
        num_envs: int,
        total_steps: int,
    ) -> S:
        """Fresh learnable state. `num_envs` and `total_steps` give schedules their
        horizon."""

    @abc.abstractmethod
    def act(
        self,
        state: S,
        obs: Shaped[Array, "..."],
        *,
        key: PRNGKeyArray,
        greedy: bool = False,
    ) -> tuple[Shaped[Array, "..."], Extras]:
        """Action for one observation, and extras for the memory (callers vmap)."""

    @abc.abstractmethod
    def update(
        self, state: S, memory: PyTree, *, key: PRNGKeyArray
    ) -> tuple[S, PyTree, Metrics]:
        """Learn from the memory. **Returns:** the new state, the memory (an agent
        may write to it, e.g. priorities) and metrics (scalar arrays)."""

    def observe(self, state: S, trajectory: Transition) -> S:
        """Update the observation statistics with a `[num_steps, num_envs]`
        trajectory just learnt from (training only; a no-op without
        `normalize_obs`)."""
        if not self.normalize_obs:
            return state
        stats = state.obs_stats.update(trajectory.obs)
        return eqx.tree_at(lambda s: s.obs_stats, state, stats)

    def preprocess(self, state: S, obs: Shaped[Array, "..."]) -> Shaped[Array, "..."]:
        """The observation(s) the networks see: normalised with `state.obs_stats`
        under `normalize_obs`, else unchanged. Any leading axes."""
        return state.obs_stats.normalize(obs) if self.normalize_obs else obs


def adam_optimizer(
    learning_rate: float,
    max_grad_norm: float,
    *,
    anneal_horizon: Int[Array, ""] | None = None,
    eps: float = 1e-8,
) -> optax.GradientTransformation:
    """Global-norm clipping then Adam; with `anneal_horizon`, the step size decays
    linearly to zero over that many updates. The horizon is an array (kept in the
    agent state), so that a saved state loads into a template built for any run
    length."""
    chain = [
        optax.clip_by_global_norm(max_grad_norm),
        optax.adam(learning_rate, eps=eps),
    ]
    if anneal_horizon is not None:
        horizon = anneal_horizon
        chain.append(
            optax.scale_by_schedule(lambda n: jnp.maximum(1.0 - n / horizon, 0.0))
        )
    return optax.chain(*chain)


def obs_stats(obs_space: Space) -> RunningStats:
    """Fresh observation statistics for `obs_space`."""
    return RunningStats.zeros(obs_space.shape)


def check_positive(agent: eqx.Module, *names: str) -> None:
    """Raise a `ValueError` naming the first of `names` that is not positive."""
    for name in names:
        value = getattr(agent, name)
        if value <= 0:
            raise ValueError(
                f"{type(agent).__name__}: {name} must be positive, got {value}"
            )
