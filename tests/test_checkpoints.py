"""Checkpoints, exact resume, interruption, the non-finite guard, determinism and
observer faults.

Budgets are tiny (a few thousand steps, 16-unit networks): these tests check
that a resumed run is the run that was never interrupted, bit for bit, not what
it learns. The CLI runs of one module-scoped fixture share a compilation cache,
so only the first of them compiles from scratch.
"""

import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo

ROOT = Path(__file__).resolve().parents[1]

SMALL = {
    "dqn": lambda **kw: zoo.make(
        "dqn", learning_starts=64, batch_size=16, hidden_sizes=(16,), **kw
    ),
    "ppo": lambda **kw: zoo.make(
        "ppo", num_steps=16, num_minibatches=2, hidden_sizes=(16,), **kw
    ),
    # CrossQ: SAC's state and update, with batch-normalised critics whose
    # running statistics (an `eqx.nn.State`) must resume too.
    "crossq": lambda **kw: zoo.make(
        "crossq",
        critic_hidden_sizes=(16,),
        learning_starts=64,
        batch_size=16,
        train_frequency=4,
        hidden_sizes=(16,),
        normalize_obs=True,
        **kw,
    ),
}
# A recurrent PPO: its per-env carry is in the state, and must resume too.
SMALL["ppo_gru"] = lambda **kw: SMALL["ppo"](torso="gru", cell_size=8, **kw)
ENV = {
    "dqn": "CartPole-v1",
    "ppo": "CartPole-v1",
    "crossq": "Pendulum-v1",
    "ppo_gru": "StatelessCartPole-v1",
}


@pytest.fixture(scope="module", autouse=True)
def _compile_once(tmp_path_factory):
    """A persistent compilation cache for this module, cold at its start: a
    resumed run compiles the very programs its original did, so each is compiled
    once here. (The tests pass without it, only slower.)"""
    from jax._src import compilation_cache

    names = (
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    )
    old = {name: getattr(jax.config, name) for name in names}
    jax.config.update(names[0], str(tmp_path_factory.mktemp("jax-cache")))
    jax.config.update(names[1], 0.0)
    jax.config.update(names[2], 0)
    compilation_cache.reset_cache()
    yield
    for name, value in old.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


def _bytes(tree) -> bytes:
    f = io.BytesIO()
    eqx.tree_serialise_leaves(f, tree)
    return f.getvalue()


def _template(agent, env, *, num_envs, num_seeds):
    return runners.state_template(
        agent, env, num_envs=num_envs, total_steps=1, num_seeds=num_seeds
    )


def _state(agent, env, *, num_envs=2, num_seeds=2):
    keys = jr.split(jr.PRNGKey(1), num_seeds)
    init = lambda k: runners.init(agent, env, key=k, num_envs=num_envs, total_steps=64)
    return eqx.filter_jit(jax.vmap(init))(keys)


# The checkpoint format.


