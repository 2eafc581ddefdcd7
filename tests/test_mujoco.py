"""Gymnasium's MuJoCo v5 tasks, stepped by MuJoCo's C engine (`envs/_mujoco.py`):
the same transitions as Gymnasium's own envs, a lossless state that resumes bit
for bit, batched stepping, and one-line errors."""

import itertools

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo
from envs import _mujoco

if not _mujoco.installed():
    pytest.skip("the mujoco extra is not installed", allow_module_level=True)
# Imported through the env module, which picks MuJoCo's headless OpenGL backend
# before MuJoCo's first import (Gymnasium's envs import it too).
mujoco = _mujoco._mj()
gym = pytest.importorskip("gymnasium")

STEPS = 300


def _time_limit(genv):
    while not hasattr(genv, "_elapsed_steps"):
        genv = genv.env
    return genv


def _our_state(genv, task: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Our state's three parts, read from a Gymnasium env's `data` as it is
    now: the full physics state, the position its next reward starts from,
    the steps taken."""
    u = genv.unwrapped
    model, data = u.model, u.data
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    physics = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, physics, spec)
    where = _mujoco.TASKS[task].position
    if where == "xpos":
        position = data.xpos[1, :2]
    elif where == "com":
        com = np.einsum("b,bj->j", model.body_mass, data.xipos)
        position = com[:2] / model.body_mass.sum()
    else:
        position = data.qpos[:1]
    return physics, np.array(position), _time_limit(genv)._elapsed_steps


CASES = [(task, {}) for task in envs.MUJOCO_TASKS] + [
    # Parameters reach the task as Gymnasium's keyword arguments.
    ("Hopper-v5", {"terminate_when_unhealthy": False, "ctrl_cost_weight": 0.01}),
    ("Ant-v5", {"contact_cost_weight": 1e-3, "healthy_z_range": [0.3, 1.0]}),
]


@pytest.mark.parametrize(("task", "params"), CASES)
def test_transitions_equal_gymnasiums(task, params):
    """From Gymnasium's state and the same random actions, over several hundred
    steps (a few episodes, the last ones cut by the time limit), our
    observations, rewards, terminations and truncations equal
    `gymnasium.make(task)`'s to float32 precision. All the steps go through
    one vmapped `step_env`, so one batched callback computes them."""
    env, genv = envs.make(task, **params), gym.make(task, **params)
    assert isinstance(env, envs.MujocoEnv) and isinstance(env.action_space, envs.Box)
    obs, _ = genv.reset(seed=0)
    # Reset: our observation of the same positions and velocities.
    model = genv.unwrapped.model
    noise = (genv.unwrapped.data.qpos - model.qpos0, genv.unwrapped.data.qvel)
    physics, position, reset_obs = _mujoco._host_reset(task, dict(env.params), *noise)
    np.testing.assert_allclose(reset_obs, obs, rtol=1e-5, atol=1e-5)
    want_physics, want_position, _ = _our_state(genv, task)
    np.testing.assert_array_equal(_mujoco._floats(physics), want_physics)
    np.testing.assert_allclose(_mujoco._floats(position), want_position, rtol=1e-12)

    # Every other episode starts 3 steps short of the time limit, so that
    # truncation is compared too.
    _time_limit(genv)._elapsed_steps = 997
    rng = np.random.default_rng(0)
    low, high = env.action_space.low, env.action_space.high
    parts, actions, want = [], [], []
    for t in range(STEPS):
        parts.append(_our_state(genv, task))
        action = rng.uniform(low, high).astype(np.float32)
        obs, reward, terminated, truncated, _ = genv.step(action)
        actions.append(action)
        want.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            genv.reset(seed=t + 1)
            _time_limit(genv)._elapsed_steps = 997 if t % 2 else 0
    physics, position, steps = (np.stack(x) for x in zip(*parts, strict=True))
    state = jax.vmap(envs.MujocoState)(
        jnp.asarray(_mujoco._bits(physics)),
        jnp.asarray(_mujoco._bits(position)),
        jnp.asarray(steps, jnp.int32),
    )
    step = jax.jit(jax.vmap(env.step_env, in_axes=(None, 0, 0)))
    got = step(jr.PRNGKey(0), state, jnp.asarray(np.stack(actions)))
    obs, reward, terminated, truncated = (np.stack(x) for x in zip(*want, strict=True))
    assert truncated.any()
    np.testing.assert_array_equal(np.asarray(got[3]), terminated)
    np.testing.assert_array_equal(np.asarray(got[4]), truncated)
    # Humanoid's observation holds contact forces of hundreds of newtons; the
    # solver's cold start moves them within its tolerance.
    tol = 1e-3 if task == "Humanoid-v5" else 1e-5
    np.testing.assert_allclose(np.asarray(got[0]), obs, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(got[2]), reward, rtol=1e-5, atol=1e-4)


def test_the_state_is_lossless_float64():
    env = envs.make("Hopper-v5")
    obs, state = jax.jit(env.reset)(jr.PRNGKey(3))
    assert state.physics.dtype == jnp.uint32
    physics = _mujoco._floats(np.asarray(state.physics))
    # qpos[1:] and qvel, the observation, are the float64 state rounded.
    sim = _mujoco._sim("Hopper-v5")
    qpos, qvel = sim.split(physics[None])
    np.testing.assert_array_equal(
        np.asarray(obs), np.concatenate([qpos[0, 1:], qvel[0]]).astype(np.float32)
    )
    assert physics.dtype == np.float64 and not np.all(
        physics == physics.astype(np.float32)
    )


def test_vmapped_envs_and_seeds_reach_one_callback(monkeypatch):
    env = envs.make("HalfCheetah-v5")
    batches = []
    step = _mujoco._step

    def recording(task, sim, params, physics, position, action):
        batches.append(physics.shape[:-1])
        return step(task, sim, params, physics, position, action)

    monkeypatch.setattr(_mujoco, "_step", recording)
    keys = jr.split(jr.PRNGKey(0), 6).reshape(2, 3, 2)
    _, states = jax.vmap(jax.vmap(env.reset))(keys)
    actions = jnp.zeros((2, 3, 6))
    jax.jit(jax.vmap(jax.vmap(env.step)))(keys, states, actions)
    assert batches == [(2, 3)]


def test_resume_is_bitwise(tmp_path, resumes_bitwise):
    """A SAC run on Hopper (which falls, terminates and resets), stopped at a
    checkpoint and resumed, ends in the same bytes as the run never stopped."""
    agent = zoo.make(
        "sac", learning_starts=64, batch_size=16, train_frequency=4, hidden_sizes=(16,)
    )
    resumes_bitwise(
        agent,
        envs.make("Hopper-v5"),
        tmp_path,
        every=256,
        key=jr.PRNGKey(5),
        total_steps=512,
        num_envs=4,
        num_seeds=2,
        eval_episodes=1,
    )


def test_bad_input_gets_one_line(monkeypatch):
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['wind'\].*valid"):
        envs.make("Hopper-v5", wind=1.0)
    with pytest.raises(ValueError, match="Hopper-v5"):  # a near miss is named
        envs.make("Hopper-v6")
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        envs.make("Ant-v5", max_steps=0)
    monkeypatch.setattr(_mujoco, "installed", lambda: False)
    with pytest.raises(ValueError, match=r"pip install -e '\.\[mujoco\]'"):
        envs.make("Walker2d-v5")


def test_frames_render_headless_and_film_an_episode(init_state):
    from experiments.record.video import record_episodes

    env = envs.make("HalfCheetah-v5")
    agent = zoo.make("sac", hidden_sizes=(8,))
    state = init_state(agent, env, jr.PRNGKey(0), 1, 100)
    episodes = record_episodes(agent, state, env, key=jr.PRNGKey(1), max_steps=6)
    (frames,) = episodes.frames
    assert len(frames) == 7  # the first observation, then one frame a step
    assert frames[0].shape == (240, 320, 3) and frames[0].dtype == np.uint8
    assert frames[0].std() > 10  # a scene, not a blank image
    assert any(np.any(a != b) for a, b in itertools.pairwise(frames))


def test_sac_learns_to_balance_the_pendulum():
    """SAC with its Pendulum-v1 block learns InvertedPendulum-v5 (1000 is the
    most an episode returns; a random policy stays near 6): two seeds, 6,000
    steps, about half a minute here."""
    agent = zoo.make(
        "sac",
        learning_rate=4e-3,
        alpha_learning_rate=4e-3,
        gamma=0.98,
        tau=0.02,
        batch_size=32,
        learning_starts=400,
        hidden_sizes=(64, 64),
    )
    result = runners.run(
        agent,
        envs.make("InvertedPendulum-v5"),
        key=jr.PRNGKey(0),
        total_steps=6000,
        num_envs=1,
        num_seeds=2,
        eval_episodes=4,
    )
    returns = np.asarray(result.final_returns).mean(axis=1)
    assert returns.min() >= 150 and returns.mean() >= 700, returns
