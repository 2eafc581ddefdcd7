"""The agent protocol, and `register`: the one place an agent is named."""

import abc
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Box, Space

from ._memory import AbstractMemory, Transition
from ._networks import RECURRENT, TORSOS, torso_kind
from ._normalize import RunningStats

Extras = dict[str, Array]
Metrics = dict[str, Array]


class AbstractState(eqx.Module):
    """What every agent's state holds besides its own learnt parts: the running
    observation statistics (used when the agent has `normalize_obs=True`)."""

    obs_stats: eqx.AbstractVar[RunningStats]


S = TypeVar("S", bound=AbstractState)


class AbstractAgent(eqx.Module, Generic[S]):
    """An agent holds hyperparameters and architecture, never parameters.

    Its learnable state (networks, optimizer state, counters) is the separate pytree
    returned by `init`, so one agent serves every seed and is static under
    `eqx.filter_jit`. The runner collects `num_steps` steps from each env per
    iteration, adds them to `memory`, calls `update` (which returns the memory
    too, e.g. with new priorities), then `observe`.

    With `normalize_obs`, observations are normalised by running statistics kept
    in the state (`state.obs_stats`): `observe` updates them in training only, so
    evaluation and a loaded agent see observations as the agent last trained on.
    With `scale_obs`, the same statistics are fixed from the observation space's
    bounds instead (`scaled_stats`): each bounded dimension maps linearly onto
    `[-1, 1]`, so a dimension with a tiny range (MountainCar's velocity, within
    +-0.07) weighs as much as the others from the first update on.
    """

    memory: eqx.AbstractVar[AbstractMemory]
    num_steps: eqx.AbstractVar[int]
    normalize_obs: eqx.AbstractVar[bool]
    scale_obs: eqx.AbstractVar[bool]
    torso: eqx.AbstractVar[str]
    # Whether `torso` may be recurrent ("gru", "lstm"): true for the
    # subclasses of `AbstractRecurrentAgent`, which have a `cell_size` and
    # learn from sequences.
    supports_recurrence: ClassVar[bool] = False

    @property
    def recurrent(self) -> bool:
        """Whether this agent's torso is recurrent (its carry is not `()`)."""
        return self.torso in RECURRENT

    def __check_init__(self):
        if self.normalize_obs and self.scale_obs:
            raise ValueError(
                f"{type(self).__name__}: normalize_obs and scale_obs both set; "
                "choose one (running statistics, or the observation space's bounds)"
            )
        if self.torso not in TORSOS:
            raise ValueError(
                f"{type(self).__name__}: unknown torso {self.torso!r}; valid ones: "
                f"{TORSOS} ('auto' picks 'cnn' for [height, width, channels] "
                "observations, 'mlp' otherwise)"
            )
        if self.torso in RECURRENT and not self.supports_recurrence:
            raise ValueError(
                f"{type(self).__name__}: torso={self.torso!r} is not supported yet "
                f"(recurrent torsos: {', '.join(recurrent_agents())}); use 'auto', "
                "'mlp' or 'cnn'"
            )

    def check_observations(self, obs_space: Space) -> None:
        """Raise `ValueError` if this agent cannot take observations from
        `obs_space`: `scale_obs` needs a `Box` with some bounded dimension,
        `torso="cnn"` image observations. Called with `check`, before anything
        is compiled."""
        torso_kind(self.torso, obs_space.shape, who=type(self).__name__)
        if self.scale_obs:
            scaled_stats(obs_space, who=type(self).__name__)

    @abc.abstractmethod
    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        """Raise `ValueError` if this agent cannot train on these spaces with
        `num_envs` parallel envs. Called before anything is compiled."""

    @abc.abstractmethod
    def init(
        self,
        obs_space: Space,
        action_space: Space,
        *,
        key: PRNGKeyArray,
        num_envs: int,
        total_steps: int,
    ) -> S:
        """Fresh learnable state. `num_envs` and `total_steps` give schedules their
        horizon."""

    @abc.abstractmethod
    def act(
        self,
        state: S,
        obs: Shaped[Array, "..."],
        *,
        key: PRNGKeyArray,
        greedy: bool = False,
    ) -> tuple[Shaped[Array, "..."], Extras]:
        """Action for one observation, and extras for the memory (callers vmap)."""

    @abc.abstractmethod
    def initial_carry(self) -> PyTree:
        """The recurrent carry of one env at an episode's start (a recurrent
        torso's hidden state); `()` for a memoryless agent, which then costs
        nothing anywhere the carry goes."""

    @abc.abstractmethod
    def act_step(
        self,
        state: S,
        carry: PyTree,
        obs: Shaped[Array, "..."],
        *,
        key: PRNGKeyArray,
        greedy: bool = False,
    ) -> tuple[Shaped[Array, "..."], Extras, PyTree]:
        """`act` with the env's recurrent carry, as Equinox's cells take theirs:
        it goes in and the next one comes back out, `(action, extras, carry)`.
        The runners call this; a memoryless agent's is its `act`, the carry
        (`()`) passed through (`AbstractMemorylessAgent`, `AbstractRecurrentAgent`
        implement it)."""

    @abc.abstractmethod
    def update(
        self, state: S, memory: PyTree, *, key: PRNGKeyArray
    ) -> tuple[S, PyTree, Metrics]:
        """Learn from the memory. **Returns:** the new state, the memory (an agent
        may write to it, e.g. priorities) and metrics (scalar arrays)."""

    @property
    def normalizes_obs(self) -> bool:
        """Whether observations are normalised by running statistics:
        `normalize_obs`, or a SimBa torso (`torso="simba"`, whose running
        normalisation is part of the architecture) unless `scale_obs` fixes
        the statistics from the space's bounds instead."""
        return self.normalize_obs or (self.torso == "simba" and not self.scale_obs)

    def observe(self, state: S, trajectory: Transition) -> S:
        """Update the observation statistics with a `[num_steps, num_envs]`
        trajectory just learnt from (training only; a no-op unless
        `normalizes_obs`)."""
        if not self.normalizes_obs:  # fixed statistics under `scale_obs`
            return state
        stats = state.obs_stats.update(trajectory.obs)
        return eqx.tree_at(lambda s: s.obs_stats, state, stats)

    def preprocess(self, state: S, obs: Shaped[Array, "..."]) -> Shaped[Array, "..."]:
        """The observation(s) the networks see: normalised with `state.obs_stats`
        under `normalize_obs` (clipped to +-10) or `scale_obs` (not clipped: bounded
        dimensions land in `[-1, 1]`, unbounded ones pass unchanged), else
        unchanged. Any leading axes."""
        if self.normalizes_obs:
            return state.obs_stats.normalize(obs)
        if self.scale_obs:
            return state.obs_stats.normalize(obs, clip=np.inf)
        return obs

    def initial_obs_stats(self, obs_space: Space) -> RunningStats:
        """The observation statistics a fresh state starts with: fixed from the
        space's bounds under `scale_obs`, else empty (mean 0, variance 1)."""
        if self.scale_obs:
            return scaled_stats(obs_space, who=type(self).__name__)
        return RunningStats.zeros(obs_space.shape)


