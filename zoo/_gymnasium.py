"""A trained agent as a policy of NumPy observations, for Gymnasium's envs."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import PyTree

from ._agent import AbstractAgent
from ._multi_agent import AbstractLearners


class GymnasiumPolicy:
    """A trained agent acting on Gymnasium's observations (NumPy arrays), one
    env's or a vector env's, and returning actions Gymnasium takes. A recurrent
    agent's carry is kept here, one per env, from one call to the next. Make
    one with `zoo.gymnasium_policy`.

    ```python
    agent, state = zoo.pretrained("ppo", "StatelessCartPole-v1")
    policy = zoo.gymnasium_policy(agent, state)
    obs, _ = env.reset(seed=0)
    policy.reset()  # a new episode: the carry starts afresh
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        done = terminated or truncated
    ```

    - `policy(obs)`: the action for one env's observation (an `int` for a
      `Discrete` action space, a `float32` array for a `Box`); for a batch of
      observations (a leading env axis, as a Gymnasium vector env returns
      them), an array of actions.
    - `policy(obs, first=mask)`: a vector env's envs whose observation starts
      an episode (`terminated | truncated` of the step before, with
      `autoreset_mode=SAME_STEP`) have their carry reset before acting.
    - `policy.reset()`: every carry starts afresh (after `env.reset()`).

    Actions are drawn from a key split off `seed` at every call unless
    `greedy` (the default: the greedy policy, as the targets are measured).
    """

    def __init__(
        self,
        agent: AbstractAgent | AbstractLearners,
        state: PyTree,
        *,
        greedy: bool = True,
        seed: int = 0,
    ):
        _check(agent, state)
        self.agent = agent
        self.state = state
        self.greedy = greedy
        self._key = jr.PRNGKey(seed)
        stats = getattr(state, "obs_stats", None)
        self.obs_shape: tuple[int, ...] | None = (
            None if stats is None else tuple(stats.mean.shape)
        )
        self._carry: PyTree = None  # per env, made at the first call
        self._batch: int | None = None

    def reset(self, mask: Any = None) -> None:
        """Start every env's carry afresh; with `mask` (a bool per env of a
        vector env), only those envs'."""
        if mask is None or self._carry is None:
            self._carry = None
            return
        mask = np.asarray(mask, dtype=bool).reshape(-1)
        if mask.shape != (self._batch,):
            raise ValueError(
                f"reset: expected a mask of {self._batch} bools (one per env), got "
                f"shape {mask.shape}"
            )
        if not mask.any():
            return
        self._carry = _reset_where(self.agent, self._carry, jnp.asarray(mask))

    def __call__(self, obs: Any, first: Any = None) -> Any:
        obs = np.asarray(obs)
        single = self.obs_shape is None or obs.shape == self.obs_shape
        batch = obs[None] if single else obs
        if self.obs_shape is not None and batch.shape[1:] != self.obs_shape:
            raise ValueError(
                f"{type(self.agent).__name__} acts on observations of shape "
                f"{self.obs_shape} (or a batch of them, [num_envs, "
                f"{', '.join(map(str, self.obs_shape))}]), got {obs.shape}; is this "
                "the env it was trained on?"
            )
        n = batch.shape[0]
        if self._carry is None or self._batch != n:
            self._batch = n
            carry = self.agent.initial_carry()
            self._carry = jax.tree.map(lambda x: jnp.stack([x] * n), carry)
        if first is not None:
            self.reset(first)
        if batch.dtype == np.float64:  # Gymnasium's default; JAX computes float32
            batch = batch.astype(np.float32)
        self._key, key = jr.split(self._key)
        action, self._carry = _act_batch(
            self.agent, self.state, self._carry, batch, key, self.greedy
        )
        action = np.asarray(action)
        if np.issubdtype(action.dtype, np.integer):
            action = action.astype(np.int64)
        if single:
            return int(action[0]) if action.ndim == 1 else action[0]
        return action


def _check(agent: Any, state: Any) -> None:
    if not isinstance(agent, AbstractAgent):
        raise TypeError(
            f"gymnasium_policy: expected an agent of the zoo (e.g. zoo.PPO()), got "
            f"{type(agent).__name__}; a multi-agent learner (zoo.Shared, "
            "zoo.Independent) plays JaxMARL's envs, not Gymnasium's"
        )
    if hasattr(state, "agent_state"):
        raise TypeError(
            "gymnasium_policy: expected the agent's state, got a runners.TrainState; "
            "pass one seed's agent state, runners.seed_state(result.state, 0)"
            ".agent_state"
        )
    stats = getattr(state, "obs_stats", None)
    if stats is not None and stats.count.ndim > 0:
        raise ValueError(
            "gymnasium_policy: this state has leading seed axes "
            f"{list(stats.count.shape)}; pass one seed's, e.g. "
            "runners.seed_state(result.state, 0).agent_state"
        )


