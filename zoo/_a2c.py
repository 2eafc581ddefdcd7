"""Advantage actor-critic (A2C), the synchronous form of A3C."""

from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Int

from envs import Space

from ._agent import Metrics, adam_optimizer, clipped, register
from ._memory import RolloutState
from ._on_policy import (
    AbstractActorCritic,
    ActorCriticState,
    explained_variance,
)

# A2C's state is the actor-critic state it shares with PPO.
A2CState = ActorCriticState

OPTIMIZERS = ("rmsprop", "adam")


@register("a2c")
@final
class A2C(AbstractActorCritic):
    """A2C (Mnih et al., 2016): one gradient step on each rollout of
    `num_envs * num_steps` transitions, the policy-gradient loss weighted by GAE
    advantages (no ratio, no clipping), plus value and entropy terms.

    **Arguments:**

    - `learning_rate`, `anneal_lr`: step size, linearly annealed to zero over
      the run when `anneal_lr`; `max_grad_norm`: global-norm gradient clipping.
    - `optimizer`: `"rmsprop"` (as in the paper and Stable-Baselines3, with
      decay `rmsprop_decay` and `eps`) or `"adam"`.
    - `num_steps`: rollout length per env.
    - `gamma`, `gae_lambda`: discount and GAE parameter (`gae_lambda=1` gives
      the paper's n-step returns).
    - `vf_coef`, `ent_coef`: loss weights.
    - `normalize_advantages`: normalise advantages over the rollout.
    - `reward_scale`, `log_std_init`, `hidden_sizes`, `activation`, `torso`,
      `cell_size`, `sequence_length`, `shared_torso`,
      `normalize_obs`, `scale_obs`: as for PPO.
    """

    learning_rate: float = 7e-4
    optimizer: str = eqx.field(static=True, default="rmsprop")
    rmsprop_decay: float = 0.99
    eps: float = 1e-5
    num_steps: int = eqx.field(static=True, default=5)
    gae_lambda: float = 1.0
    ent_coef: float = 0.0
    anneal_lr: bool = eqx.field(static=True, default=False)
    normalize_advantages: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"A2C: optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}"
            )
        if self.learning_rate <= 0:
            raise ValueError(
                f"A2C: learning_rate must be positive, got {self.learning_rate}"
            )

    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        """A2C takes one gradient step on the whole rollout: it trains on any
        discrete or Box action space, with any number of envs."""

    def make_optimizer(self, horizon: Int[Array, ""]) -> optax.GradientTransformation:
        if self.optimizer == "adam":
            return adam_optimizer(
                self.learning_rate,
                self.max_grad_norm,
                anneal_horizon=horizon if self.anneal_lr else None,
                eps=self.eps,
            )
        return clipped(
            optax.rmsprop(self.learning_rate, decay=self.rmsprop_decay, eps=self.eps),
            self.max_grad_norm,
            anneal_horizon=horizon if self.anneal_lr else None,
        )

    def steps_per_rollout(self) -> int:
        return 1

    def _loss(self, nets, batch, advantages, returns, starts=None):
        actor, critic = nets
        log_prob, entropy, value = self.evaluate_batch(actor, critic, batch, starts)
        if self.normalize_advantages:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = -jnp.mean(jax.lax.stop_gradient(advantages) * log_prob)
        value_loss = 0.5 * jnp.mean((value - returns) ** 2)
        entropy = jnp.mean(entropy)
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy
        aux = {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}
        return loss, aux

    def update(
        self, state, memory, *, key
    ) -> tuple[ActorCriticState, RolloutState, Metrics]:
        traj, advantages, returns = self.advantages(state, memory)
        data = self.training_batch(traj, advantages, returns)
        batch, returns = data[0], data[2]
        nets = (state.actor, state.critic)
        (loss, metrics), grads = eqx.filter_value_and_grad(self._loss, has_aux=True)(
            nets, *data
        )
        params = eqx.filter(nets, eqx.is_inexact_array)
        updates, opt_state = self.make_optimizer(state.horizon).update(
            grads, state.opt_state, params
        )
        actor, critic = eqx.apply_updates(nets, updates)
        metrics = {
            "loss": loss,
            **metrics,
            "explained_variance": explained_variance(returns, batch.extras["value"]),
        }
        new = eqx.tree_at(
            lambda s: (s.actor, s.critic, s.opt_state, s.step),
            state,
            (actor, critic, opt_state, state.step + 1),
        )
        return new, memory, metrics
