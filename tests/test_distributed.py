"""One run across processes (`distributed.*`): joining, a lost peer, exact resume.

The processes are real: two `python -m experiments.run` on 127.0.0.1, each with 2
CPU devices, joined by `jax.distributed` (gloo collectives). This test process
never joins a run itself.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from experiments import _distributed
from experiments.run import DistributedError, ex

ROOT = Path(__file__).resolve().parents[1]
# 8 seeds of PPO on CartPole-v1: 8 chunks of 8,192 steps, a checkpoint after each.
RUN = [
    "agent=ppo",
    "env=CartPole-v1",
    "num_seeds=8",
    "num_envs=4",
    "total_steps=65536",
    "eval_every=8192",
    "eval_episodes=8",
    "checkpoint_every=8192",
    "keep_checkpoints=8",
    "bitwise=True",
    "progress=False",
    "compilation_cache=False",
]


@pytest.mark.parametrize(
    ("distributed", "says"),
    [
        (
            {"coordinator": "127.0.0.1:1234", "num_processes": 2, "process_id": 2},
            "distributed.process_id: 2 is outside 0..1",
        ),
        (
            {"coordinator": "127.0.0.1:1234", "num_processes": 2, "process_id": -1},
            "distributed.process_id: -1 is outside 0..1",
        ),
        (
            {"coordinator": "127.0.0.1", "num_processes": 2, "process_id": 0},
            "distributed.coordinator: expected 'host:port'",
        ),
        ({"num_processes": 2, "process_id": 0}, "distributed.coordinator is missing"),
        (
            {"coordinator": "127.0.0.1:1234", "num_processes": 0, "process_id": 0},
            "distributed.num_processes: expected a positive integer",
        ),
        ({"port": 1234}, "distributed.port: unknown key"),
        (4, "distributed: expected a dict"),
    ],
)
def test_bad_distributed_config_is_named_before_joining(distributed, says):
    with pytest.raises(DistributedError) as info:
        ex.run("print_config", config_updates={"distributed": distributed})
    assert says in str(info.value), str(info.value)
    assert _distributed.joined() is None


def test_cluster_launchers_are_read_from_the_environment():
    slurm = {
        "SLURM_JOB_ID": "7",
        "SLURM_STEP_NODELIST": "node[1-2]",
        "SLURM_NTASKS": "4",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
    }
    join = _distributed.plan(None, slurm)
    assert join == _distributed.Join(None, 4, 3, "SLURM")
    # One task, or an allocation without `srun`: a plain run.
    assert _distributed.plan(None, {**slurm, "SLURM_NTASKS": "1"}) is None
    assert _distributed.plan(None, {"SLURM_JOB_ID": "7"}) is None
    mpi = {
        "OMPI_MCA_orte_hnp_uri": "1;tcp://10.0.0.1:4000",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_RANK": "0",
    }
    assert _distributed.plan(None, mpi) == _distributed.Join(None, 2, 0, "Open MPI")
    # The config wins over the environment.
    given = {"coordinator": "10.0.0.1:99", "num_processes": 2, "process_id": 1}
    assert _distributed.plan(given, slurm) == _distributed.Join(
        "10.0.0.1:99", 2, 1, "config"
    )


class _Store:
    """The coordinator's key-value store, as `PeerWatch` uses it."""

    def __init__(self):
        self.posts: dict[str, str] = {}

    def key_value_set(self, key, value, allow_overwrite=False):
        assert allow_overwrite or key not in self.posts
        self.posts[key] = value

    def key_value_dir_get(self, prefix):
        return [(k, v) for k, v in self.posts.items() if k.startswith(prefix)]


def test_a_peer_is_lost_when_it_falls_silent_while_training():
    now = [0.0]
    store = _Store()
    watch = _distributed.PeerWatch(
        store, 0, 3, lost_after_s=30, failed_after_s=10, clock=lambda: now[0]
    )

    def post(peer: int, what: str) -> None:
        store.posts[f"equizoo/alive/{peer}"] = what

    post(1, "train:1")
    post(2, "idle:1")
    assert watch.beat() is None
    assert store.posts["equizoo/alive/0"] == "idle:1"
    # Process 1 beats on; process 2 went idle (it may have ended): neither is lost.
    for t in range(1, 60):
        now[0] = float(t)
        post(1, f"train:{t + 1}")
        assert watch.beat() is None
    # A pause of this process alone (it read nothing for 100 s) condemns nobody.
    now[0] = 160.0
    post(1, "train:99")
    assert watch.beat() is None
    now[0] = 189.0
    assert watch.beat() is None
    now[0] = 190.0
    assert watch.beat() == "process 1 has given no sign of life for 30 s"
    # A peer that left training on an error is lost after the grace.
    post(1, "train:100")
    post(2, "fail:2")
    assert watch.beat() is None
    now[0] = 199.0
    post(1, "train:101")
    assert watch.beat() is None
    now[0] = 200.0
    post(1, "train:102")
    assert watch.beat() == "process 2 stopped training on an error; its log names it"


