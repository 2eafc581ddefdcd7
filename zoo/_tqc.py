"""TQC: truncated quantile critics (Kuznetsov et al., 2020)."""

from collections.abc import Callable
from typing import cast, final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ._agent import Metrics, check_positive, register
from ._memory import Sample
from ._networks import QCritic, ensemble_q, q_ensemble
from ._off_policy import update_critics
from ._qrdqn import quantile_huber_loss
from ._sac import AbstractSoftActorCritic, CriticStep, SACState


def truncated_atoms(
    quantiles: Float[Array, "n_critics n_quantiles"], drop_per_critic: int
) -> Float[Array, " kept"]:
    """TQC's target atoms: every critic's quantiles pooled and sorted, the
    largest `drop_per_critic * n_critics` dropped."""
    n_critics, n_quantiles = quantiles.shape
    kept = n_critics * (n_quantiles - drop_per_critic)
    return jnp.sort(quantiles.reshape(-1))[:kept]


@register("tqc", default_env="Pendulum-v1")
@final
class TQC(AbstractSoftActorCritic):
    """TQC (Kuznetsov et al., 2020): SAC whose critics each give
    `n_quantiles` quantiles of the return; the target pools the target
    critics' quantiles at a next action from the policy, drops the
    `top_quantiles_to_drop_per_net * n_critics` largest (the control of
    overestimation, in place of SAC's minimum), and every critic learns all
    the kept atoms, less the entropy term, by the quantile Huber loss
    (threshold `kappa`, averaged over quantiles and atoms as in the paper).
    The actor maximises the mean of every critic's quantiles.

    **Arguments:** those of `SAC`, and

    - `n_quantiles`: quantiles per critic (the paper's M, 25);
      `top_quantiles_to_drop_per_net`: atoms dropped per critic (d, 2, as
      sb3-contrib's default; the paper tunes 0 to 5 per task);
      `n_critics`: 2 (sb3-contrib's default; the paper's is 5).
    - `kappa`: the Huber threshold of the quantile loss.

    Priorities for prioritised replay are the absolute differences between
    the critics' mean and the kept atoms' mean.
    """

    learning_rate: float = 3e-4
    target_update_interval: int = 1
    n_quantiles: int = eqx.field(static=True, default=25)
    top_quantiles_to_drop_per_net: int = eqx.field(static=True, default=2)
    kappa: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        check_positive(self, "n_quantiles")
        drop = self.top_quantiles_to_drop_per_net
        if type(drop) is not int or not 0 <= drop < self.n_quantiles:
            raise ValueError(
                "TQC: top_quantiles_to_drop_per_net must be an integer in "
                f"[0, n_quantiles={self.n_quantiles}), got {drop!r}"
            )
        if not self.kappa > 0:
            raise ValueError(f"TQC: kappa must be > 0, got {self.kappa!r}")

    def make_critics(
        self, obs_shape: tuple[int, ...], action_dim: int, *, key: PRNGKeyArray
    ) -> tuple[QCritic, None]:
        critics = q_ensemble(
            self.n_critics,
            obs_shape,
            action_dim,
            self.hidden_sizes,
            self.activation,
            torso=self.torso,
            quantiles=self.n_quantiles,
            key=key,
        )
        return critics, None

    def td_target(
        self, state: SACState, sample: Sample, *, key: PRNGKeyArray
    ) -> Float[Array, "batch atoms"]:
        """The kept atoms of the target critics at a next action drawn from
        the policy, less `alpha` times its log-probability, discounted onto
        the reward (no bootstrap where the episode terminated)."""
        batch = sample.batch
        next_obs = self.preprocess(state, batch.next_obs)
        next_action, next_log_prob = self._sample_actions(state.actor, next_obs, key)
        z = jax.vmap(lambda o, a: ensemble_q(state.target, o, a))(
            next_obs, next_action
        )  # [batch, n_critics, n_quantiles]
        atoms = jax.vmap(
            lambda q: truncated_atoms(q, self.top_quantiles_to_drop_per_net)
        )(z)
        soft = atoms - jnp.exp(state.log_alpha) * next_log_prob[:, None]
        discount = sample.discount * (1.0 - batch.terminated)
        y = batch.reward[:, None] + discount[:, None] * soft
        return jax.lax.stop_gradient(y)

    def critic_update(self, state, sample, obs, action, *, key) -> CriticStep:
        """Every critic's quantile Huber loss to `td_target`'s atoms."""
        y = self.td_target(state, sample, key=key)
        critics, opt, loss, q = update_critics(
            cast(QCritic, state.critics),
            state.critic_opt,
            self.optimizer(),
            obs,
            action,
            y,
            sample.weights,
            losses=self.critic_losses,
        )
        return critics, opt, None, loss, q, y

    def critic_values(self, critics, critic_state, obs, action) -> Array:
        critics = cast(QCritic, critics)
        return jax.vmap(lambda o, a: ensemble_q(critics, o, a))(obs, action)

    @property
    def critic_losses(self) -> Callable[[Array, Array], Array]:
        """The per-transition loss of the critics' quantiles `q`
        (`[batch, n_critics, n_quantiles]`) against the atoms `y`."""

        def losses(
            q: Float[Array, "batch n_critics n_quantiles"],
            y: Float[Array, "batch atoms"],
        ) -> Float[Array, " batch"]:
            one = lambda z, t: quantile_huber_loss(z, t, self.kappa) / z.shape[0]
            per_critic = jax.vmap(jax.vmap(one, in_axes=(0, None)))(q, y)
            return jnp.sum(per_critic, axis=1)

        return losses

    def policy_value(
        self, q: Float[Array, "batch n_critics n_quantiles"]
    ) -> Float[Array, " batch"]:
        """The mean of every critic's quantiles."""
        return jnp.mean(q, axis=(1, 2))

    def priorities(
        self,
        q: Float[Array, "batch n_critics n_quantiles"],
        y: Float[Array, "batch atoms"],
    ) -> Float[Array, " batch"]:
        return jnp.abs(jnp.mean(q, axis=(1, 2)) - jnp.mean(y, axis=1))

    def online(self, state: SACState) -> QCritic:
        return cast(QCritic, state.critics)

    def schedule_metrics(self, state: SACState) -> Metrics:
        return {}
