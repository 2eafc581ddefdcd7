"""Recurrent torsos (Equinox's GRU and LSTM cells) and training through time:
the carry resets where an episode starts, sequences keep their time order,
a recurrent agent solves a task that needs memory where the memoryless one
cannot, and everything that works for a memoryless agent (evaluation, save and
load, resume, video) works for a recurrent one."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo
from zoo._on_policy import episode_starts, to_sequences, unroll

# MemoryChain: the first observation shows a bit; the action three steps later
# earns +1 if it names that bit, -1 if not. Without memory the best return is 0.
CHAIN = envs.make("MemoryChain-bsuite", memory_length=3)
TINY = dict(hidden_sizes=(16,), cell_size=16, num_steps=8, num_minibatches=2)


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "name", [n for n in zoo.names() if not zoo.AGENTS[n].supports_recurrence]
)
def test_agents_without_recurrence_refuse_a_recurrent_torso(name):
    with pytest.raises(ValueError) as excinfo:
        zoo.make(name, torso="gru")
    assert "torso='gru' is not supported" in one_line(excinfo)
    # The registered agents that take one, from their classes.
    assert "A2C, C51, DQN, PPO, PQN, QRDQN" in str(excinfo.value)


@pytest.mark.parametrize("name", ["dqn", "c51", "qrdqn"])
def test_bad_recurrent_replay_settings_fail_with_one_line(name):
    for bad, word in [
        (dict(cell_size=-1), "cell_size"),
        (dict(sequence_length=0), "sequence_length"),
        (dict(burn_in=-1), "burn_in"),
        (dict(prioritized=True), "prioritised replay of sequences"),
    ]:
        with pytest.raises(ValueError) as excinfo:
            zoo.make(name, torso="gru", **bad)
        assert word in one_line(excinfo)
    # 24-step sequences do not fit 1,000 transitions over 50 envs (20 each).
    agent = zoo.make(name, torso="gru", buffer_size=1000, burn_in=8)
    with pytest.raises(ValueError) as excinfo:
        agent.check(CHAIN.observation_space, CHAIN.action_space, 50)
    assert "24 consecutive steps" in one_line(excinfo)


@pytest.mark.parametrize("name", ["ppo", "a2c", "pqn"])
def test_bad_recurrent_settings_fail_with_one_line(name):
    with pytest.raises(ValueError) as excinfo:
        zoo.make(name, torso="lstm", cell_size=0)
    assert "cell_size" in one_line(excinfo)
    with pytest.raises(ValueError) as excinfo:
        zoo.make(name, torso="gru", num_steps=8, sequence_length=3)
    assert "sequence_length=3 does not divide" in one_line(excinfo)
    if name != "a2c":  # 5 envs x 2 sequences do not split into 4 minibatches
        agent = zoo.make(
            name, torso="gru", num_steps=8, sequence_length=4, num_minibatches=4
        )
        with pytest.raises(ValueError) as excinfo:
            agent.check(CHAIN.observation_space, CHAIN.action_space, 5)
        assert "whole sequences" in one_line(excinfo)


def test_sequences_keep_time_order_and_one_env_each():
    steps, num_envs, length = 8, 3, 4
    t, e = np.meshgrid(np.arange(steps), np.arange(num_envs), indexing="ij")
    stamp = jnp.asarray(100 * e + t)  # [steps, envs]: env and time of each step
    seq = np.asarray(to_sequences(stamp, length))
    assert seq.shape == (steps // length * num_envs, length)
    for row in seq:
        assert len(set(row // 100)) == 1  # one env
        np.testing.assert_array_equal(np.diff(row % 100), 1)  # consecutive steps
    # Every step appears once.
    assert sorted(seq.ravel().tolist()) == sorted(np.asarray(stamp).ravel().tolist())


def test_replayed_sequences_keep_time_order_one_env_and_their_stored_carry():
    rows, num_envs, length = 10, 3, 4
    t, e = np.meshgrid(np.arange(13), np.arange(num_envs), indexing="ij")
    stamp = jnp.asarray(100 * e + t, jnp.float32)  # [13 steps, envs]
    traj = zoo.Transition(
        obs=stamp,
        action=jnp.zeros(stamp.shape, jnp.int32),
        reward=stamp,
        terminated=jnp.zeros(stamp.shape, bool),
        truncated=jnp.zeros(stamp.shape, bool),
        next_obs=stamp,
        extras={"carry": jnp.repeat(stamp[..., None], 2, axis=-1)},
    )
    replay = zoo.Replay(rows * num_envs)
    state = replay.init(jax.tree.map(lambda x: x[0, 0], traj), num_envs)
    state = replay.add(state, jax.tree.map(lambda x: x[:6], traj))
    state = replay.add(state, jax.tree.map(lambda x: x[6:], traj))  # wraps
    sample = replay.sample_sequences(state, 256, length, key=jr.PRNGKey(0))
    obs = np.asarray(sample.batch.obs)
    assert obs.shape == (256, length)
    assert len(set((obs // 100).ravel().tolist())) == num_envs
    assert (np.diff(obs // 100, axis=1) == 0).all()  # one env per sequence
    np.testing.assert_array_equal(np.diff(obs % 100, axis=1), 1)  # in order
    # Only the 10 newest steps are kept (3..12): every window lies inside them.
    assert (obs % 100).min() == 3 and (obs % 100).max() == 12
    np.testing.assert_array_equal(sample.batch.extras["carry"][..., 0], obs)


def test_unroll_resets_the_carry_where_an_episode_starts():
    # A "cell" that counts its steps: the output is the carry before the step.
    count = lambda c, _: (c, c + 1)
    starts = jnp.array([False, False, True, False, False, True, False])
    out, carries = unroll(count, jnp.array(5), jnp.zeros((7, 1)), starts, 0)
    np.testing.assert_array_equal(out, [5, 6, 0, 1, 2, 0, 1])
    np.testing.assert_array_equal(carries, np.asarray(out) + 1)
    # Episode starts follow the step before: the rollout's first never resets.
    traj = zoo.Transition(
        obs=jnp.zeros((4, 1)),
        action=jnp.zeros((4, 1)),
        reward=jnp.zeros((4, 1)),
        terminated=jnp.array([[True], [False], [False], [False]]),
        truncated=jnp.array([[False], [False], [True], [False]]),
        next_obs=jnp.zeros((4, 1)),
        extras={},
    )
    np.testing.assert_array_equal(
        episode_starts(traj)[:, 0], [False, True, False, True]
    )


@pytest.mark.parametrize("torso", ["gru", "lstm"])
def test_recurrent_networks_use_equinox_cells(torso, init_state):
    agent = zoo.make("ppo", torso=torso, **TINY)
    state = init_state(agent, CHAIN, jr.PRNGKey(0), 2, 64)
    cell = eqx.nn.GRUCell if torso == "gru" else eqx.nn.LSTMCell
    assert isinstance(state.actor.torso.cell, cell)
    assert isinstance(state.critic.torso.cell, cell)
    obs, _ = CHAIN.reset(jr.PRNGKey(1))
    with pytest.raises(ValueError, match="act_step"):
        agent.act(state, obs, key=jr.PRNGKey(2))
    carry = agent.initial_carry()
    action, extras, carry2 = agent.act_step(state, carry, obs, key=jr.PRNGKey(2))
    assert jax.tree.structure(carry2) == jax.tree.structure(carry)
    assert not all(bool(jnp.all(c == 0)) for c in jax.tree.leaves(carry2))
    assert set(extras) == {"log_prob", "value", "carry", "next_carry"}


@pytest.mark.parametrize("torso", ["gru", "lstm", "mlp"])
def test_a_shared_torso_is_one_network_trained_by_both_heads(torso, init_state):
    """`shared_torso`: the critic is a head on the actor torso's features, the
    carry has one cell's part, and the value loss moves the shared torso."""
    agent = zoo.make("ppo", torso=torso, shared_torso=True, **TINY)
    state = init_state(agent, CHAIN, jr.PRNGKey(0), 2, 64)
    assert state.critic.torso is None
    assert state.critic.head.in_features == state.actor.torso.out_size
    obs, _ = CHAIN.reset(jr.PRNGKey(1))
    if torso == "mlp":
        assert agent.initial_carry() == ()
        _, extras = agent.act(state, obs, key=jr.PRNGKey(2))
        features = state.actor.torso(obs)
    else:
        carry = agent.initial_carry()
        assert jax.tree.leaves(carry[0]) and carry[1] == ()
        _, extras, after = agent.act_step(state, carry, obs, key=jr.PRNGKey(2))
        assert jax.tree.structure(after) == jax.tree.structure(carry)
        features, _ = state.actor.torso.step(carry[0], obs)
    np.testing.assert_allclose(extras["value"], state.critic.from_features(features))
    with pytest.raises(TypeError, match="shares the actor's torso"):
        state.critic(obs)

    def value_loss(actor):
        if torso == "mlp":
            return state.critic.from_features(actor.torso(obs)) ** 2
        x, _ = actor.torso.step(agent.initial_carry()[0], obs)
        return state.critic.from_features(x) ** 2

    grads = eqx.filter_grad(value_loss)(state.actor)
    assert any(bool(jnp.any(g != 0)) for g in jax.tree.leaves(grads.torso))


