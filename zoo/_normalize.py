"""Running observation statistics, kept in the agent's state."""

from typing import final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Shaped


@final
class RunningStats(eqx.Module):
    """Running mean and variance of observations (Chan et al.'s parallel update).

    An agent with `normalize_obs=True` updates them from each rollout it trains
    on and normalises every observation it sees with them, in training, in
    evaluation and after loading: they are part of its state, saved with it.
    """

    mean: Float[Array, "..."]
    var: Float[Array, "..."]
    count: Float[Array, ""]

    @staticmethod
    def zeros(shape: tuple[int, ...]) -> "RunningStats":
        return RunningStats(jnp.zeros(shape), jnp.ones(shape), jnp.array(0.0))

    def update(self, obs: Shaped[Array, "..."]) -> "RunningStats":
        """Add a batch of observations (any leading axes before the observation
        shape)."""
        shape = self.mean.shape
        batch = obs.reshape(-1, *shape).astype(jnp.float32)
        n = jnp.asarray(batch.shape[0], jnp.float32)
        batch_mean = jnp.mean(batch, axis=0)
        batch_var = jnp.var(batch, axis=0)
        count = self.count + n
        delta = batch_mean - self.mean
        mean = self.mean + delta * (n / count)
        m2 = self.var * self.count + batch_var * n + delta**2 * (self.count * n / count)
        return RunningStats(mean, m2 / count, count)

    def normalize(
        self, obs: Shaped[Array, "..."], clip: float = 10.0, epsilon: float = 1e-8
    ) -> Float[Array, "..."]:
        """`(obs - mean) / std`, clipped to `[-clip, clip]`; any leading axes."""
        mean = jnp.broadcast_to(self.mean, obs.shape)
        std = jnp.broadcast_to(jnp.sqrt(self.var + epsilon), obs.shape)
        return jnp.clip((obs.astype(jnp.float32) - mean) / std, -clip, clip)
