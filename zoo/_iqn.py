"""IQN: implicit quantile networks (Dabney et al., 2018)."""

from typing import ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._agent import Extras, refuse_act, register
from ._q_learning import AbstractQAgent, QState
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

    def outputs(self, network, obs, *, key) -> Float[Array, "actions quantiles"]:
        return network.quantiles(obs, self.fractions(key, self.n_quantiles))

    def q_values(
        self, state: QState, obs: Array, *, key: PRNGKeyArray
    ) -> Float[Array, " actions"]:
        # A key of its own: `key` also draws the epsilon-greedy choice.
        fractions = self.fractions(jr.fold_in(key, 1), self.n_policy_quantiles)
        return self.value(state.online.quantiles(obs, fractions))

    def greedy_q_values(self, state: QState, obs: Array) -> Float[Array, " actions"]:
        """The action values at the midpoints `(2i + 1) / 2K` of
        `n_policy_quantiles` equal slices of [0, 1]: the mean quantile by the
        midpoint rule, with no sampling noise."""
        k = self.n_policy_quantiles
        fractions = (2.0 * jnp.arange(k, dtype=jnp.float32) + 1.0) / (2.0 * k)
        return self.value(state.online.quantiles(obs, fractions))

    def act(self, state, obs, *, key, greedy=False) -> tuple[Int[Array, ""], Extras]:
        refuse_act(self)
        obs = self.preprocess(state, obs)
        if greedy:
            return jnp.argmax(self.greedy_q_values(state, obs)).astype(jnp.int32), {}
        q = self.q_values(state, obs, key=key)
        return self.choose(state, q, key=key, greedy=False), {}

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
