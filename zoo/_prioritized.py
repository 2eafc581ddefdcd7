"""Proportional prioritised replay (Schaul et al., 2016) on a sum tree.

Transition `i` is drawn with probability `p_i**alpha / sum_k p_k**alpha`, where
`p_i` is its last absolute TD error plus `eps`; new transitions enter at the
largest priority seen so far, so each is replayed at least once soon. Sampling
walks a sum tree (every node holds the sum of its children) from the root to
a leaf: `O(depth * fanout)` work per draw with a depth of 2 or 3, vectorised
over the batch, and the same to write new priorities, so the cost hardly grows
with the buffer (a flat prefix sum over it would cost `O(N)` per draw).
"""

import math
from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int

from ._memory import (
    AbstractReplay,
    Replay,
    ReplayState,
    Sample,
    Transition,
    n_step_batch,
)


@final
class SumTree(eqx.Module):
    """A sum tree of fan-out `fanout` over `fanout**depth >= size` leaves:
    `levels[0]` holds the leaves, and each entry of `levels[l + 1]` the sum of
    `fanout` consecutive entries of `levels[l]`. A wide tree keeps the depth
    small (3 levels for a million leaves), so a lookup or update is a few
    vectorised gathers over the batch, not a loop of dozens of tiny steps."""

    levels: tuple[Float[Array, " _size"], ...]
    fanout: int = eqx.field(static=True)

    @staticmethod
    def zeros(size: int, max_fanout: int = 128) -> "SumTree":
        size = max(size, 2)
        depth = max(1, math.ceil(math.log(size) / math.log(max_fanout)))
        fanout = math.ceil(size ** (1.0 / depth))
        while fanout**depth < size:  # rounding
            fanout += 1
        levels = tuple(
            jnp.zeros(fanout ** (depth - level), jnp.float32) for level in range(depth)
        )
        return SumTree(levels, fanout)

    @property
    def total(self) -> Float[Array, ""]:
        return jnp.sum(self.levels[-1])

    def get(self, index: Int[Array, " n"]) -> Float[Array, " n"]:
        return self.levels[0][index]

    def set(self, index: Int[Array, " n"], value: Float[Array, " n"]) -> "SumTree":
        """Set leaves `index` to `value` and refresh their ancestors (a repeated
        index takes one of its values)."""
        levels = [self.levels[0].at[index].set(value)]
        for level in self.levels[1:]:
            index = index // self.fanout
            children = levels[-1].reshape(-1, self.fanout)[index]
            levels.append(level.at[index].set(jnp.sum(children, axis=1)))
        return SumTree(tuple(levels), self.fanout)

    def find(self, mass: Float[Array, " n"]) -> Int[Array, " n"]:
        """The leaf where the running sum of the leaves passes each `mass`
        (in `[0, total)`): leaf `j` is found for a share `value_j / total` of
        the masses."""
        node = jnp.zeros(mass.shape, jnp.int32)
        for level in reversed(self.levels):
            children = level.reshape(-1, self.fanout)[node]  # [n, fanout]
            below = jnp.cumsum(children, axis=1)
            child = jnp.minimum(
                jnp.sum(below <= mass[:, None], axis=1), self.fanout - 1
            )
            before = jnp.take_along_axis(below - children, child[:, None], axis=1)
            mass = mass - before[:, 0]
            node = node * self.fanout + child.astype(jnp.int32)
        return node


@final
class PrioritizedReplayState(eqx.Module):
    """A prioritised replay buffer: the transitions and a sum tree of their
    priorities."""

    replay: ReplayState  # the transitions, as uniform replay stores them
    tree: SumTree  # priority**alpha of entry `row * num_envs + env`
    max_priority: Float[Array, ""]  # the largest priority**alpha written

    @property
    def count(self) -> Int[Array, ""]:
        return self.replay.count

    @property
    def size(self) -> Int[Array, ""]:
        return self.replay.size


