"""MuJoCo Playground's DM Control suite (`envs/_playground.py`): the same
transitions as Playground's own raw env, our time limit and auto-reset, a
state the runners train, checkpoint and resume, frames, and one-line errors."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import zoo
from envs import _playground

if not _playground.installed():
    pytest.skip("the playground extra is not installed", allow_module_level=True)

# Cartpole compiles in seconds on MJX; its swing-up starts anywhere on the track.
TASK = "playground/CartpoleSwingup"
LENGTH = 12  # a short episode_length, so that truncation comes within the test


def test_tasks_are_offered_under_their_prefix():
    names = envs.names()
    assert TASK in names and "playground/CheetahRun" in names
    assert envs.suite_of("playground/WalkerWalk") == "playground"


def test_transitions_equal_playgrounds():
    """Over 40 random steps of 4 vmapped envs (three episodes each), every
    step's observation, reward and termination equal Playground's raw
    `env.step` from the same state, truncation comes at `episode_length`, and
    each new episode starts from a state of Playground's own reset."""
    env = envs.PlaygroundEnv(TASK.removeprefix("playground/"), episode_length=LENGTH)
    raw = env.env
    n, steps = 4, 40

    @jax.jit
    def run(key):
        _, state = jax.vmap(env.reset)(jr.split(key, n))

        def one(state, key):
            k_act, k_step = jr.split(key)
            action = jr.uniform(k_act, (n, 1), minval=-1.0, maxval=1.0)
            with jax.numpy_rank_promotion("allow"):
                theirs = jax.vmap(raw.step)(state.inner, action)
            obs, new, reward, term, trunc, info = jax.vmap(env.step)(
                jr.split(k_step, n), state, action
            )
            out = (
                info["final_observation"],
                theirs.obs,
                reward,
                theirs.reward,
                term,
                theirs.done,
                trunc,
                state.steps,
                obs,
            )
            return new, out

        return jax.lax.scan(one, state, jr.split(key, steps))

    _, out = run(jr.PRNGKey(0))
    ours_obs, their_obs, reward, their_reward, term, done, trunc, before, obs = map(
        np.asarray, out
    )
    np.testing.assert_array_equal(ours_obs, their_obs)
    np.testing.assert_array_equal(reward, their_reward)
    np.testing.assert_array_equal(term, done > 0)
    np.testing.assert_array_equal(trunc, before + 1 == LENGTH)
    assert trunc.sum() == 3 * n and not term.any()
    # The observation after a truncation is a start: one of the bank's.
    starts = np.asarray(env.starts.obs)
    for o in obs[trunc]:
        assert np.any(np.all(starts == o, axis=-1))
    # Different envs and episodes start from different states.
    assert len({tuple(o) for o in obs[trunc]}) == trunc.sum()


def test_action_repeat_sums_rewards():
    env = envs.PlaygroundEnv(
        TASK.removeprefix("playground/"), action_repeat=3, episode_length=9
    )
    _, state = env.reset(jr.PRNGKey(1))
    action = jnp.array([0.5])
    with jax.numpy_rank_promotion("allow"):
        raw_step = jax.jit(env.env.step)
        inner, total = state.inner, 0.0
        for _ in range(3):
            inner = raw_step(inner, action)
            total += float(inner.reward)
    obs, state, reward, _, trunc, _ = jax.jit(env.step_env)(
        jr.PRNGKey(2), state, action
    )
    np.testing.assert_allclose(float(reward), total, rtol=1e-6)
    np.testing.assert_array_equal(obs, inner.obs)
    assert not trunc and int(state.steps) == 1


def test_ppo_trains_checkpoints_and_resumes_bitwise(tmp_path, resumes_bitwise):
    """PPO trains on it through the runner (vmapped envs and seeds), and a run
    stopped at a checkpoint and resumed ends in the same bytes."""
    agent = zoo.make("ppo", num_steps=8, num_minibatches=2, hidden_sizes=(16,))
    full = resumes_bitwise(
        agent,
        envs.make(TASK, episode_length=LENGTH),
        tmp_path,
        every=256,
        key=jr.PRNGKey(3),
        total_steps=512,
        num_envs=4,
        num_seeds=2,
        eval_episodes=1,
    )
    assert np.isfinite(np.asarray(full.final_returns)).all()


def test_a_frame_renders_headless():
    env = envs.make(TASK)
    _, state = env.reset(jr.PRNGKey(4))
    from envs.render import render

    frame = render(env, state)
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
    assert frame.std() > 10  # a scene, not a blank image


def test_bad_input_gets_one_line(monkeypatch):
    with pytest.raises(ValueError, match=r"unknown Playground task 'CheetahWalk'"):
        envs.make("playground/CheetahWalk")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['wind'\].*valid"):
        envs.make(TASK, wind=1.0)
    with pytest.raises(ValueError, match="impl='warp' is not offered"):
        envs.make(TASK, impl="warp")
    with pytest.raises(ValueError, match="vision=True"):
        envs.make(TASK, vision=True)
    with pytest.raises(ValueError, match="episode_length must be a positive integer"):
        envs.make(TASK, episode_length=0)
    monkeypatch.setattr(_playground, "installed", lambda: False)
    with pytest.raises(ValueError, match=r"pip install -e '\.\[playground\]'"):
        envs.make("playground/CheetahRun")
