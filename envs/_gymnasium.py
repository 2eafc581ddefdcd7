"""One of our envs as a Gymnasium env (`envs.to_gymnasium`): Gymnasium's tools
(wrappers, `check_env`, users' loops) take it, while it still steps as a
compiled JAX function."""

from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from ._env import AbstractEnv
from ._multi_agent import AbstractMultiAgentEnv
from ._spaces import Box, Discrete


def gymnasium_space(space: Any) -> Any:
    """Our `Box` or `Discrete` as Gymnasium's.

    **Raises:** `ValueError` for another kind of space."""
    import gymnasium

    if isinstance(space, Discrete):
        return gymnasium.spaces.Discrete(space.n)
    if isinstance(space, Box):
        dtype = np.dtype(space.dtype)
        return gymnasium.spaces.Box(
            space.low.astype(dtype), space.high.astype(dtype), space.shape, dtype.type
        )
    raise ValueError(
        f"to_gymnasium: no Gymnasium space for {space!r}; Box and Discrete spaces "
        "convert"
    )


def _gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError:  # pragma: no cover - gymnax brings it
        raise ImportError(
            "to_gymnasium needs Gymnasium: pip install 'gymnasium>=1.3'"
        ) from None
    return gymnasium


def to_gymnasium(
    env: AbstractEnv | AbstractMultiAgentEnv, *, num_envs: int | None = None
) -> Any:
    """`env` as a `gymnasium.Env`, or with `num_envs` a `gymnasium.vector.VectorEnv`
    of that many copies stepped together in one vmapped call.

    ```python
    genv = envs.to_gymnasium(envs.make("CartPole-v1"))
    gymnasium.utils.env_checker.check_env(genv)
    obs, info = genv.reset(seed=0)
    obs, reward, terminated, truncated, info = genv.step(1)
    vec = envs.to_gymnasium(envs.make("Breakout-MinAtar"), num_envs=8)
    ```

    - Seeding follows Gymnasium: `reset(seed=s)` reseeds the env's `np_random`,
      and each reset draws the episode's JAX key from it, so seeded resets
      repeat and unseeded ones go on.
    - The single env ends an episode on the observation it ended on; call
      `reset()` to start the next, as Gymnasium expects.
    - The vector env resets finished envs in the same step
      (`autoreset_mode=SAME_STEP`, as our envs do): `info["final_obs"]` holds
      the observations they ended on, `info["_final_obs"]` which envs ended.
    - Observations, rewards and flags come back as NumPy values (one device
      transfer per step); an action may be a NumPy value or a Python number.

    **Raises:** `ValueError` for a multi-agent env, a space other than `Box`
    or `Discrete`, or `num_envs` below 1.
    """
    if isinstance(env, AbstractMultiAgentEnv):
        raise ValueError(
            f"to_gymnasium: {env.name} is a multi-agent env; Gymnasium's API is "
            "single-agent (JaxMARL's envs keep their own API)"
        )
    if not isinstance(env, AbstractEnv):
        raise TypeError(
            f"to_gymnasium: expected one of our envs (envs.make(...)), got "
            f"{type(env).__name__}"
        )
    if num_envs is None:
        return _single_env_class()(env)
    if type(num_envs) is not int or num_envs < 1:
        raise ValueError(
            f"to_gymnasium: num_envs must be an int >= 1, got {num_envs!r}"
        )
    return _vector_env_class()(env, num_envs)


def _episode_key(rng: np.random.Generator) -> jax.Array:
    return jr.PRNGKey(int(rng.integers(2**31)))


_CLASSES: dict[str, type] = {}