@final
class PrioritizedReplay(AbstractReplay):
    """A replay buffer of `capacity` transitions, sampled in proportion to their
    priority to the power `alpha`.

    `sample` takes the importance-sampling exponent `beta` (the agent anneals it
    to 1 over its run) and returns weights `(N * P(i))**-beta`, divided by the
    largest in the batch, as Dopamine and Rainbow do; `update_priorities` takes
    absolute TD errors.
    """

    capacity: int = eqx.field(static=True)
    alpha: float | Float[Array, ""] = 0.6  # an array when the agent's is swept
    eps: float = 1e-6

    def __check_init__(self):
        if self.capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {self.capacity}")

    def _uniform(self) -> Replay:
        return Replay(self.capacity)

    def init(self, example: Transition, num_envs: int) -> PrioritizedReplayState:
        replay = self._uniform().init(example, num_envs)
        rows = replay.data.reward.shape[0]
        return PrioritizedReplayState(
            replay, SumTree.zeros(rows * num_envs), jnp.array(1.0, jnp.float32)
        )

    def add(
        self, state: PrioritizedReplayState, trajectory: Transition
    ) -> PrioritizedReplayState:
        """Store the trajectory, every new transition at the maximal priority."""
        num_steps, num_envs = trajectory.reward.shape
        rows = state.replay.data.reward.shape[0]
        row = (state.replay.position + jnp.arange(num_steps)) % rows
        index = (row[:, None] * num_envs + jnp.arange(num_envs)[None, :]).reshape(-1)
        tree = state.tree.set(index, jnp.full(index.shape, state.max_priority))
        replay = self._uniform().add(state.replay, trajectory)
        return PrioritizedReplayState(replay, tree, state.max_priority)

    def sample(
        self, state, batch_size, *, key, n_step=1, gamma=1.0, beta=1.0
    ) -> Sample:
        """Draw `batch_size` transitions in proportion to their priorities, one
        from each of `batch_size` equal slices of the total priority (stratified,
        as in the paper). A window cut short by the newest row sums fewer steps."""
        replay = state.replay
        rows, num_envs = replay.data.reward.shape
        total = state.tree.total
        u = (jnp.arange(batch_size) + jr.uniform(key, (batch_size,))) / batch_size
        leaf = state.tree.find(u * total)
        stored = replay.size * num_envs
        # Rounding can walk onto an empty leaf: draw that one uniformly instead.
        priority = state.tree.get(leaf)
        bad = (priority <= 0.0) | (leaf >= rows * num_envs)
        oldest = jnp.where(replay.size < rows, 0, replay.position)
        fallback = (oldest * num_envs + (u * stored).astype(jnp.int32)) % (
            rows * num_envs
        )
        leaf = jnp.where(bad, fallback, leaf)
        priority = state.tree.get(leaf)
        row, env = leaf // num_envs, leaf % num_envs
        # Steps written from `row` on, the newest row (`position - 1`) included.
        available = (replay.position - 1 - row) % rows + 1
        batch, discount = n_step_batch(replay.data, row, env, n_step, gamma, available)
        prob = jnp.maximum(priority, 1e-12) / total
        weights = (stored * prob) ** -jnp.asarray(beta)
        weights = weights / jnp.max(weights)
        return Sample(batch, discount, weights, row, env)

    def update_priorities(self, state, sample, priorities) -> PrioritizedReplayState:
        """Set the sampled transitions' priorities to `(priorities + eps)**alpha`."""
        num_envs = state.replay.data.reward.shape[1]
        value = (jnp.abs(priorities) + self.eps) ** self.alpha
        value = jax.lax.stop_gradient(value.astype(jnp.float32))
        tree = state.tree.set(sample.row * num_envs + sample.env, value)
        return PrioritizedReplayState(
            state.replay, tree, jnp.maximum(state.max_priority, jnp.max(value))
        )

    def split(
        self, state: PrioritizedReplayState
    ) -> tuple[ReplayState, tuple[SumTree, Float[Array, ""]]]:
        return state.replay, (state.tree, state.max_priority)

    def join(
        self, stored: ReplayState, written: tuple[SumTree, Float[Array, ""]]
    ) -> PrioritizedReplayState:
        return PrioritizedReplayState(stored, *written)
