"""`python -m experiments.run with sweep...`: members, programs, records, resume."""

import json
import shutil

import pytest

import zoo
from experiments.run import ConfigError, ex
from experiments.sweeps import members as _members

TINY = {"total_steps": 4096, "eval_episodes": 4, "progress": False}


def _resolve(**updates):
    return ex.run("print_config", config_updates=updates).config


def test_grid_and_random_members():
    agent = zoo.make("ppo")
    members = _members.members(
        agent,
        {"gamma": [0.98, 0.99], "learning_rate": "loguniform(1e-4,1e-2)"},
        samples=3,
        seed=0,
    )
    assert len(members) == 6
    assert [m["gamma"] for m in members] == [0.98] * 3 + [0.99] * 3
    rates = [m["learning_rate"] for m in members]
    assert rates[:3] == rates[3:] and all(1e-4 <= r <= 1e-2 for r in rates)
    programs = _members.programs(
        agent,
        _members.members(agent, {"hidden_sizes": [[8], [16]], "gamma": [0.9]}, 0, 0),
    )
    assert [p.static for p in programs] == [
        {"hidden_sizes": [8]},
        {"hidden_sizes": [16]},
    ]
    assert [p.floats for p in programs] == [{"gamma": [0.9]}] * 2


@pytest.mark.parametrize(
    ("updates", "says"),
    [
        ({"sweep.learning_rat": [1e-3]}, "sweep.learning_rat: PPO has no such"),
        (
            {"sweep.learning_rate": []},
            "sweep.learning_rate: the list of values is empty",
        ),
        ({"sweep.learning_rate": "loguniform(1e-4,1e-2)"}, "set sweep_samples=N"),
        ({"sweep_samples": 4}, "no sweep entry is a distribution"),
        ({"sweep.learning_rate": "normal(0,1)"}, "neither a list of values"),
        ({"sweep.learning_rate": "loguniform(0,1)"}, "positive bounds"),
        ({"sweep.num_steps": "uniform(16,64)"}, "random search draws floats"),
        ({"sweep.learning_rate": ["fast"]}, "expected numbers"),
        ({"sweep.num_minibatches": [4, 7]}, "sweep (num_minibatches=7)"),
        ({"devices": 0}, "devices: expected a positive number"),
    ],
)
def test_bad_sweep_is_named_before_anything_runs(updates, says):
    with pytest.raises(ConfigError, match=None) as info:
        _resolve(agent="ppo", **updates)
    assert says in str(info.value), str(info.value)


def test_sweep_records_every_member_and_resumes_exactly(tmp_path, monkeypatch, capsys):
    """A grid of 2 learning rates x 2 seeds in one program: the member table,
    per-member series and best command; then the run resumed from its first
    checkpoint ends exactly where the uninterrupted one did."""
    monkeypatch.chdir(tmp_path)
    argv = ["run.py", "-F", str(tmp_path / "runs"), "with", "agent=ppo"]
    argv += ["sweep.learning_rate=[0.001,0.003]", "num_seeds=2"]
    argv += [f"{k}={v}" for k, v in TINY.items()]
    argv += ["checkpoint_every=2048", "keep_checkpoints=3", "compilation_cache=False"]
    run = ex.run_commandline(argv)
    assert run is not None and run.status == "COMPLETED"
    err = capsys.readouterr().err
    assert "Sweep: 2 member(s) in one program" in err
    assert "Added new config entry" not in err  # sweep.<name> adds entries by design
    folder = tmp_path / "runs" / "1"
    info = json.loads((folder / "info.json").read_text())
    table = info["members"]
    assert [row["learning_rate"] for row in table] == [0.001, 0.003]
    best = max(table, key=lambda row: row["return_mean"])
    assert run.result == best["return_mean"]
    assert f"hp.learning_rate={best['learning_rate']}" in info["best_command"]
    metrics = json.loads((folder / "metrics.json").read_text())
    for member in (0, 1):
        assert len(metrics[f"member_{member}.eval.return_mean"]["values"]) >= 2
    assert (folder / "members.md").is_file() and (
        folder / "learning_curve.png"
    ).is_file()

    copy = tmp_path / "runs" / "copy"
    shutil.copytree(folder, copy)
    steps = sorted(int(p.name) for p in (copy / "checkpoints").iterdir())
    for later in steps[1:]:
        shutil.rmtree(copy / "checkpoints" / str(later))
    resumed = ex.run_commandline(
        [
            "run.py",
            "-F",
            str(tmp_path / "runs"),
            "with",
            f"resume={copy}",
            "progress=False",
            "compilation_cache=False",
        ]
    )
    assert resumed is not None and resumed.status == "COMPLETED"
    again = json.loads((tmp_path / "runs" / "2" / "info.json").read_text())["members"]
    assert again == table
