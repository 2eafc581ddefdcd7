"""One slower learning test per agent, with the tuned configs users get.

Each trains one seed with the hyperparameters of `experiments/configs/<agent>.yaml`
and asserts the mean greedy return over 64 episodes reaches the pair's target in
the one targets file (`experiments.targets`, `benchmarks/targets.yaml`). Each
agent's cheapest tuned pair; the dearer ones (MountainCarContinuous, MinAtar)
are held to their targets by the benchmark table (`benchmarks/table.py`), over
8 seeds and 24 held out, not here.
"""

import jax.random as jr
import pytest

import envs
import runners
import zoo
from experiments import targets
from experiments.configs import tuned


@pytest.mark.slow
@pytest.mark.parametrize(
    ("agent_name", "env_name"),
    [
        ("ppo", "CartPole-v1"),
        ("c51", "CartPole-v1"),
        ("qrdqn", "CartPole-v1"),
        ("iqn", "CartPole-v1"),
        ("rainbow", "CartPole-v1"),
        ("pqn", "CartPole-v1"),
        ("a2c", "CartPole-v1"),
        ("sac", "Pendulum-v1"),
        ("tqc", "Pendulum-v1"),
        ("crossq", "Pendulum-v1"),
        ("td3", "Pendulum-v1"),
        ("ddpg", "Pendulum-v1"),
    ],
)
def test_agent_reaches_target_return(agent_name, env_name):
    target = targets.target(agent_name, env_name)
    assert target is not None, f"no target for {agent_name} on {env_name}"
    threshold = target.value
    block = tuned(agent_name, env_name)
    assert block is not None, f"no tuned config for {agent_name} on {env_name}"
    agent = zoo.make(agent_name, **block.get("hp", {}))
    result = runners.run(
        agent,
        envs.make(env_name, **block.get("env_params", {})),
        key=jr.PRNGKey(0),
        total_steps=block["total_steps"],
        num_envs=block["num_envs"],
        eval_episodes=64,
    )
    mean_return = float(result.final_returns.mean())
    assert mean_return >= threshold, f"{agent_name} on {env_name}: {mean_return:.1f}"