def test_a_peer_that_never_posts_is_lost_and_the_watch_acts_once_inside():
    store = _Store()
    watch = _distributed.PeerWatch(store, 1, 2, beat_s=0.01, lost_after_s=0.2)
    called: list[str] = []
    done = threading.Event()

    def on_lost(what: str) -> None:
        called.append(what)
        done.set()

    watch.start()
    try:
        time.sleep(0.4)
        assert not called  # outside `watching`, a lost peer is only noted
        with watch.watching(on_lost):
            assert done.wait(5)
            time.sleep(0.1)
        assert called == [called[0]]
        assert called[0].startswith("process 0 has given no sign of life for ")
        with pytest.raises(RuntimeError), watch.watching(on_lost):
            assert store.posts["equizoo/alive/1"].startswith("train:")
            raise RuntimeError("a failing chunk")
        assert store.posts["equizoo/alive/1"].startswith("fail:")
    finally:
        watch.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pair(cwd: Path, *updates: str) -> list[subprocess.Popen]:
    """Processes 1 and 0 of a run, joined at a free port of 127.0.0.1."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    port = _free_port()
    common = [f"distributed.coordinator=127.0.0.1:{port}"]
    common += ["distributed.num_processes=2"]
    procs = []
    for pid in (1, 0):
        command = [sys.executable, "-m", "experiments.run", "-F", str(cwd / "runs")]
        command += ["with", *updates, *common, f"distributed.process_id={pid}"]
        with open(cwd / f"process_{pid}.log", "w") as log:  # the child keeps it
            procs.append(
                subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=log)
            )
    return procs[::-1]


def _wait(procs: list[subprocess.Popen], timeout: float = 300) -> list[int]:
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _log(cwd: Path, pid: int) -> str:
    return (cwd / f"process_{pid}.log").read_text()


def _returns(run_dir: Path) -> dict[str, list[float]]:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {
        name: series["values"]
        for name, series in metrics.items()
        if name.startswith("eval.return.seed_")
    }


@pytest.mark.serial
def test_two_processes_train_as_one_and_resume_after_a_lost_peer(tmp_path, monkeypatch):
    """Two processes x 2 devices train 8 seeds: process 1 is killed after the
    first checkpoint, process 0 stops with a clear error; the pair resumes from
    that checkpoint and ends bitwise where one process trains the same seeds."""
    # 1. The pair, until process 1 is killed after the first checkpoint.
    first = tmp_path / "runs" / "1" / "checkpoints" / "8192" / "state.eqx"
    zero, one = _pair(tmp_path, *RUN)
    deadline = time.monotonic() + 300
    while not first.exists() and zero.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    one.send_signal(signal.SIGKILL)
    codes = _wait([zero, one])
    log = _log(tmp_path, 0)
    assert codes[0] == 1, log[-3000:]
    assert "process 0 of 2 lost contact with the run's other processes" in log
    assert "Resume with, on every process" in log
    assert f"with resume={tmp_path / 'runs' / '1'}" in log
    lost = json.loads((tmp_path / "runs" / "1" / "run.json").read_text())
    assert lost["status"] == "FAILED"
    written = tmp_path / "runs" / "1" / "checkpoints"
    assert not (written / "65536").exists()
    # Only process 0 recorded: one run folder.
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["1", "_sources"]

    # 2. The pair resumes from the last checkpoint it wrote, to the end.
    procs = _pair(tmp_path, f"resume={tmp_path / 'runs' / '1'}", "progress=False")
    codes = _wait(procs)
    assert codes == [0, 0], _log(tmp_path, 0)[-3000:] + _log(tmp_path, 1)[-3000:]
    assert "recorded by process 0" in _log(tmp_path, 1)
    resumed = tmp_path / "runs" / "2"
    assert json.loads((resumed / "run.json").read_text())["status"] == "COMPLETED"

    # 3. One process (this one: 1 device) trains the same 8 seeds.
    monkeypatch.chdir(tmp_path)
    alone = ex.run_commandline(["run.py", "-F", str(tmp_path / "alone"), "with", *RUN])
    assert alone is not None and alone.status == "COMPLETED"
    single = tmp_path / "alone" / "1"

    # The pair's first checkpoint and the resumed pair's end are the single
    # process's, bit for bit; so are the evaluation returns.
    for a, b in (
        (written / "8192", single / "checkpoints" / "8192"),
        (resumed / "checkpoints" / "65536", single / "checkpoints" / "65536"),
    ):
        assert (a / "state.eqx").read_bytes() == (b / "state.eqx").read_bytes(), a
    assert (resumed / "final_state.eqx").read_bytes() == (
        single / "final_state.eqx"
    ).read_bytes()
    pair_returns = _returns(tmp_path / "runs" / "1")
    alone_returns = _returns(single)
    assert len(alone_returns) == 8
    for name, values in pair_returns.items():
        assert values == alone_returns[name][: len(values)], name
    final = json.loads((resumed / "eval_returns.json").read_text())
    assert final == json.loads((single / "eval_returns.json").read_text())


@pytest.mark.serial
def test_a_frozen_peer_stops_the_run_with_a_clear_error(tmp_path):
    """Process 1 is frozen (SIGSTOP) after the first checkpoint: its sockets stay
    open, so no collective fails, and process 0 waits on one until its watch
    finds process 1 silent; it stops with the lost-peer error, the record FAILED."""
    first = tmp_path / "runs" / "1" / "checkpoints" / "8192" / "state.eqx"
    zero, one = _pair(tmp_path, *RUN)
    try:
        deadline = time.monotonic() + 300
        while not first.exists() and zero.poll() is None:
            assert time.monotonic() < deadline, _log(tmp_path, 0)[-3000:]
            time.sleep(0.05)
        one.send_signal(signal.SIGSTOP)
        code = zero.wait(_distributed.LOST_AFTER_S + 60)
    finally:
        one.kill()
        _wait([zero, one])
    log = _log(tmp_path, 0)
    assert code == 1, log[-3000:]
    said = "process 0 of 2 lost contact with the run's other processes (process 1 "
    assert f"{said}has given no sign of life for " in log, log[-3000:]
    assert "Resume with, on every process" in log
    record = json.loads((tmp_path / "runs" / "1" / "run.json").read_text())
    assert record["status"] == "FAILED"
    assert record["fail_trace"][0].startswith(said), record["fail_trace"]
