import dataclasses

import gymnax
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from PIL import Image, ImageSequence

import envs
import runners
import zoo
from envs.render import RENDERABLE, RenderError, render, renderable
from experiments.record.video import record_episodes, write_video

MAX_STEPS = 40


# A field of each env's state, and a value that moves what is drawn.
MOVES = {
    "Acrobot-v1": ("joint_angle1", 1.0),
    "CartPole-v1": ("theta", 0.2),
    "MountainCar-v0": ("position", -0.9),
    "MountainCarContinuous-v0": ("position", -0.9),
    "Pendulum-v1": ("theta", 1.0),
    "Asterix-MinAtar": ("player_x", 2),
    "Breakout-MinAtar": ("pos", 7),
    "Freeway-MinAtar": ("pos", 5),
    "Seaquest-MinAtar": ("sub_x", 2),
    "SpaceInvaders-MinAtar": ("pos", 2),
}


def _moved(state, field, value):
    old = getattr(state, field)
    return dataclasses.replace(
        state, **{field: jnp.asarray(value, jnp.asarray(old).dtype)}
    )


@pytest.mark.parametrize("name", RENDERABLE)
def test_render_every_env(name, getkey):
    # Stepping MinAtar games would compile them (seconds each): reset, then move.
    env = envs.make(name)
    _, state = env.reset(getkey())
    frame = render(env, state)
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[-1] == 3
    assert 150 <= frame.shape[0] <= 600 and 150 <= frame.shape[1] <= 600
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 2  # not blank
    other = render(env, _moved(state, *MOVES[name]))
    assert not np.array_equal(frame, other)
    assert np.array_equal(render(env, jax.device_get(state)), frame)  # NumPy leaves
    assert renderable(env) and renderable(name)


def test_render_reads_the_state():
    env = envs.CartPole()
    upright = envs.CartPoleState(*map(jnp.array, (0.0, 0.0, 0.0, 0.0, 0)))
    tilted = dataclasses.replace(upright, theta=jnp.array(0.2))
    moved = dataclasses.replace(upright, x=jnp.array(1.0))
    frames = [render(env, s) for s in (upright, tilted, moved)]
    assert not np.array_equal(frames[0], frames[1])
    assert not np.array_equal(frames[0], frames[2])
    # Upright, the pole's colour fills one column above the axle: symmetric.
    pole = np.all(frames[0] == (202, 152, 101), axis=-1)
    columns = np.nonzero(pole.any(axis=0))[0]
    assert abs((columns[0] + columns[-1]) / 2 - 300) <= 1
    # The env's own parameters: a longer pole reaches higher.
    long_pole = render(envs.CartPole(length=1.0), upright)
    top = lambda f: np.nonzero(np.all(f == (202, 152, 101), axis=-1).any(axis=1))[0][0]
    assert top(long_pole) < top(frames[0])


def test_render_through_wrappers_and_gymnax_twins(getkey):
    key = getkey()
    env = envs.CartPole()
    wrapped = envs.EpisodeStatistics(envs.FlattenObservation(env))
    _, wrapped_state = wrapped.reset(key)
    _, state = env.reset(key)
    assert np.array_equal(render(wrapped, wrapped_state), render(env, state))
    assert renderable(wrapped)
    # gymnax's CartPole has the same state fields and parameters.
    assert np.array_equal(
        render(envs.make("gymnax/CartPole-v1"), state), render(env, state)
    )


def test_every_minatar_game_renders():
    minatar = {n for n in gymnax.registered_envs if n.endswith("-MinAtar")}
    assert minatar <= set(RENDERABLE)


def test_render_errors(getkey):
    probe = envs.make("probe/ConstantReward")
    assert not renderable(probe)
    with pytest.raises(RenderError, match="ConstantReward has no renderer; envs that "):
        render(probe, probe.reset(getkey())[1])
    catch = envs.make("Catch-bsuite")
    with pytest.raises(
        RenderError, match=r"Catch-bsuite .*Acrobot-v1, Asterix-MinAtar"
    ):
        render(catch, catch.reset(getkey())[1])
    env = envs.CartPole()
    _, batch = jax.vmap(env.reset)(jr.split(getkey(), 2))
    with pytest.raises(ValueError, match="pass one env's state"):
        render(env, batch)
    _, pendulum_state = envs.Pendulum().reset(getkey())
    with pytest.raises(ValueError, match="not a state of CartPole-v1"):
        render(env, pendulum_state)


@pytest.fixture(scope="module")
def ppo_cartpole(init_state):
    env = envs.CartPole()
    agent = zoo.make("ppo")
    state = init_state(agent, env, jr.PRNGKey(0), 1, 1000)
    return agent, state, env