class AbstractMemorylessAgent(AbstractAgent[S], Generic[S]):
    """An agent without a recurrent carry (`torso` is never "gru" or "lstm"):
    its carry is `()` and `act_step` is `act`."""

    @final
    def initial_carry(self) -> PyTree:
        return ()

    @final
    def act_step(
        self, state, carry, obs, *, key, greedy=False
    ) -> tuple[Shaped[Array, "..."], Extras, PyTree]:
        action, extras = self.act(state, obs, key=key, greedy=greedy)
        return action, extras, carry


class AbstractRecurrentAgent(AbstractAgent[S], Generic[S]):
    """An agent that may take a recurrent torso (`torso="gru"` or `"lstm"`, a
    cell of `cell_size` units): memoryless, `act_step` is `act`; recurrent, it
    is `recurrent_act`, and the agent learns from sequences."""

    cell_size: eqx.AbstractVar[int]
    supports_recurrence: ClassVar[bool] = True

    def __check_init__(self):
        size = self.cell_size
        if self.recurrent and (type(size) is not int or size <= 0):
            raise ValueError(
                f"{type(self).__name__}: cell_size (the {self.torso} cell's hidden "
                f"size) must be a positive integer, got {size!r}"
            )

    @abc.abstractmethod
    def recurrent_act(
        self,
        state: S,
        carry: PyTree,
        obs: Shaped[Array, "..."],
        *,
        key: PRNGKeyArray,
        greedy: bool = False,
    ) -> tuple[Shaped[Array, "..."], Extras, PyTree]:
        """`act_step` of a recurrent torso: the action, the extras the memory
        keeps (the carry the step started from, at least) and the next carry."""

    @final
    def act_step(
        self, state, carry, obs, *, key, greedy=False
    ) -> tuple[Shaped[Array, "..."], Extras, PyTree]:
        if self.recurrent:
            return self.recurrent_act(state, carry, obs, key=key, greedy=greedy)
        action, extras = self.act(state, obs, key=key, greedy=greedy)
        return action, extras, carry


# Every agent `zoo.make` builds, by name, and the env each trains on when a
# config names none: `register` fills both, once per agent.
AGENTS: dict[str, type[AbstractAgent]] = {}
DEFAULT_ENVS: dict[str, str] = {}
A = TypeVar("A", bound=type[AbstractAgent])


