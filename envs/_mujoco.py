"""Gymnasium's MuJoCo v5 tasks as pure envs, stepped by MuJoCo's own C engine.

The state is a JAX pytree that holds MuJoCo's full physics state
(`mjSTATE_FULLPHYSICS`: time, joint positions and velocities, actuator
activations) as the bytes of its float64 values, so a float32 program carries it
losslessly: vmapped seeds, sweeps, checkpoints and resumes treat it as any
other state. `step` hands the states of every env in the program (all vmapped
envs and seeds at once) to one `mujoco.rollout` call through
`jax.pure_callback`, which steps them on all cores; the observation, reward and
termination are computed there too, in float64, as Gymnasium's v5 envs compute
them. The episode is truncated at `max_steps` (1000, Gymnasium's time limit).

What differs from Gymnasium: the constraint solver's warm start is not part of
the state (it is not physics; MJX and Brax drop it too), so each step starts
the solver cold. One step from a state matches Gymnasium's to about 1e-12; a
long trajectory drifts apart as any chaotic system does under rounding.
Observations are float32.
"""

import dataclasses
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, UInt32

from ._env import AbstractEnv, Action, Observation
from ._registry import Suite, register_suite
from ._spaces import Box, Space

INSTALL = "pip install -e '.[mujoco]'"
INF = float("inf")


def _mj() -> Any:
    """The `mujoco` module (its compiled names have no type stubs). MuJoCo
    picks its OpenGL backend when first imported: without a display, OSMesa
    where Debian's `libosmesa6` is installed (else EGL), so that frames render
    headless; `MUJOCO_GL` set by the user wins."""
    if "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
        import ctypes.util

        if ctypes.util.find_library("OSMesa"):
            os.environ.setdefault("MUJOCO_GL", "osmesa")
        elif ctypes.util.find_library("EGL"):
            os.environ.setdefault("MUJOCO_GL", "egl")
    import mujoco

    return mujoco


def installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("mujoco") is not None


# --- the tasks: Gymnasium's v5 definitions, on the host in float64 -------------


class _Physics(NamedTuple):
    """The quantities of a batch of envs that a task reads: positions and
    velocities after the step (`qpos`, `qvel`), and what MuJoCo's last forward
    pass computed (`forward`, a dict of arrays, for tasks that read it)."""

    qpos: np.ndarray
    qvel: np.ndarray
    forward: dict


@dataclasses.dataclass(frozen=True)
class _Task:
    """One of Gymnasium's v5 tasks.

    - `xml`: its model in Gymnasium's assets; `frame_skip`: MuJoCo steps a step.
    - `params`: its parameters (Gymnasium's keyword arguments) and defaults.
    - `qvel_noise`: the reset noise of the velocities, `"uniform"` in
      `[-scale, scale]` or `"normal"` with standard deviation `scale` (the
      positions' is uniform).
    - `forward`: what it reads of the data MuJoCo's last substep leaves
      (`mj_step`, then `mj_rnePostConstraint`, as Gymnasium steps: computed
      at the substep's start under Euler, at RK4's last stage under RK4);
      empty when it reads only positions and velocities.
    - `position`: the position whose change over a step is the forward
      velocity, read from the forward pass (`"xpos"`: the torso; `"com"`: the
      centre of mass), or `None` for `qpos[0]` (read from the state).
    - `observe(params, physics)`, `healthy(params, physics)`, and
      `reward(params, physics, velocity, action, healthy)` (given `healthy`'s
      answer, computed once a step).
    - `reset_forward(sim, states)`: what `forward` holds after a reset,
      computed without MuJoCo (every env resets at every step of the compiled
      program, and is selected where its episode ended), or `None` to run
      `mj_forward` for it.
    """

    xml: str
    frame_skip: int
    params: dict[str, Any]
    qvel_noise: str
    observe: Callable[[dict, _Physics], np.ndarray]
    reward: Callable[[dict, _Physics, np.ndarray, np.ndarray, np.ndarray], Any]
    healthy: Callable[[dict, _Physics], np.ndarray]
    forward: tuple[str, ...] = ()
    position: str | None = None
    reset_forward: "Callable[[_Sim, np.ndarray], dict] | None" = None


