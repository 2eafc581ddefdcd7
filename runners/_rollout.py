"""The one rollout step under training, evaluation, multi-agent play and
filming: every env's policy call, then every env's step.

A zoo agent acts per env (vmapped, one key each); learners (`zoo.Shared`,
`zoo.Independent`) act for every env and agent at once. Which env step runs is
the caller's: training's auto-resets and keeps episode statistics, evaluation's
stops at an episode's end. A recurrent policy's carry goes through `act`.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.random as jr
from jaxtyping import PRNGKeyArray, PyTree

from zoo import AbstractLearners


def act(
    agent: Any, agent_state: PyTree, obs: PyTree, key: PRNGKeyArray, greedy: bool
) -> tuple[PyTree, PyTree]:
    """`(action, extras)` of every env (the leading axis of `obs`)."""
    if isinstance(agent, AbstractLearners):
        return agent.act(agent_state, obs, key=key, greedy=greedy)
    num_envs = jax.tree.leaves(obs)[0].shape[0]
    return jax.vmap(lambda o, k: agent.act(agent_state, o, key=k, greedy=greedy))(
        obs, jr.split(key, num_envs)
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
) -> tuple[PyTree, PyTree, tuple]:
    """One step of every env: the agent acts with `key`'s first half, and
    `env_step(key, env_state, action)` runs per env with the second's.

    **Returns:** `(action, extras, what env_step returned, per env)`."""
    num_envs = jax.tree.leaves(obs)[0].shape[0]
    k_act, k_env = jr.split(key)
    action, extras = act(agent, agent_state, obs, k_act, greedy)
    out = jax.vmap(env_step)(jr.split(k_env, num_envs), env_state, action)
    return action, extras, out