@eqx.filter_jit  # one program per agent and batch shape, shared by policies
def _act_batch(agent, state, carry, obs, key, greedy):
    keys = jr.split(key, obs.shape[0])

    def one(c, o, k):
        action, _, c = agent.act_step(state, c, o, key=k, greedy=greedy)
        return action, c

    return jax.vmap(one)(carry, obs, keys)


@eqx.filter_jit
def _reset_where(agent, carry, mask):
    fresh = agent.initial_carry()

    def where(c, f):
        m = mask.reshape(mask.shape + (1,) * (c.ndim - 1))
        return jnp.where(m, f, c)

    return jax.tree.map(where, carry, fresh)


def gymnasium_policy(
    agent: AbstractAgent | AbstractLearners,
    state: PyTree,
    *,
    greedy: bool = True,
    seed: int = 0,
) -> GymnasiumPolicy:
    """A trained `agent` (with its learnt `state`) as a callable that acts on a
    Gymnasium env's observations and returns actions the env takes; it keeps a
    recurrent agent's carry across steps (`policy.reset()` at `env.reset()`).
    See `zoo.GymnasiumPolicy`.

    ```python
    import gymnasium as gym
    agent, state = zoo.pretrained("ppo", "CartPole-v1")
    policy = zoo.gymnasium_policy(agent, state)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    action = policy(obs)
    ```

    **Raises:** `TypeError` for a multi-agent learner or a `runners.TrainState`,
    `ValueError` for a state with a seed axis; calling it with observations of
    another shape than the agent was trained on raises `ValueError`.
    """
    return GymnasiumPolicy(agent, state, greedy=greedy, seed=seed)


def gymnasium_returns(
    policy: GymnasiumPolicy,
    env: Any,
    *,
    episodes: int = 16,
    seed: int = 0,
    max_steps: int = 100_000,
    wrappers: Any = (),
) -> np.ndarray:
    """The undiscounted return of `episodes` episodes `policy` plays on
    Gymnasium's `env`, in parallel (a synchronous vector env of `episodes`
    copies, each playing its first episode from `reset(seed=seed)`).

    ```python
    policy = zoo.gymnasium_policy(*zoo.pretrained("sac", "Pendulum-v1"))
    zoo.gymnasium_returns(policy, "Pendulum-v1", episodes=8).mean()
    ```

    **Arguments:** `env`: a Gymnasium env id, or a function making the env;
    `wrappers`: Gymnasium wrappers applied to each copy (as `gymnasium.make_vec`
    takes them); `max_steps`: steps after which unfinished episodes count what
    they earned.

    **Raises:** `ValueError` when the env's observations or actions are not
    the agent's (before any episode is played).
    """
    import gymnasium

    if type(episodes) is not int or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    same_step = gymnasium.vector.AutoresetMode.SAME_STEP
    make = (lambda: gymnasium.make(env)) if isinstance(env, str) else env
    wrapped = list(wrappers)

    def one() -> Any:
        e = make()
        for wrap in wrapped:
            e = wrap(e)
        return e

    vec = gymnasium.vector.SyncVectorEnv([one] * episodes, autoreset_mode=same_step)
    try:
        _check_spaces(policy, vec.single_observation_space, vec.single_action_space)
        obs, _ = vec.reset(seed=seed)
        policy.reset()
        returns = np.zeros(episodes)
        done = np.zeros(episodes, dtype=bool)
        first = None
        for _ in range(max_steps):
            obs, reward, terminated, truncated, _ = vec.step(policy(obs, first=first))
            returns += np.where(done, 0.0, reward)
            first = terminated | truncated
            done |= first
            if done.all():
                break
        return returns
    finally:
        vec.close()


def _check_spaces(policy: GymnasiumPolicy, obs_space: Any, action_space: Any) -> None:
    """Refuse a Gymnasium env whose spaces are not the agent's."""
    name = type(policy.agent).__name__
    if policy.obs_shape is not None and tuple(obs_space.shape) != policy.obs_shape:
        raise ValueError(
            f"{name} acts on observations of shape {policy.obs_shape}; this "
            f"Gymnasium env's are {tuple(obs_space.shape)}: not the env it was "
            "trained on"
        )
    space = getattr(policy.state, "action_space", None)
    n = getattr(action_space, "n", None)
    if space is not None:
        ours = getattr(space, "n", None)
        if ours is not None and n is not None and int(n) != ours:
            raise ValueError(
                f"{name} picks one of {ours} actions; this Gymnasium env has {n}"
            )
        if ours is None and n is not None:
            raise ValueError(
                f"{name} takes continuous actions; this Gymnasium env's are "
                f"Discrete({n})"
            )