def _single_env_class() -> type:
    if "single" in _CLASSES:
        return _CLASSES["single"]
    gymnasium = _gymnasium()

    class GymnasiumEnv(gymnasium.Env):
        """One of our envs as a `gymnasium.Env` (`envs.to_gymnasium`)."""

        metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

        def __init__(self, env: AbstractEnv):
            self.env = env
            self.observation_space = gymnasium_space(env.observation_space)
            self.action_space = gymnasium_space(env.action_space)
            self._action_dtype = np.dtype(env.action_space.dtype)
            self._reset = jax.jit(env.reset)
            self._step = jax.jit(_step_to_end(env))
            self._key: jax.Array | None = None
            self._state: Any = None

        def reset(self, *, seed: int | None = None, options: dict | None = None):
            super().reset(seed=seed)
            self._key, key = jr.split(_episode_key(self.np_random))
            obs, self._state = self._reset(key)
            return np.asarray(obs), {}

        def step(self, action: Any):
            if self._state is None or self._key is None:
                raise RuntimeError("call reset() before step()")
            self._key, key = jr.split(self._key)
            action = np.asarray(action, dtype=self._action_dtype)
            obs, self._state, reward, terminated, truncated = self._step(
                key, self._state, action
            )
            # What Gymnasium returns comes to the host; the state stays put.
            obs, reward, terminated, truncated = jax.device_get(
                (obs, reward, terminated, truncated)
            )
            return np.asarray(obs), float(reward), bool(terminated), bool(truncated), {}

        def __repr__(self) -> str:
            return f"GymnasiumEnv({self.env.name})"

    _CLASSES["single"] = GymnasiumEnv
    return GymnasiumEnv


def _step_to_end(env: AbstractEnv) -> Any:
    """`env.step`, returning the observation an episode ended on when it ends
    (Gymnasium's single env does not reset by itself)."""

    def step(key, state, action):
        obs, state, reward, terminated, truncated, info = env.step(key, state, action)
        done = terminated | truncated
        obs = jax.tree.map(
            lambda last, first: jnp.where(done, last, first),
            info["final_observation"],
            obs,
        )
        return obs, state, reward, terminated, truncated

    return step


def _vector_env_class() -> type:
    if "vector" in _CLASSES:
        return _CLASSES["vector"]
    gymnasium = _gymnasium()
    from gymnasium.vector import AutoresetMode
    from gymnasium.vector.utils import batch_space

    class GymnasiumVectorEnv(gymnasium.vector.VectorEnv):
        """`num_envs` copies of one of our envs as a `gymnasium.vector.VectorEnv`,
        stepped in one vmapped call (`envs.to_gymnasium(env, num_envs=n)`)."""

        metadata: ClassVar[dict[str, Any]] = {
            "render_modes": [],
            "autoreset_mode": AutoresetMode.SAME_STEP,
        }

        def __init__(self, env: AbstractEnv, num_envs: int):
            self.env = env
            self.num_envs = num_envs
            self.single_observation_space = gymnasium_space(env.observation_space)
            self.single_action_space = gymnasium_space(env.action_space)
            self.observation_space = batch_space(
                self.single_observation_space, num_envs
            )
            self.action_space = batch_space(self.single_action_space, num_envs)
            self._action_dtype = np.dtype(env.action_space.dtype)
            self._reset = jax.jit(jax.vmap(env.reset))
            self._step = jax.jit(jax.vmap(env.step))
            self._key: jax.Array | None = None
            self._state: Any = None

        def reset(
            self, *, seed: int | list[int] | None = None, options: dict | None = None
        ):
            if isinstance(seed, list):
                seed = seed[0]  # one generator draws every env's key
            super().reset(seed=seed)
            self._key, key = jr.split(_episode_key(self.np_random))
            obs, self._state = self._reset(jr.split(key, self.num_envs))
            return np.asarray(obs), {}

        def step(self, actions: Any):
            if self._state is None or self._key is None:
                raise RuntimeError("call reset() before step()")
            self._key, key = jr.split(self._key)
            actions = np.asarray(actions, dtype=self._action_dtype)
            keys = jr.split(key, self.num_envs)
            obs, self._state, reward, terminated, truncated, info = self._step(
                keys, self._state, actions
            )
            obs, reward, terminated, truncated, final = jax.device_get(
                (obs, reward, terminated, truncated, info["final_observation"])
            )
            done = np.asarray(terminated | truncated)
            infos: dict[str, Any] = {}
            if done.any():
                infos = {"final_obs": np.asarray(final), "_final_obs": done}
            return (
                np.asarray(obs),
                np.asarray(reward),
                np.asarray(terminated),
                np.asarray(truncated),
                infos,
            )

        def __repr__(self) -> str:
            return f"GymnasiumVectorEnv({self.env.name}, num_envs={self.num_envs})"

    _CLASSES["vector"] = GymnasiumVectorEnv
    return GymnasiumVectorEnv
