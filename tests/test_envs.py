from typing import final

import gymnax
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
from envs._gymnax import gymnax_names

NUM_STEPS = 64


def _rollout(step, reset, action_space_sample, key):
    """Random-action rollout returning obs, rewards, terminations, truncations."""
    k_reset, k_run = jr.split(key)
    obs, state = reset(k_reset)

    def body(carry, k):
        obs, state = carry
        k_act, k_step = jr.split(k)
        action = action_space_sample(k_act)
        obs, state, reward, terminated, truncated, info = step(k_step, state, action)
        return (obs, state), (
            obs,
            reward,
            terminated,
            truncated,
            info["final_observation"],
        )

    _, out = jax.lax.scan(body, (obs, state), jr.split(k_run, NUM_STEPS))
    return out


@pytest.mark.parametrize("name", gymnax_names())
def test_gymnax_adapter_matches_gymnax(name, getkey):
    ours = envs.GymnaxEnv(name)
    theirs, params = gymnax.make(name)
    sample = lambda k: theirs.action_space(params).sample(k)
    key = getkey()

    @jax.jit
    def both(key):
        a = _rollout(ours.step, ours.reset, sample, key)
        b = _rollout(
            lambda k, s, a: theirs.step(k, s, a, params),
            lambda k: theirs.reset(k, params),
            sample,
            key,
        )
        return a, b

    # gymnax's own code relies on implicit rank promotion (e.g. Swimmer-misc).
    with jax.numpy_rank_promotion("allow"):
        a, b = both(key)
    # Same keys, same operations: equal up to float rounding (XLA may fuse the two
    # programs differently).
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
def test_native_envs_match_gymnax(name):
    ours = envs.make(name)
    assert not isinstance(ours, envs.GymnaxEnv)
    theirs, params = gymnax.make(name)
    sample = lambda k: theirs.action_space(params).sample(k)
    # Long enough for several episode ends (CartPole falls, Pendulum truncates).
    key = jr.PRNGKey(3)

    @jax.jit
    def both(key):
        steps = 450

        def run(step, reset):
            k_reset, k_run = jr.split(key)
            obs, state = reset(k_reset)

            def body(carry, k):
                obs, state = carry
                k_act, k_step = jr.split(k)
                obs, state, r, term, trunc, info = step(k_step, state, sample(k_act))
                return (obs, state), (obs, r, term, trunc, info["final_observation"])

            return jax.lax.scan(body, (obs, state), jr.split(k_run, steps))[1]

        return (
            run(ours.step, ours.reset),
            run(
                lambda k, s, a: theirs.step(k, s, a, params),
                lambda k: theirs.reset(k, params),
            ),
        )

    a, b = both(key)
    ends = int(jnp.sum(a[2] | a[3]))
    assert ends >= 2, "the rollout should cross episode boundaries"
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_auto_reset_and_final_observation(getkey):
    env = envs.make("CartPole-v1")
    step = jax.jit(env.step)
    obs, state = env.reset(getkey())
    # Always pushing right makes the pole fall within a few dozen steps.
    for _ in range(200):
        prev = state
        obs, state, reward, terminated, truncated, info = step(getkey(), state, 1)
        if terminated:
            break
    assert bool(terminated) and not bool(truncated)
    final = info["final_observation"]
    # The final observation is the state the episode ended in: beyond a threshold.
    assert (
        abs(float(final[0])) > env.x_threshold
        or abs(float(final[2])) > env.theta_threshold_radians
    )
    # ... while the returned observation starts a new episode.
    assert np.all(np.abs(np.asarray(obs)) <= 0.05)
    assert int(state.time) == 0 and int(prev.time) > 0


def test_truncation_is_not_termination(getkey):
    env = envs.make("Pendulum-v1", max_steps_in_episode=5)
    obs, state = env.reset(getkey())
    flags = []
    for _ in range(5):
        obs, state, _, terminated, truncated, info = env.step(
            getkey(), state, jnp.zeros(1)
        )
        flags.append((bool(terminated), bool(truncated)))
    assert flags == [(False, False)] * 4 + [(False, True)]
    assert int(state.time) == 0


