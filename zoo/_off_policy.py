"""The update every off-policy agent shares: DQN, C51, QR-DQN, SAC, TD3, DDPG.

An off-policy agent says what one gradient step on a sampled minibatch is
(`learn`) and which of its networks the target networks track (`online`); this
module owns the rest: the replay memory, the learning-starts gate, the scan over
`gradient_steps`, the target update (every `target_update_interval` gradient
steps, a fraction `tau` of the way), prioritised replay's priorities and
importance exponent, and the env-step counter behind schedules.
"""

import abc
from collections.abc import Callable
from typing import Generic, TypeVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Box, Space

from ._agent import (
    AbstractAgent,
    AbstractMemorylessAgent,
    AbstractState,
    Metrics,
    adam_optimizer,
    check_positive,
)
from ._memory import AbstractReplay, Replay, Sample
from ._networks import QCritic, ensemble_q
from ._prioritized import PrioritizedReplay


class AbstractOffPolicyState(AbstractState):
    """The parts of an off-policy agent's state the shared update moves."""

    target: eqx.AbstractVar[PyTree]  # the target networks
    step: eqx.AbstractVar[Int[Array, ""]]  # gradient steps taken
    env_steps: eqx.AbstractVar[Int[Array, ""]]  # transitions seen, all envs
    # Gradient steps over the whole run: the horizon of schedules (learning
    # rate, prioritised replay's beta).
    horizon: eqx.AbstractVar[Int[Array, ""]]


S = TypeVar("S", bound=AbstractOffPolicyState)


