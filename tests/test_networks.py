"""Torsos: the convolution against a hand computation, the automatic choice, and
every agent building, acting with and rejecting the CNN torso."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo
from envs import Box, Discrete
from zoo._networks import ensemble_q


def test_auto_picks_cnn_for_images_and_mlp_otherwise():
    assert zoo.torso_kind("auto", (10, 10, 4)) == "cnn"
    assert zoo.torso_kind("auto", (4,)) == "mlp"
    assert zoo.torso_kind("auto", (3, 5)) == "mlp"
    assert zoo.torso_kind("mlp", (10, 10, 4)) == "mlp"
    with pytest.raises(ValueError, match=r"torso='cnn' needs image .* shape \(4,\)"):
        zoo.torso_kind("cnn", (4,))
    with pytest.raises(ValueError, match="unknown torso 'conv'"):
        zoo.torso_kind("conv", (10, 10, 4))
    with pytest.raises(ValueError, match="at least 3x3"):
        zoo.Torso((2, 8, 1), (8,), "relu", kind="cnn", key=jr.PRNGKey(0))


def test_cnn_torso_matches_a_hand_computed_convolution():
    torso = zoo.Torso((5, 4, 2), (3,), "relu", kind="cnn", key=jr.PRNGKey(0))
    assert torso.kind == "cnn" and torso.out_size == 3
    assert torso.layers[0].weight.shape == (3, 16 * 3 * 2)
    obs = np.asarray(jr.normal(jr.PRNGKey(1), (5, 4, 2)))
    w = np.asarray(torso.conv.weight)  # [out, in, 3, 3]  # pyright: ignore
    b = np.asarray(torso.conv.bias).reshape(-1)  # pyright: ignore
    conv = np.zeros((3, 2, 16))  # channels last, as the torso flattens it
    for c in range(16):
        for i in range(3):
            for j in range(2):
                patch = obs[i : i + 3, j : j + 3, :]  # [3, 3, in]
                conv[i, j, c] = np.sum(w[c] * patch.transpose(2, 0, 1)) + b[c]
    dense = torso.layers[0]
    want = np.maximum(
        np.asarray(dense.weight) @ np.maximum(conv, 0).ravel() + np.asarray(dense.bias),
        0,
    )
    np.testing.assert_allclose(torso(jnp.asarray(obs)), want, rtol=1e-4, atol=1e-5)
    # The same as Equinox's own convolution of the channels-first image.
    reference = torso.conv(jnp.asarray(obs).transpose(2, 0, 1))  # pyright: ignore
    np.testing.assert_allclose(
        zoo.conv3x3(torso.conv, jnp.asarray(obs)),  # pyright: ignore
        np.asarray(reference).transpose(1, 2, 0),
        rtol=1e-4,
        atol=1e-5,
    )


def test_mlp_torso_draws_the_same_weights_as_before_cnn_existed():
    # Tuned results depend on the exact initial weights of the MLP torso.
    torso = zoo.Torso((4,), (8, 8), "tanh", key=jr.PRNGKey(3))
    keys = jr.split(jr.PRNGKey(3), 2)
    want = jax.nn.initializers.orthogonal(np.sqrt(2))(keys[0], (8, 4))
    np.testing.assert_allclose(torso.layers[0].weight, want, rtol=1e-6)
    assert torso.conv is None and torso.kind == "mlp"


IMAGE = Box(0.0, 1.0, (6, 6, 3))


# One agent per network builder: C51 and QR-DQN build DQN's QNetwork, A2C PPO's
# actor and critic, DDPG TD3's actor and critics.
@pytest.mark.parametrize("name", ["dqn", "pqn", "ppo"])
def test_discrete_agents_build_cnn_for_image_observations(name, getkey):
    agent = zoo.make(name, hidden_sizes=(16,))
    agent.check_observations(IMAGE)
    state = agent.init(IMAGE, Discrete(3), key=getkey(), num_envs=2, total_steps=1000)
    torsos = [
        x.torso
        for x in jax_leaves_modules(state)
        if isinstance(getattr(x, "torso", None), zoo.Torso)
    ]
    assert torsos and all(t.kind == "cnn" for t in torsos)
    action, _ = agent.act(state, IMAGE.sample(key=getkey()), key=getkey())
    assert 0 <= int(action) < 3


@pytest.mark.parametrize("name", ["sac", "td3", "ppo"])
def test_continuous_agents_build_cnn_for_image_observations(name, getkey):
    agent = zoo.make(name, hidden_sizes=(16,))
    actions = Box(-1.0, 1.0, (2,))
    state = agent.init(IMAGE, actions, key=getkey(), num_envs=2, total_steps=1000)
    obs = IMAGE.sample(key=getkey())
    action, _ = agent.act(state, obs, key=getkey(), greedy=True)
    assert action.shape == (2,) and bool(jnp.all(jnp.abs(action) <= 1.0))
    if name != "ppo":  # the critics join the action after the convolution
        critics = state.critics  # pyright: ignore[reportAttributeAccessIssue]
        assert critics.torso.kind == "cnn"
        q = ensemble_q(critics, obs, action)
        assert q.shape == (agent.n_critics,) and bool(jnp.all(jnp.isfinite(q)))


def jax_leaves_modules(tree):
    """Every `eqx.Module` inside `tree` (depth first)."""
    out = []

    def visit(x):
        if isinstance(x, eqx.Module):
            out.append(x)
            for v in vars(x).values():
                visit(v)
        elif isinstance(x, (tuple, list)):
            for v in x:
                visit(v)

    visit(tree)
    return out


def test_cnn_on_vector_observations_fails_before_compiling():
    with pytest.raises(ValueError, match=r"DQN: torso='cnn' needs image"):
        runners.validate(
            zoo.make("dqn", torso="cnn"), envs.make("CartPole-v1"), 4, 1000
        )
    with pytest.raises(ValueError, match="PPO: unknown torso 'conv'"):
        zoo.make("ppo", torso="conv")


# --- SimBa ---------------------------------------------------------------------


def _layer_norm(x):
    """Equinox's `LayerNorm` at initialisation (unit weight, zero bias)."""
    return (x - x.mean()) / np.sqrt(x.var() + 1e-5)


