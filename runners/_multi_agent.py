"""Training and evaluation on multi-agent envs: the same `TrainState`, iteration
and chunk as single-agent runs, with observations, actions and transitions kept
per agent name and the learners (`zoo.Shared`, `zoo.Independent`) acting and
learning for every agent."""

from functools import partial
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from envs import ALL_AGENTS, AbstractEnv, AbstractMultiAgentEnv
from zoo import AbstractAgent, AbstractLearners, Transition

from ._rollout import rollout_step


class StatsState(eqx.Module):
    """A multi-agent env's state with the running return of each agent and the
    length of the episode under way."""

    env_state: PyTree
    returns: dict[str, Float[Array, ""]]
    length: Int[Array, ""]


def check_pair(agent: Any, env: Any) -> bool:
    """Whether `(agent, env)` is a multi-agent pair.

    **Raises:** `ValueError` for learners on a single-agent env or a zoo agent
    on a multi-agent env (with the fix).
    """
    multi_env = isinstance(env, AbstractMultiAgentEnv)
    if multi_env and isinstance(agent, AbstractAgent):
        raise ValueError(
            f"{env.name} is a multi-agent env (agents {list(env.agents)}): give "
            f"learners for it, zoo.Shared({type(agent).__name__}(...)) for one "
            f"agent shared by all, or zoo.Independent.of({type(agent).__name__}"
            "(...), env) for one per agent"
        )
    if isinstance(agent, AbstractLearners) and not multi_env:
        raise ValueError(
            f"{type(agent).__name__} learners train on a multi-agent env, but "
            f"{getattr(env, 'name', type(env).__name__)} is a single-agent env; "
            "give the zoo agent itself"
        )
    if multi_env and not isinstance(agent, AbstractLearners):
        raise ValueError(
            f"expected zoo.Shared or zoo.Independent learners for {env.name}, got "
            f"{type(agent).__name__}"
        )
    if not multi_env and not isinstance(env, AbstractEnv):
        raise ValueError(f"expected an env of envs, got {type(env).__name__}")
    return multi_env


def reset(env: AbstractMultiAgentEnv, key: PRNGKeyArray):
    obs, state = env.reset(key)
    zero = jnp.array(0.0, jnp.float32)
    returns = {a: zero for a in env.agents}
    return obs, StatsState(state, returns, jnp.array(0, jnp.int32))


def step(env: AbstractMultiAgentEnv, key: PRNGKeyArray, state: StatsState, actions):
    """`env.step`, with `info["episode_return"]` (per agent),
    `info["episode_length"]` and `info["episode_done"]` as `EpisodeStatistics`
    gives them for single-agent envs."""
    obs, env_state, rewards, term, trunc, info = env.step(key, state.env_state, actions)
    returns = {a: state.returns[a] + rewards[a] for a in env.agents}
    length = state.length + 1
    done = term[ALL_AGENTS] | trunc[ALL_AGENTS]
    info = {
        **info,
        "episode_return": returns,
        "episode_length": length,
        "episode_done": done,
    }
    zero = jnp.zeros_like(length)
    new = StatsState(
        env_state,
        {a: jnp.where(done, 0.0, r) for a, r in returns.items()},
        jnp.where(done, zero, length),
    )
    return obs, new, rewards, term, trunc, info


def transition(learners, env, agent_state, obs, env_state, key, carry=()):
    """One step of every env, as `runners._train._transition`: per agent name,
    `(Transition[num_envs], ...)`, with each agent's running return in
    `info["episode_return"]`."""
    actions, extras, out, carry = rollout_step(
        learners, agent_state, partial(step, env), obs, env_state, key, carry=carry
    )
    next_obs, env_state, rewards, term, trunc, info = out
    final = info["final_observation"]
    transition = {
        a: Transition(
            obs[a], actions[a], rewards[a], term[a], trunc[a], final[a], extras[a]
        )
        for a in env.agents
    }
    return transition, env_state, next_obs, info, carry
