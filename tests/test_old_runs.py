"""Run folders written by an earlier main (commit 677e650, before the
experiments layer was redesigned) still load, evaluate and resume.

`tests/fixtures/old_runs/` holds what these commands wrote (record sources and
learning-curve images left out: nothing reads them back):

    python -m experiments.run -F runs with agent=dqn total_steps=2000 \
        checkpoint_every=1000 eval_episodes=2 hp.buffer_size=1000     # runs/1
    python -m experiments.run -F runs with agent=ppo env=Pendulum-v1 \
        total_steps=4096 num_envs=4 num_seeds=2 checkpoint_every=2048 \
        eval_episodes=2                                               # runs/2
    python -m experiments.run -F runs with agent=dqn total_steps=2000 \
        eval_episodes=2 hp.buffer_size=1000 num_seeds=2 \
        'sweep.learning_rate=[1e-3,3e-3]'                             # runs/3
    python -m experiments.run -F runs with agent=ppo env=marl/MatrixGame \
        sharing=independent per_agent.agent_1.agent=dqn \
        per_agent.agent_1.learning_starts=32 per_agent.agent_1.buffer_size=256 \
        total_steps=1024 num_envs=4 hp.num_steps=1 hp.num_minibatches=1 \
        'hp.hidden_sizes=[16]' checkpoint_every=512                   # runs/4
    python -m experiments.sweep --workers 1 --folder study with agent=dqn \
        total_steps=2000 num_seeds=2 eval_episodes=2 hp.buffer_size=1000 \
        'grid.hp.learning_rate=[1e-3]'                                # study
"""

import json
import math
import shutil
from pathlib import Path

import jax
import jax.random as jr
import numpy as np
import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "old_runs"
# run folder: (agent, env, runs trained (members x seeds), env steps recorded)
RUNS = {
    "1": ("dqn", "CartPole-v1", 1, 2016),
    "2": ("ppo", "Pendulum-v1", 2, 4096),
    "3": ("dqn", "CartPole-v1", 4, 2016),
    "4": ("ppo", "marl/MatrixGame", 1, 1024),
}


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / "old" / name
    shutil.copytree(FIXTURES / "runs" / name, target)
    return target


@pytest.mark.parametrize("name", sorted(RUNS))
def test_old_run_loads_and_acts(name, tmp_path):
    import experiments

    agent_name, env_name, num_runs, steps = RUNS[name]
    folder = _copy(name, tmp_path)
    assert json.loads((folder / "config.json").read_text())["agent"] == agent_name
    last = sorted((folder / "checkpoints").iterdir(), key=lambda p: int(p.name))[-1]
    assert int(last.name) == steps
    for seed in range(num_runs):
        agent, state, env = experiments.load_run(folder, seed=seed)
        assert env.name == env_name
        _, from_checkpoint, _ = experiments.load_run(last, seed=seed)
        for a, b in zip(
            jax.tree.leaves(state), jax.tree.leaves(from_checkpoint), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        if env_name.startswith("marl/"):
            continue  # multi-agent acting: test_old_run_evaluates plays it
        obs, _ = env.reset(jr.PRNGKey(0))
        action, _ = agent.act(state, obs, key=jr.PRNGKey(1), greedy=True)
        assert np.all(np.isfinite(np.asarray(action)))
    with pytest.raises(IndexError, match=f"trained {num_runs} run"):
        experiments.load_run(folder, seed=num_runs)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_old_run_evaluates(name, tmp_path):
    from experiments import evaluate

    folder = _copy(name, tmp_path)
    done = evaluate.ex.run(
        config_updates={"run": str(folder), "episodes": 2},
        options={"--file_storage": str(tmp_path / "records")},
    )
    assert done.status == "COMPLETED"
    returns = done.info["returns"]
    assert len(returns) == 2 and all(math.isfinite(r) for r in returns)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_old_run_resumes(name, tmp_path):
    from experiments.run import ex

    _, _, num_runs, steps = RUNS[name]
    folder = _copy(name, tmp_path)
    before = json.loads((folder / "config.json").read_text())
    run = ex.run(
        config_updates={
            "resume": str(folder),
            "total_steps": 2 * steps,
            "progress": False,
            "compilation_cache": False,
        },
        options={"--file_storage": str(tmp_path / "records")},
    )
    assert run.status == "COMPLETED"
    for key in ("agent", "env", "seed", "num_seeds", "num_envs", "hp", "sweep"):
        assert run.config[key] == before[key], key
    resumed = tmp_path / "records" / str(run._id)
    newest = sorted((resumed / "checkpoints").iterdir(), key=lambda p: int(p.name))
    assert int(newest[-1].name) >= 2 * steps
    metrics = json.loads((resumed / "metrics.json").read_text())
    eval_steps = [
        s for k, v in metrics.items() if ".eval.return" in f".{k}" for s in v["steps"]
    ]
    # The resumed record goes on from the old run's steps, not from 0.
    assert eval_steps and min(eval_steps) > steps
    info = json.loads((resumed / "info.json").read_text())
    if "members" in info:  # a sweep's info: one row per member
        assert 2 * len(info["members"]) == num_runs
    else:
        assert info["env_steps"] >= 2 * steps
        assert len(info["final_returns"]) == num_runs


def test_old_sweep_folder_continues_with_nothing_to_run(tmp_path, capfd):
    from experiments import sweep

    folder = tmp_path / "study"
    shutil.copytree(FIXTURES / "study", folder)
    status = sweep.main(
        [
            "--workers",
            "1",
            "--folder",
            str(folder),
            "with",
            "agent=dqn",
            "total_steps=2000",
            "num_seeds=2",
            "eval_episodes=2",
            "hp.buffer_size=1000",
            "grid.hp.learning_rate=[1e-3]",
        ]
    )
    out = capfd.readouterr()
    assert status == 0
    assert "1 trial(s), 0 to run" in out.out + out.err, out
    assert "1/1 trials completed" in out.out
    summary = json.loads((folder / "summary.json").read_text())
    (row,) = summary["trials"]
    assert row["status"] == "COMPLETED" and row["iqm"] == 74.5
    assert summary["best"]["trial"] == 0
