"""Every agent on every probe env it supports, plus construction errors and shapes."""

import re

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo

GAMMA = 0.9

# Small, fast settings: probes are learnt in a few thousand steps.
DQN_PROBE = dict(
    gamma=GAMMA,
    learning_rate=5e-3,
    # Close to a squared loss: Huber's capped gradient makes Q grow slowly
    # towards the large targets of the truncation probe.
    huber_delta=10.0,
    buffer_size=2_000,
    batch_size=64,
    learning_starts=256,
    gradient_steps=2,
    target_update_interval=1,
    tau=0.1,
    exploration_steps=1_000,
    hidden_sizes=(32,),
)
AGENTS = {
    "dqn": lambda: zoo.make("dqn", **DQN_PROBE),
    # n-step returns: discounting and truncation inside the window.
    "dqn3": lambda: zoo.make("dqn", n_step=3, **DQN_PROBE),
    "ppo": lambda: zoo.make(
        "ppo",
        gamma=GAMMA,
        learning_rate=3e-3,
        num_steps=16,
        num_epochs=4,
        num_minibatches=2,
        ent_coef=0.0,
        anneal_lr=False,
        hidden_sizes=(32,),
    ),
}
STEPS = {"dqn": 12_000, "dqn3": 12_000, "ppo": 20_000}

# Each probe: the expected value (or Q) at given observations.
CASES = [
    ("dqn", "probe/ConstantReward"),
    ("dqn", "probe/ObservationReward"),
    ("dqn", "probe/TwoStepDiscount"),
    ("dqn", "probe/ActionReward"),
    ("dqn", "probe/TruncatedConstantReward"),
    ("dqn3", "probe/TwoStepDiscount"),
    ("dqn3", "probe/TruncatedConstantReward"),
    ("ppo", "probe/ConstantReward"),
    ("ppo", "probe/ObservationReward"),
    ("ppo", "probe/TwoStepDiscount"),
    ("ppo", "probe/ActionReward"),
    ("ppo", "probe/TruncatedConstantReward"),
    ("ppo", "probe/ContinuousActionReward"),
]


def _value(agent_name, state, obs):
    """State value: V for PPO, max_a Q for DQN."""
    obs = jnp.array([obs], dtype=jnp.float32)
    if agent_name == "ppo":
        return float(state.critic(obs))
    return float(jnp.max(state.online(obs)))


@pytest.mark.parametrize(("agent_name", "env_name"), CASES)
def test_agent_learns_probe(agent_name, env_name, getkey):
    agent, env = AGENTS[agent_name](), envs.make(env_name)
    state, metrics = runners.train(
        agent, env, key=getkey(), total_steps=STEPS[agent_name], num_envs=8
    )
    s = state.agent_state
    assert np.all(np.isfinite(metrics["loss"]))
    if env_name == "probe/ConstantReward":
        assert _value(agent_name, s, 0.0) == pytest.approx(1.0, abs=0.1)
    elif env_name == "probe/ObservationReward":
        assert _value(agent_name, s, 1.0) == pytest.approx(1.0, abs=0.15)
        assert _value(agent_name, s, -1.0) == pytest.approx(-1.0, abs=0.15)
    elif env_name == "probe/TwoStepDiscount":
        assert _value(agent_name, s, 0.0) == pytest.approx(GAMMA, abs=0.1)
        assert _value(agent_name, s, 1.0) == pytest.approx(1.0, abs=0.1)
    elif env_name == "probe/TruncatedConstantReward":
        # Treating truncation as termination would give about 2.7 (the mean
        # discounted remainder of a 5-step episode), not 1 / (1 - gamma) = 10.
        assert _value(agent_name, s, 0.0) == pytest.approx(1 / (1 - GAMMA), abs=1.0)
    elif env_name == "probe/ActionReward":
        obs = jnp.zeros(1)
        action, _ = agent.act(s, obs, key=getkey(), greedy=True)
        assert int(action) == 1
        if agent_name == "dqn":
            q = s.online(obs)
            assert float(q[0]) == pytest.approx(0.0, abs=0.1)
            assert float(q[1]) == pytest.approx(1.0, abs=0.1)
    elif env_name == "probe/ContinuousActionReward":
        action, _ = agent.act(s, jnp.zeros(1), key=getkey(), greedy=True)
        assert float(action[0]) == pytest.approx(0.5, abs=0.15)


def test_make_rejects_unknown_agent():
    with pytest.raises(
        ValueError,
        match=r"unknown agent 'dqm'.*'dqn'.*" + re.escape(str(zoo.names())),
    ):
        zoo.make("dqm")