def register(name: str, *, default_env: str = "CartPole-v1") -> Callable[[A], A]:
    """Class decorator: make an agent class known as `name` to `zoo.make`,
    `zoo.names`, `zoo.save`/`zoo.load`, the experiments' CLI and the test suite.

    ```python
    @zoo.register("myq", default_env="CartPole-v1")
    class MyQ(zoo.AbstractAgent[MyState]): ...
    ```

    `default_env`: the env `python -m experiments.run with agent=<name>` trains
    on when none is given. An agent registered outside the package is saved and
    loaded like the zoo's own, once its module is imported.

    **Raises:** `ValueError` if `name` is taken, not lower-case, or the class is
    not an `AbstractAgent` or is registered already.
    """

    def add(cls: Any) -> Any:  # any class: a non-agent gets the error below
        if not (isinstance(cls, type) and issubclass(cls, AbstractAgent)):
            raise ValueError(
                f"zoo.register({name!r}): {cls!r} is not a subclass of "
                "zoo.AbstractAgent"
            )
        if name != name.lower() or not name.isidentifier():
            raise ValueError(
                f"zoo.register({name!r}): an agent name is a lower-case "
                "identifier, e.g. 'iqn'"
            )
        if name in AGENTS or cls in AGENTS.values():
            taken = name if name in AGENTS else cls.__name__
            raise ValueError(
                f"zoo.register({name!r}): {taken!r} is registered already "
                f"(agents: {sorted(AGENTS)}); pick another name"
            )
        AGENTS[name] = cls
        DEFAULT_ENVS[name] = default_env
        return cls

    return add


def recurrent_agents() -> list[str]:
    """The registered agents that take a recurrent torso, by class name, sorted
    (not in the order their modules happened to be imported)."""
    return sorted(c.__name__ for c in AGENTS.values() if c.supports_recurrence)


def adam_optimizer(
    learning_rate: float | Float[Array, ""],
    max_grad_norm: float | Float[Array, ""],
    *,
    anneal_horizon: Int[Array, ""] | None = None,
    eps: float = 1e-8,
    b1: float | Float[Array, ""] = 0.9,
) -> optax.GradientTransformation:
    """Global-norm clipping then Adam (`clipped`), first-moment decay `b1`."""
    return clipped(
        optax.adam(learning_rate, b1=b1, eps=eps),
        max_grad_norm,
        anneal_horizon=anneal_horizon,
    )


def clipped(
    optimizer: optax.GradientTransformation,
    max_grad_norm: float | Float[Array, ""],
    *,
    anneal_horizon: Int[Array, ""] | None = None,
) -> optax.GradientTransformation:
    """Global-norm clipping then `optimizer`; with `anneal_horizon`, the step
    size decays linearly to zero over that many updates. The horizon is an
    array (kept in the agent state), so that a saved state loads into a template
    built for any run length."""
    chain = [optax.clip_by_global_norm(max_grad_norm), optimizer]
    if anneal_horizon is not None:
        horizon = anneal_horizon
        chain.append(
            optax.scale_by_schedule(lambda n: jnp.maximum(1.0 - n / horizon, 0.0))
        )
    # Flattened: one vector for the moments and the norm instead of a few ops per
    # parameter leaf, which cuts the compiled program by a quarter.
    return optax.flatten(optax.chain(*chain))


# Gymnasium (and so gymnax) marks an unbounded dimension with the largest float32.
_UNBOUNDED = float(np.finfo(np.float32).max)


def scaled_stats(obs_space: Space, *, who: str = "scaled_stats") -> RunningStats:
    """Statistics that normalise each dimension of `obs_space` with finite bounds
    `[low, high]` linearly onto `[-1, 1]` (mean the midpoint, standard deviation
    half the width). Unbounded dimensions (infinite, or at the largest float32,
    as Gymnasium marks them) are left unchanged.

    **Raises:** `ValueError` if `obs_space` is not a `Box` or has no bounded
    dimension (nothing to scale: use `normalize_obs` instead).
    """
    if not isinstance(obs_space, Box):
        raise ValueError(
            f"{who}: scale_obs needs a Box observation space, got {obs_space}; "
            "use normalize_obs instead"
        )
    low, high = obs_space.low.astype(np.float64), obs_space.high.astype(np.float64)
    bounded = (
        np.isfinite(low)
        & np.isfinite(high)
        & (np.abs(low) < _UNBOUNDED)
        & (np.abs(high) < _UNBOUNDED)
        & (high > low)
    )
    if not bounded.any():
        raise ValueError(
            f"{who}: scale_obs needs an observation space with bounded "
            f"dimensions, but every dimension of {obs_space} is unbounded; use "
            "normalize_obs instead"
        )
    mean = np.where(bounded, (low + high) / 2, 0.0)
    var = np.where(bounded, ((high - low) / 2) ** 2, 1.0)
    return RunningStats(
        jnp.asarray(mean, jnp.float32), jnp.asarray(var, jnp.float32), jnp.array(0.0)
    )


def refuse_act(agent: "AbstractAgent") -> None:
    """A `ValueError` if `agent` is recurrent: its `act` has no carry to take,
    so it must be called through `act_step`."""
    if agent.recurrent:
        raise ValueError(
            f"{type(agent).__name__}(torso={agent.torso!r}) is recurrent: act with "
            "act_step(state, carry, obs, key=..., greedy=...), starting from "
            "agent.initial_carry() (runners.evaluate and experiments do)"
        )


def check_positive(agent: eqx.Module, *names: str) -> None:
    """Raise a `ValueError` naming the first of `names` that is not positive."""
    for name in names:
        value = getattr(agent, name)
        if value <= 0:
            raise ValueError(
                f"{type(agent).__name__}: {name} must be positive, got {value}"
            )
