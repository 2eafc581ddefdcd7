import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
import zoo


@pytest.mark.parametrize(
    ("agent_name", "env_name"),
    [
        ("dqn", "CartPole-v1"),
        ("ppo", "Pendulum-v1"),
        ("c51", "CartPole-v1"),
        ("qrdqn", "CartPole-v1"),
        ("iqn", "CartPole-v1"),
        ("rainbow", "CartPole-v1"),
        ("tqc", "Pendulum-v1"),
        ("crossq", "Pendulum-v1"),
        ("pqn", "CartPole-v1"),
        ("a2c", "CartPole-v1"),
    ],
)
def test_save_then_load_gives_the_same_agent_and_state(
    agent_name, env_name, tmp_path, getkey, init_state
):
    env = envs.make(env_name)
    agent = zoo.make(agent_name, hidden_sizes=(8,), learning_rate=3e-4)
    state = init_state(agent, env, getkey(), 2, 4096)
    path = tmp_path / "agent.eqx"
    zoo.save(path, agent, state, env.observation_space, env.action_space)
    loaded_agent, loaded_state = zoo.load(path)
    assert loaded_agent == agent
    assert jax.tree.structure(loaded_state) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(loaded_state), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    obs = jnp.zeros(env.observation_space.shape)
    key = getkey()
    np.testing.assert_array_equal(
        agent.act(state, obs, key=key, greedy=True)[0],
        loaded_agent.act(loaded_state, obs, key=key, greedy=True)[0],
    )