class AbstractOffPolicyAgent(AbstractAgent[S], Generic[S]):
    """An agent that learns from a replay memory.

    Every `train_frequency` env steps (per env), once the memory holds
    `learning_starts` transitions, `update` takes `gradient_steps` gradient steps
    on minibatches of `batch_size` n-step transitions, and after each moves the
    target networks every `target_update_interval` steps by a fraction `tau`.

    With `prioritized`, the memory is a `PrioritizedReplay`: transitions are
    drawn in proportion to their absolute TD error to the power
    `priority_alpha`, and weighted by importance weights whose exponent rises
    linearly from `priority_beta` to 1 over the run.
    """

    gamma: eqx.AbstractVar[float]
    n_step: eqx.AbstractVar[int]
    buffer_size: eqx.AbstractVar[int]
    batch_size: eqx.AbstractVar[int]
    learning_starts: eqx.AbstractVar[int]
    train_frequency: eqx.AbstractVar[int]
    gradient_steps: eqx.AbstractVar[int]
    target_update_interval: eqx.AbstractVar[int]
    tau: eqx.AbstractVar[float]
    prioritized: eqx.AbstractVar[bool]
    priority_alpha: eqx.AbstractVar[float]
    priority_beta: eqx.AbstractVar[float]

    def __check_init__(self):
        check_positive(
            self,
            "buffer_size",
            "batch_size",
            "train_frequency",
            "gradient_steps",
            "target_update_interval",
            "n_step",
        )
        name = type(self).__name__
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"{name}: tau must be in (0, 1], got {self.tau}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"{name}: gamma must be in [0, 1], got {self.gamma}")
        if self.learning_starts < 0:
            raise ValueError(
                f"{name}: learning_starts must be >= 0, got {self.learning_starts}"
            )
        if not 0.0 <= self.priority_alpha <= 1.0:
            raise ValueError(
                f"{name}: priority_alpha must be in [0, 1], got {self.priority_alpha}"
            )
        if not 0.0 <= self.priority_beta <= 1.0:
            raise ValueError(
                f"{name}: priority_beta must be in [0, 1], got {self.priority_beta}"
            )

    @property
    def memory(self) -> AbstractReplay:
        if self.prioritized:
            return PrioritizedReplay(self.buffer_size, alpha=self.priority_alpha)
        return Replay(self.buffer_size)

    def beta(self, state: S) -> Float[Array, ""]:
        """Prioritised replay's importance exponent: `priority_beta` rising
        linearly to 1 over the run's gradient steps."""
        progress = jnp.minimum(state.step / jnp.maximum(state.horizon, 1), 1.0)
        return self.priority_beta + (1.0 - self.priority_beta) * progress

    @property
    def num_steps(self) -> int:
        return self.train_frequency

    def check_replay(self, num_envs: int) -> None:
        """Raise `ValueError` if an iteration's transitions overflow the memory."""
        if num_envs * self.train_frequency > self.buffer_size:
            raise ValueError(
                f"{type(self).__name__}: num_envs * train_frequency = "
                f"{num_envs * self.train_frequency} transitions per iteration "
                f"exceed buffer_size={self.buffer_size}"
            )
        rows = self.buffer_size // num_envs
        if self.window > rows:
            raise ValueError(
                f"{type(self).__name__}: a sample reads {self.window} consecutive "
                f"steps of one env, but buffer_size={self.buffer_size} over "
                f"{num_envs} envs keeps {rows} per env; raise buffer_size"
            )

    def gradient_horizon(self, num_envs: int, total_steps: int) -> Int[Array, ""]:
        """Gradient steps over a run of `total_steps` (a schedule's horizon)."""
        per_iteration = num_envs * self.train_frequency
        learning = total_steps // per_iteration - self.learning_starts // per_iteration
        return jnp.array(max(learning, 1) * self.gradient_steps, jnp.int32)

    @property
    @abc.abstractmethod
    def window(self) -> int:
        """Consecutive steps per env a sample reads (`n_step` for transitions;
        a recurrent agent's sequences are longer). Learning waits until that
        many are stored."""

    @abc.abstractmethod
    def draw(self, state: S, memory: PyTree, *, key: PRNGKeyArray) -> Sample:
        """A minibatch for `learn`: `batch_size` n-step transitions
        (`draw_transitions`), or sequences for a recurrent agent."""

    def draw_transitions(
        self, state: S, memory: PyTree, *, key: PRNGKeyArray
    ) -> Sample:
        """`batch_size` n-step transitions, prioritised or uniform."""
        return self.memory.sample(
            memory,
            self.batch_size,
            key=key,
            n_step=self.n_step,
            gamma=self.gamma,
            beta=self.beta(state),
        )

    @abc.abstractmethod
    def learn(
        self, state: S, sample: Sample, *, key: PRNGKeyArray
    ) -> tuple[S, Float[Array, " batch"], Metrics]:
        """One gradient step on `sample` (`state.step` not yet incremented).

        **Returns:** the new state, the sample's new priorities (absolute TD
        errors) and scalar metrics.
        """

    @abc.abstractmethod
    def online(self, state: S) -> PyTree:
        """The networks `state.target` tracks, in its structure."""

    @abc.abstractmethod
    def schedule_metrics(self, state: S) -> Metrics:
        """Metrics reported every iteration, learning or not (e.g. epsilon)."""

    def update(
        self, state: S, memory: PyTree, *, key: PRNGKeyArray
    ) -> tuple[S, PyTree, Metrics]:
        state = eqx.tree_at(lambda s: s.env_steps, state, memory.count)
        # Only what learning writes (priorities) goes through the gate below.
        stored, written = self.memory.split(memory)

        def gradient_step(carry, k):
            s, written = carry
            k_sample, k_learn = jr.split(k)
            mem = self.memory.join(stored, written)
            sample = self.draw(s, mem, key=k_sample)
            s, priorities, metrics = self.learn(s, sample, key=k_learn)
            _, written = self.memory.split(
                self.memory.update_priorities(mem, sample, priorities)
            )
            step = s.step + 1
            moved = optax.incremental_update(self.online(s), s.target, self.tau)  # pyright: ignore
            target = optax.periodic_update(
                moved,  # pyright: ignore
                s.target,
                step,
                self.target_update_interval,
            )
            s = eqx.tree_at(lambda s: (s.step, s.target), s, (step, target))
            return (s, written), metrics

        def learning(carry):
            carry, metrics = jax.lax.scan(
                gradient_step, carry, jr.split(key, self.gradient_steps)
            )
            return carry, jax.tree.map(jnp.mean, metrics)

        def waiting(carry):
            shapes = jax.eval_shape(learning, carry)[1]
            return carry, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)

        ready = (memory.count >= max(self.learning_starts, self.batch_size)) & (
            memory.size >= self.window
        )
        (state, written), metrics = jax.lax.cond(
            ready, learning, waiting, (state, written)
        )
        memory = self.memory.join(stored, written)
        return state, memory, {**metrics, **self.schedule_metrics(state)}