def test_episode_statistics(getkey):
    env = envs.EpisodeStatistics(envs.make("CartPole-v1"))
    step = jax.jit(env.step)
    obs, state = env.reset(getkey())
    lengths = []
    for _ in range(300):
        obs, state, reward, term, trunc, info = step(getkey(), state, 0)
        if info["episode_done"]:
            # CartPole pays 1 per step, so return equals length.
            assert float(info["episode_return"]) == int(info["episode_length"])
            lengths.append(int(info["episode_length"]))
            assert int(state.episode_length) == 0
    assert len(lengths) >= 3 and all(8 <= n <= 100 for n in lengths)


def test_flatten_observation(getkey):
    env = envs.FlattenObservation(envs.make("Breakout-MinAtar"))
    assert env.observation_space.shape == (400,)
    assert env.name == "Breakout-MinAtar"
    obs, state = env.reset(getkey())
    assert obs.shape == (400,) and obs.dtype == jnp.float32
    obs, _, _, _, _, info = env.step(getkey(), state, 0)
    assert obs.shape == (400,)
    assert info["final_observation"].shape == (400,)
    assert info["final_observation"].dtype == jnp.float32


def test_clip_action(getkey):
    # Reward -(a - 0.5)^2 with actions in [-1, 1]: the probe does not clip itself.
    inner = envs.make("probe/ContinuousActionReward")
    env = envs.ClipAction(inner)
    assert env.action_space == inner.action_space and env.name == inner.name
    for action, clipped in ((100.0, 1.0), (-100.0, -1.0), (0.25, 0.25)):
        key_reset, key_step = getkey(), getkey()
        _, state = env.reset(key_reset)
        reward = env.step(key_step, state, jnp.array([action]))[2]
        assert float(reward) == -((clipped - 0.5) ** 2)
        _, state = inner.reset(key_reset)
        unclipped = inner.step(key_step, state, jnp.array([action]))[2]
        assert float(unclipped) == -((action - 0.5) ** 2)
    with pytest.raises(ValueError, match="ClipAction needs a Box action space"):
        envs.ClipAction(envs.make("CartPole-v1"))


@final
class _StepCounter(envs.AbstractTransparentWrapper[tuple]):
    """Counts every step across episodes: state that must survive auto-resets."""

    env: envs.AbstractEnv

    def reset_env(self, key):
        obs, state = self.env.reset(key)
        return obs, (state, jnp.array(0, jnp.int32))

    def step_env(self, key, state, action):
        inner, count = state
        obs, inner, reward, terminated, truncated, info = self.env.step(
            key, inner, action
        )
        return obs, (inner, count + 1), reward, terminated, truncated, info


def test_wrapper_state_survives_auto_reset(getkey):
    env = envs.EpisodeStatistics(
        _StepCounter(envs.make("probe/TruncatedConstantReward", horizon=3))
    )
    _, state = env.reset(getkey())
    step = jax.jit(env.step)
    seen = []
    for _ in range(9):
        _, state, reward, _, truncated, info = step(getkey(), state, 0)
        seen.append(
            (
                float(info["episode_return"]),
                int(info["episode_length"]),
                bool(info["episode_done"]),
                bool(truncated),
                int(state.episode_length),
            )
        )
    # Reward 1 per step, truncated after 3: the statistics restart with each
    # episode, exactly once per episode end.
    assert (
        seen
        == [
            (1.0, 1, False, False, 1),
            (2.0, 2, False, False, 2),
            (3.0, 3, True, True, 0),
        ]
        * 3
    )
    inner_state, count = state.env_state
    assert int(count) == 9  # never reset by the three auto-resets below it
    assert int(inner_state.time) == 0


