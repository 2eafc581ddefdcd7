"""`python -m experiments.sweep`: trials as Sacred runs, launched by submitit's
local executor, searched by Optuna for the IQM over at least 4 seeds; a killed
sweep resumes its trials.

Trials vary the seed, so a worker compiles its programs once and its later trials
reuse them: these tests check the launching and recording, not learning.
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import runners
from experiments import sweep
from experiments._errors import ConfigError
from experiments.analysis import stats
from experiments.sweeps import trials as _trials

ROOT = Path(__file__).resolve().parents[1]
TINY = ["agent=ppo", "total_steps=2048", "num_envs=4", "eval_episodes=4"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Hermetic: workers inherit this and neither read nor fill the user's cache.
    monkeypatch.setenv("EQUIZOO_CACHE_DIR", str(tmp_path / "jax-cache"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return tmp_path


@pytest.mark.parametrize(
    ("updates", "says"),
    [
        (["grid.seed=[0,1]", "search.seed=uniform(0,1)"], "grid.* and search.*"),
        (["grid.seed=[]"], "grid.seed: expected a non-empty list"),
        (["search.hp.learning_rate=normal(0,1)"], "search.hp.learning_rate: expected"),
        (["search.hp.learning_rate=loguniform(0,1)"], "positive bounds"),
        (["search.hp.num_epochs=intuniform(1.5,4)"], "must be integers"),
        (["seed=1"], "nothing to sweep"),
        (["grid.hp.learning_rat=[0.1,0.2]"], "trial hp.learning_rat=0.1: hp"),
        (["grid.num_envs=[4,0]"], "trial num_envs=0: num_envs"),
        (["search.seed=intuniform(0,9)"], "search.* needs --trials N"),
    ],
)
def test_bad_sweeps_are_named_before_any_job(workdir, updates, says):
    with pytest.raises(ConfigError) as info:
        sweep.main(["--executor", "local", "with", *TINY, *updates])
    assert says in str(info.value), str(info.value)
    assert not (workdir / "sweeps").exists() or not any(
        (workdir / "sweeps").glob("*/jobs")
    )


@pytest.mark.parametrize(
    ("updates", "says"),
    [
        (["num_seeds=2"], "num_seeds=2: a search ranks trials by the IQM"),
        (["num_seeds=3"], "set num_seeds=4 (or more)"),
        (["search.num_seeds=[2,4]"], "search.num_seeds=[2, 4]: a search ranks"),
        (["search.num_seeds=intuniform(1,8)"], "search num_seeds over values of 4"),
    ],
)
def test_a_search_under_four_seeds_is_refused(workdir, updates, says):
    argv = ["--executor", "local", "--trials", "2", "with", *TINY]
    with pytest.raises(ConfigError) as info:
        sweep.main([*argv, "search.seed=intuniform(0,9)", *updates])
    assert says in str(info.value), str(info.value)
    assert not (workdir / "sweeps").exists()


def test_a_search_under_four_seeds_is_one_line_before_any_trial(workdir):
    command = [sys.executable, "-m", "experiments.sweep", "--executor", "local"]
    command += ["--trials", "2", "with", *TINY, "num_seeds=2"]
    command += ["search.seed=intuniform(0,9)"]
    out = subprocess.run(
        command, cwd=workdir, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stdout == ""
    assert out.stderr.splitlines() == [
        "error: num_seeds=2: a search ranks trials by the IQM of their seeds' final "
        "returns, which needs at least 4 seeds; set num_seeds=4 (or more)"
    ]
    assert not (workdir / "sweeps").exists()  # no folder, no job, no trial


def test_a_trial_on_disk_gives_its_iqm_and_old_records_their_mean(tmp_path):
    """`trial_state` reads a completed trial's objective from its record: the
    recorded IQM, else the IQM of the recorded per-seed returns, else (a run
    recorded before either was) its result, the mean."""

    def record(slot: str, info: dict | None) -> Path:
        attempt = tmp_path / "trials" / slot / "1"
        attempt.mkdir(parents=True)
        run = {"status": "COMPLETED", "result": 26.5}
        (attempt / "run.json").write_text(json.dumps(run))
        if info is not None:
            (attempt / "info.json").write_text(json.dumps(info))
        return attempt.parent

    finals = [1.0, 2.0, 3.0, 100.0]
    recorded = record("0000", {"final_returns": finals, "return_iqm": 2.5})
    assert _trials.trial_state(recorded)[:2] == ("COMPLETED", 2.5)
    per_seed = record("0001", {"final_returns": finals, "wall_s": 1.0})
    assert _trials.trial_state(per_seed)[1] == float(stats.iqm(finals)) == 2.5
    old = record("0002", {"wall_s": 1.0})
    assert _trials.trial_state(old)[1] == 26.5
    assert _trials.trial_state(record("0003", None))[1] == 26.5
    # A completed trial is reused, not run again: its recorded IQM.
    assert _trials.run_trial(str(tmp_path), 0, {}, None) == 2.5


def _runs(folder: Path) -> list[dict]:
    return [
        json.loads(p.read_text()) for p in sorted(folder.glob("trials/*/*/run.json"))
    ]


@pytest.mark.serial
def test_grid_of_four_trials_on_two_local_workers(workdir, capsys):
    folder = workdir / "grid"
    argv = ["--folder", str(folder), "--workers", "2", "--executor", "local"]
    code = sweep.main([*argv, "with", *TINY, "grid.seed=[0,1,2,3]"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    runs = _runs(folder)
    assert [r["status"] for r in runs] == ["COMPLETED"] * 4
    configs = [
        json.loads(p.read_text())["seed"]
        for p in sorted(folder.glob("trials/*/1/config.json"))
    ]
    assert configs == [0, 1, 2, 3]
    summary = json.loads((folder / "summary.json").read_text())
    best = summary["best"]
    assert best["result"] == max(r["result"] for r in runs)
    assert f"seed={best['seed']}" in best["command"]
    study = json.loads((folder / "best.json").read_text())
    assert (study["trials"], study["trial"]) == (4, best["trial"])
    assert study["value"] == best["iqm"] == best["result"]  # one seed: the mean
    assert study["worst"] == best["worst"] == best["result"]
    assert "| worst |" in (folder / "summary.md").read_text()
    assert "4/4 trials completed" in out.out
    assert "best: trial" in out.out
    # Relaunching a finished sweep runs nothing again.
    assert sweep.main([*argv, "with", *TINY, "grid.seed=[0,1,2,3]"]) == 0
    assert len(_runs(folder)) == 4
    # The same folder with another sweep is refused.
    with pytest.raises(ConfigError, match="holds another sweep"):
        sweep.main([*argv, "with", *TINY, "grid.seed=[0,1]"])


@pytest.mark.serial
def test_optuna_study_of_six_trials_across_two_workers(workdir, capsys):
    """Given no num_seeds, a search's trials train 4 seeds; Optuna's value of a
    trial is the IQM of its seeds' recorded final returns (the run's result
    stays their mean), and best.json records the study."""
    import optuna

    folder = workdir / "search"
    argv = ["--folder", str(folder), "--workers", "2", "--executor", "local"]
    argv += ["--trials", "6", "with", *TINY, "search.seed=intuniform(0,1000)"]
    code = sweep.main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / sweep.STUDY_FILE))
    )
    study = optuna.load_study(study_name="sweep", storage=storage)
    trials = study.get_trials()
    assert len(trials) == 6
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}
    runs = _runs(folder)
    assert [r["status"] for r in runs] == ["COMPLETED"] * 6
    for trial in trials:
        run_dir = folder / "trials" / f"{trial.user_attrs['slot']:04d}" / "1"
        config = json.loads((run_dir / "config.json").read_text())
        assert (config["seed"], config["num_seeds"]) == (trial.params["seed"], 4)
        info = json.loads((run_dir / "info.json").read_text())
        finals = info["final_returns"]
        assert len(finals) == 4 and all(isinstance(r, float) for r in finals)
        assert trial.value == info["return_iqm"] == float(stats.iqm(finals))
        result = json.loads((run_dir / "run.json").read_text())["result"]
        assert result == pytest.approx(sum(finals) / 4, rel=1e-6)
    # Both workers took trials: two submitit jobs ran.
    assert len(list((folder / "jobs").glob("*_result.pkl"))) == 2
    best = json.loads((folder / "best.json").read_text())
    assert best["command"] == shlex.join(["python", "-m", "experiments.sweep", *argv])
    assert best["trials"] == 6 and best["num_seeds"] == 4
    assert best["value"] == study.best_value == max(t.value for t in trials)
    (chosen,) = [t for t in trials if t.user_attrs["slot"] == best["trial"]]
    assert chosen.value == best["value"]
    chosen_dir = folder / "trials" / f"{best['trial']:04d}" / "1"
    finals = json.loads((chosen_dir / "info.json").read_text())["final_returns"]
    assert best["worst"] == min(finals)  # what the IQM hides, beside it
    assert best["params"] == {"seed": chosen.params["seed"]}
    assert f"seed={chosen.params['seed']}" in best["train_command"]
    assert "num_seeds=4" in best["train_command"]
    assert f"best: trial {best['trial']} of 6 completed, IQM" in out.out
    assert str(folder / "best.json") in out.out


@pytest.mark.serial
def test_a_killed_search_resumes_its_trial_when_relaunched(workdir):
    """The launcher and its worker are killed once the first trial has written a
    checkpoint; launched again, that trial continues from its checkpoint (its
    stale Optuna trial failed, its parameters enqueued again), then the study
    runs the trial it still owes."""
    import optuna

    folder = workdir / "killed"
    command = [sys.executable, "-m", "experiments.sweep", "--folder", str(folder)]
    command += ["--workers", "1", "--trials", "2", "--executor", "local"]
    command += ["with", "agent=ppo", "total_steps=65536", "num_envs=4"]
    command += ["num_seeds=4", "eval_episodes=4", "checkpoint_every=4096"]
    command += ["search.seed=intuniform(0,1000)"]
    checkpoints = folder / "trials" / "0000" / "1" / "checkpoints"
    with open(workdir / "first.log", "w") as log:
        first = subprocess.Popen(
            command,
            cwd=workdir,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:
            if runners.latest_checkpoint(checkpoints) is not None:  # complete
                break
            time.sleep(0.05)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the launcher and its worker
        first.wait()
    assert runners.latest_checkpoint(checkpoints) is not None, (
        workdir / "first.log"
    ).read_text()
    killed = json.loads((folder / "trials" / "0000" / "1" / "run.json").read_text())
    assert killed["status"] == "RUNNING"  # killed: Sacred could not say otherwise

    again = subprocess.run(
        command, cwd=workdir, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2/2 trials completed" in again.stdout
    resumed = folder / "trials" / "0000" / "2"
    info = json.loads((resumed / "info.json").read_text())
    assert info["resumed_from"]["run_dir"] == str(folder / "trials" / "0000" / "1")
    assert info["resumed_from"]["env_steps"] >= 4096
    assert json.loads((resumed / "run.json").read_text())["status"] == "COMPLETED"
    rows = json.loads((folder / "summary.json").read_text())["trials"]
    assert [(r["trial"], r["attempts"], r["status"]) for r in rows] == [
        (0, 2, "COMPLETED"),
        (2, 1, "COMPLETED"),
    ]
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / sweep.STUDY_FILE))
    )
    trials = optuna.load_study(study_name="sweep", storage=storage).get_trials()
    State = optuna.trial.TrialState
    assert [t.state for t in trials] == [State.FAIL, State.COMPLETE, State.COMPLETE]
    assert trials[1].params == trials[0].params
