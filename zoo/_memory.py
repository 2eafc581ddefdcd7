"""Memory components: what an agent keeps of the transitions it collected.

On- versus off-policy is this component, not a class hierarchy: `Rollout` keeps the
latest rollout, `Replay` keeps a uniform replay buffer (and `PrioritizedReplay`,
in `_prioritized.py`, a prioritised one).
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
    """What an agent keeps of the transitions it collected: `init` an empty
    memory state, `add` each iteration's trajectory. The state is a pytree
    kept in the runner's carry, apart from the agent."""

    @abc.abstractmethod
    def init(self, example: Transition, num_envs: int) -> PyTree:
        """Empty memory for transitions shaped like `example` (one env, one step)."""

    @abc.abstractmethod
    def add(self, state: PyTree, trajectory: Transition) -> PyTree:
        """Add a `[num_steps, num_envs]` trajectory."""


@final
class RolloutState(eqx.Module):
    """The latest `[num_steps, num_envs]` trajectory."""

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
    """A uniform replay buffer: `rows` rows of one transition per env."""

    data: Transition  # [rows, num_envs, ...]: each env's transitions in time order
    position: Int[Array, ""]  # the next row to write
    size: Int[Array, ""]  # rows written, at most `rows`
    count: Int[Array, ""]  # transitions ever added, all envs together


@final
class Sample(eqx.Module):
    """A minibatch drawn from a replay memory.

    `batch` holds n-step transitions (`reward` the discounted sum, `next_obs` the
    observation to bootstrap from, `terminated` whether the episode terminated
    within the window); `discount` is `gamma**k` for the `k` steps summed;
    `weights` are importance weights (ones for uniform sampling); `row` and `env`
    say where each transition is stored, for `update_priorities`.
    """

    batch: Transition
    discount: Float[Array, " batch"]
    weights: Float[Array, " batch"]
    row: Int[Array, " batch"]
    env: Int[Array, " batch"]


class AbstractReplay(AbstractMemory):
    """A replay memory: transitions stored per env in time order
    (`capacity // num_envs` rows of `num_envs`), so n-step returns can be built.

    Off-policy agents use any replay memory through `add`, `sample` and
    `update_priorities`; the runner does not know which one they hold.
    """

    capacity: eqx.AbstractVar[int]

    @abc.abstractmethod
    def sample(
        self,
        state: PyTree,
        batch_size: int,
        *,
        key: PRNGKeyArray,
        n_step: int = 1,
        gamma: float | Float[Array, ""] = 1.0,
        beta: float | Float[Array, ""] = 1.0,
    ) -> Sample:
        """Draw `batch_size` n-step transitions; `beta` is the exponent of the
        importance weights of a prioritised memory."""

    @abc.abstractmethod
    def update_priorities(
        self, state: PyTree, sample: Sample, priorities: Float[Array, " batch"]
    ) -> PyTree:
        """Record new priorities (e.g. absolute TD errors) of a sample's
        transitions."""

    @abc.abstractmethod
    def split(self, state: PyTree) -> tuple[PyTree, PyTree]:
        """`(stored, written)`: the transitions, which learning only reads, and
        what `update_priorities` writes. An update carries only `written`
        through its learning-starts gate: under a vmap over seeds that gate
        evaluates both branches and selects, and selecting the whole buffer
        would copy it every iteration."""

    @abc.abstractmethod
    def join(self, stored: PyTree, written: PyTree) -> PyTree:
        """The inverse of `split`."""


def n_step_batch(
    data: Transition,
    row: Int[Array, " batch"],
    env: Int[Array, " batch"],
    n_step: int,
    gamma: float | Float[Array, ""],
    available: Int[Array, " batch"] | None = None,
) -> tuple[Transition, Float[Array, " batch"]]:
    """The n-step transitions starting at `data[row, env]`: each sums the next
    `n_step` discounted rewards, stopping early where an episode ends, and after
    `available` steps where given (the steps written so far from `row` on: a
    window cut short by the newest row bootstraps earlier, which is still a
    correct target).

    **Returns:** the transitions and the bootstrap discount `gamma**k`, where `k`
    is the number of steps summed.
    """
    rows = data.reward.shape[0]
    window = (row[:, None] + jnp.arange(n_step)[None, :]) % rows  # [batch, n]
    at = lambda x: x[window, env[:, None]]
    done = at(data.terminated) | at(data.truncated)
    # Step i counts if no episode ended before it within the window.
    ended_before = jnp.cumsum(done, axis=1) - done
    alive = ended_before == 0
    if available is not None:
        alive &= jnp.arange(n_step)[None, :] < available[:, None]
    alive = alive.astype(jnp.float32)
    discounts = jnp.asarray(gamma) ** jnp.arange(n_step, dtype=jnp.float32)
    reward = jnp.sum(at(data.reward) * alive * discounts[None, :], axis=1)
    steps = jnp.sum(alive, axis=1).astype(jnp.int32)
    last = jnp.take_along_axis(window, (steps - 1)[:, None], axis=1)[:, 0]
    first = jax.tree.map(lambda x: x[row, env], data)
    batch = Transition(
        obs=first.obs,
        action=first.action,
        reward=reward,
        terminated=data.terminated[last, env],
        truncated=data.truncated[last, env],
        next_obs=data.next_obs[last, env],
        extras=first.extras,
    )
    return batch, jnp.asarray(gamma) ** steps


