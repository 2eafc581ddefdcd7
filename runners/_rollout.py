"""The one rollout step under training, evaluation, multi-agent play and
filming: every env's policy call, then every env's step.

A zoo agent acts per env (vmapped, one key each); learners (`zoo.Shared`,
`zoo.Independent`) act for every env and agent at once. Which env step runs is
the caller's: training's auto-resets and keeps episode statistics, evaluation's
stops at an episode's end. A recurrent policy's carry (one per env) goes in and
comes back out, back at `agent.initial_carry()` where an episode ended; a
memoryless agent's carry is `()`, which adds nothing to the programs.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, PRNGKeyArray, PyTree

from envs import ALL_AGENTS
from zoo import AbstractLearners


def act(
    agent: Any,
    agent_state: PyTree,
    obs: PyTree,
    key: PRNGKeyArray,
    greedy: bool,
    carry: PyTree = (),
) -> tuple[PyTree, PyTree, PyTree]:
    """`(action, extras, carry)` of every env (the leading axis of `obs` and
    `carry`)."""
    if isinstance(agent, AbstractLearners):
        return agent.act_step(agent_state, carry, obs, key=key, greedy=greedy)
    num_envs = jax.tree.leaves(obs)[0].shape[0]
    return jax.vmap(
        lambda o, c, k: agent.act_step(agent_state, c, o, key=k, greedy=greedy)
    )(obs, carry, jr.split(key, num_envs))


def initial_carry(agent: Any, num: int) -> PyTree:
    """`num` envs' carries at an episode's start (`()` for a memoryless agent)."""
    return jax.tree.map(
        lambda x: jnp.broadcast_to(x, (num, *x.shape)), agent.initial_carry()
    )


def reset_carry(agent: Any, carry: PyTree, done: Bool[Array, " envs"]) -> PyTree:
    """`carry` with the envs whose episode ended back at the initial carry."""
    start = agent.initial_carry()
    return jax.tree.map(
        lambda s, c: jnp.where(done.reshape(-1, *(1,) * s.ndim), s, c), start, carry
    )


def rollout_step(
    agent: Any,
    agent_state: PyTree,
    env_step: Callable[..., tuple],
    obs: PyTree,
    env_state: PyTree,
    key: PRNGKeyArray,
    *,
    greedy: bool = False,
    carry: PyTree = (),
) -> tuple[PyTree, PyTree, tuple, PyTree]:
    """One step of every env: the agent acts with `key`'s first half, and
    `env_step(key, env_state, action)` (returning `(obs, state, reward,
    terminated, truncated, info)`) runs per env with the second's.

    **Returns:** `(action, extras, what env_step returned, per env; carry)`, the
    carry reset where the step ended an episode."""
    num_envs = jax.tree.leaves(obs)[0].shape[0]
    k_act, k_env = jr.split(key)
    action, extras, carry = act(agent, agent_state, obs, k_act, greedy, carry)
    out = jax.vmap(env_step)(jr.split(k_env, num_envs), env_state, action)
    if jax.tree.leaves(carry):  # nothing to reset (and no op) without a carry
        terminated, truncated = out[3], out[4]
        if isinstance(terminated, dict):  # a multi-agent env
            terminated, truncated = terminated[ALL_AGENTS], truncated[ALL_AGENTS]
        carry = reset_carry(agent, carry, terminated | truncated)
    return action, extras, out, carry
