"""Learners for multi-agent envs: zoo agents composed per agent name.

`Independent` gives every agent of the env its own zoo agent, state and memory
(RLHive's list of agents); `Shared` lets one zoo agent act and learn for all of
them, vmapped over the agent axis (parameter sharing; without an agent id it is
self-play). Neither copies an algorithm: both call the agents' own `init`,
`act`, `update` and `observe`, so every agent of the zoo whose spaces fit works.
"""

import abc
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, PRNGKeyArray, PyTree, Shaped

from envs import AbstractMultiAgentEnv, Box, Space

from ._agent import AbstractAgent, Metrics
from ._memory import Transition

Observations = dict[str, Shaped[Array, "envs ..."]]


class AbstractLearners(eqx.Module):
    """What the runner trains on a multi-agent env: acts for every agent of it
    and learns from a `{agent_name: Transition}` trajectory.

    Its methods take and return dicts keyed by agent name, batched over the
    parallel envs (`[num_envs, ...]`); its state and memory are whatever its
    agents keep. `num_steps` is the env steps collected per iteration.
    """

    @property
    @abc.abstractmethod
    def num_steps(self) -> int: ...

    @abc.abstractmethod
    def check(self, env: AbstractMultiAgentEnv, num_envs: int) -> None:
        """Raise `ValueError` if these learners cannot train on `env` with
        `num_envs` parallel envs. Called before anything is compiled."""

    @abc.abstractmethod
    def init(
        self,
        env: AbstractMultiAgentEnv,
        *,
        key: PRNGKeyArray,
        num_envs: int,
        total_steps: int,
    ) -> PyTree:
        """Fresh learnable state."""

    @abc.abstractmethod
    def act(
        self,
        state: PyTree,
        obs: Observations,
        *,
        key: PRNGKeyArray,
        greedy: bool = False,
    ) -> tuple[dict[str, Array], dict[str, PyTree]]:
        """Every agent's action in every env, and extras for the memory."""

    @abc.abstractmethod
    def initial_carry(self) -> PyTree:
        """The recurrent carry of one env at an episode's start: `()` for
        memoryless agents, else `{agent_name: carry}`."""

    @abc.abstractmethod
    def act_step(
        self,
        state: PyTree,
        carry: PyTree,
        obs: Observations,
        *,
        key: PRNGKeyArray,
        greedy: bool = False,
    ) -> tuple[dict[str, Array], dict[str, PyTree], PyTree]:
        """`act` with every agent's recurrent carry (see
        `AbstractAgent.act_step`)."""

    @abc.abstractmethod
    def init_memory(self, example: dict[str, Transition], num_envs: int) -> PyTree:
        """Empty memory for transitions shaped like `example` (per agent: one
        env, one step)."""

    @abc.abstractmethod
    def add(self, memory: PyTree, trajectory: dict[str, Transition]) -> PyTree:
        """Add a `{agent_name: Transition[num_steps, num_envs]}` trajectory."""

    @abc.abstractmethod
    def update(
        self, state: PyTree, memory: PyTree, *, key: PRNGKeyArray
    ) -> tuple[PyTree, PyTree, Metrics]:
        """Learn: every agent's `update`."""

    @abc.abstractmethod
    def observe(self, state: PyTree, trajectory: dict[str, Transition]) -> PyTree:
        """Every agent's `observe` (observation statistics)."""


def _check_agent(agent: Any, obs: Space, action: Space, num_envs: int, who: str):
    if not isinstance(agent, AbstractAgent):
        raise ValueError(f"{who}: expected a zoo agent, got {type(agent).__name__}")
    try:
        agent.check(obs, action, num_envs)
        agent.check_observations(obs)
    except ValueError as e:
        raise ValueError(f"{who}: {e}") from None


