"""Memory, GAE, the compiled training loop, the host loop and evaluation."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo


def _transitions(rewards, terminated=None, truncated=None):
    """A `[steps, num_envs]` trajectory: obs and reward both hold `rewards`."""
    r = jnp.asarray(rewards, dtype=jnp.float32)
    z = jnp.zeros(r.shape, bool)
    term = z if terminated is None else jnp.asarray(terminated, bool)
    trunc = z if truncated is None else jnp.asarray(truncated, bool)
    obs = r[..., None]
    return zoo.Transition(obs, r.astype(jnp.int32), r, term, trunc, obs + 0.5, {})


def _empty(replay, num_envs):
    example = jax.tree.map(lambda x: x[0, 0], _transitions([[0.0]]))
    return replay.init(example, num_envs)


def test_replay_wraps_around():
    # Ten transitions of two envs: five rows, each env in time order.
    replay = zoo.Replay(capacity=10)
    state = _empty(replay, 2)
    state = replay.add(state, _transitions([[1.0, 11.0], [2.0, 12.0], [3.0, 13.0]]))
    assert (int(state.position), int(state.size), int(state.count)) == (3, 3, 6)
    state = replay.add(
        state, _transitions([[4.0, 14.0], [5.0, 15.0], [6.0, 16.0], [7.0, 17.0]])
    )
    # Seven steps in five rows: the two oldest were overwritten.
    assert (int(state.position), int(state.size), int(state.count)) == (2, 5, 14)
    np.testing.assert_array_equal(state.data.reward[:, 0], [6.0, 7.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(state.data.obs[:, 1, 0], [16, 17, 13, 14, 15])
    sample = replay.sample(state, 1000, key=jr.PRNGKey(0))
    batch, discount = sample.batch, sample.discount
    assert set(np.unique(batch.reward).tolist()) == {
        3.0,
        4.0,
        5.0,
        6.0,
        7.0,
        13.0,
        14.0,
        15.0,
        16.0,
        17.0,
    }
    np.testing.assert_array_equal(batch.next_obs[:, 0], batch.reward + 0.5)
    np.testing.assert_array_equal(discount, 1.0)


def test_replay_samples_only_filled_slots():
    replay = zoo.Replay(capacity=100)
    state = replay.add(_empty(replay, 1), _transitions([[1.0], [2.0]]))
    batch = replay.sample(state, 500, key=jr.PRNGKey(1)).batch
    assert set(np.unique(batch.reward).tolist()) == {1.0, 2.0}


def test_replay_n_step_returns_stop_at_episode_ends():
    replay = zoo.Replay(capacity=4)
    # One env: rewards 1, 2, 4, 8; the episode terminates on the second step.
    state = replay.add(
        _empty(replay, 1),
        _transitions([[1.0], [2.0], [4.0], [8.0]], terminated=[[0], [1], [0], [0]]),
    )
    sample = replay.sample(state, 400, key=jr.PRNGKey(2), n_step=2, gamma=0.5)
    batch, discount = sample.batch, sample.discount
    start = np.asarray(batch.obs[:, 0])
    # Windows of two steps start at rows 0, 1, 2 (row 3 has no successor yet).
    assert set(start.tolist()) == {1.0, 2.0, 4.0}
    for s, r, d, term, nxt in zip(
        start,
        batch.reward,
        discount,
        batch.terminated,
        batch.next_obs[:, 0],
        strict=True,
    ):
        if s == 1.0:  # 1 + 0.5 * 2, then the episode terminated
            assert (float(r), float(d), bool(term), float(nxt)) == (
                2.0,
                0.25,
                True,
                2.5,
            )
        elif s == 2.0:  # terminates at once: one step
            assert (float(r), float(d), bool(term), float(nxt)) == (2.0, 0.5, True, 2.5)
        else:  # 4 + 0.5 * 8, bootstrap from the observation after 8
            assert (float(r), float(d), bool(term), float(nxt)) == (
                8.0,
                0.25,
                False,
                8.5,
            )


def _gae_reference(reward, value, next_value, done, gamma, lam):
    adv = np.zeros_like(reward)
    last = np.zeros(reward.shape[1:])
    for t in reversed(range(len(reward))):
        delta = reward[t] + gamma * next_value[t] - value[t]
        last = delta + gamma * lam * (1.0 - done[t]) * last
        adv[t] = last
    return adv


def test_gae_matches_hand_computed_reference():
    rng = np.random.default_rng(0)
    T, N = 7, 3
    reward = rng.normal(size=(T, N)).astype(np.float32)
    value = rng.normal(size=(T, N)).astype(np.float32)
    next_value = rng.normal(size=(T, N)).astype(np.float32)
    done = (rng.random((T, N)) < 0.3).astype(np.float32)
    ours = zoo.gae(*map(jnp.asarray, (reward, value, next_value, done)), 0.97, 0.9)
    ref = _gae_reference(reward, value, next_value, done, 0.97, 0.9)
    np.testing.assert_allclose(np.asarray(ours), ref, rtol=1e-5, atol=1e-5)


def test_gae_two_steps_by_hand():
    # r = [1, 2], V = [0.5, 0.25], V(s_2) = 4, gamma = 0.5, lambda = 1:
    # A_1 = 2 + 0.5 * 4 - 0.25 = 3.75;  A_0 = 1 + 0.5 * 0.25 - 0.5 + 0.5 * 3.75 = 2.5
    adv = zoo.gae(
        jnp.array([[1.0], [2.0]]),
        jnp.array([[0.5], [0.25]]),
        jnp.array([[0.25], [4.0]]),
        jnp.zeros((2, 1)),
        0.5,
        1.0,
    )
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [2.5, 3.75])


SMALL = {
    "ppo": lambda: zoo.make("ppo", num_steps=16, num_minibatches=2, hidden_sizes=(16,)),
    "dqn": lambda: zoo.make(
        "dqn", learning_starts=64, batch_size=16, hidden_sizes=(16,)
    ),
}


@pytest.mark.parametrize("agent_name", ["ppo", "dqn"])
def test_seed_vmap_equals_single_runs(agent_name):
    agent, env = SMALL[agent_name](), envs.make("CartPole-v1")
    keys = jr.split(jr.PRNGKey(42), 3)
    train = lambda k: runners.train(agent, env, key=k, total_steps=1024, num_envs=4)
    batched_state, batched_metrics = jax.vmap(train)(keys)
    for i in range(3):
        state, metrics = train(keys[i])
        for a, b in zip(
            jax.tree.leaves(state), jax.tree.leaves(batched_state), strict=True
        ):
            np.testing.assert_allclose(
                np.asarray(a), np.asarray(b)[i], rtol=1e-4, atol=1e-5
            )
        np.testing.assert_allclose(
            metrics["loss"], batched_metrics["loss"][i], rtol=1e-4, atol=1e-5
        )


# One two-seed PPO run on CartPole: the tests below make the same call, so that
# the compiled programs are shared.
PPO_RUN = {
    "key": jr.PRNGKey(7),
    "total_steps": 2048,
    "num_envs": 4,
    "num_seeds": 2,
    "eval_every": 512,
    "eval_episodes": 4,
}


def test_run_in_chunks_equals_one_call_and_reports_floats():
    agent, env = SMALL["ppo"](), envs.make("CartPole-v1")
    reports = []
    # 4 chunks of 8 iterations of 4 envs x 16 steps.
    result = runners.run(agent, env, **PPO_RUN, callback=reports.append)
    assert result.total_steps == 2048
    assert [r.env_steps for r in reports] == [512, 1024, 1536, 2048]
    assert all(isinstance(v, float) for r in reports for v in r.train.values())
    assert all(len(r.eval_returns) == 2 for r in reports)
    assert result.final_returns.shape == (2, 4)
    keys = jr.split(jr.PRNGKey(7), 2)
    state, _ = jax.vmap(
        lambda k: runners.train(agent, env, key=k, total_steps=2048, num_envs=4)
    )(keys)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(result.state), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_run_validates_before_compiling():
    agent, env = zoo.make("ppo"), envs.make("CartPole-v1")
    for bad, message in [
        ({"num_seeds": 0}, "num_seeds must be a positive integer"),
        ({"eval_episodes": 0}, "eval_episodes must be positive"),
        ({"num_envs": 0}, "num_envs must be a positive integer"),
    ]:
        with pytest.raises(ValueError, match=message):
            runners.run(agent, env, key=jr.PRNGKey(0), total_steps=100, **bad)


def test_evaluate_returns_one_return_per_episode(getkey, init_state):
    agent, env = SMALL["ppo"](), envs.make("probe/TruncatedConstantReward")
    state = init_state(agent, env, getkey(), 1, 16)
    returns = runners.evaluate(agent, state, env, key=getkey(), num_episodes=5)
    # Every episode is truncated after exactly 5 steps of reward 1.
    np.testing.assert_array_equal(np.asarray(returns), [5.0] * 5)


# Using a trained agent: evaluation of `TrainState`s, one seed of a run, and the
# template that loading a saved state needs.


@pytest.fixture(scope="module")
def ppo_run():
    """A two-seed PPO run on CartPole; the same call as
    `test_run_in_chunks_equals_one_call_and_reports_floats`, so whichever runs
    second reuses the compiled programs."""
    agent, env = SMALL["ppo"](), envs.make("CartPole-v1")
    return agent, env, runners.run(agent, env, **PPO_RUN)


def _assert_same_shapes(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert (x.shape, x.dtype) == (y.shape, y.dtype)


def _weak(tree) -> list[str]:
    return [
        jax.tree_util.keystr(path)
        for path, x in jax.tree_util.tree_leaves_with_path(tree)
        if getattr(x, "weak_type", False)
    ]


def test_evaluate_accepts_train_states(ppo_run):
    agent, env, result = ppo_run
    key = jr.PRNGKey(3)
    seeded = runners.evaluate(agent, result.state, env, key=key, num_episodes=4)
    assert seeded.shape == (2, 4)
    for i in range(2):
        one = runners.seed_state(result.state, i)
        k = jr.fold_in(key, i)
        # One seed's TrainState (shaped like `runners.train`'s) and its agent
        # state evaluate alike, and like row i of the seeded evaluation.
        single = runners.evaluate(agent, one, env, key=k, num_episodes=4)
        by_agent = runners.evaluate(agent, one.agent_state, env, key=k, num_episodes=4)
        assert single.shape == (4,)
        np.testing.assert_array_equal(np.asarray(single), np.asarray(by_agent))
        np.testing.assert_allclose(np.asarray(seeded[i]), np.asarray(single))
    stacked = jax.tree.map(lambda x: x[None], result.state)
    with pytest.raises(ValueError, match="one leading seed axis"):
        runners.evaluate(agent, stacked, env, key=key, num_episodes=4)


def test_seed_state_takes_one_seed(ppo_run):
    agent, env, result = ppo_run
    state = result.state
    last = runners.seed_state(state, -1)
    for a, b in zip(jax.tree.leaves(last), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[1])
    # The state `runners.train` returns for one seed has the same shapes.
    trained, _ = eqx.filter_eval_shape(
        runners.train, agent, env, key=jr.PRNGKey(0), total_steps=2048, num_envs=4
    )
    _assert_same_shapes(last, trained)
    agent_state = runners.seed_state(state.agent_state, 1)
    _assert_same_shapes(agent_state, last.agent_state)
    with pytest.raises(IndexError, match="seed index 2 is out of range for 2"):
        runners.seed_state(state, 2)
    with pytest.raises(IndexError, match="seed index -3 is out of range"):
        runners.seed_state(state, -3)
    with pytest.raises(TypeError):
        runners.seed_state(state, 0.5)  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="seed index must be an integer, got True"):
        runners.seed_state(state, True)
    assert runners.seed_state(state, np.int64(1)).iteration.shape == ()
    with pytest.raises(ValueError, match="got one seed's state"):
        runners.seed_state(last, 0)
    with pytest.raises(ValueError, match="leading seed axis"):
        runners.seed_state({"w": jnp.zeros((2, 3)), "step": jnp.zeros(())}, 0)
    with pytest.raises(ValueError, match="leading seed axis"):
        runners.seed_state({"w": jnp.zeros((2, 3)), "b": jnp.zeros((3,))}, 0)


def test_state_template_matches_init(ppo_run, tmp_path):
    agent, env, result = ppo_run
    sizes = dict(num_envs=4, total_steps=2048)
    seeded = runners.state_template(agent, env, num_seeds=2, **sizes)
    single = runners.state_template(agent, env, **sizes)
    assert isinstance(seeded, runners.TrainState)
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(seeded))
    assert _weak(seeded) == [] and _weak(single) == []
    keys = jr.split(jr.PRNGKey(5), 2)
    real = eqx.filter_jit(runners.init_seeds)(agent, env, keys, **sizes)
    assert _weak(real) == []
    _assert_same_shapes(seeded, real)
    _assert_same_shapes(seeded, result.state)
    _assert_same_shapes(single, runners.seed_state(real, 0))
    # What loading a run's state needs.
    path = runners.save_checkpoint(tmp_path / "2048", result.state, {})
    loaded, _ = runners.load_checkpoint(path, seeded)
    for a, b in zip(
        jax.tree.leaves(loaded), jax.tree.leaves(result.state), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="num_seeds must be a positive integer"):
        runners.state_template(agent, env, num_seeds=0, **sizes)
    with pytest.raises(ValueError, match="num_envs must be a positive integer"):
        runners.state_template(agent, env, num_envs=0, total_steps=2048)


def test_eval_at_start_reports_the_untrained_agent_first(ppo_run):
    """The same call as `ppo_run` (its programs are reused) with an evaluation
    before training: reported at step 0, and training is unchanged."""
    agent, env, plain = ppo_run
    seen = []
    result = runners.run(
        agent, env, **PPO_RUN, eval_at_start=True, callback=seen.append
    )
    first = result.reports[0]
    assert seen[0] is first
    assert (first.env_steps, first.chunk, first.train) == (0, 0, {})
    assert first.eval_returns is not None and len(first.eval_returns) == 2
    assert result.reports[1:] and [r.chunk for r in result.reports[1:]] == [
        r.chunk for r in plain.reports
    ]
    assert result.reports[1].eval_returns == plain.reports[0].eval_returns
    for a, b in zip(
        jax.tree.leaves(result.state), jax.tree.leaves(plain.state), strict=True
    ):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_lower_gives_the_programs_a_run_compiles_without_running_them():
    agent = zoo.PPO(num_steps=8, hidden_sizes=(16,))
    env = envs.make("CartPole-v1")
    kwargs = {"key": jr.PRNGKey(0), "total_steps": 512, "num_envs": 4}
    programs = runners.lower(agent, env, **kwargs)
    # Initialisation, the chunk, the evaluation: StableHLO and XLA options.
    assert len(programs) == 3
    assert all(text.startswith("module @jit_") for text, _ in programs)
    assert all(isinstance(options, dict) for _, options in programs)
    assert runners.lower(agent, env, **kwargs) == programs
    wider = runners.lower(zoo.PPO(num_steps=8, hidden_sizes=(32,)), env, **kwargs)
    assert [t for t, _ in wider] != [t for t, _ in programs]
    # Evaluating twice as many episodes at the end adds a fourth program.
    more = runners.lower(agent, env, **kwargs, eval_every=256, final_eval_episodes=64)
    assert len(more) == 4
    # `lower` is `prepare` without compiling; such programs do not execute.
    prepared = runners.prepare(agent, env, compile=False, **kwargs)
    assert prepared.lowered == programs
    with pytest.raises(ValueError, match="prepared with compile=False"):
        runners.execute(prepared)


def test_canonical_lowering_does_not_depend_on_function_names():
    from runners._compile import canonical

    def module(names, calls):
        body = "".join(
            f"  func.func private @{n}(%arg0: tensor<f32>) -> tensor<f32> {{\n"
            f"    %0 = stablehlo.negate %arg0 : tensor<f32>\n"
            f"    return %0 : tensor<f32>\n  }}\n"
            for n in names
        )
        main = "".join(
            f"    %{i} = func.call @{c}(%arg0) : (tensor<f32>) -> tensor<f32>\n"
            for i, c in enumerate(calls)
        )
        return (
            "module @jit_f attributes {} {\n"
            "  func.func public @main(%arg0: tensor<f32>) -> tensor<f32> {\n"
            f"{main}    return %arg0 : tensor<f32>\n  }}\n{body}}}\n"
        )

    # One function called twice, or two copies under other names: the same.
    shared = canonical(module(["neg_3"], ["neg_3", "neg_3"]))
    copies = canonical(module(["neg_7", "neg_1"], ["neg_1", "neg_7"]))
    assert shared == copies
    assert "@f1(" in shared and "@neg" not in shared
