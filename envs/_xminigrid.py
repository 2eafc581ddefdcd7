"""Adapter for XLand-MiniGrid's MiniGrid tasks (`pip install -e '.[xminigrid]'`).

XLand-MiniGrid (Nikulin et al., 2024; the `xminigrid` package) is a JAX
re-implementation of MiniGrid: grid worlds the agent sees through a small,
egocentric window, so most of its tasks are partially observable. Its
`MiniGrid-Memory*` tasks need memory outright: a cue shown at the start decides
which of two objects at the end of a corridor pays.
"""

from typing import Any, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray

from ._env import AbstractEnv, Action, Observation
from ._registry import Suite, register_suite
from ._spaces import Box, Discrete, Space

PREFIX = "xminigrid/"
INSTALL = "pip install -e '.[xminigrid]'"


def installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("xminigrid") is not None


def xminigrid_names() -> list[str]:
    """`xminigrid/<name>` for each of XLand-MiniGrid's MiniGrid tasks, or none
    without the `xminigrid` extra. Its `XLand-MiniGrid-*` meta-RL tasks are not
    offered: they sample rulesets from benchmarks it downloads."""
    if not installed():
        return []
    # Importing the module runs xminigrid's __init__, which registers the tasks.
    from xminigrid.registration import registered_environments

    return [PREFIX + n for n in registered_environments() if n.startswith("MiniGrid-")]


@final
class XMiniGridEnv(AbstractEnv[Any]):
    """One of XLand-MiniGrid's MiniGrid tasks, with its parameters in the module.

    The observation is the agent's view, `view_size x view_size` cells, each
    cell one-hot over tile kinds and over colours: a `[view, view, tiles +
    colours]` float image (binary channels, as MinAtar's), so the CNN and
    recurrent torsos take it as they take MinAtar's. An episode ends in
    termination at the goal (or at the wrong object of a Memory task) and in
    truncation at `max_steps`. The reward, XLand-MiniGrid's, is
    `1 - 0.9 * steps / max_steps` at the goal and 0 elsewhere.

    **Arguments:**

    - `env_id`: a name of `xminigrid.registered_environments()` starting
      `"MiniGrid-"`, e.g. `"MiniGrid-MemoryS8"`.
    - `**env_params`: overrides of its `EnvParams` fields, e.g. `max_steps`,
      `view_size` (odd).
    """

    env: Any = eqx.field(static=True)
    params: Any = eqx.field(static=True)
    env_id: str = eqx.field(static=True)
    num_tiles: int = eqx.field(static=True)
    num_colors: int = eqx.field(static=True)

    def __init__(self, env_id: str, **env_params: Any):
        if not installed():
            raise ValueError(
                f"{PREFIX}{env_id} needs XLand-MiniGrid, the xminigrid extra: {INSTALL}"
            )
        from xminigrid.core.constants import NUM_COLORS, NUM_TILES
        from xminigrid.registration import make

        valid = [n.removeprefix(PREFIX) for n in xminigrid_names()]
        if env_id not in valid:
            raise ValueError(
                f"unknown XLand-MiniGrid task {env_id!r}; valid ones: {valid}"
            )
        env, params = make(env_id)
        if env_params:
            fields = sorted(set(params.__dataclass_fields__) - {"render_mode"})
            unknown = sorted(set(env_params) - set(fields))
            if unknown:
                raise ValueError(
                    f"unknown parameter(s) {unknown} for {PREFIX}{env_id}; "
                    f"valid ones: {fields}"
                )
            params = params.replace(**env_params)
        view = params.view_size
        if not isinstance(view, int) or view < 1 or view % 2 == 0:
            raise ValueError(
                f"{PREFIX}{env_id}: view_size must be a positive odd number, "
                f"got {view!r}"
            )
        self.env = env
        self.params = params
        self.env_id = env_id
        self.num_tiles = int(NUM_TILES)
        self.num_colors = int(NUM_COLORS)

    @property
    def name(self) -> str:
        return PREFIX + self.env_id

    @property
    def observation_space(self) -> Space:
        view = self.params.view_size
        shape = (view, view, self.num_tiles + self.num_colors)
        return Box(np.zeros(shape, np.float32), np.ones(shape, np.float32), shape)

    @property
    def action_space(self) -> Space:
        return Discrete(int(self.env.num_actions(self.params)))

    def _observe(self, grid: jax.Array) -> Observation:
        tiles = jax.nn.one_hot(grid[..., 0], self.num_tiles, dtype=jnp.float32)
        colors = jax.nn.one_hot(grid[..., 1], self.num_colors, dtype=jnp.float32)
        return jnp.concatenate([tiles, colors], axis=-1)

    def reset_env(self, key: PRNGKeyArray) -> tuple[Observation, Any]:
        timestep = self.env.reset(self.params, key)
        return self._observe(timestep.observation), timestep

    def step_env(self, key: PRNGKeyArray, state: Any, action: Action):
        # XLand-MiniGrid's step is deterministic given its state; `key` is unused.
        del key
        timestep = self.env.step(self.params, state, jnp.asarray(action, jnp.int32))
        done = timestep.last()
        terminated = done & (timestep.discount == 0.0)
        truncated = done & ~terminated
        return (
            self._observe(timestep.observation),
            timestep,
            jnp.asarray(timestep.reward, jnp.float32),
            terminated,
            truncated,
            {},
        )


def _render(env: XMiniGridEnv, timestep: Any) -> np.ndarray:
    """XLand-MiniGrid's own drawing of one state (32 pixels per cell, the
    agent's view shaded)."""
    from .render import check_one_state

    step_num = getattr(getattr(timestep, "state", None), "step_num", None)
    check_one_state(env, timestep, step_num, "step_num")
    timestep = jax.tree.map(np.asarray, timestep)
    frame = env.env.render(env.params.replace(render_mode="rgb_array"), timestep)
    return np.asarray(frame, dtype=np.uint8)


register_suite(
    "xminigrid",
    Suite(
        xminigrid_names,
        lambda name, **p: XMiniGridEnv(name.removeprefix(PREFIX), **p),
        prefix=PREFIX,
        extra="xminigrid",
        installed=installed,
        render=_render,
    ),
)
