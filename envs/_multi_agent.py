"""Multi-agent environments: pure `reset(key)` and `step(key, state, actions)` over
a fixed set of named agents, with per-agent spaces, rewards and episode ends."""

import abc
import contextlib
import os
import sys
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray, PyTree, Shaped

from ._spaces import Box, Discrete, Space

StateT = TypeVar("StateT")

Observations = dict[str, Shaped[Array, "..."]]
Actions = Mapping[str, Shaped[ArrayLike, "..."]]
Rewards = dict[str, Float[Array, ""]]
Flags = dict[str, Bool[Array, ""]]
ALL_AGENTS = "__all__"
"""The key of a multi-agent env's `terminated` and `truncated` that says the
episode ended for every agent (JaxMARL's `"__all__"`)."""


class AbstractMultiAgentEnv(eqx.Module, Generic[StateT]):
    """A pure environment of several agents, named in `agents`.

    Observations, actions and rewards are dicts keyed by agent name. Subclasses
    implement `agents`, `observation_spaces`, `action_spaces`, `reset_env` and
    `step_env` (one transition, without auto-reset); `reset` and `step` are
    written once, here:

    - `step` returns per-agent `terminated` and `truncated` flags plus, under
      `"__all__"`, those of the whole episode: it ends when every agent's has
      ended (`terminated["__all__"]`: every agent terminated;
      `truncated["__all__"]`: it ended otherwise, e.g. at a time limit).
    - When the episode ends, `step` returns the first observations and state of
      the next one and keeps the observations it ended on in
      `info["final_observation"]`, so learners can bootstrap through truncation.

    Keys are split as JaxMARL splits them (`key_step, key_reset = split(key)`),
    so an adapted JaxMARL env gives JaxMARL's trajectories.
    """

    @property
    @abc.abstractmethod
    def agents(self) -> tuple[str, ...]: ...

    @property
    @abc.abstractmethod
    def observation_spaces(self) -> dict[str, Space]: ...

    @property
    @abc.abstractmethod
    def action_spaces(self) -> dict[str, Space]: ...

    @abc.abstractmethod
    def reset_env(self, key: PRNGKeyArray) -> tuple[Observations, StateT]:
        """Start an episode: `(observations, state)`."""

    @abc.abstractmethod
    def step_env(
        self, key: PRNGKeyArray, state: StateT, actions: Actions
    ) -> tuple[Observations, StateT, Rewards, Flags, Flags, dict[str, Any]]:
        """One transition, without auto-reset: `(observations, state, rewards,
        terminated, truncated, info)`, the flags per agent."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The env's name, as `envs.make_multi` knows it."""

    @property
    def homogeneous(self) -> bool:
        """Every agent has the same observation and action space (so one shared
        agent can act for all of them)."""
        obs = list(self.observation_spaces.values())
        act = list(self.action_spaces.values())
        return all(_same(obs[0], o) for o in obs) and all(_same(act[0], a) for a in act)

    def reset(self, key: PRNGKeyArray) -> tuple[Observations, StateT]:
        """**Returns:** `(observations, state)` of a new episode."""
        return self.reset_env(key)

    def step(
        self, key: PRNGKeyArray, state: StateT, actions: Actions
    ) -> tuple[Observations, StateT, Rewards, Flags, Flags, dict[str, Any]]:
        """Advance one step, starting a new episode when this one ends.

        **Returns:** `(observations, state, rewards, terminated, truncated, info)`;
        the flags hold each agent's and, under `"__all__"`, the episode's.
        """
        key_step, key_reset = jr.split(key)
        obs_st, state_st, rewards, term, trunc, info = self.step_env(
            key_step, state, actions
        )
        term = {a: jnp.asarray(term[a], dtype=bool) for a in self.agents}
        trunc = {a: jnp.asarray(trunc[a], dtype=bool) for a in self.agents}
        ended = jnp.all(jnp.stack([term[a] | trunc[a] for a in self.agents]))
        all_term = jnp.all(jnp.stack([term[a] for a in self.agents]))
        obs_re, state_re = self.reset_env(key_reset)
        state = _select(ended, state_re, state_st)
        obs = _select(ended, obs_re, obs_st)
        info = {**info, "final_observation": obs_st}
        rewards = {a: jnp.asarray(rewards[a], dtype=jnp.float32) for a in self.agents}
        return (
            obs,
            state,
            rewards,
            {**term, ALL_AGENTS: all_term},
            {**trunc, ALL_AGENTS: ended & ~all_term},
            info,
        )


def _same(a: Space, b: Space) -> bool:
    if isinstance(a, Discrete) and isinstance(b, Discrete):
        return a.n == b.n
    if isinstance(a, Box) and isinstance(b, Box):
        return (
            a.shape == b.shape
            and np.array_equal(a.low, b.low)
            and np.array_equal(a.high, b.high)
        )
    return False


def _select(pred: Bool[Array, ""], on_true: PyTree, on_false: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jax.lax.select(pred, a, b), on_true, on_false)


class MatrixGameState(eqx.Module):
    """The steps taken in this episode (the game itself has no state)."""

    t: Array  # steps taken in this episode


