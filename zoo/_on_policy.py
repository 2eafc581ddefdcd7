"""What the on-policy agents share: GAE, epochs of minibatches over a rollout,
and the actor-critic machinery of PPO and A2C (networks, acting, advantages).

PPO and A2C differ only in their loss and in how many gradient steps they take
on a rollout; PQN shares `minibatch_epochs`.
"""

import abc
from collections.abc import Callable
from typing import Any, Generic, TypeVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Box, Discrete, Space

from . import _distributions as dist
from ._agent import AbstractRecurrentAgent, AbstractState, Extras, refuse_act
from ._memory import Rollout, RolloutState, Transition
from ._networks import Critic, DiscreteActor, GaussianActor, initial_cell_carry
from ._normalize import RunningStats


def gae(
    reward: Float[Array, " T *envs"],
    value: Float[Array, " T *envs"],
    next_value: Float[Array, " T *envs"],
    done: Float[Array, " T *envs"],
    gamma: float | Float[Array, ""],
    lam: float | Float[Array, ""],
) -> Float[Array, " T *envs"]:
    """Generalised advantage estimates, computed backwards in time.

    `next_value[t]` is the value of the state step `t` led to, already zero where
    the episode terminated (but not where it was only truncated); `done[t]` stops the
    recursion at any episode end.
    """
    delta = reward + gamma * next_value - value

    def backward(carry, x):
        delta_t, done_t = x
        carry = delta_t + gamma * lam * (1.0 - done_t) * carry
        return carry, carry

    _, advantages = jax.lax.scan(
        backward, jnp.zeros_like(delta[0]), (delta, done), reverse=True
    )
    return advantages


def minibatch_epochs(
    step: Callable[[Any, PyTree], tuple[Any, dict[str, Array]]],
    carry: Any,
    data: PyTree,
    *,
    num_epochs: int,
    num_minibatches: int,
    key: PRNGKeyArray,
) -> tuple[Any, dict[str, Array]]:
    """`num_epochs` passes over `data` (leaves with a leading batch axis), each in
    `num_minibatches` minibatches of a fresh permutation, calling
    `step(carry, minibatch) -> (carry, metrics)`.

    **Returns:** the final carry and the metrics averaged over every step.
    """
    size = jax.tree.leaves(data)[0].shape[0]

    def epoch(carry, k):
        index = jr.permutation(k, size).reshape(num_minibatches, -1)
        return jax.lax.scan(
            lambda c, i: step(c, jax.tree.map(lambda x: x[i], data)), carry, index
        )

    carry, metrics = jax.lax.scan(epoch, carry, jr.split(key, num_epochs))
    return carry, jax.tree.map(jnp.mean, metrics)


def flatten_rollout(tree: PyTree) -> PyTree:
    """Merge the `[num_steps, num_envs]` axes of every leaf into one."""
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), tree)


def episode_starts(traj: Transition, axis: int = 0) -> Bool[Array, "..."]:
    """Where a carry is reset before the step (an episode started after the
    step before ended), along the time axis `axis`; never at the first step,
    whose stored carry was reset when it was collected."""
    done = jnp.moveaxis(traj.terminated | traj.truncated, axis, 0)
    starts = jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]])
    return jnp.moveaxis(starts, 0, axis)