class Independent(AbstractLearners):
    """One zoo agent per agent name, each with its own state and memory.

    Agents may differ (PPO for one, DQN for another) but collect together, so
    they must take the same `num_steps`. Their metrics are reported as
    `<agent_name>.<metric>`.

    **Arguments:** `agents`, `{agent_name: agent}` for every agent of the env; or
    one agent, copied for every name (`Independent.of(agent, env)`).
    """

    agents: dict[str, AbstractAgent]

    def __check_init__(self):
        if not isinstance(self.agents, Mapping) or not self.agents:
            raise ValueError(
                "Independent: expected a non-empty {agent_name: agent} dict, got "
                f"{self.agents!r}"
            )
        steps = {n: a.num_steps for n, a in self.agents.items()}
        if len(set(steps.values())) > 1:
            raise ValueError(
                "Independent: the agents collect together, so they need the same "
                f"num_steps (an off-policy agent's is its train_frequency); got "
                f"{steps}"
            )

    @classmethod
    def of(cls, agent: AbstractAgent, env: AbstractMultiAgentEnv) -> "Independent":
        """The same agent (hyperparameters) for every agent of `env`; each learns
        its own state."""
        return cls({name: agent for name in env.agents})

    @property
    def num_steps(self) -> int:
        return next(iter(self.agents.values())).num_steps

    def check(self, env: AbstractMultiAgentEnv, num_envs: int) -> None:
        names = set(env.agents)
        unknown = sorted(set(self.agents) - names)
        if unknown:
            raise ValueError(
                f"Independent: {unknown[0]!r} is not an agent of {env.name}; its "
                f"agents are {list(env.agents)}"
            )
        missing = [n for n in env.agents if n not in self.agents]
        if missing:
            raise ValueError(
                f"Independent: no agent given for {missing} of {env.name} (its "
                f"agents are {list(env.agents)})"
            )
        for name in env.agents:
            _check_agent(
                self.agents[name],
                env.observation_spaces[name],
                env.action_spaces[name],
                num_envs,
                f"agent {name!r} ({type(self.agents[name]).__name__})",
            )

    def _keys(self, key: PRNGKeyArray) -> dict[str, PRNGKeyArray]:
        # Sorted: a dict that went through a JAX transformation comes back with
        # sorted keys, and each agent must get the same key either way.
        names = sorted(self.agents)
        return dict(zip(names, jr.split(key, len(names)), strict=True))

    def init(self, env, *, key, num_envs, total_steps):
        keys = self._keys(key)
        return {
            name: agent.init(
                env.observation_spaces[name],
                env.action_spaces[name],
                key=keys[name],
                num_envs=num_envs,
                total_steps=total_steps,
            )
            for name, agent in self.agents.items()
        }

    def act(self, state, obs, *, key, greedy=False):
        actions, extras = {}, {}
        for name, k in self._keys(key).items():
            agent, o = self.agents[name], obs[name]
            actions[name], extras[name] = jax.vmap(
                lambda o, k, agent=agent, s=state[name]: agent.act(
                    s, o, key=k, greedy=greedy
                )
            )(o, jr.split(k, o.shape[0]))
        return actions, extras

    def initial_carry(self) -> PyTree:
        if not any(a.recurrent for a in self.agents.values()):
            return ()
        return {n: a.initial_carry() for n, a in self.agents.items()}

    def act_step(self, state, carry, obs, *, key, greedy=False):
        if not any(a.recurrent for a in self.agents.values()):
            actions, extras = self.act(state, obs, key=key, greedy=greedy)
            return actions, extras, carry
        actions, extras, carries = {}, {}, {}
        for name, k in self._keys(key).items():
            agent, o = self.agents[name], obs[name]
            actions[name], extras[name], carries[name] = jax.vmap(
                lambda o, c, k, agent=agent, s=state[name]: agent.act_step(
                    s, c, o, key=k, greedy=greedy
                )
            )(o, carry[name], jr.split(k, o.shape[0]))
        return actions, extras, carries

    def init_memory(self, example, num_envs):
        return {n: a.memory.init(example[n], num_envs) for n, a in self.agents.items()}

    def add(self, memory, trajectory):
        return {
            n: a.memory.add(memory[n], trajectory[n]) for n, a in self.agents.items()
        }

    def update(self, state, memory, *, key):
        new_state, new_memory, metrics = {}, {}, {}
        for name, k in self._keys(key).items():
            s, m, met = self.agents[name].update(state[name], memory[name], key=k)
            new_state[name], new_memory[name] = s, m
            metrics.update({f"{name}.{k}": v for k, v in met.items()})
        return new_state, new_memory, metrics

    def observe(self, state, trajectory):
        return {n: a.observe(state[n], trajectory[n]) for n, a in self.agents.items()}