def test_checkpoint_roundtrip_and_meta(tmp_path):
    agent, env = SMALL["dqn"](buffer_size=64), envs.make("CartPole-v1")
    state = _state(agent, env)
    path = runners.save_checkpoint(tmp_path / "64", state, {"agent": "dqn", "x": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["64"]  # no temp left
    assert sorted(p.name for p in path.iterdir()) == ["meta.json", "state.eqx"]
    meta = json.loads((path / "meta.json").read_text())
    assert meta["format"] == "equizoo-checkpoint" and meta["version"] == 2
    assert meta["checksums"]["state.eqx"].startswith("sha256:")
    assert meta["checksum"].startswith("sha256:")
    assert meta["equizoo_version"] and meta["agent"] == "dqn" and meta["x"] == 1
    leaves = jax.tree.leaves(state)
    assert len(meta["structure"]) == len(leaves)
    first = meta["structure"][0]
    assert first["shape"] == list(leaves[0].shape)
    assert first["dtype"] == str(leaves[0].dtype) and first["path"].startswith(".")

    runners.verify_checkpoint(path)
    like = _template(agent, env, num_envs=2, num_seeds=2)
    loaded, meta2 = runners.load_checkpoint(path, like, expect={"agent": "dqn"})
    assert meta2 == meta
    assert _bytes(loaded) == _bytes(state) == (path / "state.eqx").read_bytes()
    assert runners.latest_checkpoint(tmp_path) == path


def test_checkpoint_refuses_what_does_not_fit(tmp_path):
    agent, env = SMALL["dqn"](buffer_size=64), envs.make("CartPole-v1")
    path = runners.save_checkpoint(tmp_path / "1", _state(agent, env), {"agent": "dqn"})
    like = _template(agent, env, num_envs=2, num_seeds=2)
    with pytest.raises(runners.CheckpointError, match="checkpoint of agent='dqn'"):
        runners.load_checkpoint(path, like, expect={"agent": "ppo"})
    # Another structure: more envs, another agent.
    other = _template(agent, env, num_envs=3, num_seeds=2)
    with pytest.raises(runners.CheckpointError, match=r"leaf \d+ is .*expected"):
        runners.load_checkpoint(path, other)
    ppo = _template(SMALL["ppo"](), env, num_envs=2, num_seeds=2)
    with pytest.raises(runners.CheckpointError, match="does not fit"):
        runners.load_checkpoint(path, ppo)

    # Truncated, or with bytes appended: caught from the headers alone.
    data = (path / "state.eqx").read_bytes()
    for broken, says in [(data[: len(data) // 2], "truncated"), (data + b"x", "after")]:
        (path / "state.eqx").write_bytes(broken)
        with pytest.raises(runners.CheckpointError, match=says):
            runners.verify_checkpoint(path)
        with pytest.raises(runners.CheckpointError, match=says):
            runners.load_checkpoint(path, like)

    # Never unpickles: an object array is refused before it is read (here in a
    # checkpoint of format 1, which has no checksums to fail first).
    meta = json.loads((path / "meta.json").read_text())
    meta = {k: v for k, v in meta.items() if k not in ("checksum", "checksums")}
    meta["version"] = 1
    with (path / "state.eqx").open("wb") as f:
        np.save(f, np.array([print], dtype=object), allow_pickle=True)
    meta["structure"] = [{"path": ".x", "shape": [1], "dtype": "object"}]
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(runners.CheckpointError, match="object arrays"):
        runners.verify_checkpoint(path)

    (path / "meta.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(runners.CheckpointError, match="newer equizoo"):
        runners.read_meta(path)
    (path / "meta.json").write_text("{not json")
    with pytest.raises(runners.CheckpointError, match="not valid JSON"):
        runners.read_meta(path)
    with pytest.raises(runners.CheckpointError, match="no checkpoint folder"):
        runners.read_meta(tmp_path / "missing")


def test_prune_keeps_the_newest(tmp_path):
    tree = {"a": jnp.arange(3.0)}
    for step in (100, 200, 300, 1000):
        runners.save_checkpoint(tmp_path / str(step), tree, {})
    (tmp_path / ".400.tmp-123").mkdir()  # what a killed writer leaves
    (tmp_path / "500").mkdir()  # incomplete: not a checkpoint
    assert [p.name for p in runners.list_checkpoints(tmp_path)] == [
        "100",
        "200",
        "300",
        "1000",
    ]
    runners.prune_checkpoints(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1000", "300", "500"]
    # Rewriting a checkpoint replaces it whole.
    runners.save_checkpoint(tmp_path / "1000", {"a": jnp.ones(3)}, {})
    loaded, _ = runners.load_checkpoint(tmp_path / "1000", tree)
    np.testing.assert_array_equal(loaded["a"], np.ones(3))


# Exact resume through the library: stop anywhere on a chunk boundary, save,
# load, continue; the result is the uninterrupted run's, byte for byte.


def _same_reports(a, b):
    assert [r.env_steps for r in a] == [r.env_steps for r in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_equal(x.train, y.train)  # NaN == NaN here
        assert x.eval_returns == y.eval_returns


@pytest.mark.parametrize(
    ("agent_name", "num_seeds"),
    # Several seeds each: one seed is the same code path with a shorter axis.
    [("dqn", 3), ("ppo", 3), ("crossq", 2), ("ppo_gru", 2)],
)
def test_resume_is_exact(tmp_path, agent_name, num_seeds):
    agent, env = SMALL[agent_name](), envs.make(ENV[agent_name])
    kwargs: dict = dict(
        key=jr.PRNGKey(5),
        total_steps=2048,
        num_envs=4,
        num_seeds=num_seeds,
        eval_every=256,
        eval_episodes=3,
        checkpoint_every=768,
    )

    def saver(folder):
        def save(state, report):
            runners.save_checkpoint(folder / str(report.env_steps), state, {})

        return save

    reports = []
    full = runners.run(
        agent, env, callback=reports.append, checkpoint=saver(tmp_path / "a"), **kwargs
    )
    assert full.chunks == (8, full.chunks[1]) and not full.stopped
    assert [p.name for p in runners.list_checkpoints(tmp_path / "a")] == [
        "768",
        "1536",
        "2048",
    ]
    final = (tmp_path / "a" / "2048" / "state.eqx").read_bytes()
    assert final == _bytes(full.state)

    like = _template(agent, env, num_envs=4, num_seeds=num_seeds)
    state, _ = runners.load_checkpoint(tmp_path / "a" / "768", like)
    resumed_reports: list = []
    calls = iter(range(100))
    # The 3-seed PPO run is interrupted once more, to resume a resumed run.
    stop_after = 2 if (agent_name, num_seeds) == ("ppo", 3) else None

    def resume(state, **stop):
        return runners.run(
            agent,
            env,
            callback=resumed_reports.append,
            checkpoint=saver(tmp_path / "b"),
            state=state,
            chunks=full.chunks,
            **stop,
            **kwargs,
        )

    resumed = resume(state, should_stop=lambda: next(calls) + 1 == stop_after)
    if stop_after is not None:
        assert resumed.stopped and resumed.final_returns.shape == (num_seeds, 0)
        stopped_at = resumed_reports[-1].env_steps
        assert stopped_at == 768 + 2 * 256
        assert runners.latest_checkpoint(tmp_path / "b").name == str(stopped_at)
        state, _ = runners.load_checkpoint(tmp_path / "b" / str(stopped_at), like)
        resumed = resume(state)
    assert not resumed.stopped
    assert (tmp_path / "b" / "2048" / "state.eqx").read_bytes() == final
    _same_reports(resumed_reports, reports[3:])
    np.testing.assert_array_equal(resumed.final_returns, full.final_returns)


def test_resume_refuses_a_state_off_the_plan():
    agent, env = SMALL["ppo"](), envs.make("CartPole-v1")
    state = _state(agent, env, num_envs=4, num_seeds=1)
    state = eqx.tree_at(lambda s: s.iteration, state, jnp.array([3], jnp.int32))
    with pytest.raises(ValueError, match="not on a boundary"):
        runners.run(
            agent, env, key=jr.PRNGKey(0), total_steps=1024, num_envs=4, state=state
        )
    with pytest.raises(ValueError, match="does not fit"):
        runners.run(
            agent, env, key=jr.PRNGKey(0), total_steps=1024, num_envs=2, state=state
        )


# The CLI: a real run interrupted with SIGTERM, resumed with the command it
# prints, against the same run never interrupted (twice: determinism).

# Pinned, so that tuning experiments/configs/dqn.yaml does not move the steps.
CLI = [
    "agent=dqn",
    "num_seeds=2",
    "num_envs=8",
    "hp.train_frequency=4",
    "hp.gradient_steps=1",
    "hp.batch_size=32",
    "total_steps=40000",
    "eval_every=4000",
    "eval_episodes=4",
    "checkpoint_every=8000",
    "hp.hidden_sizes=[16]",
    "hp.learning_starts=500",
    "hp.buffer_size=2000",
]


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["EQUIZOO_CACHE_DIR"] = str(cache)  # hermetic, shared by this module's runs
    return env


def _cli(args, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "experiments.run", *args],
        cwd=cwd,
        env=_env(cache),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out


def _interrupt(args, cwd: Path, cache: Path) -> tuple[int, str]:
    """Start a CLI run, SIGTERM it once its first chunk has been reported."""
    err_path = cwd / "interrupted.err"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "experiments.run", *args],
            cwd=cwd,
            env=_env(cache),
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
        try:
            deadline = time.monotonic() + 240
            while "steps/s" not in err_path.read_text():
                assert proc.poll() is None, err_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "no chunk reported"
                time.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
            returncode = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return returncode, err_path.read_text()


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("resume")
    cache = cwd / "jax-cache"
    full = _cli(["with", *CLI], cwd, cache)  # runs/1
    assert full.returncode == 0, full.stderr[-3000:]
    code, err = _interrupt(["with", *CLI], cwd, cache)  # runs/2
    command = re.search(r"Resume with:\n  (.+)\n", err)
    assert command is not None, err[-3000:]
    argv = command.group(1).split()
    assert argv[:3] == ["python", "-m", "experiments.run"], argv
    resumed = _cli(argv[3:], cwd, cache)  # runs/3
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = _cli(["with", *CLI], cwd, cache)  # runs/4
    assert again.returncode == 0, again.stderr[-3000:]
    return {"cwd": cwd, "code": code, "err": err, "argv": argv}


def _json(path: Path):
    return json.loads(path.read_text())


def _final_state(run_dir: Path) -> bytes:
    latest = runners.latest_checkpoint(run_dir / "checkpoints")
    assert latest is not None and latest.name == "40000"
    data = (latest / "state.eqx").read_bytes()
    assert (run_dir / "final_state.eqx").read_bytes() == data  # the artifact
    return data


def _metrics(run_dir: Path, after: int = -1) -> dict:
    """Logged metrics after env step `after`, without the timing ones."""
    out = {}
    for name, series in _json(run_dir / "metrics.json").items():
        if name.startswith("perf."):
            continue
        steps, values = series["steps"], series["values"]
        out[name] = [(s, v) for s, v in zip(steps, values, strict=True) if s > after]
    return out


@pytest.mark.serial
def test_sigterm_checkpoints_and_marks_interrupted(cli_runs):
    runs = cli_runs["cwd"] / "runs"
    assert cli_runs["code"] == 128 + signal.SIGTERM
    assert _json(runs / "2" / "run.json")["status"] == "INTERRUPTED"
    assert cli_runs["argv"][3:] == ["with", f"resume={Path('runs') / '2'}"]
    stopped = runners.latest_checkpoint(runs / "2" / "checkpoints")
    assert stopped is not None and 0 < int(stopped.name) < 40000
    meta = runners.read_meta(stopped)
    assert meta["agent"] == "dqn" and meta["env"] == "CartPole-v1"
    assert meta["env_steps"] == int(stopped.name)
    assert meta["config"] == _json(runs / "2" / "config.json")
    assert meta["plan"]["chunks"][0] == 10
    assert {"path", "shape", "dtype"} == set(meta["structure"][0])
    runners.verify_checkpoint(stopped)


def test_resumed_run_equals_the_uninterrupted_one(cli_runs):
    runs = cli_runs["cwd"] / "runs"
    stopped = runners.latest_checkpoint(runs / "2" / "checkpoints")
    assert stopped is not None
    at = int(stopped.name)
    assert _final_state(runs / "3") == _final_state(runs / "1")
    assert _metrics(runs / "3") == _metrics(runs / "1", after=at)
    assert _metrics(runs / "2", after=-1) == {
        name: [(s, v) for s, v in pairs if s <= at]
        for name, pairs in _metrics(runs / "1").items()
    }
    info = _json(runs / "3" / "info.json")
    assert info["resumed_from"]["run_dir"] == str(Path("runs") / "2")
    assert info["resumed_from"]["env_steps"] == at
    config = _json(runs / "3" / "config.json")
    original = _json(runs / "1" / "config.json")
    assert config == {**original, "resume": str(Path("runs") / "2")}
    assert _json(runs / "3" / "run.json")["status"] == "COMPLETED"
    assert len(runners.list_checkpoints(runs / "1" / "checkpoints")) == 2  # keep 2


def test_same_config_and_seed_give_identical_runs(cli_runs):
    runs = cli_runs["cwd"] / "runs"
    assert _final_state(runs / "4") == _final_state(runs / "1")
    assert _metrics(runs / "4") == _metrics(runs / "1")
    assert (
        _json(runs / "4" / "run.json")["result"]
        == _json(runs / "1" / "run.json")["result"]
    )


@pytest.mark.serial
def test_second_signal_exits_at_once_keeping_the_last_checkpoint(cli_runs):
    cwd = cli_runs["cwd"]
    err_path = cwd / "twice.err"
    # A long run in long chunks (40,000 steps, a second or more), so that both
    # signals land while a chunk trains: with the CLI's 4,000-step chunks the
    # stop (one short chunk, a checkpoint, the records) can end the process
    # before the second signal is sent, and it then has nothing left to say.
    # (A second signal during the stop goes through the same watcher thread.)
    long = ("total_steps=", "eval_every=")
    args = [a for a in CLI if not a.startswith(long)]
    args += ["total_steps=400000", "eval_every=40000"]
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "experiments.run", "-F", "twice", "with", *args],
            cwd=cwd,
            env=_env(cwd / "jax-cache"),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            root = cwd / "twice" / "1" / "checkpoints"
            deadline = time.monotonic() + 240
            while runners.latest_checkpoint(root) is None:
                assert proc.poll() is None, err_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint written"
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            t = time.monotonic()
            returncode = proc.wait(timeout=60)
            assert time.monotonic() - t < 5
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert returncode == 128 + signal.SIGTERM
    assert "Exiting now; the last complete checkpoint is" in err_path.read_text()
    # The record is closed, not left RUNNING.
    record = json.loads((cwd / "twice" / "1" / "run.json").read_text())
    assert record["status"] == "INTERRUPTED" and record["stop_time"], record
    kept = runners.list_checkpoints(root)
    assert kept
    for path in kept:
        runners.verify_checkpoint(path)
    assert all(p.name.isdigit() or ".tmp-" in p.name for p in root.iterdir())


# In process: the non-finite guard and a MongoDB that fails mid-run.

TINY = {
    "agent": "dqn",
    "num_envs": 10,
    "hp.train_frequency": 1,
    "hp.gradient_steps": 1,
    "hp.buffer_size": 2000,
    "total_steps": 3000,
    "eval_episodes": 2,
    "checkpoint_every": 1000,
    "hp.hidden_sizes": [16],
    "progress": False,
    "compilation_cache": False,
}


def test_non_finite_loss_fails_the_run_and_keeps_the_last_checkpoint(tmp_path):
    from experiments.run import TrainingError, ex

    updates = {**TINY, "hp.learning_rate": 1e38, "hp.learning_starts": 1500}
    with pytest.raises(TrainingError) as info:
        ex.run(config_updates=updates, options={"--file_storage": str(tmp_path)})
    message = str(info.value)
    step = int(re.search(r"at env step ([\d,]+)", message).group(1).replace(",", ""))
    assert message.startswith("train.loss is nan at env step") or message.startswith(
        "train.loss is inf at env step"
    ), message
    assert 1500 <= step <= 3000
    run_dir = tmp_path / "1"
    assert _json(run_dir / "run.json")["status"] == "FAILED"
    kept = runners.list_checkpoints(run_dir / "checkpoints")
    assert kept and int(kept[-1].name) < step
    assert f"the last good checkpoint is {kept[-1]}" in message
    from experiments.run import load_state

    state = load_state(kept[-1])
    params = eqx.filter(state.agent_state, eqx.is_inexact_array)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(params))


# Sacred's and mongomock's own deprecations, not ours.
@pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning:mongomock")
@pytest.mark.filterwarnings("ignore::DeprecationWarning:sacred")
@pytest.mark.serial
def test_mongo_failing_mid_run_does_not_stop_training(
    tmp_path, monkeypatch, mongo_client
):
    import mongomock
    import pymongo.errors

    from experiments.record import progress as _record
    from experiments.run import ex

    client = mongo_client
    # The server goes away once training has started: every later write fails.
    down = []
    Collection = mongomock.collection.Collection
    for method in ("insert_one", "update_one"):
        real = getattr(Collection, method)

        def failing(self, *args, _real=real, **kwargs):
            if down:
                raise pymongo.errors.ConnectionFailure("server went away")
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(Collection, method, failing)
    record = _record.Recorder.__call__

    def record_then_fail(self, report):
        down.append(True)
        return record(self, report)

    monkeypatch.setattr(_record.Recorder, "__call__", record_then_fail)
    monkeypatch.chdir(tmp_path)
    argv = ["run.py", "-m", "localhost:27017:equizoo", "with"]
    argv += [f"{k}={v!r}" if type(v) is str else f"{k}={v}" for k, v in TINY.items()]
    run = ex.run_commandline(argv)
    assert run is not None and run.status == "COMPLETED"
    local = tmp_path / "runs" / str(run._id)
    assert _json(local / "run.json")["status"] == "COMPLETED"
    assert "eval.return_mean" in _json(local / "metrics.json")
    assert (local / "final_state.eqx").exists()
    latest = runners.latest_checkpoint(local / "checkpoints")
    assert latest is not None and latest.name == "3000"
    assert math.isfinite(run.result)
    doc = client["equizoo"].runs.find_one({"_id": run._id})
    assert doc is not None and doc["status"] == "RUNNING"  # as the server last saw


@pytest.mark.serial
def test_unreachable_mongo_fails_fast(tmp_path):
    t = time.monotonic()
    out = _cli(
        ["-m", "localhost:1:equizoo", "with", "total_steps=1000"],
        tmp_path,
        tmp_path / "cache",
    )
    assert time.monotonic() - t < 20
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("experiments.run.ConfigError: -m localhost:1:equizoo: ")
    assert "cannot reach MongoDB at localhost:1" in last
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