@final
class Replay(AbstractReplay):
    """A uniform replay buffer of `capacity` transitions; the oldest are
    overwritten."""

    capacity: int = eqx.field(static=True)

    def __check_init__(self):
        if self.capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {self.capacity}")

    def init(self, example: Transition, num_envs: int) -> ReplayState:
        rows = max(self.capacity // num_envs, 1)
        data = jax.tree.map(
            lambda x: jnp.zeros((rows, num_envs, *x.shape), x.dtype), example
        )
        zero = jnp.array(0, jnp.int32)
        return ReplayState(data, zero, zero, zero)

    def add(self, state: ReplayState, trajectory: Transition) -> ReplayState:
        rows = state.data.reward.shape[0]
        num_steps, num_envs = trajectory.reward.shape
        if num_steps > rows:
            raise ValueError(
                f"a rollout of {num_steps} steps of {num_envs} envs does not fit a "
                f"replay buffer of {self.capacity} transitions"
            )
        index = (state.position + jnp.arange(num_steps)) % rows
        data = jax.tree.map(lambda buf, x: buf.at[index].set(x), state.data, trajectory)
        return ReplayState(
            data,
            (state.position + num_steps) % rows,
            jnp.minimum(state.size + num_steps, rows),
            state.count + num_steps * num_envs,
        )

    def sample(
        self, state, batch_size, *, key, n_step=1, gamma=1.0, beta=1.0
    ) -> Sample:
        """Draw `batch_size` n-step transitions uniformly, with replacement, each
        starting at a stored step (whose whole window has been written) of a
        random env. Importance weights are ones (`beta` has nothing to
        correct)."""
        rows, num_envs = state.data.reward.shape
        starts = jnp.maximum(state.size - (n_step - 1), 1)
        oldest = jnp.where(state.size < rows, 0, state.position)
        # One draw for row and env (each random draw compiles a kernel of its own).
        flat = jr.randint(key, (batch_size,), 0, starts * num_envs)
        row = (oldest + flat // num_envs) % rows
        env = flat % num_envs
        batch, discount = n_step_batch(state.data, row, env, n_step, gamma)
        return Sample(batch, discount, jnp.ones(batch_size), row, env)

    def sample_sequences(
        self, state: ReplayState, batch_size: int, length: int, *, key: PRNGKeyArray
    ) -> Sample:
        """Draw `batch_size` sequences of `length` consecutive stored steps of
        one env each, uniformly, with replacement, from the windows written
        in full (a recurrent agent's replay, R2D2-style: each step's extras
        hold the carry it was acted from, so a sequence starts from the
        carry stored at its start). `batch` is `[batch_size, length]`; `row`
        and `env` are where each sequence starts; `discount` and `weights`
        are ones."""
        rows, num_envs = state.data.reward.shape
        if length > rows:
            raise ValueError(
                f"sequences of {length} steps do not fit a replay buffer of "
                f"{rows} rows per env ({self.capacity} transitions over "
                f"{num_envs} envs)"
            )
        starts = jnp.maximum(state.size - (length - 1), 1)
        oldest = jnp.where(state.size < rows, 0, state.position)
        flat = jr.randint(key, (batch_size,), 0, starts * num_envs)
        row = (oldest + flat // num_envs) % rows
        env = flat % num_envs
        window = (row[:, None] + jnp.arange(length)[None, :]) % rows  # [batch, T]
        batch = jax.tree.map(lambda x: x[window, env[:, None]], state.data)
        ones = jnp.ones(batch_size)
        return Sample(batch, ones, ones, row, env)

    def update_priorities(
        self, state: ReplayState, sample: Sample, priorities: Float[Array, " batch"]
    ) -> ReplayState:
        """Uniform replay keeps no priorities: `state` unchanged."""
        return state

    def split(self, state: ReplayState) -> tuple[ReplayState, None]:
        return state, None

    def join(self, stored: ReplayState, written: None) -> ReplayState:
        return stored