@pytest.mark.parametrize(
    "name, params, sample",
    [
        # Random observations at each reset: a second reset would change them.
        ("probe/ObservationReward", {}, lambda k: jnp.array(0)),
        (
            "Pendulum-v1",
            {"max_steps_in_episode": 5},
            lambda k: jr.uniform(k, (1,), minval=-2.0, maxval=2.0),
        ),
    ],
)
def test_wrapping_keeps_the_trajectory(name, params, sample, getkey):
    base = envs.make(name, **params)
    wrapped = _StepCounter(envs.FlattenObservation(envs.EpisodeStatistics(base)))
    if isinstance(base.action_space, envs.Box):
        wrapped = envs.ClipAction(wrapped)  # a no-op on actions within bounds
    key = getkey()

    @jax.jit
    def both(key):
        return (
            _rollout(base.step, base.reset, sample, key),
            _rollout(wrapped.step, wrapped.reset, sample, key),
        )

    a, b = both(key)
    assert int(jnp.sum(a[2] | a[3])) >= 5, "the rollout should cross episode ends"
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _env_classes() -> set[type]:
    """Every `AbstractEnv` subclass that `envs` exports, with their bases."""
    exported = [
        c
        for c in vars(envs).values()
        if isinstance(c, type) and issubclass(c, envs.AbstractEnv)
    ]
    return {b for c in exported for b in c.__mro__ if issubclass(b, envs.AbstractEnv)}


def test_reset_and_step_are_written_once():
    classes = _env_classes()
    assert {envs.AbstractWrapper, envs.ClipAction, envs.GymnaxEnv} <= classes
    for cls in classes - {envs.AbstractEnv}:
        assert "reset" not in cls.__dict__, f"{cls.__name__} overrides reset"
        assert "step" not in cls.__dict__, f"{cls.__name__} overrides step"
    wrappers = {c for c in classes if issubclass(c, envs.AbstractWrapper)}
    assert wrappers == {
        envs.AbstractWrapper,
        envs.AbstractTransparentWrapper,
        envs.ClipAction,
        envs.EpisodeStatistics,
        envs.FlattenObservation,
        envs.MaskObservation,
        envs.StickyActions,
    }


def test_make_unknown_name_lists_close_matches():
    with pytest.raises(ValueError, match="Did you mean 'CartPole-v1'"):
        envs.make("Cartpole-v1")
    with pytest.raises(ValueError, match="unknown parameter"):
        envs.make("CartPole-v1", gravitee=3.0)


def test_names_cover_gymnax_and_probes():
    names = envs.names()
    assert "CartPole-v1" in names and "Breakout-MinAtar" in names
    assert "probe/TwoStepDiscount" in names
    assert "MNISTBandit-bsuite" not in names


def test_a_suite_registered_outside_the_package_builds_and_names_its_envs(monkeypatch):
    monkeypatch.setattr(envs._registry, "SUITES", dict(envs.SUITES))
    suite = envs.Suite(
        lambda: ["mine/Pole"],
        lambda name, **p: envs.CartPole(**p),
        prefix="mine/",
        extra="mine",
    )
    envs.register_suite("mine", suite)
    assert envs.suite_of("mine/Pole") == "mine" and "mine/Pole" in envs.names()
    assert isinstance(envs.make("mine/Pole", gravity=10.0), envs.CartPole)
    with pytest.raises(ValueError, match="already registered"):
        envs.register_suite("mine", suite)
    with pytest.raises(ValueError, match="prefix 'mine/' is already"):
        envs.register_suite("yours", suite)


@pytest.mark.parametrize("name", sorted(envs.PROBES))
def test_probes_follow_the_protocol(name, getkey):
    env = envs.make(name)
    obs, state = env.reset(getkey())
    assert obs.shape == env.observation_space.shape == (1,)
    action = env.action_space.sample(key=getkey())
    obs, state, reward, term, trunc, info = env.step(getkey(), state, action)
    assert reward.shape == () and term.dtype == jnp.bool_
    assert info["final_observation"].shape == (1,)


