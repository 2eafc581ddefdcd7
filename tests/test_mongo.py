"""`-m`: records in MongoDB, against mongomock (as Sacred's own tests) and a real
MongoDB-wire server (SecantusDB in a child process: `mongo_server`)."""

import json
import time

import pytest

from experiments._errors import ConfigError
from experiments.board.server import LocalServer
from experiments.sacred import mongo as _mongo

TINY = ["agent=dqn", "total_steps=2000", "eval_episodes=4", "compilation_cache=False"]

pytestmark = [
    # Sacred's and mongomock's own deprecations, not ours.
    pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:mongomock"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sacred"),
]


def test_mongo_record(tmp_path, monkeypatch, mongo):
    """A run's document (config, result, info, code and versions), its metrics,
    and its artifacts in GridFS with their content types; the file record the
    same."""
    import gridfs

    from experiments.run import ex, resume_command

    monkeypatch.chdir(tmp_path)
    run = ex.run_commandline(["run.py", "-m", mongo.spec, "with", *TINY])
    assert run is not None and run.status == "COMPLETED"

    doc = mongo.db.runs.find_one({"_id": run._id})
    assert doc["status"] == "COMPLETED"
    assert doc["config"]["agent"] == "dqn" and doc["config"]["total_steps"] == 2000
    assert doc["result"] == pytest.approx(run.result)
    assert {"wall_s", "compile_s", "steps_per_s"} <= set(doc["info"])

    metric = mongo.db.metrics.find_one({"run_id": run._id, "name": "eval.return_mean"})
    assert metric is not None
    assert metric["steps"] == sorted(metric["steps"]) and len(metric["steps"]) > 1
    assert all(isinstance(v, float) for v in metric["values"])

    fs = gridfs.GridFS(mongo.db)
    types = {}
    for artifact in doc["artifacts"]:
        assert fs.get(artifact["file_id"]).read()
        stored = mongo.db["fs.files"].find_one({"_id": artifact["file_id"]})
        types[artifact["name"]] = stored["contentType"]
    assert types == {
        "final_state.eqx": "application/octet-stream",
        "final_state.json": "application/json",
        "eval_returns.json": "application/json",
        "learning_curve.png": "image/png",
    }
    # Given its content type, no artifact makes Sacred print a guess.
    assert "content-type" not in doc["captured_out"]

    # The code that ran and the versions that decided its numbers, in both records.
    local = tmp_path / "runs" / str(run._id)
    on_disk = json.loads((local / "run.json").read_text())
    for experiment in (doc["experiment"], on_disk["experiment"]):
        assert experiment["mainfile"] == "experiments/run.py"
        sources = {s[0] for s in experiment["sources"]}
        assert {
            "experiments/run.py",
            "experiments/configs/dqn.yaml",
            "zoo/_dqn.py",
            "runners/_run.py",
            "envs/_classic.py",
        } <= sources, sorted(sources)
        versions = dict(d.split("==") for d in experiment["dependencies"])
        assert {
            "jax",
            "jaxlib",
            "equinox",
            "optax",
            "gymnax",
            "numpy",
            "sacred",
        } <= set(versions), versions
        import jax

        assert versions["jax"] == jax.__version__
        (repository,) = experiment["repositories"]
        assert len(repository["commit"]) == 40 and "dirty" in repository
    # Sacred keeps a copy of every source, so the code can be recovered.
    assert len(list((tmp_path / "runs" / "_sources").iterdir())) >= len(sources)

    # The command that resumes the run records where it did, MongoDB included.
    command = resume_command(run)
    assert f"-m {mongo.spec}" in command, command
    assert f"resume=runs/{run._id}" in command, command
    assert on_disk["status"] == "COMPLETED"
    assert (local / "learning_curve.png").exists()


