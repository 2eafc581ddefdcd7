"""Proximal Policy Optimization for discrete and continuous actions."""

from typing import final

import equinox as eqx
import jax.numpy as jnp
import optax
from jaxtyping import Array, Int

from envs import Space

from ._agent import Metrics, adam_optimizer, check_positive, register
from ._memory import RolloutState, Transition
from ._on_policy import (
    AbstractActorCritic,
    ActorCriticState,
    explained_variance,
    gae as gae,
    minibatch_epochs,
)

# PPO's state is the actor-critic state it shares with A2C.
PPOState = ActorCriticState


@register("ppo")
@final
class PPO(AbstractActorCritic):
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
    - `hidden_sizes`, `activation`: actor and critic MLP torsos; `torso`:
      `"auto"`, `"mlp"`, `"cnn"`, or a recurrent `"gru"`/`"lstm"` (Equinox's
      cell of `cell_size` units after the torso `"auto"` picks).
    - `sequence_length`: a recurrent agent learns from sequences of this many
      steps of one env (a divisor of `num_steps`; `None`: whole rollouts), run
      from the carry stored at each sequence's start; minibatches take whole
      sequences.
    - `shared_torso`: one torso (and, when recurrent, one cell and one carry)
      under the policy and value heads, trained by both losses, as
      PureJaxRL's recurrent PPO does; `False`: the actor and the critic have a
      torso each. Sharing halves the torso's arithmetic.
    - `normalize_obs`: normalise observations by running statistics;
      `scale_obs`: instead map bounded observation dimensions onto [-1, 1].
    """

    learning_rate: float = 2.5e-4
    num_steps: int = eqx.field(static=True, default=128)
    num_epochs: int = eqx.field(static=True, default=4)
    num_minibatches: int = eqx.field(static=True, default=4)
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    anneal_lr: bool = eqx.field(static=True, default=True)
    normalize_advantages: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        check_positive(self, "num_epochs", "num_minibatches", "clip_eps")

    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        self.check_minibatches(num_envs, self.num_minibatches)

    def make_optimizer(self, horizon: Int[Array, ""]) -> optax.GradientTransformation:
        return adam_optimizer(
            self.learning_rate,
            self.max_grad_norm,
            anneal_horizon=horizon if self.anneal_lr else None,
            eps=1e-5,
        )

    def steps_per_rollout(self) -> int:
        return self.num_epochs * self.num_minibatches

    def _loss(self, nets, batch: Transition, advantages, returns, starts=None):
        actor, critic = nets
        log_prob, entropy, value = self.evaluate_batch(actor, critic, batch, starts)
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
        self, state, memory, *, key
    ) -> tuple[ActorCriticState, RolloutState, Metrics]:
        traj, advantages, returns = self.advantages(state, memory)
        data = self.training_batch(traj, advantages, returns)
        optimizer = self.make_optimizer(state.horizon)
        grad_fn = eqx.filter_value_and_grad(self._loss, has_aux=True)

        def minibatch_step(carry, minibatch):
            nets, opt_state = carry
            (loss, aux), grads = grad_fn(nets, *minibatch)
            params = eqx.filter(nets, eqx.is_inexact_array)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            nets = eqx.apply_updates(nets, updates)
            return (nets, opt_state), {"loss": loss, **aux}

        ((actor, critic), opt_state), metrics = minibatch_epochs(
            minibatch_step,
            ((state.actor, state.critic), state.opt_state),
            data,
            num_epochs=self.num_epochs,
            num_minibatches=self.num_minibatches,
            key=key,
        )
        metrics["explained_variance"] = explained_variance(
            returns, traj.extras["value"]
        )
        new = eqx.tree_at(
            lambda s: (s.actor, s.critic, s.opt_state, s.step),
            state,
            (actor, critic, opt_state, state.step + 1),
        )
        return new, memory, metrics