@pytest.fixture(scope="module")
def memory_runs():
    """Recurrent (one GRU each for actor and critic, and one shared) and
    memoryless PPO on MemoryChain, same budget, 4 seeds."""
    out = {}
    for name, torso, shared in (
        ("gru", "gru", False),
        ("shared", "gru", True),
        ("mlp", "mlp", False),
    ):
        agent = zoo.make(
            "ppo",
            torso=torso,
            shared_torso=shared,
            hidden_sizes=(32,),
            cell_size=32,
            num_steps=16,
            num_minibatches=4,
            learning_rate=3e-3,
        )
        out[name] = runners.run(
            agent,
            CHAIN,
            key=jr.PRNGKey(0),
            total_steps=40_960,
            num_envs=16,
            num_seeds=4,
            eval_episodes=64,
        )
    return out


def test_recurrent_ppo_remembers_what_the_memoryless_one_cannot(memory_runs):
    memoryless = np.asarray(memory_runs["mlp"].final_returns).mean(-1)
    for name in ("gru", "shared"):
        recurrent = np.asarray(memory_runs[name].final_returns).mean(-1)
        assert recurrent.min() >= 0.9, (name, recurrent)
    assert memoryless.max() <= 0.5, memoryless


@pytest.mark.parametrize("name", ["dqn", "c51", "qrdqn"])
def test_recurrent_replay_agents_remember(name):
    """R2D2-style replay: sequences with a burn-in, from the stored carry.
    Each of DQN, C51 and QR-DQN learns MemoryChain on every seed (the
    memoryless optimum is 0)."""
    agent = zoo.make(
        name,
        torso="gru",
        hidden_sizes=(32,),
        cell_size=32,
        sequence_length=8,
        burn_in=4,
        n_step=3,
        batch_size=32,
        buffer_size=10_000,
        learning_starts=500,
        train_frequency=4,
        exploration_steps=2_000,
        target_update_interval=100,
    )
    run = runners.run(
        agent,
        CHAIN,
        key=jr.PRNGKey(0),
        total_steps=8_000,
        num_envs=8,
        num_seeds=2,
        eval_episodes=64,
    )
    returns = np.asarray(run.final_returns).mean(-1)
    assert returns.min() >= 0.9, returns