def test_simba_torso_by_hand(getkey):
    torso = zoo.Torso((3,), (8, 8), "relu", kind="simba", key=getkey())
    assert torso.kind == "simba" and torso.out_size == 8
    assert torso.blocks is not None and len(torso.blocks) == 2
    obs = np.asarray(jr.normal(getkey(), (3,)))
    embed = torso.layers[0]
    x = np.asarray(embed.weight) @ obs + np.asarray(embed.bias)
    for _, up, down in torso.blocks:
        assert up.weight.shape == (32, 8)  # the inverted bottleneck: 4x wide
        h = np.maximum(np.asarray(up.weight) @ _layer_norm(x) + np.asarray(up.bias), 0)
        x = x + np.asarray(down.weight) @ h + np.asarray(down.bias)
    np.testing.assert_allclose(torso(jnp.asarray(obs)), _layer_norm(x), atol=1e-5)


def test_simba_refuses_widths_that_differ():
    with pytest.raises(ValueError, match=r"torso='simba' takes hidden_sizes of one"):
        zoo.Torso((3,), (8, 16), "relu", kind="simba", key=jr.PRNGKey(0))


# One agent per network builder, as above: a Q network, an actor-critic, SAC's
# critics (which join the action before the blocks).
@pytest.mark.parametrize(
    ("name", "env_name"),
    [("rainbow", "CartPole-v1"), ("ppo", "CartPole-v1"), ("sac", "Pendulum-v1")],
)
def test_agents_take_the_simba_torso_and_normalise_observations(name, env_name, getkey):
    env = envs.make(env_name)
    agent = zoo.make(name, torso="simba", hidden_sizes=(16,))
    assert agent.normalizes_obs  # SimBa's running normalisation comes with it
    state, _ = runners.train(agent, env, key=getkey(), total_steps=512, num_envs=2)
    s = state.agent_state
    torsos = [x for x in jax_leaves_modules(s) if isinstance(x, zoo.Torso)]
    assert torsos and all(t.kind == "simba" for t in torsos)
    stats = s.obs_stats  # pyright: ignore[reportAttributeAccessIssue]
    assert float(stats.count) >= 512 and bool(jnp.any(stats.mean != 0))
    obs = env.observation_space.sample(key=getkey())
    action, _ = agent.act(s, obs, key=getkey(), greedy=True)
    assert bool(jnp.all(jnp.isfinite(jnp.asarray(action, jnp.float32))))
    # With the space's bounds fixed instead (`scale_obs`), nothing runs.
    assert not zoo.make("sac", torso="simba", scale_obs=True).normalizes_obs
