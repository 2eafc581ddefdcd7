"""Proximal Policy Optimization for discrete and continuous actions."""

from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Box, Discrete, Space

from . import _distributions as dist
from ._agent import (
    AbstractAgent,
    AbstractState,
    Extras,
    Metrics,
    adam_optimizer,
    check_positive,
    obs_stats,
)
from ._memory import Rollout, RolloutState, Transition
from ._networks import Critic, DiscreteActor, GaussianActor
from ._normalize import RunningStats


@final
class PPOState(AbstractState):
    actor: DiscreteActor | GaussianActor
    critic: Critic
    opt_state: PyTree
    step: Int[Array, ""]  # updates done
    # Optimizer steps over the whole run: the horizon of learning-rate annealing.
    horizon: Int[Array, ""]
    obs_stats: RunningStats
    action_space: Space = eqx.field(static=True)


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


@final
class PPO(AbstractAgent[PPOState]):
    """PPO with a clipped objective (Schulman et al., 2017).

    **Arguments:**

    - `learning_rate`, `anneal_lr`: Adam step size, linearly annealed to zero over
      the run when `anneal_lr`; `max_grad_norm`: global-norm gradient clipping.
    - `num_steps`: rollout length per env; `num_epochs` passes over each rollout,
      in `num_minibatches` minibatches.
    - `gamma`, `gae_lambda`: discount and GAE parameter.
    - `clip_eps`: probability-ratio clipping; `vf_coef`, `ent_coef`: loss weights.
    - `normalize_advantages`: per-minibatch advantage normalisation.
    - `reward_scale`: multiplies rewards before learning (returns are reported
      unscaled).
    - `log_std_init`: initial log standard deviation of a Gaussian policy.
    - `hidden_sizes`, `activation`: actor and critic MLP torsos.
    - `normalize_obs`: normalise observations by running statistics.
    """

    learning_rate: float = 2.5e-4
    num_steps: int = eqx.field(static=True, default=128)
    num_epochs: int = eqx.field(static=True, default=4)
    num_minibatches: int = eqx.field(static=True, default=4)
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    anneal_lr: bool = eqx.field(static=True, default=True)
    normalize_advantages: bool = eqx.field(static=True, default=True)
    reward_scale: float = 1.0
    log_std_init: float = 0.0
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(64, 64))
    activation: str = eqx.field(static=True, default="tanh")
    normalize_obs: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        check_positive(self, "num_steps", "num_epochs", "num_minibatches", "clip_eps")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError("PPO: gamma and gae_lambda must be in [0, 1]")

    @property
    def memory(self) -> Rollout:
        return Rollout(self.num_steps)

    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        batch = num_envs * self.num_steps
        if batch % self.num_minibatches:
            raise ValueError(
                f"PPO: the rollout of num_envs * num_steps = {num_envs} * "
                f"{self.num_steps} = {batch} transitions does not split into "
                f"num_minibatches={self.num_minibatches} equal minibatches; choose "
                "values whose product is divisible by num_minibatches."
            )

    def _optimizer(self, horizon: Int[Array, ""]) -> optax.GradientTransformation:
        return adam_optimizer(
            self.learning_rate,
            self.max_grad_norm,
            anneal_horizon=horizon if self.anneal_lr else None,
            eps=1e-5,
        )

    def init(
        self,
        obs_space: Space,
        action_space: Space,
        *,
        key: PRNGKeyArray,
        num_envs: int,
        total_steps: int,
    ) -> PPOState:
        k_actor, k_critic = jr.split(key)
        shape = obs_space.shape
        if isinstance(action_space, Discrete):
            actor = DiscreteActor(
                shape, action_space.n, self.hidden_sizes, self.activation, key=k_actor
            )
        else:
            actor = GaussianActor(
                shape,
                action_space.shape[0],
                self.hidden_sizes,
                self.activation,
                self.log_std_init,
                key=k_actor,
            )
        critic = Critic(shape, self.hidden_sizes, self.activation, key=k_critic)
        updates = max(total_steps // (num_envs * self.num_steps), 1)
        horizon = jnp.array(updates * self.num_epochs * self.num_minibatches)
        opt_state = self._optimizer(horizon).init(
            eqx.filter((actor, critic), eqx.is_inexact_array)
        )
        return PPOState(
            actor=actor,
            critic=critic,
            opt_state=opt_state,
            step=jnp.array(0, jnp.int32),
            horizon=horizon,
            obs_stats=obs_stats(obs_space),
            action_space=action_space,
        )

    def _policy(self, state: PPOState, actor, obs, action):
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

    def act(
        self,
        state: PPOState,
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

    def _loss(self, nets, state: PPOState, batch: Transition, advantages, returns):
        actor, critic = nets
        action = batch.extras.get("raw_action", batch.action)
        log_prob, entropy = jax.vmap(lambda o, a: self._policy(state, actor, o, a))(
            batch.obs, action
        )
        value = jax.vmap(critic)(batch.obs)
        if self.normalize_advantages:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        log_ratio = log_prob - batch.extras["log_prob"]
        ratio = jnp.exp(log_ratio)
        clipped = jnp.clip(ratio, 1.0 - self.clip_eps, 1.0 + self.clip_eps)
        policy_loss = -jnp.mean(jnp.minimum(ratio * advantages, clipped * advantages))
        value_loss = 0.5 * jnp.mean((value - returns) ** 2)
        entropy = jnp.mean(entropy)
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy
        aux = {
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
            "clip_fraction": jnp.mean(jnp.abs(ratio - 1.0) > self.clip_eps),
        }
        return loss, aux

    def update(
        self, state: PPOState, memory: RolloutState, *, key: PRNGKeyArray
    ) -> tuple[PPOState, RolloutState, Metrics]:
        # The statistics the rollout was collected with: `observe` updates them
        # only after this update, so log-probabilities match the stored ones.
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
        returns = advantages + value

        flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), traj)
        advantages, returns = advantages.reshape(-1), returns.reshape(-1)
        batch_size = advantages.shape[0]
        optimizer = self._optimizer(state.horizon)
        grad_fn = eqx.filter_value_and_grad(self._loss, has_aux=True)

        def minibatch_step(carry, index):
            nets, opt_state = carry
            mb = jax.tree.map(lambda x: x[index], (flat, advantages, returns))
            (loss, aux), grads = grad_fn(nets, state, *mb)
            params = eqx.filter(nets, eqx.is_inexact_array)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            nets = eqx.apply_updates(nets, updates)
            return (nets, opt_state), {"loss": loss, **aux}

        def epoch(carry, k):
            perm = jr.permutation(k, batch_size)
            index = perm.reshape(self.num_minibatches, -1)
            return jax.lax.scan(minibatch_step, carry, index)

        carry = ((state.actor, state.critic), state.opt_state)
        ((actor, critic), opt_state), metrics = jax.lax.scan(
            epoch, carry, jr.split(key, self.num_epochs)
        )
        metrics = jax.tree.map(jnp.mean, metrics)
        explained = 1.0 - jnp.var(returns - value.reshape(-1)) / (
            jnp.var(returns) + 1e-8
        )
        metrics["explained_variance"] = explained
        new = eqx.tree_at(
            lambda s: (s.actor, s.critic, s.opt_state, s.step),
            state,
            (actor, critic, opt_state, state.step + 1),
        )
        return new, memory, metrics