class Shared(AbstractLearners):
    """One zoo agent acting and learning for every agent of the env: its state
    is shared, its `act` vmapped over agents and envs, and its `update` learns
    from all agents' transitions as from `num_agents * num_envs` parallel envs.

    With `agent_id`, each agent's observation is extended by a one-hot of its
    index, so the shared network can behave differently per agent (flat `Box`
    observations only). Without it every agent plays the same policy: self-play
    in a competitive env.

    Needs a homogeneous env (every agent with the same spaces). A recurrent
    agent keeps one carry per agent of each env, so it needs the env's agent
    names, `agents`: build it with `Shared.of(agent, env)`.
    """

    agent: AbstractAgent
    agent_id: bool = False
    agents: tuple[str, ...] = eqx.field(static=True, default=())

    def __check_init__(self):
        if not isinstance(self.agent, AbstractAgent):
            raise ValueError(
                f"Shared: expected a zoo agent, got {type(self.agent).__name__}"
            )

    @classmethod
    def of(
        cls, agent: AbstractAgent, env: AbstractMultiAgentEnv, *, agent_id: bool = False
    ) -> "Shared":
        """`agent` shared by every agent of `env` (whose names a recurrent
        agent's carries are kept under)."""
        return cls(agent, agent_id=agent_id, agents=tuple(env.agents))

    @property
    def num_steps(self) -> int:
        return self.agent.num_steps

    def spaces(self, env: AbstractMultiAgentEnv) -> tuple[Space, Space]:
        """The observation and action space the shared agent sees."""
        first = env.agents[0]
        obs, action = env.observation_spaces[first], env.action_spaces[first]
        if not self.agent_id:
            return obs, action
        if not isinstance(obs, Box) or len(obs.shape) != 1:
            raise ValueError(
                f"Shared: agent_id appends a one-hot to flat observations, but "
                f"{env.name}'s are {obs}; set agent_id=False"
            )
        n = len(env.agents)
        low = np.concatenate([obs.low, np.zeros(n, obs.low.dtype)])
        high = np.concatenate([obs.high, np.ones(n, obs.high.dtype)])
        return Box(low, high, (obs.shape[0] + n,)), action

    def check(self, env: AbstractMultiAgentEnv, num_envs: int) -> None:
        if not env.homogeneous:
            raise ValueError(
                f"Shared: the agents of {env.name} have different spaces "
                f"(observations {env.observation_spaces}, actions "
                f"{env.action_spaces}), so one agent cannot act for all; use "
                "independent learners"
            )
        if self.agent.recurrent and sorted(self.agents) != sorted(env.agents):
            raise ValueError(
                f"Shared: a recurrent {type(self.agent).__name__} keeps one carry "
                f"per agent, so it needs {env.name}'s agent names "
                f"{list(env.agents)}, got {list(self.agents)}; build it with "
                "zoo.Shared.of(agent, env)"
            )
        obs, action = self.spaces(env)
        _check_agent(
            self.agent,
            obs,
            action,
            num_envs * len(env.agents),
            f"shared {type(self.agent).__name__}",
        )

    def init(self, env, *, key, num_envs, total_steps):
        obs, action = self.spaces(env)
        return self.agent.init(
            obs,
            action,
            key=key,
            num_envs=num_envs * len(env.agents),
            total_steps=total_steps,
        )

    def _stack(self, per_agent: dict[str, Any], axis: int) -> Any:
        """`{name: [..., envs, ...]}` -> `[..., agents * envs, ...]`, agent-major
        along `axis`, agents in sorted order (as JAX orders dict keys)."""
        parts = [per_agent[n] for n in sorted(per_agent)]
        return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=axis), *parts)

    def _with_id(self, obs: dict[str, Array]) -> dict[str, Array]:
        if not self.agent_id:
            return obs
        names = sorted(obs)
        eye = jnp.eye(len(names), dtype=next(iter(obs.values())).dtype)
        return {
            n: jnp.concatenate(
                [o, jnp.broadcast_to(eye[i], (*o.shape[:-1], len(names)))], axis=-1
            )
            for i, (n, o) in enumerate((n, obs[n]) for n in names)
        }

    def act(self, state, obs, *, key, greedy=False):
        names = sorted(obs)
        flat = self._stack(self._with_id(obs), 0)
        actions, extras = jax.vmap(
            lambda o, k: self.agent.act(state, o, key=k, greedy=greedy)
        )(flat, jr.split(key, flat.shape[0]))
        return self._unstack(actions, names), self._unstack(extras, names)

    def initial_carry(self) -> PyTree:
        if not self.agent.recurrent:
            return ()
        return {n: self.agent.initial_carry() for n in self.agents}

    def act_step(self, state, carry, obs, *, key, greedy=False):
        if not self.agent.recurrent:
            actions, extras = self.act(state, obs, key=key, greedy=greedy)
            return actions, extras, carry
        names = sorted(obs)
        flat = self._stack(self._with_id(obs), 0)
        actions, extras, carry = jax.vmap(
            lambda o, c, k: self.agent.act_step(state, c, o, key=k, greedy=greedy)
        )(flat, self._stack(carry, 0), jr.split(key, flat.shape[0]))
        unstack = lambda tree: self._unstack(tree, names)
        return unstack(actions), unstack(extras), unstack(carry)

    def _unstack(self, tree: Any, names: list[str]) -> dict[str, Any]:
        """`[agents * envs, ...]`, agent-major -> `{name: [envs, ...]}`."""
        split = jax.tree.map(lambda x: x.reshape(len(names), -1, *x.shape[1:]), tree)
        return {
            n: jax.tree.map(lambda x, i=i: x[i], split) for i, n in enumerate(names)
        }

    def _flat(self, trajectory: dict[str, Transition]) -> Transition:
        # Observations (and next ones) carry the id the agent acted with.
        names = sorted(trajectory)
        obs = self._with_id({n: trajectory[n].obs for n in names})
        next_obs = self._with_id({n: trajectory[n].next_obs for n in names})
        trajectory = {
            n: eqx.tree_at(
                lambda t: (t.obs, t.next_obs), trajectory[n], (obs[n], next_obs[n])
            )
            for n in names
        }
        return self._stack(trajectory, 1)  # [num_steps, agents * envs]

    def init_memory(self, example, num_envs):
        names = sorted(example)
        obs = self._with_id({n: example[n].obs for n in names})
        one = eqx.tree_at(
            lambda t: (t.obs, t.next_obs), example[names[0]], (obs[names[0]],) * 2
        )
        return self.agent.memory.init(one, num_envs * len(names))

    def add(self, memory, trajectory):
        return self.agent.memory.add(memory, self._flat(trajectory))

    def update(self, state, memory, *, key):
        return self.agent.update(state, memory, key=key)

    def observe(self, state, trajectory):
        return self.agent.observe(state, self._flat(trajectory))
