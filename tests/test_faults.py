"""Faults a run survives: damaged checkpoints (checksums, the fall back to the
newest that verifies), a full disk or read-only folder (injected at the write
calls), records left RUNNING by a killed process, configs too big for memory,
and SIGKILL at random moments (the quick soak of benchmarks/soak.py).

The in-process runs are tiny (3,000 steps of DQN); they check what is kept and
what is said, not what is learnt.
"""

import errno
import importlib.util
import json
import os
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.random as jr
import pytest

import envs
import runners
import zoo

ROOT = Path(__file__).resolve().parents[1]

TINY = {
    "agent": "dqn",
    "num_envs": 10,
    "hp.train_frequency": 1,
    "hp.gradient_steps": 1,
    "hp.buffer_size": 2000,
    "hp.learning_starts": 500,
    "total_steps": 3000,
    "eval_every": 1000,
    "eval_episodes": 2,
    "checkpoint_every": 1000,
    "keep_checkpoints": 3,
    "hp.hidden_sizes": [16],
    "progress": False,
    "compilation_cache": False,
}


def _run(folder: Path, **updates):
    from experiments.run import ex

    return ex.run(
        config_updates={**TINY, **updates}, options={"--file_storage": str(folder)}
    )


def _json(path: Path):
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One uninterrupted tiny run (`runs/1`, checkpoints at 1k, 2k and 3k steps)."""
    folder = tmp_path_factory.mktemp("finished")
    run = _run(folder)
    assert run.status == "COMPLETED"
    return folder / "1"


# Checksums.


def test_every_checkpoint_carries_checksums_that_catch_damage(tmp_path):
    tree = {"a": jnp.arange(1000.0), "b": jnp.ones((3, 3), jnp.int32)}
    path = runners.save_checkpoint(
        tmp_path / "7", tree, {"agent": "dqn", "env_steps": 7}
    )
    meta = _json(path / "meta.json")
    assert meta["version"] == 2
    assert meta["checksums"]["state.eqx"].startswith("sha256:")
    runners.verify_checkpoint(path)
    data = (path / "state.eqx").read_bytes()

    # One flipped byte in the data: the headers still parse, the checksum fails.
    flipped = bytearray(data)
    flipped[-5] ^= 0x01
    (path / "state.eqx").write_bytes(bytes(flipped))
    with pytest.raises(runners.CheckpointError, match="does not match its checksum"):
        runners.verify_checkpoint(path)
    with pytest.raises(runners.CheckpointError, match="does not match its checksum"):
        runners.load_checkpoint(path, tree)
    runners.verify_checkpoint(path, data=False)  # the headers alone cannot tell
    # Truncated: caught from the headers.
    (path / "state.eqx").write_bytes(data[:-100])
    with pytest.raises(runners.CheckpointError, match="truncated"):
        runners.load_checkpoint(path, tree)
    (path / "state.eqx").write_bytes(data)
    runners.load_checkpoint(path, tree)

    # meta.json changed and still valid JSON: its own checksum fails.
    text = (path / "meta.json").read_text()
    (path / "meta.json").write_text(text.replace('"env_steps": 7', '"env_steps": 8'))
    with pytest.raises(runners.CheckpointError, match=r"meta\.json.*does not match"):
        runners.read_meta(path)


def test_a_checkpoint_of_format_1_still_loads_without_checksums(tmp_path):
    tree = {"a": jnp.arange(4.0)}
    path = runners.save_checkpoint(tmp_path / "1", tree, {})
    meta = _json(path / "meta.json")
    old = {k: v for k, v in meta.items() if k not in ("checksum", "checksums")}
    (path / "meta.json").write_text(json.dumps({**old, "version": 1}))
    loaded, _ = runners.load_checkpoint(path, tree)
    assert loaded["a"].tolist() == [0.0, 1.0, 2.0, 3.0]


def _copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_resume_falls_back_to_the_newest_checkpoint_that_verifies(
    finished, tmp_path, capfd
):
    from experiments.run import ex

    run_dir = _copy_run(finished, tmp_path / "runs" / "1")
    root = run_dir / "checkpoints"
    assert [p.name for p in runners.list_checkpoints(root)] == ["1000", "2000", "3000"]
    # The newest damaged, the one before it without its state: resume from 1000.
    state = root / "3000" / "state.eqx"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    state.write_bytes(bytes(data))
    (root / "2000" / "state.eqx").unlink()
    run = ex.run(
        config_updates={
            "resume": str(run_dir),
            "progress": False,
            "compilation_cache": False,
        },
        options={"--file_storage": str(tmp_path / "runs")},
    )
    assert run.status == "COMPLETED"
    err = capfd.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("resume: "))
    assert "3000/state.eqx' does not match its checksum" in line
    assert f"resuming from {root / '1000'}, the newest checkpoint that verifies" in line
    assert "(2 newer one(s) passed over)" in line
    resumed = tmp_path / "runs" / "2"
    assert _json(resumed / "info.json")["resumed_from"]["env_steps"] == 1000
    # Exact resume from the older checkpoint: the same final state.
    assert (resumed / "final_state.eqx").read_bytes() == (
        finished / "final_state.eqx"
    ).read_bytes()


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("meta", r"meta.json' is not valid JSON"),
        ("missing", r"has no meta.json"),
        ("agent", r"is a checkpoint of agent 'dqn', not 'ppo'"),
    ],
)
def test_a_run_without_a_good_checkpoint_is_refused_in_one_line(
    finished, tmp_path, damage, says
):
    from experiments.run import ConfigError, ex

    run_dir = _copy_run(finished, tmp_path / "1")
    updates: dict = {"resume": str(run_dir)}
    for path in runners.list_checkpoints(run_dir / "checkpoints"):
        if damage == "meta":
            text = (path / "meta.json").read_text()
            (path / "meta.json").write_text(text[: len(text) // 2])
        elif damage == "missing":
            (path / "meta.json").unlink()
    if damage == "agent":
        updates["agent"] = "ppo"
    with pytest.raises(ConfigError, match=says) as info:
        ex.run(config_updates=updates, options={"--file_storage": str(tmp_path)})
    assert "\n" not in str(info.value)
    assert len(list((run_dir / "checkpoints").iterdir())) == 3  # nothing removed


# A full disk, a read-only folder.


def _fail_writes(monkeypatch, after: int, error: int):
    """Every checkpoint write from the `after`-th on fails with `error` halfway
    through its state file."""
    from runners import _checkpoint

    calls = {"n": 0}
    write = _checkpoint._HashingWriter.write

    def failing(self, b):
        if calls["n"] >= after:
            raise OSError(error, os.strerror(error), "state.eqx")
        return write(self, b)

    real = _checkpoint._write

    def counting(tmp, state, header):
        try:
            return real(tmp, state, header)
        finally:
            calls["n"] += 1

    monkeypatch.setattr(_checkpoint._HashingWriter, "write", failing)
    monkeypatch.setattr(_checkpoint, "_write", counting)


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EROFS])
def test_a_checkpoint_that_cannot_be_written_stops_the_run_in_one_line(
    finished, tmp_path, monkeypatch, error
):
    from experiments.run import TrainingError, ex

    _fail_writes(monkeypatch, after=1, error=error)
    with pytest.raises(TrainingError) as info:
        _run(tmp_path)
    message = str(info.value)
    root = tmp_path / "1" / "checkpoints"
    assert "\n" not in message
    assert message.startswith(f"could not write the checkpoint {root / '2000'} (")
    assert os.strerror(error) in message
    assert f"the last complete checkpoint is {root / '1000'}" in message
    assert f"resume with: python -m experiments.run -F {tmp_path} with" in message
    assert sorted(p.name for p in root.iterdir()) == ["1000"]  # no partial write
    runners.verify_checkpoint(root / "1000")
    assert _json(tmp_path / "1" / "run.json")["status"] == "FAILED"

    # Space again: the run resumes and ends as if nothing had happened.
    monkeypatch.undo()
    run = ex.run(
        config_updates={"resume": str(tmp_path / "1"), "progress": False},
        options={"--file_storage": str(tmp_path)},
    )
    assert run.status == "COMPLETED"
    assert (tmp_path / "2" / "final_state.eqx").read_bytes() == (
        finished / "final_state.eqx"
    ).read_bytes()


def test_a_run_that_trained_all_its_steps_but_did_not_complete_is_finished(
    finished, tmp_path, monkeypatch
):
    """Its artifacts could not be written (a full disk after the last checkpoint;
    a SIGKILL there leaves the same folder): resume= trains nothing and writes
    what the run would have, with the same final evaluation."""
    from experiments.record import progress as _record
    from experiments.run import ConfigError, TrainingError, ex

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "eval_returns.json")

    monkeypatch.setattr(_record, "write_json", full)
    with pytest.raises(TrainingError) as info:
        _run(tmp_path)
    message = str(info.value)
    root = tmp_path / "1" / "checkpoints"
    assert "\n" not in message
    assert message.startswith("could not write the run's artifacts (No space left")
    assert f"the last complete checkpoint is {root / '3000'}" in message
    assert _json(tmp_path / "1" / "run.json")["status"] == "FAILED"
    assert not (tmp_path / "1" / "final_state.eqx").exists()

    monkeypatch.undo()
    run = ex.run(
        config_updates={"resume": str(tmp_path / "1"), "progress": False},
        options={"--file_storage": str(tmp_path)},
    )
    assert run.status == "COMPLETED"
    done = tmp_path / "2"
    assert _json(done / "info.json")["resumed_from"]["env_steps"] == 3000
    for name in ("final_state.eqx", "final_state.json", "learning_curve.png"):
        assert (done / name).exists()
    assert (done / "final_state.eqx").read_bytes() == (
        finished / "final_state.eqx"
    ).read_bytes()
    # The final evaluation it missed, with the keys of the original's last chunk.
    assert _json(done / "eval_returns.json") == _json(finished / "eval_returns.json")
    metrics = _json(done / "metrics.json")
    assert metrics["eval.return_mean"]["steps"] == [3000]
    assert "perf.steps_per_s" not in metrics  # nothing trained
    runners.verify_checkpoint(done / "checkpoints" / "3000")
    # A completed run is not finished twice.
    with pytest.raises(ConfigError, match="completed its total_steps=3000"):
        ex.run(
            config_updates={"resume": str(done), "progress": False},
            options={"--file_storage": str(tmp_path)},
        )


def test_a_record_that_cannot_be_written_stops_the_run_in_one_line(
    tmp_path, monkeypatch
):
    from experiments.record import progress as _record
    from experiments.run import TrainingError
    from experiments.sacred.observers import FileRecords

    save = FileRecords.save_json
    broken = []

    def failing(self, obj, filename):
        if broken:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), filename)
        return save(self, obj, filename)

    record = _record.Recorder.__call__

    def break_after_first(self, report):
        out = record(self, report)
        broken.append(True)  # the folder turns read-only after the first chunk
        return out

    monkeypatch.setattr(FileRecords, "save_json", failing)
    monkeypatch.setattr(_record.Recorder, "__call__", break_after_first)
    with pytest.raises(TrainingError) as info:
        _run(tmp_path)
    message = str(info.value)
    root = tmp_path / "1" / "checkpoints"
    assert "\n" not in message
    assert message.startswith(
        f"the run's file record in {tmp_path / '1'} could not be written"
    )
    assert f"the last complete checkpoint is {root / '1000'}" in message
    runners.verify_checkpoint(root / "1000")


# Records a killed process left RUNNING.


def _running_record(folder: Path, heartbeat: str) -> Path:
    folder.mkdir(parents=True)
    record = {"status": "RUNNING", "heartbeat": heartbeat, "start_time": heartbeat}
    (folder / "run.json").write_text(json.dumps(record))
    return folder


def test_records_of_dead_processes_are_marked_interrupted_and_named(
    finished, tmp_path, capfd
):
    import datetime
    import fcntl

    from experiments.sacred import liveness as _liveness

    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    recent, old = now.isoformat(), (now - datetime.timedelta(hours=1)).isoformat()
    runs = tmp_path / "runs"
    # Killed: its lock file is free.
    dead = _copy_run(finished, runs / "1")
    record = _json(dead / "run.json")
    metrics = (dead / "metrics.json").read_text()
    (dead / "run.json").write_text(json.dumps({**record, "status": "RUNNING"}))
    (dead / _liveness.LOCK).touch()
    # Alive: another open file holds its lock, though its heartbeat is old.
    alive = _running_record(runs / "2", old)
    lock = (alive / _liveness.LOCK).open("w")
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    # No lock file (another host): judged by its heartbeat's age.
    stale = _running_record(runs / "3", old)
    fresh = _running_record(runs / "4", recent)

    marked = _liveness.mark_dead_file_records(runs)
    lock.close()
    assert marked == [dead, stale]
    assert _json(dead / "run.json")["status"] == "INTERRUPTED"
    assert _json(dead / "run.json")["stop_time"] == record["heartbeat"]
    assert (dead / "metrics.json").read_text() == metrics  # kept
    assert _json(stale / "run.json")["status"] == "INTERRUPTED"
    assert _json(alive / "run.json")["status"] == "RUNNING"
    assert _json(fresh / "run.json")["status"] == "RUNNING"
    err = capfd.readouterr().err
    assert (
        f"{dead}: left RUNNING by a process that is gone (its process has ended): "
        f"marked INTERRUPTED. Resume it with: python -m experiments.run with "
        f"resume={dead}"
    ) in err
    assert re.search(rf"{stale}: .*\(no heartbeat for 60 min\)", err)


def test_mongo_documents_of_dead_processes_are_marked_interrupted(tmp_path, capfd):
    import datetime
    import types

    import mongomock

    from experiments.sacred import liveness as _liveness

    runs = mongomock.MongoClient()["equizoo"].runs
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    old = now - datetime.timedelta(hours=2)
    runs.insert_many(
        [
            # Its file record's folder is unlocked: the process is gone.
            {"_id": 1, "status": "RUNNING", "heartbeat": now, "metrics": [1]},
            # No file record here, a heartbeat of two hours ago.
            {"_id": 2, "status": "RUNNING", "heartbeat": old},
            # No file record here, beating now: left alone.
            {"_id": 3, "status": "RUNNING", "heartbeat": now},
            {"_id": 4, "status": "COMPLETED", "heartbeat": old},
        ]
    )
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / _liveness.LOCK).touch()
    observer = types.SimpleNamespace(runs=runs)
    assert _liveness.mark_dead_mongo_records(observer, (tmp_path,)) == [1, 2]
    status = {d["_id"]: d["status"] for d in runs.find()}
    assert status == {1: "INTERRUPTED", 2: "INTERRUPTED", 3: "RUNNING", 4: "COMPLETED"}
    first = runs.find_one({"_id": 1})
    assert first is not None and first["metrics"] == [1]  # kept
    err = capfd.readouterr().err
    assert "MongoDB run 1: left RUNNING by a process that is gone" in err
    assert "MongoDB run 2: left RUNNING by a process that is gone (no heartbeat" in err


@pytest.mark.serial
def test_the_next_run_marks_a_killed_run_in_its_folder(finished, tmp_path, capfd):
    import subprocess
    import sys
    import time

    # A real process dies holding the lock: the kernel releases it.
    folder = _running_record(tmp_path / "runs" / "1", "2026-01-01T00:00:00")
    folder.joinpath("run.json").write_text(
        json.dumps({"status": "RUNNING", "heartbeat": None, "start_time": None})
    )
    code = (
        "import time; from experiments.sacred import liveness as _liveness\n"
        f"_liveness.acquire({str(folder)!r}); print('held', flush=True)\n"
        "time.sleep(60)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
    from experiments.sacred import liveness as _liveness

    assert _liveness.mark_dead_file_records(tmp_path / "runs") == []  # alive
    proc.kill()
    proc.wait()
    proc.stdout.close()
    t = time.monotonic()
    run = _run(tmp_path / "runs", total_steps=1000)
    assert run.status == "COMPLETED" and time.monotonic() - t < 120
    assert _json(folder / "run.json")["status"] == "INTERRUPTED"
    assert f"{folder}: left RUNNING by a process that is gone" in capfd.readouterr().err


# Memory.


@pytest.mark.parametrize("name", zoo.names())
def test_a_config_too_big_for_memory_is_refused_before_compiling(name):
    # Off-policy: a replay of 2**27 transitions per seed; on-policy: a rollout of
    # 2**27 steps (it is kept in the training state). 64 seeds of either are
    # far beyond this machine's memory.
    big = {"buffer_size": 2**27} if "buffer_size" in _fields(name) else {}
    num_envs = 1 if big else 2**12
    if not big:
        big = {"num_steps": 2**15}
    env = envs.make(zoo.default_env(name))  # a discrete or a continuous one
    agent = zoo.make(name, **big)
    with pytest.raises(
        runners.MemoryLimitError, match=r"need about [\d.]+ GiB.* than the [\d.]+ GiB"
    ):
        runners.run(
            agent,
            env,
            key=jr.PRNGKey(0),
            total_steps=2**27,
            num_envs=num_envs,
            num_seeds=8,
            sweep={"learning_rate": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3]},
        )


def test_the_command_line_refuses_a_sweep_too_big_in_one_line():
    from experiments.run import ConfigError, ex

    updates = {
        "agent": "dqn",
        "hp.buffer_size": 2**27,
        "num_seeds": 16,
        "sweep.learning_rate": [1e-4, 1e-3],
        "progress": False,
    }
    with pytest.raises(ConfigError) as info:
        ex.run(config_updates=updates, options={"--unobserved": True})
    message = str(info.value)
    assert message.startswith("program 1 of the sweep: 32 run(s) need about"), message
    assert "GiB available" in message and "\n" not in message


def _fields(name: str) -> set[str]:
    import dataclasses

    return {f.name for f in dataclasses.fields(zoo.make(name))}


def test_the_memory_estimate_counts_members_times_seeds():
    agent, env = zoo.make("dqn", buffer_size=2**20), envs.make("CartPole-v1")
    shape = jax.eval_shape(
        lambda k: runners.init(agent, env, key=k, num_envs=1, total_steps=1),
        jr.PRNGKey(0),
    )
    per_run = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shape))
    from runners import _placement

    with pytest.raises(ValueError) as info:
        stacked = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((40_000, *x.shape), x.dtype), shape
        )
        _placement.check_memory(stacked, num_runs=40_000, devices=jax.devices())
    message = str(info.value)
    assert message.startswith(
        f"40000 run(s) need about {2 * 40_000 * per_run / 2**30:.1f} GiB"
    )
    assert f"({per_run / 2**20:.0f} MiB per run, held twice)" in message


# SIGKILL at random moments.


@pytest.mark.serial
def test_a_run_killed_at_each_moment_ends_as_the_one_never_killed(tmp_path):
    """SIGKILL once at each of the soak's moments (start-up, a chunk, a
    checkpoint's write, a record's write); `python benchmarks/soak.py` kills 100
    times."""
    spec = importlib.util.spec_from_file_location(
        "soak", ROOT / "benchmarks" / "soak.py"
    )
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    import random

    lines: list[str] = []
    kills = len(soak.MOMENTS)
    result = soak.soak("dqn", kills, tmp_path, random.Random(0), log=lines.append)
    assert result["kills"] == kills, lines
    assert result["identical_final_state"] and result["identical_metrics"], result
    assert result["records"].get("RUNNING", 0) == 0, result
    assert result["records"]["COMPLETED"] == 1, result
    assert result["killed_runs_with_metrics_kept"] == result["killed_runs_recorded"]
    assert result["ok"], result
