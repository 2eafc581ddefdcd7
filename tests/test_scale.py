"""Sweeps in one program, and runs sharded over devices."""

import os
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo
from experiments.configs import tuned
from runners import _run

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ({}, "lists of values"),
        ({"learning_rat": [1e-3]}, "no hyperparameter 'learning_rat'"),
        ({"hidden_sizes": [[32], [64]]}, "not a float hyperparameter"),
        ({"num_steps": [64, 128]}, "not a float hyperparameter"),
        ({"anneal_lr": [True, False]}, "not a float hyperparameter"),
        ({"learning_rate": []}, "is empty"),
        ({"learning_rate": "1e-3"}, "needs a list"),
        ({"learning_rate": [1e-3, "fast"]}, "takes numbers"),
        ({"learning_rate": [1e-3, float("nan")]}, "finite"),
        ({"learning_rate": [1e-3, 3e-3], "gamma": [0.99]}, "one value per member"),
    ],
)
def test_bad_sweep_is_named_before_compiling(sweep, message):
    agent, env = zoo.make("ppo"), envs.make("CartPole-v1")
    with pytest.raises(ValueError, match=message):
        runners.run(agent, env, key=jr.PRNGKey(0), total_steps=1000, sweep=sweep)


@pytest.mark.parametrize("devices", [0, 2, 5, True, []])
def test_bad_devices(devices):
    agent, env = zoo.make("ppo"), envs.make("CartPole-v1")
    with pytest.raises(ValueError, match="devices"):
        runners.run(agent, env, key=jr.PRNGKey(0), total_steps=1000, devices=devices)


def test_sweep_too_big_for_memory_is_refused_before_compiling():
    # 2**26 transitions of CartPole per seed: about 2.7 GiB each, 16 seeds.
    agent = zoo.make("dqn", buffer_size=2**26)
    env = envs.make("CartPole-v1")
    with pytest.raises(ValueError, match=r"GiB .* fewer seeds or sweep members"):
        runners.run(
            agent,
            env,
            key=jr.PRNGKey(0),
            total_steps=1000,
            num_seeds=16,
            sweep={"learning_rate": [1e-4, 1e-3]},
        )


def test_grid_crosses_every_value():
    sweep = runners.grid(learning_rate=[1e-3, 3e-3], gamma=[0.98, 0.99, 0.999])
    assert sweep["learning_rate"] == [1e-3] * 3 + [3e-3] * 3
    assert sweep["gamma"] == [0.98, 0.99, 0.999] * 2


@pytest.mark.parametrize("name", zoo.names())
def test_every_float_hyperparameter_traces_as_an_array(name):
    """What `sweepable` promises: the agent trains and evaluates with all of its
    float hyperparameters traced at once (traced, not compiled)."""
    agent = zoo.make(name)
    env = envs.make(zoo.default_env(name))
    names = runners.sweepable(agent)
    assert "learning_rate" in names or "actor_lr" in names or len(names) > 3
    keys = jr.split(jr.PRNGKey(0), 2)
    hparams = {n: jnp.full(2, getattr(agent, n), jnp.float32) for n in names}
    init = partial(runners.init_seeds, agent, env, num_envs=4, total_steps=10_000)
    state = jax.eval_shape(init, keys, hparams)
    chunk = partial(_run._chunk_seeds, agent, env, iterations=1)
    _, metrics, _ = jax.eval_shape(chunk, state, hparams)
    assert metrics and all(m.shape[0] == 2 for m in jax.tree.leaves(metrics))
    evaluate = partial(_run._evaluate_seeds, agent, env, num_episodes=2)
    assert jax.eval_shape(evaluate, state.agent_state, keys, hparams).shape == (2, 2)


def test_sweep_trains_every_member_in_one_program():
    """PPO's tuned CartPole block with its own learning rate and with none: each
    member trains two seeds; the first learns, the second keeps its initial
    parameters."""
    block = tuned("ppo", "CartPole-v1")
    assert block is not None
    agent, env = zoo.make("ppo", **block["hp"]), envs.make("CartPole-v1")
    lr = agent.learning_rate
    key = jr.PRNGKey(0)
    result = runners.run(
        agent,
        env,
        key=key,
        total_steps=block["total_steps"],
        num_envs=block["num_envs"],
        num_seeds=2,
        eval_episodes=16,
        sweep={"learning_rate": [lr, 0.0]},
    )
    assert result.sweep == {"learning_rate": [lr, 0.0]}
    assert result.final_returns.shape == (4, 16)
    assert result.state.iteration.shape == (4,)
    returns = result.member_returns
    assert returns.shape == (2, 2)
    assert returns[0].min() >= 450, returns
    initial = runners.init_seeds(
        agent, env, jr.split(key, 2), num_envs=block["num_envs"], total_steps=1
    )
    for before, after in zip(
        jax.tree.leaves(initial.agent_state.actor),
        jax.tree.leaves(result.state.agent_state.actor),
        strict=True,
    ):
        # (up to the rounding of the run's init, compiled with other options)
        np.testing.assert_allclose(np.asarray(after)[2:], before, atol=1e-5)
        assert np.abs(np.asarray(after)[:2] - before).max() > 1e-3
    report = result.reports[-1]
    assert report.train_runs is not None and len(report.train_runs) == 4
    assert report.eval_returns == pytest.approx(returns.ravel().tolist())


DEVICES_SCRIPT = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_num_cpu_devices", 2)
    import jax.random as jr
    import numpy as np
    import envs, runners, zoo

    agent = zoo.make("ppo", num_steps=32, hidden_sizes=(16, 16))
    env = envs.make("CartPole-v1")

    def run(devices, num_seeds, learning_rates):
        return runners.run(
            agent, env, key=jr.PRNGKey(0), total_steps=2048, num_envs=4,
            num_seeds=num_seeds, eval_episodes=8, devices=devices, bitwise=True,
            sweep={"learning_rate": learning_rates},
        )

    assert len(jax.devices()) == 2
    # 2 members x 2 seeds: 2 runs per device; 3 members x 1 seed: padded to 4.
    for num_seeds, rates in ((2, [1e-3, 3e-3]), (1, [1e-3, 2e-3, 3e-3])):
        one, two = run(1, num_seeds, rates), run(2, num_seeds, rates)
        runs = len(rates) * num_seeds
        assert one.state.iteration.shape == two.state.iteration.shape == (runs,)
        for a, b in zip(jax.tree.leaves(one.state), jax.tree.leaves(two.state)):
            assert np.array_equal(np.asarray(a), np.asarray(b)), runs
        assert np.array_equal(one.final_returns, two.final_returns)
    # One run per device, and one run alone: a batch of one compiles apart, so
    # bitwise pads each device to two runs.
    one, two = run(1, 1, [1e-3, 3e-3]), run(2, 1, [1e-3, 3e-3])
    for a, b in zip(jax.tree.leaves(one.state), jax.tree.leaves(two.state)):
        assert np.array_equal(np.asarray(a), np.asarray(b)), "1 run per device"
    alone = run(1, 1, [3e-3])
    for a, b in zip(jax.tree.leaves(alone.state), jax.tree.leaves(one.state)):
        assert np.array_equal(np.asarray(a)[0], np.asarray(b)[1]), "1 run alone"
    print("OK")
    """
)


def test_two_devices_give_bitwise_the_same_runs_as_one():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", DEVICES_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
