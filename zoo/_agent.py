"""The agent protocol."""

import abc
from typing import Generic, TypeVar

import equinox as eqx
from jaxtyping import Array, PRNGKeyArray, PyTree, Shaped

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


def check_positive(agent: eqx.Module, *names: str) -> None:
    """Raise a `ValueError` naming the first of `names` that is not positive."""
    for name in names:
        value = getattr(agent, name)
        if value <= 0:
            raise ValueError(
                f"{type(agent).__name__}: {name} must be positive, got {value}"
            )
