"""The compiled part: one `lax.scan` over training iterations, envs vmapped."""

from functools import partial
from typing import Any, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import AbstractEnv, AbstractMultiAgentEnv, EpisodeStatistics
from zoo import AbstractAgent, AbstractLearners, Transition

from . import _multi_agent
from ._rollout import initial_carry, rollout_step

# A zoo agent on a single-agent env, or learners (`zoo.Shared`,
# `zoo.Independent`) on a multi-agent env.
Agent = AbstractAgent | AbstractLearners
Env = AbstractEnv | AbstractMultiAgentEnv


@final
class TrainState(eqx.Module):
    """Everything a run carries from one iteration to the next, for one seed.

    Iteration `i` draws its randomness from `fold_in(key, i)`, so a run split into
    chunks of any size (or resumed from a checkpoint) sees the same keys as one that
    ran in a single call.
    """

    agent_state: PyTree
    memory: PyTree
    env_state: PyTree
    obs: PyTree[Shaped[Array, "envs ..."]]  # per agent name on a multi-agent env
    key: PRNGKeyArray
    iteration: Int[Array, ""]
    env_steps: Int[Array, ""]
    # Each env's recurrent carry (`agent.initial_carry()` at an episode's start);
    # `()` for a memoryless agent: no leaves, so its checkpoints are as before.
    carry: PyTree = ()


def steps_per_iteration(agent: Agent, num_envs: int) -> int:
    return num_envs * agent.num_steps


def validate(agent: Agent, env: Env, num_envs: int, total_steps: int) -> None:
    """Raise `ValueError` for a configuration that cannot train, before compiling:
    also for a zoo agent on a multi-agent env (it needs `zoo.Shared` or
    `zoo.Independent` learners) and for learners on a single-agent env."""
    if not isinstance(num_envs, int) or num_envs <= 0:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    if not isinstance(total_steps, int) or total_steps <= 0:
        raise ValueError(f"total_steps must be a positive integer, got {total_steps!r}")
    if _multi_agent.check_pair(agent, env):
        assert isinstance(agent, AbstractLearners)
        assert isinstance(env, AbstractMultiAgentEnv)
        agent.check(env, num_envs)
        return
    assert isinstance(agent, AbstractAgent) and isinstance(env, AbstractEnv)
    agent.check(env.observation_space, env.action_space, num_envs)
    agent.check_observations(env.observation_space)


def _wrap(env: AbstractEnv) -> EpisodeStatistics:
    return EpisodeStatistics(env)


def init(
    agent: Agent,
    env: Env,
    *,
    key: PRNGKeyArray,
    num_envs: int,
    total_steps: int,
) -> TrainState:
    """The state a run starts from: fresh agent state, empty memory, reset envs."""
    validate(agent, env, num_envs, total_steps)
    k_agent, k_env, k_example, k_run = jr.split(key, 4)
    step_fn: Any
    if isinstance(agent, AbstractLearners):
        # Multi-agent envs keep their episode statistics per agent.
        assert isinstance(env, AbstractMultiAgentEnv)
        agent_state = agent.init(
            env, key=k_agent, num_envs=num_envs, total_steps=total_steps
        )
        stepped: Any = env
        reset, step_fn = partial(_multi_agent.reset, env), _multi_agent.transition
        init_memory = agent.init_memory
    else:
        assert isinstance(env, AbstractEnv)
        agent_state = agent.init(
            env.observation_space,
            env.action_space,
            key=k_agent,
            num_envs=num_envs,
            total_steps=total_steps,
        )
        stepped = _wrap(env)
        reset, step_fn, init_memory = stepped.reset, _transition, agent.memory.init
    obs, env_state = jax.vmap(reset)(jr.split(k_env, num_envs))
    carry = initial_carry(agent, num_envs)
    # Shapes and dtypes of one transition, to size the memory.
    step = (agent, stepped, agent_state, obs, env_state, k_example, carry)
    example = jax.eval_shape(lambda: step_fn(*step))[0]
    example = jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), example)
    memory = init_memory(example, num_envs)
    zero = jnp.array(0, jnp.int32)
    return TrainState(agent_state, memory, env_state, obs, k_run, zero, zero, carry)


def _transition(agent, env, agent_state, obs, env_state, key, carry=()):
    """One step of every env: `(Transition[num_envs], env_state, obs, info,
    carry)`."""
    action, extras, out, carry = rollout_step(
        agent, agent_state, env.step, obs, env_state, key, carry=carry
    )
    next_obs, env_state, reward, terminated, truncated, info = out
    transition = Transition(
        obs, action, reward, terminated, truncated, info["final_observation"], extras
    )
    return transition, env_state, next_obs, info, carry


