"""The policy distributions of PPO and SAC, as plain functions.

distrax would fit, but importing it pulls in TensorFlow Probability's JAX substrate
(about 2 s on a small CPU, a third of a short CartPole run); these few lines are all
PPO and SAC use of it.
"""

import math

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PRNGKeyArray

_LOG_2PI = math.log(2 * math.pi)


def categorical_sample(
    logits: Float[Array, " n"], *, key: PRNGKeyArray
) -> Int[Array, ""]:
    return jr.categorical(key, logits)


def categorical_log_prob(
    logits: Float[Array, " n"], action: Int[Array, ""]
) -> Float[Array, ""]:
    return jax.nn.log_softmax(logits)[action]


def categorical_entropy(logits: Float[Array, " n"]) -> Float[Array, ""]:
    log_p = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(log_p) * log_p)


def gaussian_sample(
    mean: Float[Array, " d"], log_std: Float[Array, " d"], *, key: PRNGKeyArray
) -> Float[Array, " d"]:
    return mean + jnp.exp(log_std) * jr.normal(key, mean.shape)


def gaussian_log_prob(
    mean: Float[Array, " d"], log_std: Float[Array, " d"], x: Float[Array, " d"]
) -> Float[Array, ""]:
    z = (x - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * _LOG_2PI)


def gaussian_entropy(log_std: Float[Array, " d"]) -> Float[Array, ""]:
    return jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI))


def squashed_gaussian_sample(
    mean: Float[Array, " d"], log_std: Float[Array, " d"], *, key: PRNGKeyArray
) -> tuple[Float[Array, " d"], Float[Array, ""]]:
    """`tanh(u)` for `u ~ N(mean, exp(log_std)^2)`, and its log-density.

    The change of variables subtracts `log(1 - tanh(u)^2)` per dimension, written
    as `2 (log 2 - u - softplus(-2u))`, which stays finite where tanh saturates.
    """
    u = gaussian_sample(mean, log_std, key=key)
    return jnp.tanh(u), squashed_gaussian_log_prob(mean, log_std, u)


def squashed_gaussian_log_prob(
    mean: Float[Array, " d"], log_std: Float[Array, " d"], u: Float[Array, " d"]
) -> Float[Array, ""]:
    """The log-density of `tanh(u)` for `u ~ N(mean, exp(log_std)^2)`, given `u`
    (the pre-squash sample)."""
    log_det = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return gaussian_log_prob(mean, log_std, u) - jnp.sum(log_det)