@pytest.fixture(scope="module")
def cartpole_episodes(ppo_cartpole):
    agent, state, env = ppo_cartpole
    return record_episodes(
        agent, state, env, key=jr.PRNGKey(3), num_episodes=2, max_steps=MAX_STEPS
    )


def test_record_cartpole(ppo_cartpole, cartpole_episodes):
    agent, state, env = ppo_cartpole
    episodes = cartpole_episodes
    expected = runners.evaluate(
        agent, state, env, key=jr.PRNGKey(3), num_episodes=2, max_steps=MAX_STEPS
    )
    np.testing.assert_array_equal(episodes.returns, np.asarray(expected))
    for frames, ret, length in zip(
        episodes.frames, episodes.returns, episodes.lengths, strict=True
    ):
        # +1 a step; the first state and the state after every step are filmed.
        assert ret == length and len(frames) == length + 1 <= MAX_STEPS + 1
        assert all(f.shape == (400, 600, 3) for f in frames)
    assert min(episodes.lengths) < MAX_STEPS  # an untrained policy soon drops it
    # The last frame shows the state the episode ended in: the pole has fallen
    # past 12 degrees or the cart left the track.
    assert not np.array_equal(episodes.frames[0][-1], episodes.frames[0][-2])


def test_write_video(cartpole_episodes, tmp_path):
    joined = cartpole_episodes.joined()
    assert len(joined) == sum(len(f) for f in cartpole_episodes.frames)
    paths = write_video(joined, tmp_path / "sub" / "cartpole", fps=25)
    gif = tmp_path / "sub" / "cartpole.gif"
    assert paths[0] == gif
    # No temporary file is left beside them.
    assert sorted(gif.parent.iterdir()) == sorted(paths)
    with Image.open(gif) as im:
        assert im.size == (600, 400)
        durations = [f.info["duration"] for f in ImageSequence.Iterator(im)]
    # Pillow merges identical consecutive frames into one longer frame.
    assert len(durations) <= len(joined) and sum(durations) == 40 * len(joined)
    try:
        import imageio_ffmpeg
    except ImportError:  # MP4 is skipped without imageio's ffmpeg plugin
        assert paths == [gif]
        return
    assert paths == [gif, gif.with_suffix(".mp4")]
    count, seconds = imageio_ffmpeg.count_frames_and_secs(str(paths[1]))
    assert count == len(joined) and seconds == pytest.approx(len(joined) / 25)


def test_record_through_a_wrapper(ppo_cartpole, cartpole_episodes):
    agent, state, env = ppo_cartpole
    episodes = record_episodes(
        agent,
        state,
        envs.EpisodeStatistics(env),
        key=jr.PRNGKey(3),
        num_episodes=2,
        max_steps=MAX_STEPS,
    )
    np.testing.assert_array_equal(episodes.returns, cartpole_episodes.returns)
    # The state a wrapped episode ended in is gone (the next episode started).
    for frames, base in zip(episodes.frames, cartpole_episodes.frames, strict=True):
        assert len(frames) == len(base) - 1
        assert all(np.array_equal(a, b) for a, b in zip(frames, base[:-1], strict=True))


def test_record_minatar(tmp_path, init_state):
    env = envs.make("Breakout-MinAtar")
    agent = zoo.make("ppo", torso="mlp")  # compiles faster than the CNN
    state = init_state(agent, env, jr.PRNGKey(0), 1, 1000)
    episodes = record_episodes(agent, state, env, key=jr.PRNGKey(1), max_steps=12)
    (frames,) = episodes.frames
    assert 2 <= len(frames) <= 13 and frames[0].shape == (160, 160, 3)
    paths = write_video(frames, tmp_path / "breakout")
    with Image.open(paths[0]) as im:
        assert im.size == (160, 160)


def test_record_checks_before_compiling(ppo_cartpole, tmp_path):
    agent, state, _ = ppo_cartpole
    probe = envs.make("probe/ObservationReward")
    with pytest.raises(RenderError, match="ObservationReward has no renderer"):
        record_episodes(agent, state, probe, key=jr.PRNGKey(0))
    with pytest.raises(ValueError, match="no frames"):
        write_video([], tmp_path / "empty")


def test_render_xminigrid(getkey):
    """XLand-MiniGrid's tasks render with its own drawing, through wrappers; a
    turn moves what is drawn, and a batch is refused."""
    name = "xminigrid/MiniGrid-MemoryS8"
    env = envs.EpisodeStatistics(envs.make(name))
    assert renderable(env) and renderable(name)
    _, state = env.reset(getkey())
    frame = render(env, state)
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[-1] == 3
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 3
    _, turned, *_ = env.step(getkey(), state, 2)  # turn left
    assert not np.array_equal(render(env, turned), frame)
    batch = jax.vmap(env.reset)(jr.split(getkey(), 2))[1]
    with pytest.raises(ValueError, match="got a batch"):
        render(env, batch)
