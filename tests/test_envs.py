import gymnax
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
from envs._gymnax import gymnax_names

NUM_STEPS = 64


def _rollout(step, reset, action_space_sample, key):
    """Random-action rollout returning obs, rewards, terminations, truncations."""
    k_reset, k_run = jr.split(key)
    obs, state = reset(k_reset)

    def body(carry, k):
        obs, state = carry
        k_act, k_step = jr.split(k)
        action = action_space_sample(k_act)
        obs, state, reward, terminated, truncated, info = step(k_step, state, action)
        return (obs, state), (
            obs,
            reward,
            terminated,
            truncated,
            info["final_observation"],
        )

    _, out = jax.lax.scan(body, (obs, state), jr.split(k_run, NUM_STEPS))
    return out


@pytest.mark.parametrize("name", gymnax_names())
def test_gymnax_adapter_matches_gymnax(name, getkey):
    ours = envs.GymnaxEnv(name)
    theirs, params = gymnax.make(name)
    sample = lambda k: theirs.action_space(params).sample(k)
    key = getkey()

    @jax.jit
    def both(key):
        a = _rollout(ours.step, ours.reset, sample, key)
        b = _rollout(
            lambda k, s, a: theirs.step(k, s, a, params),
            lambda k: theirs.reset(k, params),
            sample,
            key,
        )
        return a, b

    # gymnax's own code relies on implicit rank promotion (e.g. Swimmer-misc).
    with jax.numpy_rank_promotion("allow"):
        a, b = both(key)
    # Same keys, same operations: equal up to float rounding (XLA may fuse the two
    # programs differently).
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
def test_native_envs_match_gymnax(name):
    ours = envs.make(name)
    assert not isinstance(ours, envs.GymnaxEnv)
    theirs, params = gymnax.make(name)
    sample = lambda k: theirs.action_space(params).sample(k)
    # Long enough for several episode ends (CartPole falls, Pendulum truncates).
    key = jr.PRNGKey(3)

    @jax.jit
    def both(key):
        steps = 450

        def run(step, reset):
            k_reset, k_run = jr.split(key)
            obs, state = reset(k_reset)

            def body(carry, k):
                obs, state = carry
                k_act, k_step = jr.split(k)
                obs, state, r, term, trunc, info = step(k_step, state, sample(k_act))
                return (obs, state), (obs, r, term, trunc, info["final_observation"])

            return jax.lax.scan(body, (obs, state), jr.split(k_run, steps))[1]

        return (
            run(ours.step, ours.reset),
            run(
                lambda k, s, a: theirs.step(k, s, a, params),
                lambda k: theirs.reset(k, params),
            ),
        )

    a, b = both(key)
    ends = int(jnp.sum(a[2] | a[3]))
    assert ends >= 2, "the rollout should cross episode boundaries"
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_auto_reset_and_final_observation(getkey):
    env = envs.make("CartPole-v1")
    step = jax.jit(env.step)
    obs, state = env.reset(getkey())
    # Always pushing right makes the pole fall within a few dozen steps.
    for _ in range(200):
        prev = state
        obs, state, reward, terminated, truncated, info = step(getkey(), state, 1)
        if terminated:
            break
    assert bool(terminated) and not bool(truncated)
    final = info["final_observation"]
    # The final observation is the state the episode ended in: beyond a threshold.
    assert (
        abs(float(final[0])) > env.x_threshold
        or abs(float(final[2])) > env.theta_threshold_radians
    )
    # ... while the returned observation starts a new episode.
    assert np.all(np.abs(np.asarray(obs)) <= 0.05)
    assert int(state.time) == 0 and int(prev.time) > 0


def test_truncation_is_not_termination(getkey):
    env = envs.make("Pendulum-v1", max_steps_in_episode=5)
    obs, state = env.reset(getkey())
    flags = []
    for _ in range(5):
        obs, state, _, terminated, truncated, info = env.step(
            getkey(), state, jnp.zeros(1)
        )
        flags.append((bool(terminated), bool(truncated)))
    assert flags == [(False, False)] * 4 + [(False, True)]
    assert int(state.time) == 0


def test_episode_statistics(getkey):
    env = envs.EpisodeStatistics(envs.make("CartPole-v1"))
    step = jax.jit(env.step)
    obs, state = env.reset(getkey())
    lengths = []
    for _ in range(300):
        obs, state, reward, term, trunc, info = step(getkey(), state, 0)
        if info["episode_done"]:
            # CartPole pays 1 per step, so return equals length.
            assert float(info["episode_return"]) == int(info["episode_length"])
            lengths.append(int(info["episode_length"]))
            assert int(state.episode_length) == 0
    assert len(lengths) >= 3 and all(8 <= n <= 100 for n in lengths)


def test_flatten_observation(getkey):
    env = envs.FlattenObservation(envs.make("Breakout-MinAtar"))
    assert env.observation_space.shape == (400,)
    obs, state = env.reset(getkey())
    assert obs.shape == (400,) and obs.dtype == jnp.float32
    obs, *_ = env.step(getkey(), state, 0)
    assert obs.shape == (400,)


def test_normalize_observation_keeps_statistics_across_episodes(getkey):
    env = envs.NormalizeObservation(envs.make("Pendulum-v1", max_steps_in_episode=10))
    obs, state = env.reset(getkey())
    step = jax.jit(env.step)
    seen = []
    for _ in range(60):
        obs, state, _, _, trunc, info = step(getkey(), state, jnp.ones(1))
        seen.append(np.asarray(obs))
    assert float(state.count) == 61.0  # one reset plus 60 steps; never zeroed
    # Normalised observations are roughly standardised.
    seen = np.stack(seen)
    assert np.all(np.abs(seen.mean(axis=0)) < 1.0)
    assert np.all(np.abs(seen) <= env.clip)


def test_clip_action(getkey):
    env = envs.ClipAction(envs.make("Pendulum-v1"))
    obs, state = env.reset(getkey())
    _, state, *_ = env.step(getkey(), state, jnp.array([100.0]))
    assert float(state.last_u) == 2.0


def test_make_unknown_name_lists_close_matches():
    with pytest.raises(ValueError, match="Did you mean 'CartPole-v1'"):
        envs.make("Cartpole-v1")
    with pytest.raises(ValueError, match="unknown parameter"):
        envs.make("CartPole-v1", gravitee=3.0)


def test_names_cover_gymnax_and_probes():
    names = envs.names()
    assert "CartPole-v1" in names and "Breakout-MinAtar" in names
    assert "probe/TwoStepDiscount" in names
    assert "MNISTBandit-bsuite" not in names


@pytest.mark.parametrize("name", sorted(envs.PROBES))
def test_probes_follow_the_protocol(name, getkey):
    env = envs.make(name)
    obs, state = env.reset(getkey())
    assert obs.shape == env.observation_space.shape == (1,)
    action = env.action_space.sample(key=getkey())
    obs, state, reward, term, trunc, info = env.step(getkey(), state, action)
    assert reward.shape == () and term.dtype == jnp.bool_
    assert info["final_observation"].shape == (1,)
