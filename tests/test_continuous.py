"""SAC, TQC, CrossQ, TD3 and DDPG: action scaling, targets, temperature,
batch normalisation, probes, bad input."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo

SMALL = dict(
    learning_rate=3e-3,
    buffer_size=4_000,
    batch_size=64,
    learning_starts=256,
    hidden_sizes=(32, 32),
)
AGENTS = {
    "sac": lambda **kw: zoo.make("sac", **{"alpha_learning_rate": 3e-3, **SMALL, **kw}),
    "td3": lambda **kw: zoo.make("td3", **{"exploration_noise": 0.3, **SMALL, **kw}),
    "ddpg": lambda **kw: zoo.make("ddpg", **{"exploration_noise": 0.3, **SMALL, **kw}),
    "tqc": lambda **kw: zoo.make(
        "tqc", **{"alpha_learning_rate": 3e-3, "n_quantiles": 5, **SMALL, **kw}
    ),
    "crossq": lambda **kw: zoo.make(
        "crossq",
        **{"alpha_learning_rate": 3e-3, "critic_hidden_sizes": (64, 64), **SMALL, **kw},
    ),
}
ASYMMETRIC = envs.Box(np.array([0.0, -3.0]), np.array([4.0, -1.0]))


def _init(agent, obs_space, action_space, key):
    return agent.init(obs_space, action_space, key=key, num_envs=1, total_steps=1000)


def _sample(obs, action, reward, next_obs, terminated, discount):
    n = reward.shape[0]
    batch = zoo.Transition(
        obs=obs,
        action=action,
        reward=reward,
        terminated=terminated,
        truncated=jnp.zeros(n, bool),
        next_obs=next_obs,
        extras={},
    )
    index = jnp.zeros(n, jnp.int32)
    return zoo.Sample(batch, discount, jnp.ones(n), index, index)


def test_action_scaling_maps_the_unit_box_onto_the_bounds_exactly():
    unit = jnp.array([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0], [0.5, -0.5]])
    scaled = jax.vmap(lambda a: zoo.scale_action(ASYMMETRIC, a))(unit)
    np.testing.assert_array_equal(
        scaled, [[0.0, -3.0], [4.0, -1.0], [2.0, -2.0], [3.0, -2.5]]
    )
    np.testing.assert_allclose(zoo.unscale_action(ASYMMETRIC, scaled), unit)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_actions_lie_within_the_bounds(name, getkey):
    agent = AGENTS[name]()
    obs_space = envs.Box(-1.0, 1.0, (3,))
    state = _init(agent, obs_space, ASYMMETRIC, getkey())
    obs = 5.0 * jr.normal(getkey(), (256, 3))
    for greedy in (False, True):
        actions = jax.vmap(lambda o, k: agent.act(state, o, key=k, greedy=greedy)[0])(
            obs, jr.split(getkey(), 256)
        )
        assert actions.shape == (256, 2)
        actions = np.asarray(actions)
        assert np.all(actions >= ASYMMETRIC.low) and np.all(actions <= ASYMMETRIC.high)


def _set_heads(critics, values):
    """Stacked critics whose outputs are `values[i]` whatever the input (a
    row of quantiles each for quantile critics)."""
    values = jnp.asarray(values, jnp.float32)
    return eqx.tree_at(
        lambda c: (c.head.weight, c.head.bias),
        critics,
        (
            jnp.zeros_like(critics.head.weight),
            values[:, None] if values.ndim == 1 else values,
        ),
    )


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_target_takes_the_minimum_of_the_twin_critics(name, getkey):
    agent = AGENTS[name]()
    obs_space, action_space = envs.Box(-1.0, 1.0, (1,)), envs.Box(-1.0, 1.0, (1,))
    state = _init(agent, obs_space, action_space, getkey())
    twins = _set_heads(state.critics, [3.0, -2.0])
    if name == "sac":
        # A negligible temperature leaves only the critics in the soft target.
        state = eqx.tree_at(
            lambda s: (s.target, s.log_alpha), state, (twins, jnp.array(-40.0))
        )
    else:
        state = eqx.tree_at(lambda s: s.target, state, (state.target[0], twins))
    n = 5
    sample = _sample(
        jnp.zeros((n, 1)),
        jnp.zeros((n, 1)),
        jnp.arange(n, dtype=jnp.float32),
        jnp.zeros((n, 1)),
        jnp.array([False, False, False, False, True]),
        jnp.full(n, 0.5),
    )
    y = agent.td_target(state, sample, key=getkey())
    # reward + 0.5 * min(3, -2), and no bootstrap where the episode terminated.
    np.testing.assert_allclose(y, [-1.0, 0.0, 1.0, 2.0, 4.0], atol=1e-5)


@pytest.mark.parametrize(("scale", "direction"), [(-5.0, 1.0), (5.0, -1.0)])
def test_temperature_moves_toward_the_target_entropy(scale, direction, getkey):
    # Target entropy +5 per dimension cannot be reached: alpha must rise; -5 is
    # far below the initial policy's entropy: alpha must fall.
    agent = AGENTS["sac"](target_entropy_scale=scale, learning_starts=0)
    obs_space, action_space = envs.Box(-1.0, 1.0, (1,)), envs.Box(-1.0, 1.0, (1,))
    state = _init(agent, obs_space, action_space, getkey())
    n = 64
    sample = _sample(
        jr.normal(getkey(), (n, 1)),
        jr.uniform(getkey(), (n, 1), minval=-1.0, maxval=1.0),
        jnp.zeros(n),
        jr.normal(getkey(), (n, 1)),
        jnp.zeros(n, bool),
        jnp.full(n, 0.9),
    )
    alpha0 = float(jnp.exp(state.log_alpha))
    for _ in range(5):
        state, _, metrics = agent.learn(state, sample, key=getkey())
    assert direction * (float(jnp.exp(state.log_alpha)) - alpha0) > 0
    assert float(metrics["alpha"]) == pytest.approx(float(jnp.exp(state.log_alpha)))


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_critic_fits_the_continuous_action_reward_probe(name, getkey):
    # One step, reward -(a - 0.5)^2 for a in [-1, 1]: a correct critic learns
    # Q(s, a) = -(a - 0.5)^2 and the greedy action goes to 0.5.
    agent = AGENTS[name](gamma=0.9)
    env = envs.make("probe/ContinuousActionReward")
    state, _ = runners.train(agent, env, key=getkey(), total_steps=4_000, num_envs=4)
    s = state.agent_state
    obs = jnp.zeros(1)
    action, _ = agent.act(s, obs, key=getkey(), greedy=True)
    assert float(action[0]) == pytest.approx(0.5, abs=0.15)
    if name == "crossq":
        # In inference mode (running statistics) the batch-normalised critics
        # fit the actions the replay holds most: near the optimum to 0.12, the
        # edges, seldom tried once the policy settles, only in order.
        acts = jnp.array([[-0.5], [0.0], [0.5]])
        values = agent.critic_values(s.critics, s.critic_state, jnp.zeros((3, 1)), acts)
        np.testing.assert_allclose(values[1:], [[-0.25] * 2, [0.0] * 2], atol=0.12)
        assert np.all(values[0] < values[1]) and np.all(values[1] < values[2])
        return
    for a in (-0.5, 0.0, 0.5, 1.0):
        # Every critic, at an action in [-1, 1] units (the probe's own bounds);
        # a quantile critic's mean.
        values = eqx.filter_vmap(lambda c: c(obs, jnp.array([a])))(s.critics)
        values = values.mean(axis=-1) if values.ndim > 1 else values
        np.testing.assert_allclose(values, -((a - 0.5) ** 2), atol=0.12)


@pytest.mark.parametrize(
    ("name", "hparams", "match"),
    [
        ("sac", {"tau": 0.0}, r"tau must be in \(0, 1\]"),
        ("td3", {"tau": 1.5}, r"tau must be in \(0, 1\]"),
        ("ddpg", {"tau": -0.1}, r"tau must be in \(0, 1\]"),
        ("td3", {"policy_delay": 0}, "policy_delay must be positive"),
        ("td3", {"exploration_noise": -0.1}, "exploration_noise must be >= 0"),
        ("td3", {"target_noise": -0.2}, "target_noise must be >= 0"),
        ("ddpg", {"exploration_noise": -1.0}, "exploration_noise must be >= 0"),
        ("ddpg", {"noise_sample_freq": -1}, "noise_sample_freq must be >= 0"),
        ("sac", {"log_std_bounds": (2.0, -5.0)}, "low < high"),
        ("sac", {"log_std_bounds": (1.0,)}, "must be a list of 2 numbers"),
        ("sac", {"alpha_init": 0.0}, "alpha_init must be positive"),
        ("tqc", {"top_quantiles_to_drop_per_net": 25}, r"in \[0, n_quantiles=25\)"),
        ("tqc", {"n_quantiles": 0}, "n_quantiles must be positive"),
        ("crossq", {"policy_delay": 0}, "policy_delay must be positive"),
        ("crossq", {"critic_hidden_sizes": ()}, "critic_hidden_sizes must be"),
        ("crossq", {"batch_norm_momentum": 1.0}, r"batch_norm_momentum must be in"),
        ("crossq", {"torso": "simba"}, r"torso='simba' is not supported"),
    ],
)
def test_invalid_values_fail_at_construction(name, hparams, match):
    with pytest.raises(ValueError, match=match):
        zoo.make(name, **hparams)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_discrete_or_unbounded_actions_fail_before_compiling(name):
    agent = zoo.make(name)
    with pytest.raises(ValueError, match=r"needs a continuous \(Box\) action space"):
        runners.validate(agent, envs.make("CartPole-v1"), 4, 1000)
    obs_space = envs.make("Pendulum-v1").observation_space
    infinite = envs.Box(-np.inf, np.inf, (1,))
    with pytest.raises(ValueError, match=r"squashes its actions.*not finite"):
        agent.check(obs_space, infinite, 4)
    runners.validate(agent, envs.make("Pendulum-v1"), 4, 1000)  # bounded: fine


def test_state_dependent_noise_holds_between_draws(getkey):
    agent = AGENTS["td3"](exploration_noise=0.3, noise_sample_freq=100)
    obs_space, action_space = envs.Box(-1.0, 1.0, (2,)), envs.Box(-1.0, 1.0, (1,))
    state = _init(agent, obs_space, action_space, getkey())
    obs = jnp.array([0.3, -0.2])
    act = lambda s, k: float(agent.act(s, obs, key=k)[0][0])
    greedy = float(agent.act(state, obs, key=getkey(), greedy=True)[0][0])
    first = act(state, getkey())
    assert first != greedy
    assert act(state, getkey()) == first  # same draw until 100 env steps pass
    later = eqx.tree_at(lambda s: s.env_steps, state, jnp.array(100, jnp.int32))
    assert act(later, getkey()) != first
    # Over many draws the noise is N(0, 0.3^2) (before clipping to [-1, 1]).
    draws = jax.vmap(
        lambda n: agent.act(
            eqx.tree_at(lambda s: s.env_steps, state, n * 100), obs, key=getkey()
        )[0][0]
    )(jnp.arange(2000, dtype=jnp.int32))
    assert float(jnp.std(draws - greedy)) == pytest.approx(0.3, rel=0.1)


def test_uniform_fan_in_draws_every_layer_at_its_own_scale(getkey):
    critic = zoo.QCritic((3,), 1, (256, 64), key=getkey())
    layers = [*critic.torso.layers, critic.head]
    for layer in layers:
        limit = 1.0 / np.sqrt(layer.in_features)
        for x in (np.asarray(layer.weight), np.asarray(layer.bias)):
            assert np.all(np.abs(x) <= limit)
        # Uniform on [-limit, limit]: standard deviation limit / sqrt(3).
        w = np.asarray(layer.weight)
        if w.size > 1000:
            assert w.std() == pytest.approx(limit / np.sqrt(3), rel=0.05)
    # Independent draws: no two layers share values.
    assert not np.allclose(layers[1].weight[0, :4], layers[0].weight[:4, 0])


def test_sde_exploration_holds_between_draws_and_depends_on_the_state(getkey):
    agent = AGENTS["sac"](use_sde=True, sde_sample_freq=50, sde_log_std_init=-1.0)
    obs_space, action_space = envs.Box(-1.0, 1.0, (2,)), envs.Box(-1.0, 1.0, (1,))
    state = _init(agent, obs_space, action_space, getkey())
    assert isinstance(state.actor, zoo.SDEActor)
    a, b = jnp.array([0.3, -0.2]), jnp.array([-0.5, 0.4])
    act = lambda s, o: float(agent.act(s, o, key=getkey())[0][0])
    greedy = float(agent.act(state, a, key=getkey(), greedy=True)[0][0])
    mean, _ = state.actor(a)
    assert greedy == pytest.approx(float(jnp.tanh(mean[0])), abs=1e-6)
    first = act(state, a)
    assert first != greedy
    assert act(state, a) == first  # one matrix until 50 env steps pass
    later = eqx.tree_at(lambda s: s.env_steps, state, jnp.array(50, jnp.int32))
    assert act(later, a) != first
    # The same matrix gives other noise at another state.
    noise = lambda o: (
        act(state, o) - float(agent.act(state, o, key=getkey(), greedy=True)[0][0])
    )
    assert noise(a) != pytest.approx(noise(b))


def test_sde_log_density_is_the_state_dependent_gaussian_squashed(getkey):
    agent = AGENTS["sac"](use_sde=True, sde_log_std_init=-0.5)
    obs_space, action_space = envs.Box(-1.0, 1.0, (3,)), envs.Box(-1.0, 1.0, (2,))
    actor = _init(agent, obs_space, action_space, getkey()).actor
    obs = jr.uniform(getkey(), (256, 3), minval=-1.0, maxval=1.0)
    key = getkey()
    action, log_prob = agent._sample_actions(actor, obs, key)
    # By hand: u = mean + z @ W for one W of the batch; u_j ~ N(mean_j,
    # sum_i z_i^2 exp(log_std_ij)^2) at each state; tanh's Jacobian.
    mean, z = jax.vmap(actor)(obs)
    w = jnp.exp(actor.log_std) * jr.normal(key, actor.log_std.shape)
    u = mean + z @ w
    np.testing.assert_allclose(action, jnp.tanh(u), rtol=1e-5, atol=1e-6)
    std = jnp.sqrt((z**2) @ jnp.exp(2 * actor.log_std) + 1e-6)
    gauss = jax.scipy.stats.norm.logpdf(u, mean, std).sum(axis=1)
    expected = gauss - jnp.log(1.0 - jnp.tanh(u) ** 2).sum(axis=1)
    np.testing.assert_allclose(log_prob, expected, rtol=1e-4, atol=1e-4)
    # Reparameterised: the log-density's gradient reaches the learnt scales.
    grad = jax.grad(
        lambda a: agent._sample_actions(a, obs, key)[1].mean(), allow_int=True
    )(actor)
    assert float(jnp.abs(grad.log_std).sum()) > 0


# --- TQC ---------------------------------------------------------------------


def test_tqc_truncation_pools_sorts_and_drops_the_largest():
    quantiles = jnp.array([[0.0, 1.0, 2.0, 9.0], [3.0, 4.0, 5.0, 8.0]])
    np.testing.assert_array_equal(
        zoo.truncated_atoms(quantiles, 1), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    )
    np.testing.assert_array_equal(zoo.truncated_atoms(quantiles, 0).shape, (8,))


def test_tqc_target_is_the_kept_atoms_discounted_onto_the_reward(getkey):
    agent = AGENTS["tqc"](n_quantiles=4, top_quantiles_to_drop_per_net=1)
    obs_space, action_space = envs.Box(-1.0, 1.0, (1,)), envs.Box(-1.0, 1.0, (1,))
    state = _init(agent, obs_space, action_space, getkey())
    critics = _set_heads(state.critics, [[0.0, 1.0, 2.0, 9.0], [3.0, 4.0, 5.0, 8.0]])
    # A negligible temperature leaves only the critics in the soft target.
    state = eqx.tree_at(
        lambda s: (s.target, s.log_alpha), state, (critics, jnp.array(-40.0))
    )
    sample = _sample(
        jnp.zeros((2, 1)),
        jnp.zeros((2, 1)),
        jnp.array([1.0, 2.0]),
        jnp.zeros((2, 1)),
        jnp.array([False, True]),
        jnp.full(2, 0.5),
    )
    y = agent.td_target(state, sample, key=getkey())
    kept = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_allclose(y, [1.0 + 0.5 * kept, np.full(6, 2.0)], atol=1e-5)


def test_tqc_critic_loss_by_hand():
    agent = zoo.make("tqc", n_quantiles=2, top_quantiles_to_drop_per_net=0)
    q = jnp.array([[[0.0, 1.0], [2.0, 0.5]]])  # [batch 1, 2 critics, 2 quantiles]
    y = jnp.array([[0.5, 3.0, -1.0]])
    loss = agent.critic_losses(q, y)  # pyright: ignore[reportOptionalCall]
    tau = np.array([0.25, 0.75])

    def critic(z):
        u = np.asarray(y[0])[None, :] - np.asarray(z)[:, None]
        huber = np.where(np.abs(u) <= 1.0, 0.5 * u**2, np.abs(u) - 0.5)
        weight = np.abs(tau[:, None] - (u < 0))
        return (weight * huber).mean()  # over quantiles and atoms, as the paper

    expected = critic(q[0, 0]) + critic(q[0, 1])
    assert float(loss[0]) == pytest.approx(expected, rel=1e-6)
    # The actor maximises the mean of every critic's quantiles.
    assert float(agent.policy_value(q)[0]) == pytest.approx(0.875)


def test_batch_norm_trains_on_the_batch_and_infers_with_running_statistics():
    layer, state = eqx.nn.make_with_state(zoo.BatchNorm)(2, momentum=0.9, eps=0.0)
    x = jnp.array([[1.0, 10.0], [3.0, 10.0], [5.0, 16.0], [7.0, 12.0]])
    y, moved = layer(x, state, inference=False)
    # The batch's own statistics: mean [4, 12], biased variance [5, 6].
    np.testing.assert_allclose(y.mean(axis=0), 0.0, atol=1e-6)
    np.testing.assert_allclose(y.var(axis=0), 1.0, rtol=1e-5)
    mean, var = moved.get(layer.stats)
    np.testing.assert_allclose(mean, [0.4, 1.2], rtol=1e-6)  # 0.9 * 0 + 0.1 * m
    np.testing.assert_allclose(var, [0.9 + 0.5, 0.9 + 0.6], rtol=1e-6)
    # Inference: the running statistics normalise, and the state stays as it was.
    z, same = layer(x, moved, inference=True)
    np.testing.assert_allclose(z, (x - mean[None]) / jnp.sqrt(var)[None], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(moved), strict=True):
        np.testing.assert_array_equal(a, b)


def test_crossq_joint_pass_normalises_current_and_next_together(getkey):
    agent = AGENTS["crossq"](critic_hidden_sizes=(8,), batch_norm_momentum=0.5)
    obs_space, action_space = envs.Box(-1.0, 1.0, (1,)), envs.Box(-1.0, 1.0, (1,))
    state = _init(agent, obs_space, action_space, getkey())
    assert state.target == ()  # no target network
    n = 6
    obs, next_obs = jnp.full((n, 1), 2.0), jnp.full((n, 1), -4.0)
    sample = _sample(
        obs,
        jnp.zeros((n, 1)),
        jnp.zeros(n),
        next_obs,
        jnp.zeros(n, bool),
        jnp.full(n, 0.9),
    )
    new, _, metrics = agent.learn(state, sample, key=getkey())
    # The input layer's statistics saw both halves: the observations' mean is
    # (2 - 4) / 2 = -1, moved half way from 0.
    norm = new.critics.norms[0]
    mean, _ = new.critic_state.get(norm.stats)
    np.testing.assert_allclose(mean[:, 0], [-0.5, -0.5], rtol=1e-6)
    # The actor and temperature wait for the third critic step (policy_delay 3).
    assert float(metrics["actor_loss"]) == 0.0
    np.testing.assert_array_equal(new.log_alpha, state.log_alpha)
    for step in (1, 2):  # the runner counts the steps
        new = eqx.tree_at(lambda s: s.step, new, jnp.array(step, jnp.int32))
        new, _, metrics = agent.learn(new, sample, key=getkey())
    assert float(metrics["actor_loss"]) != 0.0
    assert float(new.log_alpha) != float(state.log_alpha)
