"""Gymnasium both ways: our envs as Gymnasium envs (`envs.to_gymnasium`), and
trained agents acting on Gymnasium's own envs (`zoo.gymnasium_policy`)."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs
import zoo


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar"])
def test_our_envs_pass_gymnasiums_checker(name):
    genv = envs.to_gymnasium(envs.make(name))
    assert isinstance(genv, gym.Env)
    with warnings.catch_warnings():
        # Pendulum's torque is in [-2, 2]: Gymnasium's checker recommends [-1, 1]
        # (a warning, not a failure); any other warning fails the test.
        warnings.filterwarnings(
            "ignore", message=".*recommend using a symmetric and normalized space"
        )
        check_env(genv, skip_render_check=True)
    # The same episode start as our env's reset with the key it draws.
    genv.reset(seed=3)
    again = envs.to_gymnasium(envs.make(name))
    np.testing.assert_array_equal(genv.reset(seed=3)[0], again.reset(seed=3)[0])


def test_the_single_env_ends_on_its_last_observation_and_waits_for_reset():
    genv = envs.to_gymnasium(envs.make("CartPole-v1"))
    obs, _ = genv.reset(seed=0)
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, _ = genv.step(1)  # always push right
        assert reward == 1.0
        steps += 1
    # Pushed one way, the pole falls within a few dozen steps: the last
    # observation is past a termination bound (|x| > 2.4 or |angle| > 12 deg).
    assert terminated and not truncated and steps < 100
    assert abs(obs[0]) > 2.4 or abs(obs[2]) > 12 * 2 * np.pi / 360


def test_the_vector_env_resets_finished_envs_in_the_same_step():
    vec = envs.to_gymnasium(envs.make("CartPole-v1"), num_envs=4)
    assert vec.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (4, 4) and obs in vec.observation_space
    vec.action_space.seed(0)
    ended = 0
    for _ in range(200):
        obs, reward, terminated, truncated, info = vec.step(vec.action_space.sample())
        assert obs in vec.observation_space
        np.testing.assert_array_equal(reward, 1.0)
        done = terminated | truncated
        if done.any():
            np.testing.assert_array_equal(info["_final_obs"], done)
            final = info["final_obs"][done]
            # Each finished env's last observation is past a bound; the one it
            # goes on from is a fresh start, near the middle.
            past = (np.abs(final[:, 0]) > 2.4) | (np.abs(final[:, 2]) > 0.2094)
            assert past.all()
            assert (np.abs(obs[done]) <= 0.05).all()
            ended += int(done.sum())
    assert ended > 10  # random actions end episodes after ~20 steps


def test_bad_input_to_the_gymnasium_adapters():
    with pytest.raises(ValueError, match="num_envs must be an int >= 1"):
        envs.to_gymnasium(envs.make("CartPole-v1"), num_envs=0)
    with pytest.raises(ValueError, match="multi-agent env"):
        envs.to_gymnasium(envs.make_multi("marl/MatrixGame"))  # pyright: ignore
    agent, state = zoo.pretrained("ppo", "CartPole-v1")
    policy = zoo.gymnasium_policy(agent, state)
    with pytest.raises(ValueError, match=r"observations of shape \(4,\).*got \(3,\)"):
        policy(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"shape \(4,\); this Gymnasium env's"):
        zoo.gymnasium_returns(policy, "Pendulum-v1", episodes=1)
    with pytest.raises(TypeError, match="multi-agent learner"):
        zoo.gymnasium_policy(zoo.Shared(zoo.PPO()), state)  # pyright: ignore


# Gymnasium's env for each classic-control env of the zoo: the same id, or for
# a partially observable variant the base env with only the dimensions ours
# keeps.
_GYMNASIUM = {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1"}
_GYMNASIUM |= {"MountainCarContinuous-v0"}
_BASE = {"StatelessCartPole-v1": "CartPole-v1", "StatelessPendulum-v1": "Pendulum-v1"}
SHIPPED = [p for p in zoo.pretrained() if p[1] in _GYMNASIUM or p[1] in _BASE]


def _masked(keep):
    def wrap(genv):
        low, high = genv.observation_space.low, genv.observation_space.high
        space = gym.spaces.Box(low[keep], high[keep], dtype=np.float32)
        return gym.wrappers.TransformObservation(genv, lambda o: o[keep], space)

    return wrap


@pytest.mark.parametrize("pair", SHIPPED, ids=lambda p: f"{p[0]}:{p[1]}")
def test_every_shipped_classic_control_agent_reaches_its_target_on_gymnasium(pair):
    """Through `zoo.gymnasium_policy`, on Gymnasium's own env (8 episodes from
    `reset(seed=0)`, played in a vector env): the shipped agent's target. The
    recurrent agents (the Stateless envs) carry their memory across steps."""
    name, env_name = pair
    agent, state = zoo.pretrained(name, env_name)
    wrappers = [_masked(list(envs.POMDP[env_name][1]))] if env_name in _BASE else []
    policy = zoo.gymnasium_policy(agent, state)
    returns = zoo.gymnasium_returns(
        policy, _BASE.get(env_name, env_name), episodes=8, wrappers=wrappers
    )
    assert returns.mean() >= zoo.provenance(name, env_name)["target"]


def test_a_single_env_policy_carries_a_recurrent_agents_memory():
    """One Gymnasium env, the policy called per observation and reset at each
    episode: a recurrent PPO balances the stateless pole, which it cannot
    without its carry; without `reset` the carry of the last episode leaks,
    and a carry kept afresh at every step (memoryless) fails."""
    agent, state = zoo.pretrained("ppo", "StatelessCartPole-v1")
    assert agent.recurrent
    genv = _masked([0, 2])(gym.make("CartPole-v1"))

    def episode(policy, forget=False):
        obs, _ = genv.reset(seed=1)
        policy.reset()
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = genv.step(policy(obs))
            if forget:
                policy.reset()
            total, done = total + float(reward), terminated or truncated
        return total

    policy = zoo.gymnasium_policy(agent, state)
    assert episode(policy) == 500.0
    assert episode(policy, forget=True) < 100.0
    # Sampled actions (not greedy) come from the policy's key: repeatable.
    a = zoo.gymnasium_policy(agent, state, greedy=False, seed=3)
    b = zoo.gymnasium_policy(agent, state, greedy=False, seed=3)
    obs = np.zeros(2, np.float32)
    assert [a(obs) for _ in range(20)] == [b(obs) for _ in range(20)]
    assert isinstance(a(obs), int)


def test_gymnasiums_vector_env_takes_our_env():
    """Gymnasium's `SyncVectorEnv` over copies of `envs.to_gymnasium(env)`
    (it resets each copy when its episode ends): the shipped PPO balances our
    CartPole for the full 500 steps there too."""
    agent, state = zoo.pretrained("ppo", "CartPole-v1")
    policy = zoo.gymnasium_policy(agent, state)
    returns = zoo.gymnasium_returns(
        policy, lambda: envs.to_gymnasium(envs.make("CartPole-v1")), episodes=4
    )
    np.testing.assert_array_equal(returns, 500.0)
