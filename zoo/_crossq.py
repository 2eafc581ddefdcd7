"""CrossQ: batch-normalised critics without target networks (Bhatt et al., 2024)."""

from typing import cast, final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ._agent import Metrics, register
from ._networks import (
    BatchNormQCritic,
    batch_norm_ensemble_q,
    batch_norm_q_ensemble,
    torso_kind,
)
from ._sac import AbstractSoftActorCritic, CriticStep, SACState


@register("crossq", default_env="Pendulum-v1")
@final
class CrossQ(AbstractSoftActorCritic):
    """CrossQ (Bhatt et al., ICLR 2024): SAC whose critics batch-normalise
    their input and every hidden layer (`BatchNormQCritic`) and keep no
    target network.

    Each critic step passes the minibatch's `(obs, action)` and its
    `(next_obs, next_action)`, the next action drawn from the policy, through
    the critics as **one** batch in training mode, so the normalisation's
    statistics are those of both halves together; the next half, without
    gradient, makes the soft target (the critics' minimum less `alpha` times
    the next action's log-probability), the current half regresses onto it.
    The actor and the temperature learn every `policy_delay` critic steps
    against the critics in inference mode (their running statistics). The
    critics' running statistics live in the state's `critic_state` (an
    `eqx.nn.State`), saved and resumed with the rest.

    **Arguments:** those of `SAC` (without a target network, `tau` and
    `target_update_interval` do nothing), with the paper's defaults:

    - `learning_rate` 1e-3 and `adam_beta1` 0.5 (Adam's first-moment decay)
      for actor, critics and temperature's critics alike;
    - `policy_delay`: critic steps per actor and temperature step (3);
    - `critic_hidden_sizes`: the critics' widths (the paper's 2048, 2048;
      `hidden_sizes` is the actor's);
    - `batch_norm_momentum`: how slowly the running statistics move (0.99).

    The critics are dense (`torso="auto"` or `"mlp"`) and see flattened
    observations.
    """

    learning_rate: float = 1e-3
    adam_beta1: float = 0.5
    policy_delay: int = eqx.field(static=True, default=3)
    target_update_interval: int = 1
    critic_hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(2048, 2048))
    batch_norm_momentum: float = eqx.field(static=True, default=0.99)

    def __check_init__(self):
        if self.torso in ("cnn", "simba"):  # recurrent ones: refused by the base
            raise ValueError(
                f"CrossQ: torso={self.torso!r} is not supported: its batch-"
                "normalised critics are dense, and so is its actor; use "
                "torso='mlp' (or 'auto' for vector observations)."
            )
        if not self.critic_hidden_sizes or any(
            type(n) is not int or n <= 0 for n in self.critic_hidden_sizes
        ):
            raise ValueError(
                "CrossQ: critic_hidden_sizes must be positive integers, got "
                f"{self.critic_hidden_sizes!r}"
            )
        if not 0.0 < self.batch_norm_momentum < 1.0:
            raise ValueError(
                "CrossQ: batch_norm_momentum must be in (0, 1), got "
                f"{self.batch_norm_momentum!r}"
            )

    def make_critics(
        self, obs_shape: tuple[int, ...], action_dim: int, *, key: PRNGKeyArray
    ) -> tuple[BatchNormQCritic, eqx.nn.State]:
        if torso_kind(self.torso, obs_shape, who="CrossQ") != "mlp":
            raise ValueError(
                f"CrossQ's critics are dense, but torso={self.torso!r} picks a "
                f"CNN for these image observations (shape {obs_shape}); pass "
                "torso='mlp' to flatten them."
            )
        return batch_norm_q_ensemble(
            self.n_critics,
            obs_shape,
            action_dim,
            self.critic_hidden_sizes,
            self.activation,
            momentum=self.batch_norm_momentum,
            key=key,
        )

    def critic_update(self, state, sample, obs, action, *, key) -> CriticStep:
        """The joint pass: current and next halves through the critics as
        one batch, the next half (without gradient) making the soft target."""
        batch = sample.batch
        next_obs = self.preprocess(state, batch.next_obs)
        next_action, next_log_prob = self._sample_actions(state.actor, next_obs, key)
        next_action = jax.lax.stop_gradient(next_action)
        alpha = jnp.exp(state.log_alpha)
        size = obs.shape[0]
        both_obs = jnp.concatenate([obs, next_obs.astype(obs.dtype)])
        both_actions = jnp.concatenate([action, next_action])
        not_done = sample.discount * (1.0 - batch.terminated)

        def loss_fn(critics):
            q_both, critic_state = batch_norm_ensemble_q(
                critics,
                cast(eqx.nn.State, state.critic_state),
                both_obs,
                both_actions,
                inference=False,
            )
            q, q_next = q_both[:size], q_both[size:]
            soft = jnp.min(q_next, axis=1) - alpha * next_log_prob
            y = jax.lax.stop_gradient(batch.reward + not_done * soft)
            per_transition = jnp.sum((q - y[:, None]) ** 2, axis=1)
            loss = 0.5 * jnp.mean(sample.weights * per_transition)
            return loss, (q, y, critic_state)

        (loss, (q, y, critic_state)), grads = eqx.filter_value_and_grad(
            loss_fn, has_aux=True
        )(state.critics)
        params = eqx.filter(state.critics, eqx.is_inexact_array)
        updates, opt = self.optimizer().update(grads, state.critic_opt, params)
        critics = eqx.apply_updates(state.critics, updates)
        return critics, opt, critic_state, loss, q, y

    def critic_values(self, critics, critic_state, obs, action) -> Array:
        """The critics in inference mode (their running statistics)."""
        q, _ = batch_norm_ensemble_q(
            cast(BatchNormQCritic, critics),
            cast(eqx.nn.State, critic_state),
            obs,
            action,
            inference=True,
        )
        return q

    def policy_value(
        self, q: Float[Array, "batch n_critics"]
    ) -> Float[Array, " batch"]:
        """The critics' minimum."""
        return jnp.min(q, axis=1)

    def priorities(
        self, q: Float[Array, "batch n_critics"], y: Float[Array, " batch"]
    ) -> Float[Array, " batch"]:
        """The mean absolute TD error over the critics."""
        return jnp.mean(jnp.abs(q - y[:, None]), axis=1)

    def online(self, state: SACState) -> tuple[()]:
        """Nothing: CrossQ keeps no target network."""
        return ()

    def schedule_metrics(self, state: SACState) -> Metrics:
        return {}
