"""Adapter for MuJoCo Playground's DM Control suite (`pip install -e '.[playground]'`).

MuJoCo Playground (Zakka et al., 2025; the `playground` package) writes its
tasks in JAX on MJX, MuJoCo's accelerator port, so the physics runs inside the
compiled program: on a GPU, thousands of envs step in parallel. This is the
accelerator route; on a CPU, `envs/_mujoco.py`'s route (MuJoCo's C engine
through one callback) takes about 8 times as many physics steps a second
(docs/envs.md has the figures).

The adapter takes Playground's raw env, not its Brax training wrapper, and
adds what our protocol asks for itself: `terminated` is Playground's `done`
(in the DM Control suite, only a diverged simulation ends an episode);
`truncated` comes at `episode_length` (1,000 steps by default, counted in
physics control steps as Brax's wrapper counts them); auto-reset is
`AbstractEnv.step`'s. `action_repeat` repeats each action and sums the
rewards, as Brax's wrapper does.

Offered: the DM Control suite (`playground/CheetahRun`, ...). Playground's
locomotion and manipulation tasks are not: their robot models come from
`mujoco_menagerie`, which Playground clones from GitHub the first time one is
built.
"""

import functools
from typing import Any, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int, PRNGKeyArray

from ._env import AbstractEnv, Action, Observation
from ._registry import Suite, register_suite
from ._spaces import Box, Space

PREFIX = "playground/"
INSTALL = "pip install -e '.[playground]'"
# Config fields the adapter reads itself, or that Playground's raw envs cannot
# honour here.
_OURS = ("episode_length", "action_repeat")
_REFUSED = {
    "vision": "pixel observations need Madrona's batch renderer, which is not "
    "offered; leave vision=False",
}
# MJX's implementations that the adapter runs. MuJoCo Warp (`"warp"`,
# Playground's default) keeps its contact buffers shared across the batch
# rather than per env, so a per-env `vmap` whose auto-reset selects between
# two states leaks its tracers (jax.errors.UnexpectedTracerError, mujoco-mjx
# 3.17); Playground's own training wrapper avoids it by resetting batched.
IMPLS = ("jax",)


def installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("mujoco_playground") is not None


def playground_names() -> list[str]:
    """`playground/<name>` for each task of Playground's DM Control suite, or
    none without the `playground` extra."""
    if not installed():
        return []
    from mujoco_playground import dm_control_suite

    return [PREFIX + n for n in dm_control_suite.ALL_ENVS]


@functools.cache
def _load(task: str, overrides: tuple[tuple[str, Any], ...]) -> Any:
    """Playground's env for `task` with config `overrides`, built once per
    process: building one compiles its MJCF model and puts it on the device."""
    from mujoco_playground import dm_control_suite

    return dm_control_suite.load(task, config_overrides=dict(overrides))


def _theirs() -> Any:
    """The context Playground's code runs in: MJX relies on NumPy's implicit
    rank promotion, which a program may have set to raise (our tests do)."""
    return jax.numpy_rank_promotion("allow")


# Episodes start from one of this many states, drawn once per task (below).
STARTS = 1024


@functools.cache
def _starts(task: str, overrides: tuple[tuple[str, Any], ...]) -> Any:
    """`STARTS` states of Playground's own `reset`, from a fixed key, as host
    arrays (constants of the compiled program).

    Most of the suite's resets settle the model for hundreds of physics steps
    (CheetahRun: 200), and a compiled `step` computes the reset of every env at
    every step, selecting it where an episode ended: it would cost 200 steps'
    physics a step. So starts are drawn from this bank instead, uniformly by the
    reset's key. Brax's and Playground's training wrappers pay for it otherwise:
    each env restarts from its one cached first state."""
    with jax.ensure_compile_time_eval(), _theirs():
        keys = jax.random.split(jax.random.PRNGKey(0), STARTS)
        bank = jax.jit(jax.vmap(_load(task, overrides).reset))(keys)
        return jax.tree.map(np.asarray, bank)


class PlaygroundState(eqx.Module):
    """Playground's own state (`mujoco_playground.State`: MJX's data, the
    observation, reward, done, metrics and info, whose `rng` is the task's
    key) and the control steps taken this episode."""

    inner: Any
    steps: Int[Array, ""]


