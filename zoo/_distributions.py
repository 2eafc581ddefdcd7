"""The two policy distributions PPO needs, as plain functions.

distrax would fit, but importing it pulls in TensorFlow Probability's JAX substrate
(about 2 s on a small CPU, a third of a short CartPole run); these few lines are all
PPO uses of it.
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
