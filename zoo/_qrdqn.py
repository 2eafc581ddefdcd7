"""QR-DQN: distributional Q-learning by quantile regression (Dabney et al., 2018)."""

from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._agent import register
from ._q_learning import AbstractQAgent


def quantile_huber_loss(
    quantiles: Float[Array, " n"],
    target: Float[Array, " m"],
    kappa: float = 1.0,
    fractions: Float[Array, " n"] | None = None,
) -> Float[Array, ""]:
    """The quantile Huber loss of `quantiles` at `fractions` `tau_i` (by
    default the midpoints `(2i+1)/2n`, QR-DQN's; IQN's are sampled) against
    samples `target` of the target distribution:
    `sum_i mean_j |tau_i - 1{u_ij < 0}| * L_kappa(u_ij) / kappa`, with
    `u_ij = target_j - quantiles_i` and `L_kappa` the Huber loss (with
    `kappa = 0`, the plain quantile loss `|tau_i - 1{u_ij < 0}| * |u_ij|`)."""
    n = quantiles.shape[0]
    if fractions is None:
        tau = (2.0 * jnp.arange(n, dtype=jnp.float32) + 1.0) / (2.0 * n)
    else:
        tau = fractions
    u = target[None, :] - quantiles[:, None]
    if kappa > 0:
        abs_u = jnp.abs(u)
        huber = jnp.where(abs_u <= kappa, 0.5 * u**2, kappa * (abs_u - 0.5 * kappa))
        huber = huber / kappa
    else:
        huber = jnp.abs(u)
    weight = jnp.abs(tau[:, None] - (u < 0).astype(jnp.float32))
    return jnp.sum(jnp.mean(weight * huber, axis=1))


@register("qrdqn")
@final
class QRDQN(AbstractQAgent):
    """QR-DQN (Dabney et al., 2018): the return of each action is represented by
    `n_quantiles` quantiles, learnt by the quantile Huber loss against the
    target network's quantiles at the next state; the greedy action maximises
    their mean.

    **Arguments:** those of `DQN` (without `huber_delta`), and

    - `n_quantiles`: quantiles per action; `kappa`: the Huber threshold of the
      quantile loss (0 for the plain quantile loss).

    Priorities for prioritised replay are the per-transition losses.
    """

    double_q: bool = eqx.field(static=True, default=False)
    n_quantiles: int = eqx.field(static=True, default=25)
    kappa: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        if self.n_quantiles < 1:
            raise ValueError(
                f"QRDQN: n_quantiles must be positive, got {self.n_quantiles}"
            )
        if self.kappa < 0:
            raise ValueError(f"QRDQN: kappa must be >= 0, got {self.kappa}")

    @property
    def quantile_embedding(self) -> None:
        return None

    def outputs(
        self, network, obs, *, key, acting=False
    ) -> Float[Array, "actions ..."]:
        return network(obs, key=self.noise(key))

    @property
    def num_atoms(self) -> int:
        return self.n_quantiles

    def value(
        self, out: Float[Array, "*b actions quantiles"]
    ) -> Float[Array, "*b actions"]:
        return jnp.mean(out, axis=-1)

    def td_loss(
        self, taken, next_taken, reward, discount
    ) -> tuple[Float[Array, " batch"], Float[Array, " batch"]]:
        target = reward[:, None] + discount[:, None] * next_taken
        target = jax.lax.stop_gradient(target)
        losses = jax.vmap(lambda q, t: quantile_huber_loss(q, t, self.kappa))(
            taken, target
        )
        return losses, losses
