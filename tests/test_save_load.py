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
        ("pqn", "CartPole-v1"),
        ("a2c", "CartPole-v1"),
    ],
)
def test_save_then_load_gives_the_same_agent_and_state(
    agent_name, env_name, tmp_path, getkey
):
    env = envs.make(env_name)
    agent = zoo.make(agent_name, hidden_sizes=(8,), learning_rate=3e-4)
    state = agent.init(
        env.observation_space,
        env.action_space,
        key=getkey(),
        num_envs=2,
        total_steps=4096,
    )
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


def test_load_rejects_damaged_files(tmp_path, getkey):
    env = envs.make("CartPole-v1")
    agent = zoo.make("dqn", hidden_sizes=(8,))
    state = agent.init(
        env.observation_space,
        env.action_space,
        key=getkey(),
        num_envs=1,
        total_steps=100,
    )
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