def test_a_recurrent_agent_evaluates_saves_loads_and_films(memory_runs, tmp_path):
    from experiments.record.video import record_episodes

    run = memory_runs["gru"]
    agent = zoo.make(
        "ppo",
        torso="gru",
        hidden_sizes=(32,),
        cell_size=32,
        num_steps=16,
        num_minibatches=4,
        learning_rate=3e-3,
    )
    state = runners.seed_state(run.state, 0)
    assert jax.tree.leaves(state.carry)  # the carry is part of the train state
    returns = runners.evaluate(agent, state, CHAIN, key=jr.PRNGKey(7), num_episodes=16)
    zoo.save(
        tmp_path / "agent.eqx",
        agent,
        state.agent_state,
        CHAIN.observation_space,
        CHAIN.action_space,
    )
    loaded, loaded_state = zoo.load(tmp_path / "agent.eqx")
    assert loaded == agent
    again = runners.evaluate(
        loaded, loaded_state, CHAIN, key=jr.PRNGKey(7), num_episodes=16
    )
    np.testing.assert_array_equal(returns, again)
    # Filming plays the episodes evaluation plays, carry and all.
    cartpole = envs.make("StatelessCartPole-v1")
    film_agent = zoo.make("ppo", torso="lstm", **TINY)
    film_state = runners.init(
        film_agent, cartpole, key=jr.PRNGKey(0), num_envs=2, total_steps=64
    )
    episodes = record_episodes(
        film_agent, film_state, cartpole, key=jr.PRNGKey(3), num_episodes=2
    )
    np.testing.assert_array_equal(
        episodes.returns,
        runners.evaluate(
            film_agent, film_state, cartpole, key=jr.PRNGKey(3), num_episodes=2
        ),
    )


@pytest.mark.parametrize("sharing", ["shared", "independent"])
def test_recurrent_multi_agent_learners_keep_one_carry_per_agent(sharing):
    game = envs.MatrixGame(episode_length=4)
    ppo = zoo.make("ppo", torso="gru", hidden_sizes=(16,), cell_size=16, num_steps=8)
    if sharing == "shared":
        learners = zoo.Shared.of(ppo, game, agent_id=True)
        with pytest.raises(ValueError) as excinfo:  # no agent names to key carries
            runners.init(
                zoo.Shared(ppo), game, key=jr.PRNGKey(0), num_envs=2, total_steps=64
            )
        assert "zoo.Shared.of(agent, env)" in one_line(excinfo)
    else:
        learners = zoo.Independent.of(ppo, game)
    result = runners.run(
        learners,
        game,
        key=jr.PRNGKey(0),
        total_steps=4096,
        num_envs=8,
        num_seeds=2,
        eval_episodes=8,
    )
    carry = result.state.carry
    assert set(carry) == set(game.agents) and result.agent_returns is not None
    for name in game.agents:
        # The actor's and the critic's cells, per seed and env.
        shapes = [c.shape for c in jax.tree.leaves(carry[name])]
        assert shapes == [(2, 8, 16)] * 2, shapes
        np.testing.assert_array_equal(result.agent_returns[name], 40.0)
