"""Greedy evaluation."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from envs import AbstractEnv
from zoo import AbstractAgent


@eqx.filter_jit
def evaluate(
    agent: AbstractAgent,
    state: PyTree,
    env: AbstractEnv,
    *,
    key: PRNGKeyArray,
    num_episodes: int = 128,
    max_steps: int = 100_000,
    greedy: bool = True,
) -> Float[Array, " episodes"]:
    """Play `num_episodes` episodes in parallel with the (greedy) policy.

    Steps all episodes together until each has ended once (or `max_steps` steps).

    **Returns:** the undiscounted return of each episode.
    """
    k_reset, k_loop = jr.split(key)
    obs, env_state = jax.vmap(env.reset)(jr.split(k_reset, num_episodes))
    returns = jnp.zeros(num_episodes)
    done = jnp.zeros(num_episodes, dtype=bool)

    def cond(carry):
        _, _, _, done, t = carry
        return (t < max_steps) & ~jnp.all(done)

    def body(carry):
        obs, env_state, returns, done, t = carry
        k_act, k_env = jr.split(jr.fold_in(k_loop, t))
        action, _ = jax.vmap(lambda o, k: agent.act(state, o, key=k, greedy=greedy))(
            obs, jr.split(k_act, num_episodes)
        )
        obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step)(
            jr.split(k_env, num_episodes), env_state, action
        )
        returns = returns + jnp.where(done, 0.0, reward)
        done = done | terminated | truncated
        return obs, env_state, returns, done, t + 1

    carry = (obs, env_state, returns, done, jnp.array(0))
    _, _, returns, _, _ = jax.lax.while_loop(cond, body, carry)
    return returns
