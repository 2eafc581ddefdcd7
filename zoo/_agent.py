"""The agent protocol."""

import abc
from typing import Generic, TypeVar

import equinox as eqx
import jax.numpy as jnp
import optax
from jaxtyping import Array, Int, PRNGKeyArray, PyTree, Shaped

from envs import Space

from ._memory import AbstractMemory

S = TypeVar("S")
Extras = dict[str, Array]
Metrics = dict[str, Array]


class AbstractAgent(eqx.Module, Generic[S]):
    """An agent holds hyperparameters and architecture, never parameters.

    Its learnable state (networks, optimizer state, counters) is the separate pytree
    returned by `init`, so one agent serves every seed and is static under
    `eqx.filter_jit`. The runner collects `num_steps` steps from each env per
    iteration, adds them to `memory`, then calls `update`.
    """

    memory: eqx.AbstractVar[AbstractMemory]
    num_steps: eqx.AbstractVar[int]

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
    ) -> tuple[S, Metrics]:
        """Learn from the memory. Metrics are scalar arrays."""


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


def check_positive(agent: eqx.Module, *names: str) -> None:
    """Raise a `ValueError` naming the first of `names` that is not positive."""
    for name in names:
        value = getattr(agent, name)
        if value <= 0:
            raise ValueError(
                f"{type(agent).__name__}: {name} must be positive, got {value}"
            )
