"""Memory components: what an agent keeps of the transitions it collected.

On- versus off-policy is this component, not a class hierarchy: `Rollout` keeps the
latest rollout, `Replay` keeps a uniform replay buffer.
"""

import abc
from typing import Any, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree, Shaped


@final
class Transition(eqx.Module):
    """One step per env, or a batch of them (leading axes shared by all fields).

    `next_obs` is the observation the step led to, *before* any auto-reset, so it can
    be used to bootstrap through truncation. `extras` holds what the agent returned
    from `act` (log-probabilities, values).
    """

    obs: Shaped[Array, "..."]
    action: Shaped[Array, "..."]
    reward: Float[Array, "*batch"]
    terminated: Bool[Array, "*batch"]
    truncated: Bool[Array, "*batch"]
    next_obs: Shaped[Array, "..."]
    extras: dict[str, Any]


class AbstractMemory(eqx.Module):
    @abc.abstractmethod
    def init(self, example: Transition, num_envs: int) -> PyTree:
        """Empty memory for transitions shaped like `example` (one env, one step)."""

    @abc.abstractmethod
    def add(self, state: PyTree, trajectory: Transition) -> PyTree:
        """Add a `[num_steps, num_envs]` trajectory."""


@final
class RolloutState(eqx.Module):
    trajectory: Transition


@final
class Rollout(AbstractMemory):
    """Keeps only the latest `[num_steps, num_envs]` rollout (on-policy)."""

    num_steps: int = eqx.field(static=True)

    def init(self, example: Transition, num_envs: int) -> RolloutState:
        zeros = jax.tree.map(
            lambda x: jnp.zeros((self.num_steps, num_envs, *x.shape), x.dtype), example
        )
        return RolloutState(zeros)

    def add(self, state: RolloutState, trajectory: Transition) -> RolloutState:
        return RolloutState(trajectory)


@final
class ReplayState(eqx.Module):
    data: Transition
    position: Int[Array, ""]
    size: Int[Array, ""]
    count: Int[Array, ""]


@final
class Replay(AbstractMemory):
    """A uniform replay buffer of `capacity` transitions; the oldest are overwritten."""

    capacity: int = eqx.field(static=True)

    def __check_init__(self):
        if self.capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {self.capacity}")

    def init(self, example: Transition, num_envs: int) -> ReplayState:
        data = jax.tree.map(
            lambda x: jnp.zeros((self.capacity, *x.shape), x.dtype), example
        )
        zero = jnp.array(0, jnp.int32)
        return ReplayState(data, zero, zero, zero)

    def add(self, state: ReplayState, trajectory: Transition) -> ReplayState:
        flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), trajectory)
        n = jax.tree.leaves(flat)[0].shape[0]
        if n > self.capacity:
            raise ValueError(
                f"a rollout of {n} transitions does not fit a replay buffer of "
                f"{self.capacity}"
            )
        index = (state.position + jnp.arange(n)) % self.capacity
        data = jax.tree.map(lambda buf, x: buf.at[index].set(x), state.data, flat)
        return ReplayState(
            data,
            (state.position + n) % self.capacity,
            jnp.minimum(state.size + n, self.capacity),
            state.count + n,
        )

    def sample(
        self, state: ReplayState, batch_size: int, *, key: PRNGKeyArray
    ) -> Transition:
        """Draw `batch_size` transitions uniformly, with replacement."""
        index = jr.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1))
        return jax.tree.map(lambda x: x[index], state.data)
