"""What the on-policy agents share: GAE, epochs of minibatches over a rollout,
and the actor-critic machinery of PPO and A2C (networks, acting, advantages).

PPO and A2C differ only in their loss and in how many gradient steps they take
on a rollout; PQN shares `minibatch_epochs`.
"""

import abc
from collections.abc import Callable
from typing import Any, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Box, Discrete, Space

from . import _distributions as dist
from ._agent import AbstractAgent, AbstractState, Extras
from ._memory import Rollout, RolloutState, Transition
from ._networks import Critic, DiscreteActor, GaussianActor
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


def check_minibatches(agent: eqx.Module, num_envs: int) -> None:
    """A `ValueError` unless a rollout of `num_envs * agent.num_steps`
    transitions splits into `agent.num_minibatches` equal minibatches."""
    steps, minibatches = agent.num_steps, agent.num_minibatches  # pyright: ignore
    batch = num_envs * steps
    if batch % minibatches:
        raise ValueError(
            f"{type(agent).__name__}: the rollout of num_envs * num_steps = "
            f"{num_envs} * {steps} = {batch} transitions does not split into "
            f"num_minibatches={minibatches} equal minibatches; choose values "
            "whose product is divisible by num_minibatches."
        )


def flatten_rollout(tree: PyTree) -> PyTree:
    """Merge the `[num_steps, num_envs]` axes of every leaf into one."""
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), tree)


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


class AbstractActorCritic(AbstractAgent[ActorCriticState]):
    """A policy and a value function learnt from each rollout, with GAE
    advantages: discrete (categorical) or continuous (Gaussian) actions."""

    num_steps: eqx.AbstractVar[int]
    gamma: eqx.AbstractVar[float]
    gae_lambda: eqx.AbstractVar[float]
    reward_scale: eqx.AbstractVar[float]
    log_std_init: eqx.AbstractVar[float]
    hidden_sizes: eqx.AbstractVar[tuple[int, ...]]
    activation: eqx.AbstractVar[str]

    @abc.abstractmethod
    def make_optimizer(self, horizon: Int[Array, ""]) -> optax.GradientTransformation:
        """The optimizer of actor and critic together; `horizon` is the number
        of optimizer steps over the run."""

    @abc.abstractmethod
    def steps_per_rollout(self) -> int:
        """Optimizer steps taken on each rollout."""

    @property
    def memory(self) -> Rollout:
        return Rollout(self.num_steps)

    def __check_init__(self):
        name = type(self).__name__
        if self.num_steps <= 0:
            raise ValueError(
                f"{name}: num_steps must be positive, got {self.num_steps}"
            )
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError(f"{name}: gamma and gae_lambda must be in [0, 1]")

    def init(
        self,
        obs_space: Space,
        action_space: Space,
        *,
        key: PRNGKeyArray,
        num_envs: int,
        total_steps: int,
    ) -> ActorCriticState:
        k_actor, k_critic = jr.split(key)
        shape = obs_space.shape
        if isinstance(action_space, Discrete):
            actor = DiscreteActor(
                shape,
                action_space.n,
                self.hidden_sizes,
                self.activation,
                torso=self.torso,
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
                key=k_actor,
            )
        critic = Critic(
            shape, self.hidden_sizes, self.activation, torso=self.torso, key=k_critic
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
        if isinstance(actor, DiscreteActor):
            logits = actor(obs)
            return dist.categorical_log_prob(logits, action), dist.categorical_entropy(
                logits
            )
        mean, log_std = actor(obs)
        return dist.gaussian_log_prob(mean, log_std, action), dist.gaussian_entropy(
            log_std
        )

    def policy_batch(self, actor, batch: Transition):
        """`policy` over a batch of transitions (the sampled, unclipped action)."""
        action = batch.extras.get("raw_action", batch.action)
        return jax.vmap(lambda o, a: self.policy(actor, o, a))(batch.obs, action)

    def act(
        self,
        state: ActorCriticState,
        obs: Shaped[Array, "..."],
        *,
        key: PRNGKeyArray,
        greedy: bool = False,
    ) -> tuple[Shaped[Array, "..."], Extras]:
        space = state.action_space
        obs = self.preprocess(state, obs)
        value = state.critic(obs)
        if isinstance(space, Discrete):
            assert isinstance(state.actor, DiscreteActor)
            logits = state.actor(obs)
            if greedy:
                action = jnp.argmax(logits).astype(jnp.int32)
            else:
                action = dist.categorical_sample(logits, key=key).astype(jnp.int32)
            log_prob = dist.categorical_log_prob(logits, action)
            return action, {"log_prob": log_prob, "value": value}
        assert isinstance(space, Box) and isinstance(state.actor, GaussianActor)
        mean, log_std = state.actor(obs)
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
        next_value = jax.vmap(jax.vmap(state.critic))(traj.next_obs)
        next_value = jnp.where(traj.terminated, 0.0, next_value)
        done = (traj.terminated | traj.truncated).astype(jnp.float32)
        reward = traj.reward * self.reward_scale
        value = traj.extras["value"]
        advantages = gae(reward, value, next_value, done, self.gamma, self.gae_lambda)
        return traj, advantages, advantages + value


def explained_variance(
    returns: Float[Array, "..."], value: Float[Array, "..."]
) -> Float[Array, ""]:
    """`1 - Var(returns - value) / Var(returns)`: 1 for a perfect critic."""
    return 1.0 - jnp.var(returns - value) / (jnp.var(returns) + 1e-8)