class AbstractContinuousAgent(AbstractOffPolicyAgent[S], AbstractMemorylessAgent[S]):
    """An off-policy actor-critic on a `Box` action space with finite bounds
    (SAC, TD3, DDPG): memoryless, it learns from n-step transitions, its actor
    and critics with one Adam optimizer each (`optimizer`).

    Its fields, shared by every such agent (each agent's page lists its own):

    - `learning_rate`, `max_grad_norm`: Adam step size of actor and critics;
      global-norm clipping; `adam_beta1`: Adam's first-moment decay.
    - `gamma`, `n_step`: discount and n-step returns.
    - `buffer_size`, `batch_size`, `learning_starts`, `train_frequency`,
      `gradient_steps`: replay, as for DQN.
    - `tau`: Polyak averaging of the targets.
    - `prioritized`: prioritised replay (proportional); `priority_alpha` is
      the priority exponent, `priority_beta` the importance-weight exponent at
      the start (annealed linearly to 1).
    - `hidden_sizes`, `activation`, `torso`: actor and critic torsos.
    - `normalize_obs`: normalise observations by running statistics;
      `scale_obs`: instead map bounded observation dimensions onto [-1, 1].
    """

    learning_rate: float = 1e-3
    max_grad_norm: float = 10.0
    adam_beta1: float = 0.9
    gamma: float = 0.99
    n_step: int = eqx.field(static=True, default=1)
    buffer_size: int = eqx.field(static=True, default=100_000)
    batch_size: int = eqx.field(static=True, default=256)
    learning_starts: int = 1_000
    train_frequency: int = eqx.field(static=True, default=1)
    gradient_steps: int = eqx.field(static=True, default=1)
    tau: float = 0.005
    prioritized: bool = eqx.field(static=True, default=False)
    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(256, 256))
    activation: str = eqx.field(static=True, default="relu")
    torso: str = eqx.field(static=True, default="auto")
    normalize_obs: bool = eqx.field(static=True, default=False)
    scale_obs: bool = eqx.field(static=True, default=False)

    @final
    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        check_box(self, action_space, squashed=True)
        self.check_replay(num_envs)

    @property
    @final
    def window(self) -> int:
        return self.n_step

    @final
    def draw(self, state: S, memory: PyTree, *, key: PRNGKeyArray) -> Sample:
        return self.draw_transitions(state, memory, key=key)

    def optimizer(self) -> optax.GradientTransformation:
        """Adam with global-norm clipping, for the actor and for the critics."""
        return adam_optimizer(
            self.learning_rate, self.max_grad_norm, b1=self.adam_beta1
        )


def check_box(agent: eqx.Module, action_space: Space, *, squashed: bool) -> Box:
    """The action space as a `Box` with finite bounds, or a `ValueError` that says
    which agent to use instead."""
    name = type(agent).__name__
    if not isinstance(action_space, Box):
        raise ValueError(
            f"{name} needs a continuous (Box) action space, but this env's is "
            f"{type(action_space).__name__}; use DQN or PPO for discrete actions."
        )
    if len(action_space.shape) != 1:
        raise ValueError(
            f"{name} needs a vector of actions, got shape {action_space.shape}"
        )
    if squashed and not action_space.bounded:
        raise ValueError(
            f"{name} squashes its actions into the action space's bounds, but "
            f"they are not finite (low={action_space.low}, high={action_space.high})"
            "; wrap the env so its actions are bounded."
        )
    return action_space


def scale_action(space: Box, action: Float[Array, " n"]) -> Float[Array, " n"]:
    """Map an action in `[-1, 1]` to the space's bounds, `-1 -> low`, `1 -> high`."""
    low, high = jnp.asarray(space.low), jnp.asarray(space.high)
    return low + (action + 1.0) * 0.5 * (high - low)


def unscale_action(space: Box, action: Float[Array, "*b n"]) -> Float[Array, "*b n"]:
    """The inverse of `scale_action`, for any leading axes."""
    low = jnp.broadcast_to(jnp.asarray(space.low), action.shape)
    high = jnp.broadcast_to(jnp.asarray(space.high), action.shape)
    return 2.0 * (action - low) / (high - low) - 1.0


def update_critics(
    critics: QCritic,
    opt_state: PyTree,
    optimizer: optax.GradientTransformation,
    obs: Shaped[Array, "batch ..."],
    action: Float[Array, "batch action_dim"],
    y: Float[Array, " batch"] | Float[Array, "batch atoms"],
    weights: Float[Array, " batch"],
    losses: Callable[[Array, Array], Array] | None = None,
) -> tuple[QCritic, PyTree, Float[Array, ""], Float[Array, "batch n ..."]]:
    """One optimizer step of a critic ensemble (`q_ensemble`) on the squared error
    to the targets `y` (or on `losses(q, y)`, per transition: TQC's quantile
    loss), each transition weighted by its importance weight.

    **Returns:** the critics, the optimizer state, the loss and the critics'
    values before the step, `[batch, n_critics]` (`[batch, n_critics,
    quantiles]` for quantile critics).
    """

    def loss_fn(critics):
        q = jax.vmap(lambda o, a: ensemble_q(critics, o, a))(obs, action)
        if losses is not None:
            return jnp.mean(weights * losses(q, y)), q
        per_transition = jnp.sum((q - y[:, None]) ** 2, axis=1)
        return 0.5 * jnp.mean(weights * per_transition), q

    (loss, q), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(critics)
    params = eqx.filter(critics, eqx.is_inexact_array)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return eqx.apply_updates(critics, updates), opt_state, loss, q
