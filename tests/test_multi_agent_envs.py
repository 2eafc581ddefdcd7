"""Multi-agent environments: the protocol, the native matrix game, and JaxMARL's
environments through `envs.make_multi`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs


def test_matrix_game_rewards_and_episode_end():
    game = envs.make_multi("marl/MatrixGame", episode_length=2)
    assert game.agents == ("agent_0", "agent_1")
    assert game.homogeneous
    obs, state = game.reset(jr.PRNGKey(0))
    assert {a: o.tolist() for a, o in obs.items()} == {a: [0.0] for a in game.agents}
    step = eqx.filter_jit(game.step)
    joint = {"agent_0": jnp.array(0), "agent_1": jnp.array(0)}
    obs, state, rewards, term, trunc, info = step(jr.PRNGKey(1), state, joint)
    assert float(rewards["agent_0"]) == float(rewards["agent_1"]) == 10.0
    assert not bool(term["__all__"]) and float(obs["agent_0"][0]) == 0.5
    miss = {"agent_0": jnp.array(0), "agent_1": jnp.array(1)}
    obs, state, rewards, term, trunc, info = step(jr.PRNGKey(2), state, miss)
    assert float(rewards["agent_0"]) == 0.0
    # The episode ended (terminated, not truncated) and auto-reset.
    assert bool(term["__all__"]) and bool(term["agent_1"])
    assert not bool(trunc["__all__"])
    assert float(obs["agent_0"][0]) == 0.0 and int(state.t) == 0
    assert float(info["final_observation"]["agent_0"][0]) == 1.0


def test_matrix_game_bad_input():
    with pytest.raises(ValueError, match="payoff must be a non-empty matrix"):
        envs.MatrixGame(payoff=((1.0, 2.0), (3.0,)))
    with pytest.raises(ValueError, match="episode_length must be a positive int"):
        envs.MatrixGame(episode_length=0)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['length'\]"):
        envs.make_multi("marl/MatrixGame", length=3)
    with pytest.raises(ValueError, match="is a multi-agent env: build it with"):
        envs.make("marl/MatrixGame")


def test_unknown_multi_agent_env_suggests_names():
    with pytest.raises(ValueError, match="Did you mean 'marl/MatrixGame'"):
        envs.make_multi("marl/MatrixGam")


jaxmarl = pytest.importorskip("jaxmarl")  # the `marl` extra (in `dev`)


@pytest.fixture(scope="module")
def spread():
    return envs.make_multi("MPE_simple_spread_v3")


def test_jaxmarl_names_resolve(spread):
    assert "MPE_simple_spread_v3" in envs.names()
    assert spread.agents == ("agent_0", "agent_1", "agent_2")
    assert spread.homogeneous
    assert spread.observation_spaces["agent_0"].shape == (18,)
    assert spread.action_spaces["agent_0"] == envs.Discrete(5)
    with pytest.raises(ValueError, match="is a multi-agent env"):
        envs.make("MPE_simple_spread_v3")
    with pytest.raises(ValueError, match="Did you mean 'MPE_simple_spread_v3'"):
        envs.make_multi("MPE_simple_spred_v3")
    assert not envs.make_multi("MPE_simple_speaker_listener_v4").homogeneous


def test_jaxmarl_trajectories_match_jaxmarl(spread):
    """The adapter's `reset` and auto-resetting `step` give JaxMARL's own
    observations, rewards and episode ends, key for key, across an episode end
    (MPE's time limit is reported as truncation)."""
    native = jaxmarl.make("MPE_simple_spread_v3")
    key = jr.PRNGKey(3)
    agents = spread.agents

    def actions_at(t):
        k = jr.fold_in(key, t)
        return {a: jr.randint(jr.fold_in(k, i), (), 0, 5) for i, a in enumerate(agents)}

    @eqx.filter_jit
    def ours():
        def body(state, t):
            k_step = jr.fold_in(jr.fold_in(key, t), 99)
            obs, state, rew, term, trunc, info = spread.step(
                k_step, state, actions_at(t)
            )
            return state, (obs, rew, term, trunc, info["final_observation"])

        _, state = spread.reset(key)
        return jax.lax.scan(body, state, jnp.arange(30))[1]

    @jax.jit
    def theirs():
        def body(state, t):
            k_step = jr.fold_in(jr.fold_in(key, t), 99)
            obs, state, rew, dones, _ = native.step(k_step, state, actions_at(t))
            return state, (obs, rew, dones)

        _, state = native.reset(key)
        return jax.lax.scan(body, state, jnp.arange(30))[1]

    obs_a, rew_a, term, trunc, final = ours()
    with jax.numpy_rank_promotion("allow"):  # JaxMARL relies on it
        obs_b, rew_b, dones = theirs()
    for a in agents:  # two programs, fused differently: equal to float rounding
        np.testing.assert_allclose(obs_a[a], obs_b[a], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(rew_a[a], rew_b[a], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(term[a] | trunc[a], dones[a])
    ended = np.asarray(term["__all__"] | trunc["__all__"])
    np.testing.assert_array_equal(ended, dones["__all__"])
    assert not np.asarray(term["__all__"]).any()  # MPE only times out
    assert ended.sum() == 1
    t = int(np.argmax(ended))  # the step that ended it: the next episode's start
    assert not np.array_equal(final["agent_0"][t], obs_a["agent_0"][t])