def test_mongo_numbers_runs_after_the_file_records_too(tmp_path, monkeypatch, mongo):
    """A run with -m is numbered by the database and recorded in `runs/<id>/`
    too: the number must be free in both, whichever holds more runs."""
    from experiments.run import ex

    monkeypatch.chdir(tmp_path)
    first = ex.run_commandline(["run.py", "with", *TINY])  # a file record only
    assert first is not None and str(first._id) == "1"
    argv = ["run.py", "-m", mongo.spec, "with", *TINY]
    second = ex.run_commandline(argv)  # the database is empty: it would say 1
    assert second is not None and second.status == "COMPLETED"
    assert second._id == 2
    assert mongo.db.runs.find_one({"_id": 2})["status"] == "COMPLETED"
    assert (tmp_path / "runs" / "2" / "run.json").is_file()
    # The other way round: the database is ahead of this folder's records.
    mongo.db.runs.insert_one({"_id": 7, "status": "COMPLETED"})
    third = ex.run_commandline(argv)
    assert third is not None and third._id == 8
    assert (tmp_path / "runs" / "8" / "run.json").is_file()


def test_mongo_resume(tmp_path, monkeypatch, mongo):
    """A run resumed with -m is a new run in the database, continuing the
    metrics of the one it resumes."""
    from experiments.run import ex

    monkeypatch.chdir(tmp_path)
    argv = ["run.py", "-m", mongo.spec, "with", *TINY, "checkpoint_every=1000"]
    first = ex.run_commandline(argv)
    assert first is not None and first.status == "COMPLETED"
    more = ["run.py", "-m", mongo.spec, "with", f"resume=runs/{first._id}"]
    resumed = ex.run_commandline([*more, "total_steps=3000"])
    assert resumed is not None and resumed.status == "COMPLETED"
    assert resumed._id == first._id + 1
    doc = mongo.db.runs.find_one({"_id": resumed._id})
    assert doc["status"] == "COMPLETED"
    assert doc["config"]["resume"] == f"runs/{first._id}"
    assert doc["config"]["total_steps"] == 3000

    def steps(run):
        query = {"run_id": run._id, "name": "eval.return_mean"}
        return mongo.db.metrics.find_one(query)["steps"]

    before, after = steps(first), steps(resumed)
    assert min(after) > before[-1] and after[-1] >= 3000, (before, after)
    assert mongo.db.runs.find_one({"_id": first._id})["status"] == "COMPLETED"


@pytest.mark.serial
def test_real_server_killed_mid_run_and_down_at_start(tmp_path, monkeypatch):
    """The server is killed (SIGKILL) while a run trains: the run completes and
    its file record holds everything. Then, with the server down, `-m` fails at
    once with one line."""
    from experiments.record import progress as _record
    from experiments.run import ex

    server = LocalServer(tmp_path / "data").start()
    spec = f"{server.address}:killed"
    record = _record.Recorder.__call__

    def record_then_kill(self, report):
        server.kill()  # at the first evaluation report
        return record(self, report)

    monkeypatch.setattr(_record.Recorder, "__call__", record_then_kill)
    monkeypatch.chdir(tmp_path)
    try:
        run = ex.run_commandline(["run.py", "-m", spec, "with", *TINY])
    finally:
        server.stop()
    assert run is not None and run.status == "COMPLETED"
    local = tmp_path / "runs" / str(run._id)
    assert json.loads((local / "run.json").read_text())["status"] == "COMPLETED"
    assert "eval.return_mean" in json.loads((local / "metrics.json").read_text())
    assert (local / "final_state.eqx").exists() and (
        local / "learning_curve.png"
    ).exists()

    monkeypatch.undo()
    t = time.monotonic()
    with pytest.raises(ConfigError) as info:
        _mongo.mongo_observer(spec)
    assert time.monotonic() - t < _mongo.TIMEOUT_S + 5
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"-m {spec}: cannot reach MongoDB at {server.address}")


@pytest.mark.serial
def test_server_on_a_port_in_use_says_so(tmp_path, mongo_server):
    with pytest.raises(ConfigError, match="did not start") as info:
        LocalServer(tmp_path / "data", port=mongo_server.port).start()
    assert "\n" not in str(info.value)