@final
class _Endless(envs.AbstractEnv[jax.Array]):
    """Three actions, one observation, episodes that never end: every step's
    previous action is the one executed just before it."""

    name = "Endless"

    def reset_env(self, key):
        return jnp.zeros(1), jnp.array(0)

    def step_env(self, key, state, action):
        return jnp.zeros(1), state + 1, jnp.array(0.0), jnp.array(False), False, {}

    @property
    def observation_space(self):
        return envs.Box(np.array([0.0]), np.array([1.0]), (1,))

    @property
    def action_space(self):
        return envs.Discrete(3)


def _sticky_rollout(env, key, steps=200, num_envs=2000):
    def one(key):
        k_reset, k_actions, k_steps = jr.split(key, 3)
        _, state = env.reset(k_reset)
        given = jr.randint(k_actions, (steps,), 0, 3)

        def step(state, x):
            k, a = x
            prev = state.last_action
            _, state, _, terminated, truncated, info = env.step(k, state, a)
            return state, (prev, info["executed_action"], terminated | truncated)

        _, (prev, executed, done) = jax.lax.scan(
            step, state, (jr.split(k_steps, steps), given)
        )
        return given, prev, executed, done

    return jax.jit(jax.vmap(one))(jr.split(key, num_envs))


def test_sticky_actions_repeat_at_the_stated_rate(getkey):
    prob = 0.1
    env = envs.StickyActions(_Endless(), prob)
    given, prev, executed, _ = map(np.asarray, _sticky_rollout(env, getkey()))
    # Each step executes the given action or, if it stuck, the previous one.
    assert np.all((executed == given) | (executed == prev))
    # The first step's previous action is the no-op, then the one executed.
    assert np.all(prev[:, 0] == 0)
    np.testing.assert_array_equal(prev[:, 1:], executed[:, :-1])
    # Where the previous action differs from the given one, whether it stuck
    # is visible: a Bernoulli(prob) draw per step, independent of the actions.
    differs = prev != given
    stuck = executed[differs] == prev[differs]
    n = stuck.size
    assert n > 200_000
    assert abs(stuck.mean() - prob) < 5 * np.sqrt(prob * (1 - prob) / n)
    # Overall, an action is replaced at rate prob * P(previous != given) = 2/3 prob.
    assert abs((executed != given).mean() - prob * 2 / 3) < 0.003


def test_sticky_actions_are_deterministic_given_the_key(getkey):
    env = envs.StickyActions(_Endless(), 0.25)
    key = getkey()
    a = _sticky_rollout(env, key, steps=50, num_envs=64)
    b = _sticky_rollout(env, key, steps=50, num_envs=64)
    c = _sticky_rollout(env, getkey(), steps=50, num_envs=64)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert not np.array_equal(np.asarray(a[2]), np.asarray(c[2]))


def test_sticky_minatar_restarts_each_episode_with_the_no_op(getkey):
    env = envs.make("Breakout-MinAtar", sticky_prob=0.1)
    assert isinstance(env, envs.StickyActions) and env.prob == 0.1
    assert env.name == "Breakout-MinAtar"
    _, prev, _, done = map(
        np.asarray, _sticky_rollout(env, getkey(), steps=300, num_envs=16)
    )
    assert done.sum() >= 16, "random play should lose the ball often"
    # The step after an episode ended starts the next one: its previous action
    # is the no-op whatever was executed before.
    assert np.all(prev[:, 1:][done[:, :-1]] == 0)


def test_sticky_prob_through_make():
    assert isinstance(envs.make("CartPole-v1", sticky_prob=0), envs.CartPole)
    for bad in (-0.1, 1.0, "0.1", True):
        with pytest.raises(ValueError, match=r"sticky_prob|prob must be in"):
            envs.make("Breakout-MinAtar", sticky_prob=bad)