@final
class PlaygroundEnv(AbstractEnv[PlaygroundState]):
    """One task of MuJoCo Playground's DM Control suite.

    **Arguments:**

    - `task`: a name of `mujoco_playground.dm_control_suite.ALL_ENVS`, e.g.
      `"CheetahRun"` (`envs.make("playground/CheetahRun")`).
    - `**env_params`: overrides of the task's config
      (`dm_control_suite.get_default_config(task)`), e.g. `episode_length`,
      `action_repeat`, `ctrl_dt`. MJX's `impl` is `"jax"`, its JAX
      implementation (see `IMPLS` for why not Playground's default, MuJoCo
      Warp).
    """

    task: str = eqx.field(static=True)
    overrides: tuple[tuple[str, Any], ...] = eqx.field(static=True)
    episode_length: int = eqx.field(static=True)
    action_repeat: int = eqx.field(static=True)
    # Playground's `observation_size` traces its `reset` each time it is read
    # (1.4 s for CheetahRun): read once, here.
    obs_size: int = eqx.field(static=True)

    def __init__(self, task: str, **env_params: Any):
        if not installed():
            raise ValueError(
                f"{PREFIX}{task} needs MuJoCo Playground, the playground extra: "
                f"{INSTALL}"
            )
        from mujoco_playground import dm_control_suite

        if task not in dm_control_suite.ALL_ENVS:
            raise ValueError(
                f"unknown Playground task {task!r}; valid ones: "
                f"{sorted(dm_control_suite.ALL_ENVS)} (the DM Control suite)"
            )
        config = dm_control_suite.get_default_config(task)
        unknown = sorted(set(env_params) - set(config))
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {unknown} for env {PREFIX}{task}; valid "
                f"ones: {sorted(set(config) - set(_REFUSED))}"
            )
        for name, why in _REFUSED.items():
            if env_params.get(name):
                raise ValueError(f"{PREFIX}{task}: {name}={env_params[name]!r}: {why}")
        impl = env_params.get("impl", "jax")
        if impl not in IMPLS:
            raise ValueError(
                f"{PREFIX}{task}: impl={impl!r} is not offered; valid ones: "
                f"{list(IMPLS)} (MuJoCo Warp shares its contact buffers across "
                "the batch, which a per-env vmap with auto-reset cannot select)"
            )
        for name in _OURS:
            value = env_params.get(name, config[name])
            if type(value) is not int or value <= 0:
                raise ValueError(
                    f"{PREFIX}{task}: {name} must be a positive integer, got {value!r}"
                )
        # Lists (a YAML config's) become tuples: a static field hashes.
        given = {
            k: tuple(v) if isinstance(v, list) else v
            for k, v in {**env_params, "impl": impl}.items()
            if k not in _OURS
        }
        self.task = task
        self.overrides = tuple(sorted(given.items()))
        self.episode_length = env_params.get("episode_length", config.episode_length)
        self.action_repeat = env_params.get("action_repeat", config.action_repeat)
        with _theirs():
            size = self.env.observation_size
        if not isinstance(size, int):
            raise ValueError(
                f"{PREFIX}{task} observes a dict {size}; only flat observations "
                "are offered"
            )
        self.obs_size = size

    @property
    def env(self) -> Any:
        """Playground's raw env (`mujoco_playground.MjxEnv`)."""
        return _load(self.task, self.overrides)

    @property
    def starts(self) -> Any:
        """The bank of `STARTS` start states episodes begin from (`_starts`)."""
        return _starts(self.task, self.overrides)

    @property
    def name(self) -> str:
        return PREFIX + self.task

    @property
    def observation_space(self) -> Space:
        return Box(-np.inf, np.inf, (self.obs_size,))

    @property
    def action_space(self) -> Space:
        model = self.env.mj_model
        low, high = np.asarray(model.actuator_ctrlrange, np.float32).T
        unlimited = ~np.asarray(model.actuator_ctrllimited, bool)
        low[unlimited], high[unlimited] = -np.inf, np.inf
        return Box(low, high)

    def reset_env(self, key: PRNGKeyArray) -> tuple[Observation, PlaygroundState]:
        key_start, key_task = jax.random.split(key)
        start = jax.random.randint(key_start, (), 0, STARTS)
        inner = jax.tree.map(lambda a: jnp.asarray(a)[start], self.starts)
        # The episode's own noise stream, not the bank entry's.
        inner = inner.replace(info={**inner.info, "rng": key_task})
        return inner.obs, PlaygroundState(inner, jnp.zeros((), jnp.int32))

    def step_env(self, key: PRNGKeyArray, state: PlaygroundState, action: Action):
        # Playground's tasks draw their noise from `info["rng"]`; `key` is unused.
        del key
        action = jnp.asarray(action, jnp.float32)

        def once(inner: Any, _: None) -> tuple[Any, Array]:
            with _theirs():
                inner = self.env.step(inner, action)
            return inner, inner.reward

        inner, rewards = jax.lax.scan(once, state.inner, None, self.action_repeat)
        steps = state.steps + 1
        terminated = inner.done > 0
        truncated = ~terminated & (steps * self.action_repeat >= self.episode_length)
        return (
            inner.obs,
            PlaygroundState(inner, steps),
            jnp.sum(rewards),
            terminated,
            truncated,
            {},
        )


def _render(env: PlaygroundEnv, state: PlaygroundState) -> np.ndarray:
    """A `[240, 320, 3]` frame of one state by MuJoCo's renderer (the one
    `_mujoco.py` keeps per task), from the task's first camera (DM Control's
    tracking view), as Playground's own `render` draws it: positions,
    velocities and mocap bodies copied into MuJoCo's data, then `mj_forward`."""
    from ._mujoco import _mj, _renderer
    from .render import check_one_state

    check_one_state(env, state, getattr(state, "steps", None), "steps")
    mujoco = _mj()
    model = env.env.mj_model
    renderer = _renderer(env.name, model, env.overrides)
    inner = jax.tree.map(np.asarray, state.inner.data)
    data = mujoco.MjData(model)
    data.qpos, data.qvel = inner.qpos, inner.qvel
    data.mocap_pos, data.mocap_quat = inner.mocap_pos, inner.mocap_quat
    mujoco.mj_forward(model, data)
    renderer.update_scene(data, camera=0 if model.ncam else -1)
    return np.array(renderer.render(), dtype=np.uint8)


register_suite(
    "playground",
    Suite(
        playground_names,
        lambda name, **p: PlaygroundEnv(name.removeprefix(PREFIX), **p),
        prefix=PREFIX,
        extra="playground",
        installed=installed,
        render=_render,
    ),
)