def test_make_rejects_unknown_and_mistyped_hyperparameters():
    with pytest.raises(
        ValueError, match=r"unknown hyperparameter.*'learning_rat'.*learning_rate"
    ):
        zoo.make("ppo", learning_rat=1e-3)
    with pytest.raises(ValueError, match=r"'num_epochs' of agent 'ppo' must be int"):
        zoo.make("ppo", num_epochs=2.5)
    with pytest.raises(ValueError, match=r"'double_q' of agent 'dqn' must be bool"):
        zoo.make("dqn", double_q="yes")


@pytest.mark.parametrize(
    ("name", "hparams", "match"),
    [
        ("ppo", {"num_minibatches": 0}, "num_minibatches must be positive"),
        ("ppo", {"gamma": 1.5}, "gamma and gae_lambda must be in"),
        ("dqn", {"tau": 0.0}, r"tau must be in \(0, 1\]"),
        ("dqn", {"batch_size": -1}, "batch_size must be positive"),
        ("dqn", {"priority_alpha": 1.5}, r"priority_alpha must be in \[0, 1\]"),
        ("sac", {"priority_beta": -0.1}, r"priority_beta must be in \[0, 1\]"),
        ("c51", {"v_min": 5.0, "v_max": 1.0}, "v_min must be below v_max"),
        ("c51", {"atoms": 1}, "atoms must be at least 2"),
        ("qrdqn", {"n_quantiles": 0}, "n_quantiles must be positive"),
        ("pqn", {"q_lambda": 1.5}, "gamma and q_lambda must be in"),
        ("a2c", {"optimizer": "sgd"}, "optimizer must be one of"),
        ("a2c", {"num_steps": 0}, "num_steps must be positive"),
    ],
)
def test_invalid_values_fail_at_construction(name, hparams, match):
    with pytest.raises(ValueError, match=match):
        zoo.make(name, **hparams)


def test_invalid_combinations_fail_before_compiling(getkey):
    with pytest.raises(ValueError, match="does not split into num_minibatches=3"):
        runners.validate(
            zoo.make("ppo", num_steps=16, num_minibatches=3),
            envs.make("CartPole-v1"),
            4,
            1000,
        )
    with pytest.raises(ValueError, match="DQN needs a discrete action space"):
        runners.validate(zoo.make("dqn"), envs.make("Pendulum-v1"), 4, 1000)
    for name in ("c51", "qrdqn", "pqn"):
        with pytest.raises(ValueError, match="needs a discrete action space"):
            runners.validate(zoo.make(name), envs.make("Pendulum-v1"), 4, 1000)
    with pytest.raises(ValueError, match=r"PQN: the rollout .* num_minibatches=3"):
        runners.validate(
            zoo.make("pqn", num_steps=16, num_minibatches=3),
            envs.make("CartPole-v1"),
            4,
            1000,
        )
    with pytest.raises(ValueError, match="total_steps must be a positive integer"):
        runners.validate(zoo.make("dqn"), envs.make("CartPole-v1"), 4, 0)


@pytest.fixture(scope="module")
def ppo_cartpole_state(init_state):
    agent, env = zoo.make("ppo"), envs.make("CartPole-v1")
    state = init_state(agent, env, jr.PRNGKey(0), 4, 1024)
    return agent, state


def test_wrong_observation_shape_is_rejected_readably(ppo_cartpole_state, getkey):
    agent, state = ppo_cartpole_state
    with pytest.raises(ValueError, match=r"observation has shape \(5,\).*\(4,\).*vmap"):
        agent.act(state, jnp.zeros(5), key=getkey())
    # A batch passed where one observation is expected: the same message.
    with pytest.raises(ValueError, match=r"observation has shape \(3, 4\)"):
        agent.act(state, jnp.zeros((3, 4)), key=getkey())


def test_jaxtyping_checks_shapes_in_public_functions():
    # GAE's arguments must share their time and env axes.
    with pytest.raises(Exception, match="Type-check error"):
        zoo.gae(
            jnp.zeros((5, 2)),
            jnp.zeros((5, 2)),
            jnp.zeros((4, 2)),
            jnp.zeros((5, 2)),
            0.9,
            0.9,
        )


@pytest.mark.parametrize("agent_name", ["dqn", "ppo"])
def test_act_is_vmappable_and_greedy_is_deterministic(agent_name, getkey, init_state):
    agent, env = AGENTS[agent_name](), envs.make("CartPole-v1")
    state = init_state(agent, env, getkey(), 4, 1000)
    obs = jr.normal(getkey(), (6, 4))
    act = jax.vmap(lambda o, k: agent.act(state, o, key=k, greedy=True)[0])
    a1 = act(obs, jr.split(getkey(), 6))
    a2 = act(obs, jr.split(getkey(), 6))
    assert a1.shape == (6,)
    np.testing.assert_array_equal(a1, a2)