@pytest.mark.parametrize(
    "name, base, keep",
    [
        ("StatelessCartPole-v1", "CartPole-v1", [0, 2]),
        ("StatelessPendulum-v1", "Pendulum-v1", [0, 1]),
    ],
)
def test_stateless_variants_hide_the_velocities(name, base, keep, getkey):
    env, full = (
        envs.make(name, max_steps_in_episode=20),
        envs.make(base, max_steps_in_episode=20),
    )
    assert name in envs.names() and env.name == name
    assert env.observation_space.shape == (len(keep),)
    np.testing.assert_array_equal(
        env.observation_space.low, full.observation_space.low[keep]
    )
    key = getkey()
    obs, state = env.reset(key)
    full_obs, full_state = full.reset(key)
    np.testing.assert_array_equal(obs, full_obs[jnp.array(keep)])
    action = env.action_space.sample(key=getkey())
    for _ in range(25):  # past an episode's end: the auto-reset's observations too
        k = getkey()
        obs, state, reward, term, trunc, info = env.step(k, state, action)
        full_obs, full_state, full_reward, *_, full_info = full.step(
            k, full_state, action
        )
        np.testing.assert_array_equal(obs, full_obs[jnp.array(keep)])
        np.testing.assert_array_equal(
            info["final_observation"], full_info["final_observation"][jnp.array(keep)]
        )
        assert reward == full_reward


def test_mask_observation_refuses_bad_indices():
    with pytest.raises(ValueError, match=r"distinct indices in \[0, 4\)"):
        envs.MaskObservation(envs.make("CartPole-v1"), (0, 4))
    with pytest.raises(ValueError, match="distinct indices"):
        envs.MaskObservation(envs.make("CartPole-v1"), (1, 1))
    with pytest.raises(ValueError, match="flat Box"):
        envs.MaskObservation(envs.make("Breakout-MinAtar"), (0,))
    with pytest.raises(
        ValueError, match=r"unknown parameter\(s\) \['foo'\].*force_mag"
    ):
        envs.make("StatelessCartPole-v1", foo=1)
    masked = envs.MaskObservation(envs.make("CartPole-v1"), (3,))
    assert masked.name == "CartPole-v1[3]" and masked.observation_space.shape == (1,)


def test_a_preset_is_its_base_env_with_set_parameters():
    import experiments

    assert "MemoryChain30-bsuite" in envs.names()
    env = envs.make("MemoryChain30-bsuite")
    assert env.params.memory_length == 30  # pyright: ignore[reportAttributeAccessIssue]
    base = envs.make("MemoryChain-bsuite", memory_length=30)
    assert env.params == base.params  # pyright: ignore[reportAttributeAccessIssue]
    # Parameters given update the preset's; unknown ones are named.
    shorter = envs.make("MemoryChain30-bsuite", memory_length=7)
    assert shorter.params.memory_length == 7  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(ValueError, match="foo"):
        envs.make("MemoryChain30-bsuite", foo=1)
    # The CLI's tuned block for the preset trains on it.
    tuned = experiments.tuned("ppo", "MemoryChain30-bsuite")
    assert tuned.make_env().params.memory_length == 30  # pyright: ignore[reportAttributeAccessIssue]


MEMORY_S8 = "xminigrid/MiniGrid-MemoryS8"


def test_xminigrid_tasks_are_offered_under_their_prefix():
    names = envs.names()
    assert MEMORY_S8 in names and "xminigrid/MiniGrid-DoorKey-5x5" in names
    # The meta-RL tasks sample rulesets from downloaded benchmarks: not offered.
    assert not [n for n in names if n.startswith("xminigrid/XLand")]
    env = envs.make(MEMORY_S8)
    assert env.name == MEMORY_S8
    assert env.observation_space.shape == (3, 3, 25)  # view 3x3, 13 tiles + 12 colours
    assert env.action_space == envs.Discrete(6)


