"""Native CartPole-v1 and Pendulum-v1.

They follow gymnax's dynamics operation for operation (a test checks that both give
identical trajectories for the same keys), but avoid importing gymnax, which costs
about 2.5 s on a small CPU: a large share of a short training run.
"""

import math
from typing import final

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._env import AbstractEnv, Action, Info
from ._spaces import Box, Discrete

_F32_MAX = float(jnp.finfo(jnp.float32).max)


@final
class CartPoleState(eqx.Module):
    """Cart position and velocity, pole angle and angular velocity, and the
    steps taken in the episode."""

    x: Float[Array, ""]
    x_dot: Float[Array, ""]
    theta: Float[Array, ""]
    theta_dot: Float[Array, ""]
    time: Int[Array, ""]


@final
class CartPole(AbstractEnv[CartPoleState]):
    """CartPole-v1: balance a pole on a cart; +1 per step, at most 500 steps."""

    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5
    force_mag: float = 10.0
    tau: float = 0.02
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    max_steps_in_episode: int = 500

    @property
    def name(self) -> str:
        return "CartPole-v1"

    @property
    def observation_space(self) -> Box:
        high = [
            self.x_threshold * 2,
            _F32_MAX,
            self.theta_threshold_radians * 2,
            _F32_MAX,
        ]
        return Box([-h for h in high], high, (4,))

    @property
    def action_space(self) -> Discrete:
        return Discrete(2)

    def _obs(self, s: CartPoleState) -> Float[Array, "4"]:
        return jnp.array([s.x, s.x_dot, s.theta, s.theta_dot])

    def _terminated(self, s: CartPoleState):
        return (
            (s.x < -self.x_threshold)
            | (s.x > self.x_threshold)
            | (s.theta < -self.theta_threshold_radians)
            | (s.theta > self.theta_threshold_radians)
        )

    def reset_env(self, key: PRNGKeyArray) -> tuple[Float[Array, "4"], CartPoleState]:
        x = jr.uniform(key, minval=-0.05, maxval=0.05, shape=(4,))
        state = CartPoleState(x[0], x[1], x[2], x[3], jnp.array(0, jnp.int32))
        return self._obs(state), state

    def step_env(
        self, key: PRNGKeyArray, state: CartPoleState, action: Action
    ) -> tuple[Float[Array, "4"], CartPoleState, Array, Array, Array, Info]:
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        prev_terminal = self._terminated(state)
        force = self.force_mag * action - self.force_mag * (1 - action)
        costheta = jnp.cos(state.theta)
        sintheta = jnp.sin(state.theta)
        temp = (force + polemass_length * state.theta_dot**2 * sintheta) / total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta**2 / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        new = CartPoleState(
            x=state.x + self.tau * state.x_dot,
            x_dot=state.x_dot + self.tau * xacc,
            theta=state.theta + self.tau * state.theta_dot,
            theta_dot=state.theta_dot + self.tau * thetaacc,
            time=state.time + 1,
        )
        reward = 1.0 - prev_terminal
        terminated = self._terminated(new)
        truncated = new.time >= self.max_steps_in_episode
        return self._obs(new), new, reward, terminated, truncated, {}


@final
class PendulumState(eqx.Module):
    """Pendulum angle and angular velocity, the last torque applied, and the
    steps taken in the episode."""

    theta: Float[Array, ""]
    theta_dot: Float[Array, ""]
    last_u: Float[Array, ""]
    time: Int[Array, ""]


def _angle_normalize(x):
    return ((x + jnp.pi) % (2 * jnp.pi)) - jnp.pi


@final
class Pendulum(AbstractEnv[PendulumState]):
    """Pendulum-v1: swing a pendulum up and hold it; 200 steps, reward in [-16.3, 0]."""

    max_speed: float = 8.0
    max_torque: float = 2.0
    dt: float = 0.05
    g: float = 10.0
    m: float = 1.0
    l: float = 1.0  # noqa: E741
    max_steps_in_episode: int = 200

    @property
    def name(self) -> str:
        return "Pendulum-v1"

    @property
    def observation_space(self) -> Box:
        high = [1.0, 1.0, self.max_speed]
        return Box([-h for h in high], high, (3,))

    @property
    def action_space(self) -> Box:
        return Box(-self.max_torque, self.max_torque, (1,))

    def _obs(self, s: PendulumState) -> Float[Array, "3"]:
        return jnp.array([jnp.cos(s.theta), jnp.sin(s.theta), s.theta_dot]).squeeze()

    def reset_env(self, key: PRNGKeyArray) -> tuple[Float[Array, "3"], PendulumState]:
        high = jnp.array([jnp.pi, 1])
        x = jr.uniform(key, shape=(2,), minval=-high, maxval=high)
        state = PendulumState(x[0], x[1], jnp.array(0.0), jnp.array(0, jnp.int32))
        return self._obs(state), state

    def step_env(
        self, key: PRNGKeyArray, state: PendulumState, action: Action
    ) -> tuple[Float[Array, "3"], PendulumState, Array, Array, Array, Info]:
        u = jnp.clip(action, -self.max_torque, self.max_torque)
        reward = -(
            _angle_normalize(state.theta) ** 2
            + 0.1 * state.theta_dot**2
            + 0.001 * (u**2)
        )
        newthdot = state.theta_dot + (
            (
                3 * self.g / (2 * self.l) * jnp.sin(state.theta)
                + 3.0 / (self.m * self.l**2) * u
            )
            * self.dt
        )
        newthdot = jnp.clip(newthdot, -self.max_speed, self.max_speed)
        newth = state.theta + newthdot * self.dt
        new = PendulumState(
            theta=newth.squeeze(),
            theta_dot=newthdot.squeeze(),
            last_u=u.reshape(()),
            time=state.time + 1,
        )
        truncated = new.time >= self.max_steps_in_episode
        return self._obs(new), new, reward.squeeze(), jnp.array(False), truncated, {}
