import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
import zoo


@pytest.mark.parametrize(
    ("agent_name", "env_name"), [("dqn", "CartPole-v1"), ("ppo", "Pendulum-v1")]
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