def test_load_reads_what_save_wrote_whatever_the_run_shape(tmp_path, getkey):
    # 8 envs x 2 steps split into 4 minibatches; 1 env would not, and loading
    # must not depend on the env count of the run that trained the agent.
    import runners

    env = envs.make("CartPole-v1")
    agent = zoo.make("ppo", num_steps=2, num_minibatches=4, hidden_sizes=(8,))
    state, _ = runners.train(agent, env, key=getkey(), total_steps=64, num_envs=8)
    path = tmp_path / "ppo.eqx"
    zoo.save(path, agent, state.agent_state, env.observation_space, env.action_space)
    loaded_agent, loaded_state = zoo.load(path)
    assert loaded_agent == agent
    for a, b in zip(
        jax.tree.leaves(state.agent_state), jax.tree.leaves(loaded_state), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_normalize_obs_statistics_are_saved_and_frozen_in_evaluation(tmp_path, getkey):
    import runners

    env = envs.make("Pendulum-v1")
    agent = zoo.make("sac", normalize_obs=True, hidden_sizes=(8,), learning_starts=64)
    state, _ = runners.train(agent, env, key=getkey(), total_steps=256, num_envs=2)
    stats = state.agent_state.obs_stats
    # Updated in training: every observation the agent trained on counted.
    assert float(stats.count) == 256
    assert not np.allclose(np.asarray(stats.mean), 0.0)
    path = tmp_path / "sac.eqx"
    zoo.save(path, agent, state.agent_state, env.observation_space, env.action_space)
    _, loaded = zoo.load(path)
    np.testing.assert_array_equal(loaded.obs_stats.mean, stats.mean)
    # Evaluation uses them unchanged: the agent state is not modified by it, and
    # a greedy action is the actor's output on the normalised observation.
    runners.evaluate(agent, loaded, env, key=getkey(), num_episodes=2)
    np.testing.assert_array_equal(loaded.obs_stats.var, stats.var)
    obs = jnp.array([1.0, 0.0, 3.0])
    mean, _ = loaded.actor(stats.normalize(obs))
    action, _ = agent.act(loaded, obs, key=getkey(), greedy=True)
    np.testing.assert_allclose(action, 2.0 * jnp.tanh(mean), rtol=1e-5, atol=1e-6)


def test_load_rejects_damaged_files(tmp_path, getkey, init_state):
    env = envs.make("CartPole-v1")
    agent = zoo.make("dqn", hidden_sizes=(8,))
    state = init_state(agent, env, getkey(), 1, 100)
    good = tmp_path / "agent.eqx"
    zoo.save(good, agent, state, env.observation_space, env.action_space)
    truncated = tmp_path / "truncated.eqx"
    truncated.write_bytes(good.read_bytes()[:-64])
    with pytest.raises(ValueError, match="damaged or truncated"):
        zoo.load(truncated)
    garbage = tmp_path / "garbage.eqx"
    garbage.write_bytes(b"\x80\x04not json at all")
    with pytest.raises(ValueError, match="not an equizoo agent file"):
        zoo.load(garbage)
    with pytest.raises(ValueError, match="no agent file"):
        zoo.load(tmp_path / "missing.eqx")
    assert not list(tmp_path.glob("*.tmp"))


def test_scale_obs_maps_bounds_onto_unit_box_and_stays_fixed(getkey):
    import runners

    env = envs.make("MountainCar-v0")  # position in [-1.2, 0.6], velocity +-0.07
    agent = zoo.make("dqn", scale_obs=True, hidden_sizes=(8,), learning_starts=32)
    state, _ = runners.train(agent, env, key=getkey(), total_steps=256, num_envs=2)
    stats = state.agent_state.obs_stats
    # Fixed by the bounds, not updated in training.
    assert float(stats.count) == 0
    np.testing.assert_allclose(stats.mean, [-0.3, 0.0], atol=1e-6)
    np.testing.assert_allclose(jnp.sqrt(stats.var), [0.9, 0.07], rtol=1e-5)
    corners = agent.preprocess(
        state.agent_state, jnp.array([[-1.2, -0.07], [0.6, 0.07]])
    )
    np.testing.assert_allclose(corners, [[-1.0, -1.0], [1.0, 1.0]], atol=1e-5)
    # Unbounded dimensions (Gymnasium marks them with the largest float32) pass
    # through; CartPole's position and angle are scaled, its velocities are not.
    cartpole = envs.make("CartPole-v1").observation_space
    stats = zoo.scaled_stats(cartpole)
    np.testing.assert_allclose(stats.var, [4.8**2, 1.0, 0.41887903**2, 1.0], rtol=1e-5)
    np.testing.assert_array_equal(stats.mean, [0.0, 0.0, 0.0, 0.0])
    cartpole_agent = zoo.make("ppo", scale_obs=True)
    cartpole_state = eqx.tree_at(lambda s: s.obs_stats, state.agent_state, stats)
    obs = jnp.array([2.4, 50.0, -0.2, -30.0])
    np.testing.assert_allclose(
        cartpole_agent.preprocess(cartpole_state, obs),
        [0.5, 50.0, -0.2 / 0.41887903, -30.0],
        rtol=1e-5,
    )


def test_scale_obs_rejects_what_it_cannot_scale():
    with pytest.raises(ValueError, match="choose one"):
        zoo.make("ppo", scale_obs=True, normalize_obs=True)
    space = envs.Box(-np.inf, np.inf, (3,))
    with pytest.raises(ValueError, match=r"every dimension .* is unbounded"):
        zoo.make("sac", scale_obs=True).check_observations(space)
    with pytest.raises(ValueError, match="needs a Box"):
        zoo.make("dqn", scale_obs=True).check_observations(envs.Discrete(4))
    # The runner checks before compiling anything.
    import runners

    class Unbounded(envs.AbstractWrapper):
        env: envs.AbstractEnv
        name = "Unbounded"

        @property
        def observation_space(self):
            return space

        def reset_env(self, key):
            return self.env.reset(key)

        def step_env(self, key, state, action):
            return self.env.step(key, state, action)

    env = Unbounded(envs.make("probe/ConstantReward"))
    with pytest.raises(ValueError, match="use normalize_obs instead"):
        runners.validate(zoo.make("ppo", scale_obs=True), env, 2, 64)


def test_an_agent_registered_outside_the_package_saves_and_loads(
    tmp_path, getkey, monkeypatch
):
    from zoo import _agent

    # The registry as it was, restored after the test.
    monkeypatch.setattr(_agent, "AGENTS", dict(_agent.AGENTS))
    monkeypatch.setattr(_agent, "DEFAULT_ENVS", dict(_agent.DEFAULT_ENVS))
    monkeypatch.setattr("zoo._registry.AGENTS", _agent.AGENTS)
    monkeypatch.setattr("zoo._registry.DEFAULT_ENVS", _agent.DEFAULT_ENVS)
    monkeypatch.setattr("zoo._serialise.AGENTS", _agent.AGENTS)

    @zoo.register("userq", default_env="Acrobot-v1")
    class UserQ(zoo.DQN):  # pyright: ignore[reportGeneralTypeIssues]
        pass

    assert "userq" in zoo.names() and zoo.default_env("userq") == "Acrobot-v1"
    env = envs.make("CartPole-v1")
    agent = zoo.make("userq", hidden_sizes=(8,))
    space = (env.observation_space, env.action_space)
    state = agent.init(*space, key=getkey(), num_envs=1, total_steps=100)
    zoo.save(tmp_path / "a.eqx", agent, state, *space)
    loaded, loaded_state = zoo.load(tmp_path / "a.eqx")
    assert type(loaded) is UserQ and loaded == agent
    assert eqx.tree_equal(loaded_state, state)
    # Without its registration, loading names the module to import.
    del _agent.AGENTS["userq"]
    with pytest.raises(ValueError, match=rf"'userq'.*import {__name__}"):
        zoo.load(tmp_path / "a.eqx")
    # Registration is checked: a taken name or class, a bad name, a non-agent.
    with pytest.raises(ValueError, match="'dqn' is registered already"):
        zoo.register("dqn")(UserQ)
    with pytest.raises(ValueError, match="'DQN' is registered already"):
        zoo.register("dqn2")(zoo.DQN)
    with pytest.raises(ValueError, match="lower-case identifier"):
        zoo.register("User-Q")(UserQ)
    with pytest.raises(ValueError, match=r"not a subclass of zoo\.AbstractAgent"):
        zoo.register("thing")(dict)  # pyright: ignore[reportArgumentType]