def _ctrl_cost(p: dict, action: np.ndarray) -> np.ndarray:
    return p["ctrl_cost_weight"] * np.sum(np.square(action), axis=-1)


def _between(x: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    return (bounds[0] < x) & (x < bounds[1])


def _planar_obs(clip_qvel: bool) -> Callable[[dict, _Physics], np.ndarray]:
    """HalfCheetah, Hopper, Walker2d: `qpos[1:]` and `qvel` (clipped to +-10)."""

    def observe(p: dict, s: _Physics) -> np.ndarray:
        qvel = np.clip(s.qvel, -10, 10) if clip_qvel else s.qvel
        return np.concatenate([s.qpos[:, 1:], qvel], axis=-1)

    return observe


def _walker_reward(p: dict, s: _Physics, velocity, action, healthy) -> np.ndarray:
    """Hopper, Walker2d. The healthy reward is paid while healthy only (v5's
    rule, also when an unhealthy state does not end the episode)."""
    alive = healthy * p["healthy_reward"]
    return p["forward_reward_weight"] * velocity + alive - _ctrl_cost(p, action)


def _hopper_healthy(p: dict, s: _Physics) -> np.ndarray:
    z, angle = s.qpos[:, 1], s.qpos[:, 2]
    state = np.concatenate([s.qpos, s.qvel], axis=-1)[:, 2:]
    low, high = p["healthy_state_range"]
    healthy_state = np.all((low < state) & (state < high), axis=-1)
    return (
        healthy_state
        & _between(z, p["healthy_z_range"])
        & _between(angle, p["healthy_angle_range"])
    )


def _walker2d_healthy(p: dict, s: _Physics) -> np.ndarray:
    z, angle = s.qpos[:, 1], s.qpos[:, 2]
    return _between(z, p["healthy_z_range"]) & _between(angle, p["healthy_angle_range"])


def _contact_forces(p: dict, s: _Physics) -> np.ndarray:
    low, high = p["contact_force_range"]
    return np.clip(s.forward["cfrc_ext"], low, high)


def _ant_obs(p: dict, s: _Physics) -> np.ndarray:
    contact = _contact_forces(p, s)[:, 1:].reshape(len(s.qpos), -1)
    return np.concatenate([s.qpos[:, 2:], s.qvel, contact], axis=-1)


def _ant_reward(p: dict, s: _Physics, velocity, action, healthy) -> np.ndarray:
    contact = p["contact_cost_weight"] * np.sum(
        np.square(_contact_forces(p, s)), axis=(-2, -1)
    )
    alive = healthy * p["healthy_reward"]
    return (
        velocity * p["forward_reward_weight"] + alive - _ctrl_cost(p, action) - contact
    )


def _ant_healthy(p: dict, s: _Physics) -> np.ndarray:
    state = np.concatenate([s.qpos, s.qvel], axis=-1)
    low, high = p["healthy_z_range"]
    return (
        np.isfinite(state).all(axis=-1) & (low <= s.qpos[:, 2]) & (s.qpos[:, 2] <= high)
    )


def _humanoid_obs(p: dict, s: _Physics) -> np.ndarray:
    f, n = s.forward, len(s.qpos)
    return np.concatenate(
        [
            s.qpos[:, 2:],
            s.qvel,
            f["cinert"][:, 1:].reshape(n, -1),
            f["cvel"][:, 1:].reshape(n, -1),
            f["qfrc_actuator"][:, 6:],
            f["cfrc_ext"][:, 1:].reshape(n, -1),
        ],
        axis=-1,
    )


def _humanoid_reward(p: dict, s: _Physics, velocity, action, healthy) -> np.ndarray:
    low, high = p["contact_cost_range"]
    contact = p["contact_cost_weight"] * np.sum(
        np.square(s.forward["cfrc_ext"]), axis=(-2, -1)
    )
    contact = np.clip(contact, low, high)
    # Gymnasium charges the control MuJoCo applied: `data.ctrl`, the action.
    alive = healthy * p["healthy_reward"]
    return (
        p["forward_reward_weight"] * velocity + alive - _ctrl_cost(p, action) - contact
    )


def _humanoid_healthy(p: dict, s: _Physics) -> np.ndarray:
    return _between(s.qpos[:, 2], p["healthy_z_range"])


def _pendulum_obs(p: dict, s: _Physics) -> np.ndarray:
    return np.concatenate([s.qpos, s.qvel], axis=-1)


def _pendulum_healthy(p: dict, s: _Physics) -> np.ndarray:
    obs = _pendulum_obs(p, s)
    return np.isfinite(obs).all(axis=-1) & (np.abs(obs[:, 1]) <= 0.2)


def _pendulum_reward(p: dict, s: _Physics, velocity, action, healthy) -> np.ndarray:
    return healthy.astype(np.float64)


def _double_pendulum_obs(p: dict, s: _Physics) -> np.ndarray:
    return np.concatenate(
        [
            s.qpos[:, :1],
            np.sin(s.qpos[:, 1:]),
            np.cos(s.qpos[:, 1:]),
            np.clip(s.qvel, -10, 10),
            np.clip(s.forward["qfrc_constraint"], -10, 10)[:, :1],
        ],
        axis=-1,
    )


def _double_pendulum_healthy(p: dict, s: _Physics) -> np.ndarray:
    return s.forward["site_xpos"][:, 0, 2] > 1


def _double_pendulum_reward(
    p: dict, s: _Physics, velocity, action, healthy
) -> np.ndarray:
    x, y = s.forward["site_xpos"][:, 0, 0], s.forward["site_xpos"][:, 0, 2]
    v1, v2 = s.qvel[:, 1], s.qvel[:, 2]
    distance = 0.01 * x**2 + (y - 2) ** 2
    speed = 1e-3 * v1**2 + 5e-3 * v2**2
    alive = p["healthy_reward"] * healthy
    return alive - distance - speed


def _ant_reset(sim: "_Sim", states: np.ndarray) -> dict[str, np.ndarray]:
    """After `set_state`, the contact forces are those `mj_resetData` left
    (zeros: `mj_forward` does not compute them), and the torso, on a free
    joint, is where its first three positions put it."""
    qpos, _ = sim.split(states)
    xpos = np.zeros((len(states), sim.model.nbody, 3))
    xpos[:, 1] = qpos[:, :3]
    return {"xpos": xpos, "cfrc_ext": np.zeros((len(states), sim.model.nbody, 6))}


def _double_pendulum_reset(sim: "_Sim", states: np.ndarray) -> dict[str, np.ndarray]:
    """Within the reset noise no joint limit binds: no constraint force (the
    tip's position is not read before the first step)."""
    return {"qfrc_constraint": np.zeros((len(states), sim.model.nv))}


# Hopper's and Walker2d's shared parameters.
_WALKER = {
    "forward_reward_weight": 1.0,
    "ctrl_cost_weight": 1e-3,
    "healthy_reward": 1.0,
    "terminate_when_unhealthy": True,
    "reset_noise_scale": 5e-3,
}

TASKS: dict[str, _Task] = {
    "HalfCheetah-v5": _Task(
        "half_cheetah.xml",
        5,
        {
            "forward_reward_weight": 1.0,
            "ctrl_cost_weight": 0.1,
            "reset_noise_scale": 0.1,
        },
        "normal",
        _planar_obs(clip_qvel=False),
        lambda p, s, v, a, healthy: p["forward_reward_weight"] * v - _ctrl_cost(p, a),
        lambda p, s: np.ones(len(s.qpos), bool),
    ),
    "Hopper-v5": _Task(
        "hopper.xml",
        4,
        {
            **_WALKER,
            "healthy_state_range": (-100.0, 100.0),
            "healthy_z_range": (0.7, INF),
            "healthy_angle_range": (-0.2, 0.2),
        },
        "uniform",
        _planar_obs(clip_qvel=True),
        _walker_reward,
        _hopper_healthy,
    ),
    "Walker2d-v5": _Task(
        "walker2d_v5.xml",
        4,
        {
            **_WALKER,
            "healthy_z_range": (0.8, 2.0),
            "healthy_angle_range": (-1.0, 1.0),
        },
        "uniform",
        _planar_obs(clip_qvel=True),
        _walker_reward,
        _walker2d_healthy,
    ),
    "Ant-v5": _Task(
        "ant.xml",
        5,
        {
            "forward_reward_weight": 1.0,
            "ctrl_cost_weight": 0.5,
            "contact_cost_weight": 5e-4,
            "healthy_reward": 1.0,
            "terminate_when_unhealthy": True,
            "healthy_z_range": (0.2, 1.0),
            "contact_force_range": (-1.0, 1.0),
            "reset_noise_scale": 0.1,
        },
        "normal",
        _ant_obs,
        _ant_reward,
        _ant_healthy,
        forward=("xpos", "cfrc_ext"),
        position="xpos",
        reset_forward=_ant_reset,
    ),
    "Humanoid-v5": _Task(
        "humanoid.xml",
        5,
        {
            "forward_reward_weight": 1.25,
            "ctrl_cost_weight": 0.1,
            "contact_cost_weight": 5e-7,
            "contact_cost_range": (-INF, 10.0),
            "healthy_reward": 5.0,
            "terminate_when_unhealthy": True,
            "healthy_z_range": (1.0, 2.0),
            "reset_noise_scale": 1e-2,
        },
        "uniform",
        _humanoid_obs,
        _humanoid_reward,
        _humanoid_healthy,
        forward=("xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext"),
        position="com",
    ),
    "InvertedPendulum-v5": _Task(
        "inverted_pendulum.xml",
        2,
        {"reset_noise_scale": 1e-2},
        "uniform",
        _pendulum_obs,
        _pendulum_reward,
        _pendulum_healthy,
    ),
    "InvertedDoublePendulum-v5": _Task(
        "inverted_double_pendulum.xml",
        5,
        {"healthy_reward": 10.0, "reset_noise_scale": 0.1},
        "normal",
        _double_pendulum_obs,
        _double_pendulum_reward,
        _double_pendulum_healthy,
        forward=("site_xpos", "qfrc_constraint"),
        reset_forward=_double_pendulum_reset,
    ),
}


MUJOCO_TASKS = tuple(sorted(TASKS))

# --- MuJoCo on the host --------------------------------------------------------


class _Sim:
    """A task's compiled model, one `MjData` per thread, and the sizes of its
    state (loaded once per process and task)."""

    def __init__(self, task: _Task):
        import gymnasium

        mujoco = _mj()

        assets = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco")
        self.model = mujoco.MjModel.from_xml_path(
            os.path.join(assets, "assets", task.xml)
        )
        self.threads = len(os.sched_getaffinity(0))
        # Callbacks of programs on several devices may run at once.
        self.lock = threading.Lock()
        self.datas = [mujoco.MjData(self.model) for _ in range(self.threads)]
        self.spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        self.size = mujoco.mj_stateSize(self.model, self.spec)
        self.dt = self.model.opt.timestep * task.frame_skip
        m = self.model
        self.mass = np.asarray(m.body_mass)
        self.qpos0 = np.asarray(m.qpos0, np.float64).copy()

    def state(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """Full physics states `[batch, size]` at time 0 from positions and
        velocities (Gymnasium's `set_state` after `mj_resetData`)."""
        mujoco = _mj()

        m = self.model
        out = np.zeros((len(qpos), self.size))
        if self.size == 1 + m.nq + m.nv:  # time, qpos, qvel: no activations
            out[:, 1 : 1 + m.nq], out[:, 1 + m.nq :] = qpos, qvel
            return out
        data = self.datas[0]
        for i in range(len(qpos)):
            mujoco.mj_resetData(m, data)
            data.qpos[:], data.qvel[:] = qpos[i], qvel[i]
            mujoco.mj_getState(m, data, out[i], self.spec)
        return out

    def split(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nq, nv = self.model.nq, self.model.nv
        return states[:, 1 : 1 + nq], states[:, 1 + nq : 1 + nq + nv]

    def rollout(self, states: np.ndarray, ctrl: np.ndarray, k: int) -> np.ndarray:
        """The states after `k` MuJoCo steps under `ctrl`, on every thread."""
        from mujoco import rollout

        datas = self.datas[: min(self.threads, len(states))]
        path, _ = rollout.rollout(
            self.model,
            datas,
            states,
            np.repeat(ctrl[:, None, :], k, axis=1),
            nstep=k,
            initial_warmstart=np.zeros((len(states), self.model.nv)),
            persistent_pool=len(datas) > 1,
        )
        return np.ascontiguousarray(np.asarray(path)[:, -1])

    def last_substep(
        self, task: _Task, states: np.ndarray, ctrl: np.ndarray
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One MuJoCo step from each of `states` as Gymnasium takes it
        (`mj_step`, then `mj_rnePostConstraint`): the states after it, and what
        `task` reads of the data it leaves (computed within the step: at its
        start for the Euler integrator, at RK4's last stage for RK4)."""
        mujoco = _mj()

        after = np.empty_like(states)
        out: dict[str, list[np.ndarray]] = {n: [] for n in task.forward}
        data = self.datas[0]
        for i in range(len(states)):
            mujoco.mj_resetData(self.model, data)
            mujoco.mj_setState(self.model, data, states[i], self.spec)
            data.ctrl[:] = ctrl[i]
            mujoco.mj_step(self.model, data)
            mujoco.mj_rnePostConstraint(self.model, data)
            mujoco.mj_getState(self.model, data, after[i], self.spec)
            for n in task.forward:
                out[n].append(np.array(getattr(data, n)))
        return after, {n: np.stack(v) for n, v in out.items()}

    def at_reset(self, task: _Task, states: np.ndarray) -> dict[str, np.ndarray]:
        """What `task` reads of the data at a reset, as Gymnasium's `set_state`
        leaves it: `mj_forward` at each of `states` (its `reset_forward`, when
        the task says what that gives without running it)."""
        mujoco = _mj()

        if not task.forward:
            return {}
        if task.reset_forward is not None:
            return task.reset_forward(self, states)
        out: dict[str, list[np.ndarray]] = {n: [] for n in task.forward}
        data = self.datas[0]
        for i in range(len(states)):
            mujoco.mj_resetData(self.model, data)
            mujoco.mj_setState(self.model, data, states[i], self.spec)
            mujoco.mj_forward(self.model, data)
            for n in task.forward:
                out[n].append(np.array(getattr(data, n)))
        return {n: np.stack(v) for n, v in out.items()}

    def position(self, task: _Task, states: np.ndarray, forward: dict) -> np.ndarray:
        """The x (and y) position whose change is the forward velocity."""
        if task.position == "xpos":
            return forward["xpos"][:, 1, :2]
        if task.position == "com":
            com = np.einsum("b,nbj->nj", self.mass, forward["xipos"])
            return com[:, :2] / self.mass.sum()
        qpos, _ = self.split(states)
        return qpos[:, :1]


_SIMS: dict[str, _Sim] = {}


def _sim(task_name: str) -> _Sim:
    if task_name not in _SIMS:
        _SIMS[task_name] = _Sim(TASKS[task_name])
    return _SIMS[task_name]


def _floats(bits: Any) -> np.ndarray:
    return np.ascontiguousarray(bits, dtype=np.uint32).view(np.float64)


def _bits(floats: Any) -> np.ndarray:
    return np.ascontiguousarray(floats, dtype=np.float64).view(np.uint32)


def _host_reset(task_name: str, params: dict, noise_qpos, noise_qvel):
    """Reset on the host: `(physics bits, position bits, obs)` per env."""
    task, sim = TASKS[task_name], _sim(task_name)
    noise_qpos, noise_qvel = np.asarray(noise_qpos), np.asarray(noise_qvel)
    with sim.lock:
        return _reset(task, sim, params, noise_qpos, noise_qvel)


def _reset(task: _Task, sim: _Sim, params: dict, noise_qpos, noise_qvel):
    batch = noise_qpos.shape[:-1]
    noise_qpos = np.asarray(noise_qpos, np.float64).reshape(-1, sim.model.nq)
    noise_qvel = np.asarray(noise_qvel, np.float64).reshape(-1, sim.model.nv)
    states = sim.state(sim.qpos0 + noise_qpos, noise_qvel)
    forward = sim.at_reset(task, states)
    position = sim.position(task, states, forward)
    physics = _Physics(*sim.split(states), forward)
    obs = task.observe(params, physics)
    return (
        _bits(states).reshape(*batch, -1),
        _bits(position).reshape(*batch, -1),
        obs.astype(np.float32).reshape(*batch, -1),
    )


def _host_step(task_name: str, params: dict, physics_bits, position_bits, action):
    """One step of every env on the host: `(physics bits, position bits, obs,
    reward, healthy)`."""
    task, sim = TASKS[task_name], _sim(task_name)
    arrays = (np.asarray(physics_bits), np.asarray(position_bits), np.asarray(action))
    with sim.lock:
        return _step(task, sim, params, *arrays)


def _step(task: _Task, sim: _Sim, params: dict, physics_bits, position_bits, action):
    batch = physics_bits.shape[:-1]
    states = _floats(physics_bits).reshape(-1, sim.size)
    before = _floats(position_bits).reshape(len(states), -1)
    ctrl = np.asarray(action, np.float64).reshape(len(states), -1)
    k = task.frame_skip
    if task.forward:
        # Gymnasium reads what MuJoCo computed inside its last substep: all but
        # that substep in C, that one by `mj_step` here, as Gymnasium steps.
        last = sim.rollout(states, ctrl, k - 1) if k > 1 else states
        after, forward = sim.last_substep(task, last, ctrl)
    else:
        after, forward = sim.rollout(states, ctrl, k), {}
    position = sim.position(task, after, forward)
    physics = _Physics(*sim.split(after), forward)
    velocity = (position - before)[:, 0] / sim.dt
    obs = task.observe(params, physics)
    healthy = task.healthy(params, physics)
    reward = task.reward(params, physics, velocity, ctrl, healthy)
    return (
        _bits(after).reshape(*batch, -1),
        _bits(position).reshape(*batch, -1),
        obs.astype(np.float32).reshape(*batch, -1),
        np.asarray(reward, np.float32).reshape(batch),
        np.asarray(healthy, bool).reshape(batch),
    )


# --- the env -------------------------------------------------------------------


class MujocoState(eqx.Module):
    """The state of one MuJoCo env.

    - `physics`: MuJoCo's full physics state (`mjSTATE_FULLPHYSICS`), its
      float64 values as pairs of uint32 (their bytes), so a float32 program
      keeps every bit.
    - `position`: likewise, the position whose change over the next step is
      the forward velocity (Gymnasium reads it from the last forward pass).
    - `steps`: steps taken in this episode (the time limit's count).
    """

    physics: UInt32[Array, " state2"]
    position: UInt32[Array, " position2"]
    steps: Int[Array, ""]


@final
class MujocoEnv(AbstractEnv[MujocoState]):
    """One of Gymnasium's MuJoCo v5 tasks (`envs.make("HalfCheetah-v5")`), with
    Gymnasium's observation, reward, termination (healthy ranges) and time limit.

    **Arguments:**

    - `task`: one of `envs.MUJOCO_TASKS` (Gymnasium's names).
    - `max_steps`: the time limit (episodes are truncated after it; 1000).
    - `**env_params`: the task's Gymnasium parameters, e.g.
      `ctrl_cost_weight`, `healthy_z_range`, `reset_noise_scale`,
      `terminate_when_unhealthy`.
    """

    task: str = eqx.field(static=True)
    params: tuple[tuple[str, Any], ...] = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    sizes: tuple[int, int, int, int] = eqx.field(static=True)  # nq nv nu obs
    ctrl_range: tuple[tuple[float, ...], tuple[float, ...]] = eqx.field(static=True)

    def __init__(self, task: str, max_steps: int = 1000, **env_params: Any):
        if task not in TASKS:
            raise ValueError(
                f"unknown MuJoCo task {task!r}; valid ones: {sorted(TASKS)}"
            )
        if not installed():
            raise ValueError(f"{task} needs MuJoCo, the mujoco extra: {INSTALL}")
        defaults = TASKS[task].params
        unknown = sorted(set(env_params) - set(defaults))
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {unknown} for env {task!r}; valid ones: "
                f"{sorted([*defaults, 'max_steps'])}"
            )
        if type(max_steps) is not int or max_steps <= 0:
            raise ValueError(
                f"{task}: max_steps must be a positive integer, got {max_steps!r}"
            )
        # Ranges may come as lists (a YAML config's); a static field hashes.
        given = {
            k: tuple(v) if isinstance(v, list) else v for k, v in env_params.items()
        }
        params = {**defaults, **given}
        self.task = task
        self.params = tuple(sorted(params.items()))
        self.max_steps = max_steps
        sim = _sim(task)
        m = sim.model
        states = sim.state(sim.qpos0[None], np.zeros((1, m.nv)))
        obs = TASKS[task].observe(
            params,
            _Physics(*sim.split(states), sim.at_reset(TASKS[task], states)),
        )
        self.sizes = (m.nq, m.nv, m.nu, obs.shape[-1])
        low, high = np.asarray(m.actuator_ctrlrange, np.float32).T
        self.ctrl_range = (tuple(map(float, low)), tuple(map(float, high)))

    @property
    def name(self) -> str:
        return self.task

    @property
    def observation_space(self) -> Space:
        shape = (self.sizes[3],)
        return Box(-np.inf, np.inf, shape)

    @property
    def action_space(self) -> Space:
        return Box(np.asarray(self.ctrl_range[0]), np.asarray(self.ctrl_range[1]))

    def _shapes(self) -> tuple[Any, Any]:
        sim = _sim(self.task)
        width = 2 if TASKS[self.task].position else 1
        return (
            jax.ShapeDtypeStruct((2 * sim.size,), jnp.uint32),
            jax.ShapeDtypeStruct((2 * width,), jnp.uint32),
        )

    def reset_env(self, key: PRNGKeyArray) -> tuple[Observation, MujocoState]:
        nq, nv, _, n_obs = self.sizes
        params = dict(self.params)
        scale = params["reset_noise_scale"]
        k_pos, k_vel = jr.split(key)
        noise_qpos = jr.uniform(k_pos, (nq,), minval=-scale, maxval=scale)
        if TASKS[self.task].qvel_noise == "normal":
            noise_qvel = scale * jr.normal(k_vel, (nv,))
        else:
            noise_qvel = jr.uniform(k_vel, (nv,), minval=-scale, maxval=scale)
        physics, position = self._shapes()
        obs_shape = jax.ShapeDtypeStruct((n_obs,), jnp.float32)
        physics, position, obs = jax.pure_callback(
            lambda q, v: _host_reset(self.task, params, q, v),
            (physics, position, obs_shape),
            noise_qpos,
            noise_qvel,
            vmap_method="broadcast_all",
        )
        return obs, MujocoState(physics, position, jnp.array(0, jnp.int32))

    def step_env(
        self, key: PRNGKeyArray, state: MujocoState, action: Action
    ) -> tuple[
        Observation,
        MujocoState,
        Float[Array, ""],
        Bool[Array, ""],
        Bool[Array, ""],
        dict[str, Any],
    ]:
        del key  # MuJoCo's dynamics are deterministic
        params = dict(self.params)
        physics, position = self._shapes()
        out = (
            physics,
            position,
            jax.ShapeDtypeStruct((self.sizes[3],), jnp.float32),
            jax.ShapeDtypeStruct((), jnp.float32),
            jax.ShapeDtypeStruct((), jnp.bool_),
        )
        action = jnp.asarray(action, jnp.float32).reshape(self.sizes[2])
        physics, position, obs, reward, healthy = jax.pure_callback(
            lambda s, p, a: _host_step(self.task, params, s, p, a),
            out,
            state.physics,
            state.position,
            action,
            vmap_method="broadcast_all",
        )
        steps = state.steps + 1
        terminated = ~healthy & params.get("terminate_when_unhealthy", True)
        truncated = steps >= self.max_steps
        return (
            obs,
            MujocoState(physics, position, steps),
            reward,
            terminated,
            truncated,
            {},
        )


# --- frames ----------------------------------------------------------------------

# Gymnasium's module of each task, for its camera (`DEFAULT_CAMERA_CONFIG`).
_MODULES = {
    "HalfCheetah-v5": "half_cheetah_v5",
    "Hopper-v5": "hopper_v5",
    "Walker2d-v5": "walker2d_v5",
    "Ant-v5": "ant_v5",
    "Humanoid-v5": "humanoid_v5",
    "InvertedPendulum-v5": "inverted_pendulum_v5",
    "InvertedDoublePendulum-v5": "inverted_double_pendulum_v5",
}
_LOCOMOTION = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")
_RENDERERS: dict[Any, Any] = {}
HEIGHT, WIDTH = 240, 320


def _renderer(name: str, model: Any, variant: Any = ()) -> Any:
    """One offscreen `HEIGHT x WIDTH` renderer of `model` per env `name` (and
    `variant` of its model) and process (its OpenGL backend: see `_mj`),
    without shadows and reflections, closed at exit, before PyOpenGL is torn
    down. The Playground suite's frames come from here too."""
    key = (name, variant)
    if key not in _RENDERERS:
        import atexit

        mujoco = _mj()
        try:
            renderer = mujoco.Renderer(model, HEIGHT, WIDTH)
        except Exception as e:
            gl = os.environ.get("MUJOCO_GL", "glfw")
            raise RuntimeError(
                f"MuJoCo cannot render {name} with MUJOCO_GL={gl} ({e}); without a "
                "display install OSMesa (apt-get install libosmesa6) or set "
                "MUJOCO_GL=egl"
            ) from None
        # Shadows and reflections are most of a software renderer's time
        # (OSMesa: 53 ms a frame with them, 9 ms without, at 320x240).
        renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
        renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        atexit.register(renderer.close)
        _RENDERERS[key] = renderer
    return _RENDERERS[key]


def _render(env: MujocoEnv, state: MujocoState) -> np.ndarray:
    """A `[240, 320, 3]` frame of one state by MuJoCo's renderer, from
    Gymnasium's camera for the task (following the torso for locomotion),
    without shadows and reflections."""
    import importlib

    from .render import check_one_state

    check_one_state(env, state, getattr(state, "steps", None), "steps")
    mujoco, sim = _mj(), _sim(env.task)
    with sim.lock:
        data = sim.datas[0]
        mujoco.mj_resetData(sim.model, data)
        physics = _floats(np.asarray(state.physics))
        mujoco.mj_setState(sim.model, data, physics, sim.spec)
        mujoco.mj_forward(sim.model, data)
        module = importlib.import_module(f"gymnasium.envs.mujoco.{_MODULES[env.task]}")
        config = getattr(module, "DEFAULT_CAMERA_CONFIG", None) or {}
        camera = mujoco.MjvCamera()
        mujoco.mjv_defaultFreeCamera(sim.model, camera)
        for name, value in config.items():
            if name != "trackbodyid":
                setattr(camera, name, value) if np.ndim(value) == 0 else getattr(
                    camera, name
                ).__setitem__(slice(None), value)
        if env.task in _LOCOMOTION:
            camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
            camera.trackbodyid = 1
        renderer = _renderer(env.task, sim.model)
        renderer.update_scene(data, camera=camera)
        return np.array(renderer.render(), dtype=np.uint8)


def _build(name: str, **env_params: Any) -> MujocoEnv:
    return MujocoEnv(name, **env_params)


register_suite(
    "mujoco",
    Suite(
        lambda: sorted(TASKS) if installed() else [],
        _build,
        extra="mujoco",
        installed=installed,
        owns=lambda name: name in TASKS,
        render=_render,
    ),
)
