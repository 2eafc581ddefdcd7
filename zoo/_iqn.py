"""IQN: implicit quantile networks (Dabney et al., 2018)."""

from typing import ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ._agent import register
from ._q_learning import AbstractQAgent
from ._qrdqn import quantile_huber_loss


@register("iqn")
@final
class IQN(AbstractQAgent):
    """IQN (Dabney et al., 2018): the network gives the return's quantile at any
    fraction `tau` in [0, 1], from the observation's features multiplied by a
    cosine embedding of `tau` (`QNetwork(quantile_embedding=)`). Each update
    draws `n_quantiles` fractions for the online network and as many for the
    target network, independently for every transition, and learns by the
    quantile Huber loss at the drawn fractions; acting draws
    `n_policy_quantiles` fractions from the act key and takes the action with
    the largest mean quantile, as in the paper; a greedy action (`greedy=True`,
    evaluation) takes the mean at the midpoints of as many equal slices of
    [0, 1] instead, so that the greedy policy is deterministic and free of the
    sampled estimate's noise.

    **Arguments:** those of `DQN` (without `huber_delta`), and

    - `n_quantiles`: fractions drawn for each network in an update (the
      paper's N = N'); `n_policy_quantiles`: fractions drawn to act (K).
    - `embedding_size`: cosines in the fraction embedding (the paper's n).
    - `kappa`: the Huber threshold of the quantile loss (0 for the plain
      quantile loss).

    Priorities for prioritised replay are the per-transition losses. Recurrent
    torsos are not supported yet.
    """

    samples: ClassVar[bool] = True
    supports_recurrence: ClassVar[bool] = False
    double_q: bool = eqx.field(static=True, default=False)
    n_quantiles: int = eqx.field(static=True, default=64)
    n_policy_quantiles: int = eqx.field(static=True, default=32)
    embedding_size: int = eqx.field(static=True, default=64)
    kappa: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        for name in ("n_quantiles", "n_policy_quantiles", "embedding_size"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(
                    f"IQN: {name} must be a positive integer, got {value!r}"
                )
        if self.kappa < 0:
            raise ValueError(f"IQN: kappa must be >= 0, got {self.kappa}")

    @property
    def num_atoms(self) -> None:
        return None

    @property
    def quantile_embedding(self) -> int:
        return self.embedding_size

    def fractions(self, key: PRNGKeyArray, n: int) -> Float[Array, " n"]:
        """`n` quantile fractions drawn uniformly from [0, 1)."""
        return jr.uniform(key, (n,))

    def outputs(
        self, network, obs, *, key, acting=False
    ) -> Float[Array, "actions quantiles"]:
        """The quantiles at `n_quantiles` fractions drawn from `key` (for the
        loss) or, `acting`, at `n_policy_quantiles` of them; with no key (a
        greedy action), at the midpoints `(2i + 1) / 2K` of K equal slices of
        [0, 1]: the mean quantile by the midpoint rule, with no sampling
        noise."""
        n = self.n_policy_quantiles if acting else self.n_quantiles
        if key is None:
            fractions = (2.0 * jnp.arange(n, dtype=jnp.float32) + 1.0) / (2.0 * n)
        else:
            fractions = self.fractions(key, n)
        return network.quantiles(obs, fractions, key=self.noise(key, salt=2))

    def value(
        self, out: Float[Array, "*b actions quantiles"]
    ) -> Float[Array, "*b actions"]:
        return jnp.mean(out, axis=-1)

    def td_loss(
        self, taken, next_taken, reward, discount, *, keys
    ) -> tuple[Float[Array, " batch"], Float[Array, " batch"]]:
        target = reward[:, None] + discount[:, None] * next_taken
        target = jax.lax.stop_gradient(target)
        fractions = jax.vmap(lambda k: self.fractions(k, self.n_quantiles))(keys)
        losses = jax.vmap(lambda q, t, f: quantile_huber_loss(q, t, self.kappa, f))(
            taken, target, fractions
        )
        return losses, losses