def test_xminigrid_adapter_matches_xminigrid(getkey):
    """The adapter's transitions are XLand-MiniGrid's: its observation one-hot
    encoded, its reward, and its end of episode split into termination (at an
    object or the goal, discount 0) and truncation (at max_steps)."""
    from xminigrid.registration import make

    env = envs.make(MEMORY_S8, max_steps=12)
    raw, params = make("MiniGrid-MemoryS8", max_steps=12)
    raw_reset, raw_step = jax.jit(raw.reset), jax.jit(raw.step)
    key = getkey()
    obs, state = env.reset(key)
    timestep = raw_reset(params, key)
    tiles, colors = obs[..., :13], obs[..., 13:]
    np.testing.assert_array_equal(tiles.sum(-1), 1)
    np.testing.assert_array_equal(colors.sum(-1), 1)
    np.testing.assert_array_equal(tiles.argmax(-1), timestep.observation[..., 0])
    np.testing.assert_array_equal(colors.argmax(-1), timestep.observation[..., 1])
    # Random actions over several episodes (max_steps 12 ends some of them).
    step_env = jax.jit(env.step_env)
    ends = 0
    for _ in range(40):
        action = jr.randint(getkey(), (), 0, 6)
        obs, state, reward, terminated, truncated, _ = step_env(getkey(), state, action)
        timestep = raw_step(params, timestep, action)
        seen = timestep.observation[..., 0]
        np.testing.assert_array_equal(obs[..., :13].argmax(-1), seen)
        assert float(reward) == float(timestep.reward)
        assert bool(terminated) == bool(timestep.last() & (timestep.discount == 0))
        assert bool(truncated) == bool(timestep.last() & (timestep.discount == 1))
        at_limit = int(timestep.state.step_num) == 12
        assert bool(truncated) == (at_limit and not terminated)
        if terminated or truncated:
            ends += 1
            obs, state = env.reset(key := getkey())
            timestep = raw_reset(params, key)
    assert ends >= 2


def test_xminigrid_episodes_end_in_termination_or_truncation(getkey):
    """Random play in many envs with auto-reset: episodes end at an object
    (terminated, a reward only there) or at max_steps (truncated, never longer)."""
    env = envs.make(MEMORY_S8, max_steps=20)
    n = 64
    obs, state = jax.vmap(env.reset)(jr.split(getkey(), n))

    def body(carry, key):
        state, length = carry
        k_act, k_step = jr.split(key)
        action = jr.randint(k_act, (n,), 0, 6)
        _, state, reward, terminated, truncated, _ = jax.vmap(env.step)(
            jr.split(k_step, n), state, action
        )
        length = length + 1
        out = (reward, terminated, truncated, length)
        return (state, jnp.where(terminated | truncated, 0, length)), out

    _, (reward, terminated, truncated, length) = jax.lax.scan(
        body, (state, jnp.zeros(n, jnp.int32)), jr.split(getkey(), 60)
    )
    reward, terminated, truncated = map(np.asarray, (reward, terminated, truncated))
    assert terminated.any() and truncated.any()
    assert not (terminated & truncated).any()
    assert (reward[~terminated] == 0).all()
    np.testing.assert_array_equal(np.asarray(length)[truncated], 20)
    assert (np.asarray(length) <= 20).all()


def test_xminigrid_bad_input_is_named(monkeypatch):
    unknown = r"unknown XLand-MiniGrid task 'MiniGrid-Nope'.*MemoryS8"
    with pytest.raises(ValueError, match=unknown):
        envs.make("xminigrid/MiniGrid-Nope")
    with pytest.raises(ValueError, match=r"parameter\(s\) \['foo'\].*view_size"):
        envs.make(MEMORY_S8, foo=1)
    with pytest.raises(ValueError, match="view_size must be a positive odd number"):
        envs.make(MEMORY_S8, view_size=4)
    import envs._xminigrid as xm

    monkeypatch.setattr(xm, "installed", lambda: False)
    hint = r"xminigrid extra: pip install -e '.\[xminigrid\]'"
    with pytest.raises(ValueError, match=hint):
        envs.make(MEMORY_S8)