class MatrixGame(AbstractMultiAgentEnv[MatrixGameState]):
    """A repeated cooperative two-player matrix game: both agents receive
    `payoff[a0][a1]` for their joint action, for `episode_length` steps.

    The default payoff has its optimum at the joint action `(0, 0)` (reward 10
    per step), a safer second-best at `(1, 1)` (reward 5), and nothing for
    miscoordination. Observations are the fraction of the episode played.
    """

    payoff: tuple[tuple[float, ...], ...] = ((10.0, 0.0), (0.0, 5.0))
    episode_length: int = 1

    def __check_init__(self):
        rows = {len(row) for row in self.payoff}
        if not self.payoff or len(rows) != 1 or 0 in rows:
            raise ValueError(f"payoff must be a non-empty matrix, got {self.payoff!r}")
        if type(self.episode_length) is not int or self.episode_length < 1:
            raise ValueError(
                f"episode_length must be a positive int, got {self.episode_length!r}"
            )

    @property
    def name(self) -> str:
        return "marl/MatrixGame"

    @property
    def agents(self) -> tuple[str, ...]:
        return ("agent_0", "agent_1")

    @property
    def observation_spaces(self) -> dict[str, Space]:
        box = Box(np.zeros(1, np.float32), np.ones(1, np.float32), (1,))
        return {a: box for a in self.agents}

    @property
    def action_spaces(self) -> dict[str, Space]:
        n = (len(self.payoff), len(self.payoff[0]))
        return {a: Discrete(k) for a, k in zip(self.agents, n, strict=True)}

    def _obs(self, t: Array) -> Observations:
        frac = jnp.asarray(t, jnp.float32)[None] / self.episode_length
        return {a: frac for a in self.agents}

    def reset_env(self, key: PRNGKeyArray) -> tuple[Observations, MatrixGameState]:
        t = jnp.array(0, jnp.int32)
        return self._obs(t), MatrixGameState(t)

    def step_env(self, key: PRNGKeyArray, state: MatrixGameState, actions: Actions):
        payoff = jnp.asarray(self.payoff, jnp.float32)
        reward = payoff[actions["agent_0"], actions["agent_1"]]
        t = state.t + 1
        done = t >= self.episode_length
        flags = {a: done for a in self.agents}
        never = {a: jnp.array(False) for a in self.agents}
        rewards = {a: reward for a in self.agents}
        return self._obs(t), MatrixGameState(t), rewards, flags, never, {}


@contextlib.contextmanager
def _quiet_stdout():
    """Silence file descriptor 1 (JaxMARL prints two lines about optional
    environments when imported, past `contextlib.redirect_stdout`)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _import_jaxmarl() -> Any:
    if "jaxmarl" in sys.modules:
        return sys.modules["jaxmarl"]
    try:
        with _quiet_stdout():
            import jaxmarl
    except ImportError:
        raise ValueError(
            "JaxMARL environments need the marl extra: pip install -e '.[marl]'"
        ) from None
    return jaxmarl


def jaxmarl_names() -> list[str]:
    """JaxMARL's registered env names, or none without the `marl` extra."""
    import importlib.util

    if importlib.util.find_spec("jaxmarl") is None:
        return []
    return list(_import_jaxmarl().registered_envs)


def _convert_space(space: Any, what: str, env_id: str) -> Space:
    kind = type(space).__name__
    if kind == "Discrete":
        return Discrete(int(space.n))
    if kind == "Box":
        shape = tuple(space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
        return Box(low, high, shape)
    raise ValueError(
        f"JaxMARL env {env_id!r} has a {kind} {what} space, which equizoo does not "
        "support (only Discrete and Box)."
    )


class JaxMarlEnv(AbstractMultiAgentEnv[Any]):
    """Any registered JaxMARL environment (`pip install -e '.[marl]'`), e.g.
    `"MPE_simple_spread_v3"`.

    JaxMARL reports one `done` per agent; an episode that ends at the env's
    `max_steps` (the MPE family's time limit) is reported as truncated, any other
    end as terminated.

    **Arguments:** `env_id`, a JaxMARL name; `**env_params`, keyword arguments
    of its constructor (e.g. `num_agents=3`, `max_steps=25`).
    """

    env: Any = eqx.field(static=True)
    env_id: str = eqx.field(static=True)
    _agents: tuple[str, ...] = eqx.field(static=True)
    _observation_spaces: dict[str, Space]
    _action_spaces: dict[str, Space]

    def __init__(self, env_id: str, **env_params: Any):
        jaxmarl = _import_jaxmarl()
        try:
            env = jaxmarl.make(env_id, **env_params)
        except TypeError as e:
            raise ValueError(f"bad parameter(s) for {env_id!r}: {e}") from None
        self.env = env
        self.env_id = env_id
        self._agents = tuple(env.agents)
        self._observation_spaces = {
            a: _convert_space(env.observation_space(a), "observation", env_id)
            for a in self._agents
        }
        self._action_spaces = {
            a: _convert_space(env.action_space(a), "action", env_id)
            for a in self._agents
        }

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def agents(self) -> tuple[str, ...]:
        return self._agents

    @property
    def observation_spaces(self) -> dict[str, Space]:
        return self._observation_spaces

    @property
    def action_spaces(self) -> dict[str, Space]:
        return self._action_spaces

    # JaxMARL's code relies on NumPy's implicit rank promotion; allow it inside
    # its calls whatever the caller's `jax_numpy_rank_promotion` says.
    def reset_env(self, key: PRNGKeyArray) -> tuple[Observations, Any]:
        with jax.numpy_rank_promotion("allow"):
            return self.env.reset(key)

    def step_env(self, key: PRNGKeyArray, state: Any, actions: Actions):
        with jax.numpy_rank_promotion("allow"):
            obs, state_st, rewards, dones, info = self.env.step_env(key, state, actions)
        limit = getattr(self.env, "max_steps", None)
        step = getattr(state_st, "step", None)
        if limit is not None and step is not None:
            timeout = jnp.asarray(step >= limit)
        else:
            timeout = jnp.array(False)
        term = {a: dones[a] & ~timeout for a in self.agents}
        trunc = {a: dones[a] & timeout for a in self.agents}
        return obs, state_st, rewards, term, trunc, info
