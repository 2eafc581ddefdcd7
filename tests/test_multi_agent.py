"""Multi-agent training: shared and independent learners built from zoo agents,
trained by the same runner, resumed exactly, and run from the CLI."""

import json

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo

GAME = envs.MatrixGame()  # optimum: joint action (0, 0), 10 each per step
PPO = zoo.PPO(num_steps=8, hidden_sizes=(16,))


@pytest.mark.parametrize(
    "learners",
    [zoo.Shared(PPO, agent_id=True), zoo.Independent.of(PPO, GAME)],
    ids=["shared-with-id", "independent"],
)
def test_ppo_learners_reach_the_optimal_joint_action(learners):
    result = runners.run(
        learners,
        GAME,
        key=jr.PRNGKey(0),
        total_steps=2048,
        num_envs=8,
        num_seeds=2,
        eval_episodes=16,
    )
    assert result.agent_returns is not None
    # 10 per agent only for the joint action (0, 0): (1, 1) pays 5, others 0.
    for name in GAME.agents:
        np.testing.assert_array_equal(result.agent_returns[name], 10.0)
    np.testing.assert_array_equal(result.final_returns, 20.0)
    last = result.reports[-1]
    assert last.eval_agent_returns == {a: [10.0, 10.0] for a in GAME.agents}
    train = last.train
    assert train["episode_return"] == pytest.approx(
        train["episode_return.agent_0"] + train["episode_return.agent_1"]
    )


def test_shared_agent_sees_agent_ids_and_learns_from_every_agent():
    learners = zoo.Shared(PPO, agent_id=True)
    state = runners.init(learners, GAME, key=jr.PRNGKey(0), num_envs=3, total_steps=64)
    # One memory column per agent and env; observations carry a one-hot id.
    obs = state.memory.trajectory.obs
    assert obs.shape == (8, 2 * 3, 1 + 2)
    batch = {"agent_0": jnp.zeros((3, 1)), "agent_1": jnp.ones((3, 1))}
    with_id = learners._with_id(batch)
    np.testing.assert_array_equal(with_id["agent_1"][:, 1:], [[0, 1]] * 3)
    actions, _ = learners.act(state.agent_state, batch, key=jr.PRNGKey(1))
    assert set(actions) == set(GAME.agents) and actions["agent_0"].shape == (3,)


def test_independent_agents_may_differ_but_must_fit():
    mixed = zoo.Independent(
        {"agent_0": zoo.DQN(train_frequency=1), "agent_1": zoo.PPO(num_steps=1)}
    )
    runners.validate(mixed, GAME, 4, 100)
    with pytest.raises(ValueError, match="same num_steps"):
        zoo.Independent({"agent_0": zoo.DQN(), "agent_1": zoo.PPO()})
    with pytest.raises(ValueError, match="'agent_2' is not an agent of"):
        runners.validate(
            zoo.Independent({a: PPO for a in ("agent_0", "agent_1", "agent_2")}),
            GAME,
            4,
            100,
        )
    with pytest.raises(ValueError, match=r"agent 'agent_0' \(SAC\).*Box"):
        runners.validate(
            zoo.Independent({"agent_0": zoo.SAC(), "agent_1": zoo.SAC()}), GAME, 4, 100
        )
    with pytest.raises(ValueError, match=r"zoo.Shared\(PPO\(...\)\)"):
        runners.validate(PPO, GAME, 4, 100)
    with pytest.raises(ValueError, match="single-agent env"):
        runners.validate(zoo.Shared(PPO), envs.make("CartPole-v1"), 4, 100)
    with pytest.raises(ValueError, match="not those of Shared learners"):
        runners.check_sweep(zoo.Shared(PPO), {"learning_rate": [1e-3]})


def test_multi_agent_resume_is_exact(tmp_path):
    # A replay memory and a rollout, side by side.
    dqn = zoo.DQN(train_frequency=8, learning_starts=16, hidden_sizes=(16,))
    learners = zoo.Independent({"agent_0": dqn, "agent_1": PPO})
    kwargs: dict = dict(
        key=jr.PRNGKey(3), total_steps=1024, num_envs=4, num_seeds=2, eval_every=256
    )
    saved = []

    def save(state, report):
        saved.append(report.env_steps)
        runners.save_checkpoint(tmp_path / str(report.env_steps), state, {})

    full = runners.run(learners, GAME, checkpoint=save, checkpoint_every=512, **kwargs)
    assert saved == [512, 1024]
    like = runners.state_template(
        learners, GAME, num_envs=4, total_steps=1024, num_seeds=2
    )
    state, _ = runners.load_checkpoint(tmp_path / "512", like)
    resumed = runners.run(learners, GAME, state=state, chunks=full.chunks, **kwargs)
    same = jax.tree.map(
        lambda a, b: bool(np.array_equal(a, b)), full.state, resumed.state
    )
    assert all(jax.tree.leaves(same))
    assert resumed.reports[-1].train == full.reports[-1].train
    np.testing.assert_array_equal(resumed.final_returns, full.final_returns)


def test_cli_trains_records_and_evaluates_multi_agent_runs(tmp_path, monkeypatch):
    from experiments import evaluate
    from experiments.run import ex

    monkeypatch.chdir(tmp_path)
    run = ex.run(
        config_updates={
            "agent": "ppo",
            "env": "marl/MatrixGame",
            "sharing": "independent",
            "per_agent": {"agent_1": {"agent": "dqn", "learning_starts": 32}},
            "total_steps": 1024,
            "num_envs": 4,
            "hp": {"num_steps": 1, "num_minibatches": 1, "hidden_sizes": [16]},
            "progress": False,
        }
    )
    assert run.status == "COMPLETED"
    folder = tmp_path / "runs" / str(run._id)
    metrics = json.loads((folder / "metrics.json").read_text())
    for name in ("agent_0", "agent_1"):
        assert f"eval.return.{name}" in metrics
        assert f"train.episode_return.{name}" in metrics
        assert f"train.{name}.loss" in metrics
    done = evaluate.ex.run(config_updates={"run": str(folder), "episodes": 4})
    per_agent = done.info["agent_returns"]
    assert set(per_agent) == {"agent_0", "agent_1"}
    assert done.info["returns"] == [
        a + b for a, b in zip(per_agent["agent_0"], per_agent["agent_1"], strict=True)
    ]


def test_non_finite_learners_stop_the_run():
    broken = zoo.PPO(num_steps=8, hidden_sizes=(16,), learning_rate=float("nan"))
    learners = zoo.Independent({"agent_0": PPO, "agent_1": broken})
    with pytest.raises(runners.NonFiniteError, match="agent_1"):
        runners.run(learners, GAME, key=jr.PRNGKey(0), total_steps=256, num_envs=4)
