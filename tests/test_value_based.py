"""The value-based family and A2C against hand computations: the C51 projection,
the quantile Huber loss, PQN's Q(lambda) returns, the prioritised replay's sum
tree, sampling frequencies and importance weights; probes for each new agent."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo
from zoo import Transition

# --- C51 ---------------------------------------------------------------------


def test_c51_projection_splits_mass_between_neighbours():
    support = jnp.arange(5.0)  # 0, 1, 2, 3, 4
    probs = jnp.array([0.1, 0.2, 0.3, 0.2, 0.2])
    # r = 0.5, discount 0.5: atoms land on 0.5, 1.0, 1.5, 2.0, 2.5.
    target_support = 0.5 + 0.5 * support
    m = zoo.categorical_projection(support, target_support, probs)
    # 0.5 -> half to 0, half to 1; 1.0 -> all to 1; 1.5 -> halves to 1 and 2;
    # 2.0 -> all to 2; 2.5 -> halves to 2 and 3.
    expected = [0.05, 0.05 + 0.2 + 0.15, 0.15 + 0.2 + 0.1, 0.1, 0.0]
    np.testing.assert_allclose(m, expected, atol=1e-6)


def test_c51_projection_clips_to_the_support_and_keeps_mass():
    support = jnp.arange(5.0)
    probs = jnp.array([0.1, 0.2, 0.3, 0.2, 0.2])
    m = zoo.categorical_projection(support, 3.0 + support, probs)  # 3 .. 7
    np.testing.assert_allclose(m, [0.0, 0.0, 0.0, 0.1, 0.9], atol=1e-6)
    m = zoo.categorical_projection(support, -10.0 + 0.3 * support, probs)
    np.testing.assert_allclose(m, [1.0, 0.0, 0.0, 0.0, 0.0], atol=1e-6)


def test_c51_loss_is_the_cross_entropy_to_the_projected_target():
    agent = zoo.make("c51", atoms=5, v_min=0.0, v_max=4.0)
    taken = jnp.log(jnp.array([[0.2, 0.2, 0.2, 0.2, 0.2]]))
    next_logits = jnp.log(jnp.array([[0.1, 0.2, 0.3, 0.2, 0.2]]))
    losses, priorities = agent.td_loss(
        taken, next_logits, jnp.array([0.5]), jnp.array([0.5])
    )
    # Target [0.05, 0.4, 0.45, 0.1, 0] against a uniform prediction: -log 0.2.
    assert float(losses[0]) == pytest.approx(-np.log(0.2), rel=1e-5)
    np.testing.assert_allclose(priorities, losses)


# --- QR-DQN ------------------------------------------------------------------


def test_quantile_huber_loss_by_hand():
    quantiles = jnp.array([0.0, 1.0])  # at tau = 0.25, 0.75
    target = jnp.array([0.5, 3.0])
    # u = target - quantile: [[0.5, 3], [-0.5, 2]]; Huber(1): [[.125, 2.5],
    # [.125, 1.5]]; weights |tau - 1{u<0}|: [[.25, .25], [.25, .75]].
    expected = np.mean([0.25 * 0.125, 0.25 * 2.5]) + np.mean([0.25 * 0.125, 0.75 * 1.5])
    loss = zoo.quantile_huber_loss(quantiles, target, kappa=1.0)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    # kappa = 0: the plain quantile (pinball) loss.
    expected = np.mean([0.25 * 0.5, 0.25 * 3.0]) + np.mean([0.25 * 0.5, 0.75 * 2.0])
    loss = zoo.quantile_huber_loss(quantiles, target, kappa=0.0)
    assert float(loss) == pytest.approx(expected, rel=1e-6)


def test_quantile_loss_is_minimised_at_the_target_quantiles():
    # Quantiles of a uniform sample on [0, 1) at tau = 0.125, 0.375, ... are tau.
    target = jnp.linspace(0.0, 1.0, 1001)
    tau = (2 * jnp.arange(4) + 1) / 8.0
    at_tau = zoo.quantile_huber_loss(tau, target, kappa=0.0)
    for shift in (-0.05, 0.05):
        assert float(zoo.quantile_huber_loss(tau + shift, target, kappa=0.0)) > float(
            at_tau
        )


# --- IQN ---------------------------------------------------------------------


def test_cosine_embedding_by_hand():
    phi = zoo.cosine_embedding(jnp.array([0.0, 0.5, 1.0 / 3.0]), 4)
    assert phi.shape == (3, 4)
    # cos(pi * i * tau) for i = 1..4.
    np.testing.assert_allclose(phi[0], [1.0, 1.0, 1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(phi[1], [0.0, -1.0, 0.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(phi[2], [0.5, -0.5, -1.0, -0.5], atol=1e-6)
    # The exact period reduction and polynomial hold at large i * tau too.
    tau = jr.uniform(jr.PRNGKey(0), (4096,))
    phi = zoo.cosine_embedding(tau, 64)
    i = np.arange(1, 65)
    exact = np.cos(np.pi * np.asarray(tau, np.float64)[:, None] * i)
    np.testing.assert_allclose(phi, exact, atol=1e-5)


def test_quantile_huber_loss_at_given_fractions_by_hand():
    quantiles = jnp.array([0.0, 1.0])
    target = jnp.array([0.5, 3.0])
    # As the midpoint case above, with weights |tau - 1{u<0}| at tau = 0.1, 0.6:
    # u = [[0.5, 3], [-0.5, 2]] -> [[.1, .1], [.4, .6]].
    expected = np.mean([0.1 * 0.125, 0.1 * 2.5]) + np.mean([0.4 * 0.125, 0.6 * 1.5])
    loss = zoo.quantile_huber_loss(
        quantiles, target, kappa=1.0, fractions=jnp.array([0.1, 0.6])
    )
    assert float(loss) == pytest.approx(expected, rel=1e-6)


def test_iqn_loss_uses_the_fractions_its_keys_drew():
    agent = zoo.make("iqn", n_quantiles=3)
    keys = jr.split(jr.PRNGKey(0), 2)
    taken = jnp.array([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]])
    next_taken = jnp.array([[0.5, 1.5, 2.5], [0.0, 2.0, 4.0]])
    reward, discount = jnp.array([1.0, 0.0]), jnp.array([0.5, 0.0])
    losses, priorities = agent.td_loss(taken, next_taken, reward, discount, keys=keys)
    for i in range(2):
        fractions = agent.fractions(keys[i], 3)
        target = reward[i] + discount[i] * next_taken[i]
        expected = zoo.quantile_huber_loss(taken[i], target, 1.0, fractions)
        assert float(losses[i]) == pytest.approx(float(expected), rel=1e-6)
    np.testing.assert_allclose(priorities, losses)


def test_iqn_network_gives_quantiles_at_the_fractions_it_is_given(getkey):
    agent = zoo.make("iqn", hidden_sizes=(16,), embedding_size=8, dueling=True)
    state = agent.init(
        envs.make("CartPole-v1").observation_space,
        envs.Discrete(2),
        key=getkey(),
        num_envs=1,
        total_steps=100,
    )
    net, obs = state.online, jnp.array([0.1, -0.2, 0.03, 0.4])
    z = net.quantiles(obs, jnp.array([0.1, 0.5, 0.9, 0.5]))
    assert z.shape == (2, 4)
    np.testing.assert_array_equal(z[:, 1], z[:, 3])  # same fraction, same quantile
    assert not np.allclose(z[:, 0], z[:, 2])
    with pytest.raises(TypeError, match="quantiles"):
        net(obs)
    # Acting draws its fractions from the key: the same key, the same values.
    q = lambda k: agent.q_values(state, obs, key=k)
    key = getkey()
    np.testing.assert_array_equal(q(key), q(key))
    assert not np.allclose(q(key), q(getkey()))
    # The greedy policy uses the midpoint fractions: no key changes it.
    midpoints = (2 * jnp.arange(32) + 1) / 64.0
    expected = jnp.argmax(jnp.mean(net.quantiles(obs, midpoints), axis=1))
    for _ in range(3):
        action, _ = agent.act(state, obs, key=getkey(), greedy=True)
        assert int(action) == int(expected)


def test_iqn_refuses_bad_sizes_in_one_line():
    for field in ("n_quantiles", "n_policy_quantiles", "embedding_size"):
        with pytest.raises(ValueError, match=f"IQN: {field} must be a positive"):
            zoo.make("iqn", **{field: 0})


# --- Noisy networks and Rainbow -----------------------------------------------


def test_noisy_linear_by_hand(getkey):
    layer = zoo.NoisyLinear(3, 2, key=getkey())
    x, key = jnp.array([0.5, -1.0, 2.0]), getkey()
    k_in, k_out = jr.split(key)
    f = lambda e: np.sign(e) * np.sqrt(np.abs(e))
    eps_in = f(np.asarray(jr.normal(k_in, (3,))))
    eps_out = f(np.asarray(jr.normal(k_out, (2,))))
    w = np.asarray(layer.weight) + np.asarray(layer.weight_sigma) * np.outer(
        eps_out, eps_in
    )
    b = np.asarray(layer.bias) + np.asarray(layer.bias_sigma) * eps_out
    np.testing.assert_allclose(layer(x, key=key), w @ x + b, rtol=1e-5, atol=1e-6)
    # Without a key: the mean weights.
    np.testing.assert_allclose(
        layer(x), np.asarray(layer.weight) @ x + np.asarray(layer.bias), rtol=1e-6
    )
    # The paper's factorised initialisation: sigma0 / sqrt(in).
    np.testing.assert_allclose(layer.weight_sigma, 0.5 / np.sqrt(3), rtol=1e-6)
    assert float(jnp.max(jnp.abs(layer.weight))) <= 1 / np.sqrt(3)


def test_rainbow_is_c51_with_the_five_other_parts_on():
    agent = zoo.make("rainbow")
    assert isinstance(agent, zoo.AbstractCategoricalAgent)
    assert agent.double_q and agent.dueling and agent.noisy
    assert agent.n_step == 3 and agent.num_atoms == 51
    assert isinstance(agent.memory, zoo.PrioritizedReplay)
    assert agent.exploration_initial_eps == agent.exploration_final_eps == 0.0
    assert not zoo.make("rainbow", noisy=False).noisy
    assert not zoo.make("c51").noisy


def test_noisy_heads_are_deterministic_when_greedy_and_resampled_per_key(getkey):
    agent = zoo.make("rainbow", hidden_sizes=(16,), atoms=11)
    env = envs.make("CartPole-v1")
    state = agent.init(
        env.observation_space, env.action_space, key=getkey(), num_envs=1,
        total_steps=100,
    )  # fmt: skip
    net, obs = state.online, jnp.array([0.1, -0.2, 0.03, 0.4])
    assert isinstance(net.head, zoo.NoisyLinear)
    assert isinstance(net.value_head, zoo.NoisyLinear)
    q = lambda k: agent.q_values(state, obs, key=k)
    key = getkey()
    np.testing.assert_array_equal(q(key), q(key))
    assert not np.allclose(q(key), q(getkey()))
    # Greedy: the mean weights, whatever the key.
    mean = agent.value(net(obs))
    for _ in range(3):
        action, _ = agent.act(state, obs, key=getkey(), greedy=True)
        assert int(action) == int(jnp.argmax(mean))
    # An update draws independent noise for the online and target passes:
    # with the target equal to the online network, the loss is still not the
    # loss of one shared draw.
    sample = zoo.Sample(
        batch=Transition(
            obs=jnp.tile(obs, (4, 1)),
            action=jnp.array([0, 1, 0, 1]),
            reward=jnp.ones(4),
            terminated=jnp.zeros(4, bool),
            truncated=jnp.zeros(4, bool),
            next_obs=jnp.tile(obs, (4, 1)),
            extras={},
        ),
        discount=jnp.full(4, 0.99**3),
        weights=jnp.ones(4),
        row=jnp.arange(4),
        env=jnp.zeros(4, jnp.int32),
    )
    _, _, m1 = agent.learn(state, sample, key=key)
    _, _, m2 = agent.learn(state, sample, key=key)
    _, _, m3 = agent.learn(state, sample, key=getkey())
    assert float(m1["loss"]) == float(m2["loss"])
    assert float(m1["loss"]) != float(m3["loss"])


def test_noisy_refuses_a_recurrent_torso_and_a_bad_scale():
    with pytest.raises(ValueError, match="noisy heads with a recurrent torso"):
        zoo.make("rainbow", torso="gru")
    with pytest.raises(ValueError, match=r"noise_scale .* must be > 0"):
        zoo.make("dqn", noisy=True, noise_scale=0.0)


# --- PQN ---------------------------------------------------------------------


def _lambda_returns(terminated, done, lam=0.5):
    false = [False, False, False]
    return zoo.lambda_returns(
        jnp.array([1.0, 2.0, 3.0]),
        jnp.array([10.0, 20.0, 30.0]),
        jnp.array(terminated or false),
        jnp.array(done or false),
        0.5,
        lam,
    )


def test_lambda_returns_by_hand():
    # G2 = 3 + .5 * 30 = 18 (the rollout's end bootstraps);
    # G1 = 2 + .5 * (.5 * 20 + .5 * 18) = 11.5; G0 = 1 + .5 * (.5 * 10 + .5 * 11.5).
    np.testing.assert_allclose(_lambda_returns(None, None), [6.375, 11.5, 18.0])
    # lambda = 0: one-step targets r + gamma * max Q(next).
    np.testing.assert_allclose(_lambda_returns(None, None, lam=0.0), [6.0, 12.0, 18.0])
    # lambda = 1: discounted rewards to the rollout's end, then its bootstrap.
    g1 = 2 + 0.5 * 18.0
    np.testing.assert_allclose(
        _lambda_returns(None, None, lam=1.0), [1 + 0.5 * g1, g1, 18.0]
    )


def test_lambda_returns_bootstrap_through_truncation_not_termination():
    # Truncated at step 1: G1 = 2 + .5 * Q(final obs) = 12, not mixed with G2.
    truncated = _lambda_returns([False, False, False], [False, True, False])
    np.testing.assert_allclose(truncated, [1 + 0.5 * (5 + 6), 12.0, 18.0])
    # Terminated at step 1: G1 = 2.
    terminated = _lambda_returns([False, True, False], [False, True, False])
    np.testing.assert_allclose(terminated, [1 + 0.5 * (5 + 1), 2.0, 18.0])


# --- prioritised replay --------------------------------------------------------


@pytest.mark.parametrize("size", [7, 100, 5000])
def test_sum_tree_finds_the_leaf_of_each_prefix_sum(size):
    values = jr.uniform(jr.PRNGKey(size), (size,)) * (jnp.arange(size) % 3 > 0)
    tree = zoo.SumTree.zeros(size).set(jnp.arange(size), values)
    assert float(tree.total) == pytest.approx(float(values.sum()), rel=1e-5)
    mass = jr.uniform(jr.PRNGKey(1), (2000,)) * tree.total
    expected = jnp.searchsorted(jnp.cumsum(values), mass, side="right")
    np.testing.assert_array_equal(tree.find(mass), expected)
    # Updating a few leaves keeps every ancestor's sum.
    tree = tree.set(jnp.array([0, size - 1]), jnp.array([5.0, 0.0]))
    values = values.at[0].set(5.0).at[size - 1].set(0.0)
    assert float(tree.total) == pytest.approx(float(values.sum()), rel=1e-5)


def _replay(priorities, alpha=1.0):
    """A prioritised replay of 8 one-env transitions with the given priorities."""
    memory = zoo.PrioritizedReplay(8, alpha=alpha, eps=0.0)
    example = Transition(
        jnp.zeros(1), jnp.array(0), jnp.array(0.0), jnp.array(False),
        jnp.array(False), jnp.zeros(1), {},
    )  # fmt: skip
    state = memory.init(example, num_envs=1)
    traj = jax.tree.map(lambda x: jnp.zeros((8, 1, *x.shape), x.dtype), example)
    traj = Transition(
        jnp.arange(8.0).reshape(8, 1, 1), traj.action, jnp.arange(8.0).reshape(8, 1),
        traj.terminated, traj.truncated, traj.next_obs, {},
    )  # fmt: skip
    state = memory.add(state, traj)
    sample = zoo.Sample(
        traj, jnp.ones(8), jnp.ones(8), jnp.arange(8), jnp.zeros(8, int)
    )
    return memory, memory.update_priorities(state, sample, jnp.asarray(priorities))


def test_new_transitions_enter_at_the_largest_priority():
    memory, state = _replay([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    assert float(state.max_priority) == 8.0
    np.testing.assert_allclose(state.tree.get(jnp.arange(8)), np.arange(1.0, 9.0))


def test_prioritised_sampling_frequencies_and_importance_weights():
    priorities = np.arange(1.0, 9.0)  # alpha = 0.5 below: p**0.5
    memory, state = _replay(priorities, alpha=0.5)
    sample = jax.jit(lambda k: memory.sample(state, 4096, key=k, beta=0.5))(
        jr.PRNGKey(0)
    )
    share = np.sqrt(priorities) / np.sqrt(priorities).sum()
    counts = np.bincount(np.asarray(sample.row), minlength=8) / 4096
    np.testing.assert_allclose(counts, share, atol=0.01)
    # Weights (N * P(i))**-beta over the batch's largest, the rarest's weight.
    expected = (8 * share) ** -0.5 / (8 * share.min()) ** -0.5
    np.testing.assert_allclose(sample.weights, expected[sample.row], rtol=1e-4)
    # The sampled transitions are the stored ones (the observation is the row).
    np.testing.assert_array_equal(sample.batch.obs[:, 0], sample.row)
    # beta = 0: no correction.
    flat = memory.sample(state, 64, key=jr.PRNGKey(1), beta=0.0)
    np.testing.assert_allclose(flat.weights, 1.0)


# --- probes --------------------------------------------------------------------

GAMMA = 0.9
REPLAY = dict(
    gamma=GAMMA,
    learning_rate=5e-3,
    buffer_size=2_000,
    batch_size=64,
    learning_starts=256,
    gradient_steps=2,
    target_update_interval=1,
    tau=0.1,
    exploration_steps=1_000,
    # Enough of the unrewarded action to pin its value down too.
    exploration_final_eps=0.2,
    hidden_sizes=(32,),
)
AGENTS = {
    "c51": lambda: zoo.make("c51", v_min=-1.0, v_max=2.0, **REPLAY),
    "qrdqn": lambda: zoo.make("qrdqn", **REPLAY),
    "iqn": lambda: zoo.make("iqn", n_quantiles=16, **REPLAY),
    # All six parts, and epsilon-greedy beside the noise: the probe's check of
    # the unrewarded action's value needs that action taken.
    "rainbow": lambda: zoo.make(
        "rainbow", v_min=-1.0, v_max=2.0, exploration_initial_eps=1.0, **REPLAY
    ),
    "dqn_per": lambda: zoo.make("dqn", prioritized=True, huber_delta=10.0, **REPLAY),
    "pqn": lambda: zoo.make(
        "pqn",
        gamma=GAMMA,
        learning_rate=5e-3,
        num_steps=8,
        num_minibatches=2,
        exploration_steps=2_000,
        hidden_sizes=(32,),
    ),
    "a2c": lambda: zoo.make(
        "a2c", gamma=GAMMA, learning_rate=3e-3, num_steps=8, hidden_sizes=(32,)
    ),
}
STEPS = {
    "c51": 8_000,
    "qrdqn": 8_000,
    "iqn": 8_000,
    "rainbow": 8_000,
    "dqn_per": 8_000,
    "pqn": 8_000,
    "a2c": 16_000,
}


def _q(agent, state, obs, key):
    """The action values the agent acts on (IQN's from fractions it draws; a
    noisy network's at its mean weights)."""
    if getattr(agent, "noisy", False):
        return agent.value(agent.outputs(state.online, obs, key=None))
    return agent.q_values(state, obs, key=key)


def _values(name, agent, state, obs):
    """V for A2C, max_a Q for the rest, at each observation."""
    obs = jnp.asarray(obs, jnp.float32)[:, None]
    if name == "a2c":
        return jax.vmap(state.critic)(obs)
    q = jax.vmap(lambda o: _q(agent, state, o, jr.PRNGKey(0)))(obs)
    return jnp.max(q, axis=1)


def _trained(name, env_name, key):
    """Agent `name` with its default config, trained on the probe `env_name`."""
    agent = AGENTS[name]()
    env = envs.make(env_name)
    return agent, runners.train(
        agent, env, key=key, total_steps=STEPS[name], num_envs=8
    )


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_value_of_a_reward_one_step_later_is_discounted(name, getkey):
    """`probe/TwoStepDiscount`: reward 0, then 1: V = gamma, then 1."""
    agent, (state, metrics) = _trained(name, "probe/TwoStepDiscount", getkey())
    assert np.all(np.isfinite(metrics["loss"]))
    values = _values(name, agent, state.agent_state, [0.0, 1.0])
    np.testing.assert_allclose(values, [GAMMA, 1.0], atol=0.1)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_the_rewarded_action_is_learnt(name, getkey):
    """`probe/ActionReward`: action 1 gives 1, action 0 nothing."""
    agent, (state, _) = _trained(name, "probe/ActionReward", getkey())
    s = state.agent_state
    action, _ = agent.act(s, jnp.zeros(1), key=getkey(), greedy=True)
    assert int(action) == 1
    if name != "a2c":
        q = _q(agent, s, jnp.zeros(1), getkey())
        np.testing.assert_allclose(q, [0.0, 1.0], atol=0.1)


def test_prioritised_replay_is_an_option_of_every_replay_agent():
    for name in ("dqn", "c51", "qrdqn", "sac", "td3", "ddpg"):
        agent = zoo.make(name, prioritized=True, priority_alpha=0.5)
        assert isinstance(agent.memory, zoo.PrioritizedReplay)
        assert agent.memory.alpha == 0.5
        assert isinstance(zoo.make(name).memory, zoo.Replay)


def test_training_writes_priorities_back(getkey):
    agent = zoo.make(
        "dqn", prioritized=True, learning_starts=256, buffer_size=1024,
        hidden_sizes=(16,),
    )  # fmt: skip
    state, _ = runners.train(
        agent, envs.make("CartPole-v1"), key=getkey(), total_steps=2048, num_envs=4
    )
    memory = state.memory
    leaves = np.asarray(memory.tree.get(jnp.arange(1024)))
    # Written TD errors differ from the initial priority of 1 and from each other.
    assert float(memory.max_priority) > 1.0
    assert len(np.unique(leaves)) > 100
    assert float(memory.tree.total) == pytest.approx(leaves.sum(), rel=1e-4)