def _iteration(agent: Agent, env: Any, state: TrainState):
    """One iteration: collect `num_steps` steps of every env, learn, observe.

    `env` is the env wrapped in `EpisodeStatistics`, or a multi-agent env with
    zoo learners (whose transitions, memory and returns are per agent name; its
    metrics add `episode_return_sum.<agent>`, and `episode_return_sum` sums the
    agents')."""
    multi = isinstance(agent, AbstractLearners)
    step_fn = _multi_agent.transition if multi else _transition
    # A zoo agent and learners `update` and `observe` alike; only their
    # trajectories' types differ (one `Transition`, or one per agent name).
    learner: Any = agent
    key = jr.fold_in(state.key, state.iteration)
    k_collect, k_update = jr.split(key)

    def env_step(scanned, k):
        env_state, obs, carry = scanned
        transition, env_state, obs, info, carry = step_fn(
            agent, env, state.agent_state, obs, env_state, k, carry
        )
        stats = (info["episode_return"], info["episode_length"], info["episode_done"])
        return (env_state, obs, carry), (transition, stats)

    start = (state.env_state, state.obs, state.carry)
    (env_state, obs, carry), (trajectory, stats) = jax.lax.scan(
        env_step, start, jr.split(k_collect, agent.num_steps)
    )
    ep_return, ep_length, ep_done = stats
    add = learner.add if multi else learner.memory.add
    memory = add(state.memory, trajectory)
    agent_state, memory, metrics = learner.update(
        state.agent_state, memory, key=k_update
    )
    agent_state = learner.observe(agent_state, trajectory)
    done = ep_done.astype(jnp.float32)
    episodes = jnp.sum(done)
    per_agent = {}
    if multi:
        per_agent = {
            f"episode_return_sum.{a}": jnp.sum(r * done) for a, r in ep_return.items()
        }
        return_sum = sum(per_agent.values())
    else:
        return_sum = jnp.sum(ep_return * done)
    metrics = {
        **metrics,
        "episodes": episodes,
        "episode_return_sum": return_sum,
        "episode_length_sum": jnp.sum(ep_length * done),
        **per_agent,
    }
    steps = ep_done.size
    new = TrainState(
        agent_state,
        memory,
        env_state,
        obs,
        state.key,
        state.iteration + 1,
        state.env_steps + steps,
        carry,
    )
    return new, metrics


def train_chunk(
    agent: Agent, env: Env, state: TrainState, num_iterations: int
) -> tuple[TrainState, dict[str, Float[Array, " iterations"]]]:
    """Run `num_iterations` iterations in one `lax.scan`; metrics are stacked."""
    # Multi-agent envs keep their episode statistics per agent (`_multi_agent.step`).
    inner = env if isinstance(env, AbstractMultiAgentEnv) else _wrap(env)
    return jax.lax.scan(
        lambda s, _: _iteration(agent, inner, s), state, None, length=num_iterations
    )


def num_iterations(agent: Agent, num_envs: int, total_steps: int) -> int:
    """Iterations needed for at least `total_steps` env steps (all envs together)."""
    per = steps_per_iteration(agent, num_envs)
    return -(-total_steps // per)


@eqx.filter_jit
def train(
    agent: Agent,
    env: Env,
    *,
    key: PRNGKeyArray,
    total_steps: int,
    num_envs: int = 8,
) -> tuple[TrainState, dict[str, Float[Array, " iterations"]]]:
    """Train `agent` on `env` for `total_steps` env steps in one compiled call.

    Pure and jittable; vmap over `key` to train many seeds in one call:
    `jax.vmap(lambda k: runners.train(agent, env, key=k, total_steps=n))(keys)`.
    `total_steps` is rounded up to a whole number of iterations
    (`num_envs * agent.num_steps` steps each).

    **Returns:** the final `TrainState` and per-iteration metrics: the agent's
    training metrics, plus `episodes`, `episode_return_sum` and
    `episode_length_sum` over the episodes that finished in each iteration.
    """
    iterations = num_iterations(agent, num_envs, total_steps)
    total = iterations * steps_per_iteration(agent, num_envs)
    state = init(agent, env, key=key, num_envs=num_envs, total_steps=total)
    return train_chunk(agent, env, state, iterations)