def to_sequences(tree: PyTree, length: int) -> PyTree:
    """`[T, envs, ...]` leaves cut into sequences of `length` consecutive
    steps of one env: `[T // length * envs, length, ...]`, in time order within
    each (minibatches then take whole sequences, never shuffled across time)."""

    def cut(x):
        t, envs = x.shape[:2]
        x = x.reshape(t // length, length, envs, *x.shape[2:])
        return jnp.swapaxes(x, 1, 2).reshape(t // length * envs, length, *x.shape[3:])

    return jax.tree.map(cut, tree)


def unroll(
    step: Callable[[PyTree, Array], tuple[PyTree, PyTree]],
    carry: PyTree,
    obs: Shaped[Array, "T ..."],
    starts: Bool[Array, " T"],
    initial: PyTree,
) -> tuple[PyTree, PyTree]:
    """Run a recurrent network's `step(carry, obs) -> (output, carry)` over one
    env's sequence from `carry`, putting the carry back at `initial` before
    each step where `starts` says an episode began.

    **Returns:** `(outputs, carries)` per step, each carry the one after its step
    (before any reset)."""

    def body(c, x):
        o, start = x
        c = jax.tree.map(lambda i, c: jnp.where(start, i, c), initial, c)
        y, c = step(c, o)
        return c, (y, c)

    _, (outputs, carries) = jax.lax.scan(body, carry, (obs, starts), unroll=16)
    return outputs, carries


S = TypeVar("S", bound=AbstractState)


class AbstractRolloutAgent(AbstractRecurrentAgent[S], Generic[S]):
    """An agent that learns from each rollout of `num_steps` steps per env
    (PPO, A2C, PQN); a recurrent one from its sequences of `sequence_length`
    steps (`None`: the whole rollout)."""

    sequence_length: eqx.AbstractVar[int | None]

    def __check_init__(self):
        length, steps = self.sequence_length, self.num_steps
        if length is None:
            return
        if type(length) is not int or length <= 0 or steps % length:
            raise ValueError(
                f"{type(self).__name__}: sequence_length={length!r} does not divide "
                f"the rollout of num_steps={steps}; choose a positive divisor of "
                "num_steps (or None for whole rollouts)"
            )

    @property
    def memory(self) -> Rollout:
        return Rollout(self.num_steps)

    @property
    def training_length(self) -> int:
        """A recurrent agent's training sequence length: `sequence_length`, or
        the whole rollout (`num_steps`) when that is `None`."""
        length = self.sequence_length
        return self.num_steps if length is None else length

    def check_minibatches(self, num_envs: int, minibatches: int) -> None:
        """A `ValueError` unless a rollout of `num_envs * num_steps`
        transitions splits into `minibatches` equal minibatches (for a
        recurrent agent, its sequences do)."""
        name, steps = type(self).__name__, self.num_steps
        if self.recurrent:
            length = self.training_length
            count = num_envs * steps // length
            if count % minibatches:
                raise ValueError(
                    f"{name}: the rollout's num_envs * num_steps / "
                    f"sequence_length = {num_envs} * {steps} / {length} = {count} "
                    f"sequences do not split into num_minibatches={minibatches} "
                    "equal minibatches (a recurrent agent's minibatches are whole "
                    "sequences); choose num_envs, sequence_length or "
                    "num_minibatches to match."
                )
            return
        batch = num_envs * steps
        if batch % minibatches:
            raise ValueError(
                f"{name}: the rollout of num_envs * num_steps = "
                f"{num_envs} * {steps} = {batch} transitions does not split into "
                f"num_minibatches={minibatches} equal minibatches; choose values "
                "whose product is divisible by num_minibatches."
            )


@final
class ActorCriticState(AbstractState):
    """The learnt state of PPO and A2C."""

    actor: DiscreteActor | GaussianActor
    critic: Critic
    opt_state: PyTree
    step: Int[Array, ""]  # updates done
    # Optimizer steps over the whole run: the horizon of learning-rate annealing.
    horizon: Int[Array, ""]
    obs_stats: RunningStats
    action_space: Space = eqx.field(static=True)


class AbstractActorCritic(AbstractRolloutAgent[ActorCriticState]):
    """A policy and a value function learnt from each rollout, with GAE
    advantages: discrete (categorical) or continuous (Gaussian) actions.

    Its fields with the same default in every such agent (PPO, A2C) are
    declared here once; each agent's page lists them with its own."""

    num_steps: eqx.AbstractVar[int]
    gae_lambda: eqx.AbstractVar[float]
    gamma: float = 0.99
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    reward_scale: float = 1.0
    log_std_init: float = 0.0
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(64, 64))
    activation: str = eqx.field(static=True, default="tanh")
    torso: str = eqx.field(static=True, default="auto")
    cell_size: int = eqx.field(static=True, default=128)
    sequence_length: int | None = eqx.field(static=True, default=None)
    shared_torso: bool = eqx.field(static=True, default=False)
    normalize_obs: bool = eqx.field(static=True, default=False)
    scale_obs: bool = eqx.field(static=True, default=False)

    @abc.abstractmethod
    def make_optimizer(self, horizon: Int[Array, ""]) -> optax.GradientTransformation:
        """The optimizer of actor and critic together; `horizon` is the number
        of optimizer steps over the run."""

    @abc.abstractmethod
    def steps_per_rollout(self) -> int:
        """Optimizer steps taken on each rollout."""

    def __check_init__(self):
        name = type(self).__name__
        if self.num_steps <= 0:
            raise ValueError(
                f"{name}: num_steps must be positive, got {self.num_steps}"
            )
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError(f"{name}: gamma and gae_lambda must be in [0, 1]")

    def init(
        self, obs_space, action_space, *, key, num_envs, total_steps
    ) -> ActorCriticState:
        k_actor, k_critic = jr.split(key)
        shape = obs_space.shape
        cell_size = self.cell_size if self.recurrent else None
        if isinstance(action_space, Discrete):
            actor = DiscreteActor(
                shape,
                action_space.n,
                self.hidden_sizes,
                self.activation,
                torso=self.torso,
                cell_size=cell_size,
                key=k_actor,
            )
        else:
            actor = GaussianActor(
                shape,
                action_space.shape[0],
                self.hidden_sizes,
                self.activation,
                self.log_std_init,
                torso=self.torso,
                cell_size=cell_size,
                key=k_actor,
            )
        critic = Critic(
            shape,
            self.hidden_sizes,
            self.activation,
            torso=self.torso,
            cell_size=cell_size,
            # A shared torso: the critic is a head on the actor torso's features.
            features=actor.torso.out_size if self.shared_torso else None,
            key=k_critic,
        )
        updates = max(total_steps // (num_envs * self.num_steps), 1)
        horizon = jnp.array(updates * self.steps_per_rollout())
        opt_state = self.make_optimizer(horizon).init(
            eqx.filter((actor, critic), eqx.is_inexact_array)
        )
        return ActorCriticState(
            actor=actor,
            critic=critic,
            opt_state=opt_state,
            step=jnp.array(0, jnp.int32),
            horizon=horizon,
            obs_stats=self.initial_obs_stats(obs_space),
            action_space=action_space,
        )

    def policy(self, actor, obs, action):
        """Log-probability of `action` and the policy's entropy at `obs`."""
        return self.policy_of(actor, actor(obs), action)

    def policy_of(self, actor, out, action):
        """Log-probability of `action` and the entropy of the policy `actor`
        output (logits, or a Gaussian's mean and log standard deviation)."""
        if isinstance(actor, DiscreteActor):
            return dist.categorical_log_prob(out, action), dist.categorical_entropy(out)
        mean, log_std = out
        return dist.gaussian_log_prob(mean, log_std, action), dist.gaussian_entropy(
            log_std
        )

    def policy_batch(self, actor, batch: Transition):
        """`policy` over a batch of transitions (the sampled, unclipped action)."""
        action = batch.extras.get("raw_action", batch.action)
        return jax.vmap(lambda o, a: self.policy(actor, o, a))(batch.obs, action)

    def evaluate_batch(self, actor, critic, batch: Transition, starts=None):
        """Log-probabilities of the batch's actions, the policy's entropies and
        the values, per transition. A memoryless agent's batch is flat; a
        recurrent agent's is `[sequences, length]` (`to_sequences`), run through
        each sequence from the carry stored at its start, reset where `starts`."""
        if self.shared_torso:
            return self._evaluate_shared(actor, critic, batch, starts)
        if not self.recurrent:
            log_prob, entropy = self.policy_batch(actor, batch)
            return log_prob, entropy, jax.vmap(critic)(batch.obs)
        initial = self.initial_carry()
        actor_carry, critic_carry = jax.tree.map(
            lambda c: c[:, 0], batch.extras["carry"]
        )
        run = lambda net, c0, i: jax.vmap(
            lambda c, o, s: unroll(net.step, c, o, s, i)[0]
        )(c0, batch.obs, starts)
        out = run(actor, actor_carry, initial[0])
        value = run(critic, critic_carry, initial[1])
        action = batch.extras.get("raw_action", batch.action)
        policy = jax.vmap(jax.vmap(lambda o, a: self.policy_of(actor, o, a)))
        log_prob, entropy = policy(out, action)
        return log_prob, entropy, value

    def _evaluate_shared(self, actor, critic, batch: Transition, starts):
        """`evaluate_batch` with one torso under both heads: its features,
        computed once per step, give the policy and the value."""
        if self.recurrent:
            x = jax.vmap(
                lambda c, o, s: unroll(
                    actor.torso.step, c, o, s, self.initial_carry()[0]
                )[0]
            )(
                jax.tree.map(lambda c: c[:, 0], batch.extras["carry"][0]),
                batch.obs,
                starts,
            )
            each = lambda f: jax.vmap(jax.vmap(f))
        else:
            x = jax.vmap(actor.torso)(batch.obs)
            each = jax.vmap
        action = batch.extras.get("raw_action", batch.action)
        log_prob, entropy = each(lambda x, a: self.policy_of(actor, x, a))(
            each(actor.from_features)(x), action
        )
        return log_prob, entropy, each(critic.from_features)(x)

    def training_batch(self, traj: Transition, advantages, returns) -> tuple:
        """What minibatches are drawn from: the flattened rollout, or for a
        recurrent agent its sequences and where episodes start in them."""
        if not self.recurrent:
            return flatten_rollout((traj, advantages, returns))
        starts = episode_starts(traj)
        return to_sequences((traj, advantages, returns, starts), self.training_length)

    def initial_carry(self) -> PyTree:
        """The actor's and the critic's cell carries (zeros) for a recurrent
        torso (the critic's `()` when it shares the actor's), `()` otherwise."""
        if not self.recurrent:
            return ()
        one = initial_cell_carry(self.torso, self.cell_size)
        return (one, () if self.shared_torso else one)

    def act(
        self, state, obs, *, key, greedy=False
    ) -> tuple[Shaped[Array, "..."], Extras]:
        refuse_act(self)
        obs = self.preprocess(state, obs)
        if self.shared_torso:
            x = state.actor.torso(obs)
            value, out = state.critic.from_features(x), state.actor.from_features(x)
        else:
            value = state.critic(obs)
            out = state.actor(obs)
        return self._decide(state, out, value, key=key, greedy=greedy)

    def recurrent_act(
        self, state, carry, obs, *, key, greedy=False
    ) -> tuple[Shaped[Array, "..."], Extras, PyTree]:
        obs = self.preprocess(state, obs)
        if self.shared_torso:
            x, actor_carry = state.actor.torso.step(carry[0], obs)
            value, out = state.critic.from_features(x), state.actor.from_features(x)
            critic_carry, next_carry = (), actor_carry
        else:
            value, critic_carry = state.critic.step(carry[1], obs)
            out, actor_carry = state.actor.step(carry[0], obs)
            next_carry = critic_carry
        action, extras = self._decide(state, out, value, key=key, greedy=greedy)
        # The carry this step started from (sequence training starts from
        # it), and the critic's after it (the next observation's value uses
        # it; the actor's when they share a torso).
        extras["carry"] = carry
        extras["next_carry"] = next_carry
        return action, extras, (actor_carry, critic_carry)

    def _decide(self, state: ActorCriticState, out, value, *, key, greedy):
        """The action and extras from the actor's output and the value."""
        space = state.action_space
        if isinstance(space, Discrete):
            assert isinstance(state.actor, DiscreteActor)
            logits = out
            if greedy:
                action = jnp.argmax(logits).astype(jnp.int32)
            else:
                action = dist.categorical_sample(logits, key=key).astype(jnp.int32)
            log_prob = dist.categorical_log_prob(logits, action)
            return action, {"log_prob": log_prob, "value": value}
        assert isinstance(space, Box) and isinstance(state.actor, GaussianActor)
        mean, log_std = out
        raw = mean if greedy else dist.gaussian_sample(mean, log_std, key=key)
        log_prob = dist.gaussian_log_prob(mean, log_std, raw)
        # The env gets a clipped action; learning uses the sampled one.
        action = jnp.clip(raw, space.low, space.high)
        return action, {"log_prob": log_prob, "value": value, "raw_action": raw}

    def advantages(
        self, state: ActorCriticState, memory: RolloutState
    ) -> tuple[Transition, Float[Array, "T envs"], Float[Array, "T envs"]]:
        """The rollout with observations as the networks see them, its GAE
        advantages and its returns (advantages plus values)."""
        # The statistics the rollout was collected with: `observe` updates them
        # only after the update, so log-probabilities match the stored ones.
        traj = eqx.tree_at(
            lambda t: (t.obs, t.next_obs),
            memory.trajectory,
            (
                self.preprocess(state, memory.trajectory.obs),
                self.preprocess(state, memory.trajectory.next_obs),
            ),
        )
        # V(next_obs) is V of the next rollout step where the episode goes on, and
        # V of the final observation where it was truncated: one batched pass
        # bootstraps through truncation correctly.
        if self.recurrent:
            next_value = self._next_values(state, traj)
        elif self.shared_torso:
            value_of = lambda o: state.critic.from_features(state.actor.torso(o))
            next_value = jax.vmap(jax.vmap(value_of))(traj.next_obs)
        else:
            next_value = jax.vmap(jax.vmap(state.critic))(traj.next_obs)
        next_value = jnp.where(traj.terminated, 0.0, next_value)
        done = (traj.terminated | traj.truncated).astype(jnp.float32)
        reward = traj.reward * self.reward_scale
        value = traj.extras["value"]
        advantages = gae(reward, value, next_value, done, self.gamma, self.gae_lambda)
        return traj, advantages, advantages + value

    def _next_values(self, state: ActorCriticState, traj: Transition) -> Array:
        """A recurrent critic's value of each step's next observation, with the
        carry that step led to (kept by `act_step`): one batched pass."""
        if self.shared_torso:
            step = lambda c, o: state.critic.from_features(
                state.actor.torso.step(c, o)[0]
            )
        else:
            step = lambda c, o: state.critic.step(c, o)[0]
        return jax.vmap(jax.vmap(step))(traj.extras["next_carry"], traj.next_obs)


def explained_variance(
    returns: Float[Array, "..."], value: Float[Array, "..."]
) -> Float[Array, ""]:
    """`1 - Var(returns - value) / Var(returns)`: 1 for a perfect critic."""
    return 1.0 - jnp.var(returns - value) / (jnp.var(returns) + 1e-8)
