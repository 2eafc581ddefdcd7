"""Probe environments: tiny MDPs whose values are known in closed form.

Each one isolates one piece of an agent (value targets, discounting, bootstrapping
through truncation, the policy gradient), so that a wrong target shows up in seconds
rather than as a slow learning curve. Observations are float32 vectors of size 1.
"""

from typing import ClassVar, final

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._env import AbstractEnv, Action
from ._spaces import Box, Discrete


@final
class ProbeState(eqx.Module):
    """A probe environment's observation and the steps taken in the episode."""

    obs: Float[Array, "1"]
    time: Int[Array, ""]


class _AbstractProbe(AbstractEnv[ProbeState]):
    """A probe: one observation in `[-1, 1]`, zero at the start unless
    `signed_start` (then +1 or -1 at random), and the action space `actions`."""

    actions: ClassVar[Discrete | Box]
    signed_start: ClassVar[bool]

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def observation_space(self) -> Box:
        return Box(-1.0, 1.0, (1,))

    @property
    def action_space(self) -> Discrete | Box:
        return self.actions

    def reset_env(self, key: PRNGKeyArray) -> tuple[Float[Array, "1"], ProbeState]:
        if self.signed_start:
            obs = jnp.where(jr.bernoulli(key), 1.0, -1.0)[None]
        else:
            obs = jnp.zeros((1,))
        return obs, ProbeState(obs, jnp.array(0, jnp.int32))


@final
class ConstantReward(_AbstractProbe):
    """One step, reward 1. `V = Q = 1`."""

    actions = Discrete(1)
    signed_start = False

    def step_env(self, key: PRNGKeyArray, state: ProbeState, action: Action):
        new = ProbeState(state.obs, state.time + 1)
        return state.obs, new, jnp.array(1.0), jnp.array(True), jnp.array(False), {}


@final
class ObservationReward(_AbstractProbe):
    """One step; the observation is +1 or -1 at random and the reward equals it.
    `V(obs) = obs`."""

    actions = Discrete(1)
    signed_start = True

    def step_env(self, key: PRNGKeyArray, state: ProbeState, action: Action):
        new = ProbeState(state.obs, state.time + 1)
        return state.obs, new, state.obs[0], jnp.array(True), jnp.array(False), {}


@final
class TwoStepDiscount(_AbstractProbe):
    """Two steps: observation 0 with reward 0, then observation 1 with reward 1.
    `V(0) = gamma`, `V(1) = 1`."""

    actions = Discrete(1)
    signed_start = False

    def step_env(self, key: PRNGKeyArray, state: ProbeState, action: Action):
        first = state.time == 0
        obs = jnp.where(first, 1.0, 0.0)[None]
        new = ProbeState(obs, state.time + 1)
        reward = jnp.where(first, 0.0, 1.0)
        return obs, new, reward, ~first, jnp.array(False), {}


@final
class ActionReward(_AbstractProbe):
    """One step, two actions; action 1 earns 1, action 0 earns 0.
    `Q(·, 0) = 0`, `Q(·, 1) = 1`, and the optimal policy picks action 1."""

    actions = Discrete(2)
    signed_start = False

    def step_env(self, key: PRNGKeyArray, state: ProbeState, action: Action):
        new = ProbeState(state.obs, state.time + 1)
        reward = jnp.where(jnp.asarray(action) == 1, 1.0, 0.0)
        return state.obs, new, reward, jnp.array(True), jnp.array(False), {}


@final
class TruncatedConstantReward(_AbstractProbe):
    """Reward 1 on every step; episodes never terminate but are truncated after
    `horizon` steps, and the observation does not reveal the time. Only a learner
    that bootstraps through truncation finds `V = 1 / (1 - gamma)`."""

    actions = Discrete(1)
    signed_start = False

    horizon: int = 5

    def step_env(self, key: PRNGKeyArray, state: ProbeState, action: Action):
        new = ProbeState(state.obs, state.time + 1)
        truncated = new.time >= self.horizon
        return state.obs, new, jnp.array(1.0), jnp.array(False), truncated, {}


@final
class ContinuousActionReward(_AbstractProbe):
    """One step with a continuous action in `[-1, 1]`; reward `-(a - 0.5)^2`.
    The optimal (mean) action is 0.5."""

    actions = Box(-1.0, 1.0, (1,))
    signed_start = False

    def step_env(self, key: PRNGKeyArray, state: ProbeState, action: Action):
        new = ProbeState(state.obs, state.time + 1)
        reward = -jnp.sum((action - 0.5) ** 2)
        return state.obs, new, reward, jnp.array(True), jnp.array(False), {}
