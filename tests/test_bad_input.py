"""Bad input through the CLI: each case exits non-zero before compiling anything,
with one line naming the problem, and leaves every existing run untouched.

Cases in `SUBPROCESS` are real `python -m experiments.run` subprocesses (each
exits in about two seconds); the others run the same command line in this
process (`ex.run_commandline`, Sacred's own entry point, stderr captured), which
checks the same message for a fraction of the cost. All work in one directory
that holds a real, finished DQN run (`runs/1`, with checkpoints) to resume from.
"""

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# Command lines in subprocesses, timed (each exits before compiling).
pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[1]

# (id, `with` arguments, how the one-line message starts, what it also says).
# `{run}`: the finished DQN run; `{empty}`: a run folder without checkpoints;
# `{truncated}`: a copy of the run whose state.eqx files lost their second half.
CASES = [
    ("unknown-agent", ["agent=dqx"], "agent: ", "Did you mean 'dqn'?"),
    ("unknown-env", ["env=CartPol-v1"], "env: ", "'CartPole-v1'"),
    (
        "agent-unsuited-to-env",
        ["agent=dqn", "env=Pendulum-v1"],
        "agent=dqn env=Pendulum-v1: ",
        "discrete action space",
    ),
    (
        "continuous-agent-on-discrete-env",
        ["agent=sac", "env=CartPole-v1"],
        "agent=sac env=CartPole-v1: ",
        "continuous (Box) action space",
    ),
    (
        "tau-out-of-range",
        ["agent=td3", "hp.tau=1.5"],
        "hp.tau: ",
        "tau must be in (0, 1]",
    ),
    (
        "policy-delay-below-one",
        ["agent=td3", "hp.policy_delay=0"],
        "hp.policy_delay: ",
        "policy_delay must be positive",
    ),
    (
        "negative-noise",
        ["agent=ddpg", "hp.exploration_noise=-0.1"],
        "hp.exploration_noise: ",
        "exploration_noise must be >= 0",
    ),
    (
        "log-std-bounds-not-a-pair",
        ["agent=sac", "hp.log_std_bounds=[1.0]"],
        "hp.log_std_bounds: ",
        "a list of 2 numbers",
    ),
    ("negative-total-steps", ["total_steps=-5"], "total_steps: ", "positive integer"),
    ("zero-total-steps", ["total_steps=0"], "total_steps: ", "positive integer"),
    ("zero-num-envs", ["num_envs=0"], "num_envs: ", "positive integer"),
    ("zero-num-seeds", ["num_seeds=0"], "num_seeds: ", "positive integer"),
    ("non-integer-seed", ["seed=1.5"], "seed: ", "expected an integer"),
    (
        "unknown-hyperparameter",
        ["hp.learning_rat=0.1"],
        "hp.learning_rat: ",
        "did you mean 'learning_rate'?",
    ),
    (
        "wrongly-typed-hyperparameter",
        ["hp.learning_rate=fast"],
        "hp.learning_rate: ",
        "must be float",
    ),
    (
        "minibatches-do-not-divide-batch",
        ["agent=ppo", "num_envs=3", "hp.num_minibatches=5"],
        "agent=ppo env=CartPole-v1: ",
        "minibatch",
    ),
    (
        "multi-agent-action-space-does-not-fit",
        ["agent=sac", "env=marl/MatrixGame"],
        "agent=sac env=marl/MatrixGame: ",
        "continuous (Box) action space",
    ),
    (
        "unknown-agent-name-in-per-agent-config",
        [
            "agent=ppo",
            "env=marl/MatrixGame",
            "sharing=independent",
            "per_agent.agent_7.learning_rate=0.001",
        ],
        "per_agent.agent_7: ",
        "Its agents: ['agent_0', 'agent_1']",
    ),
    (
        "sharing-on-a-single-agent-env",
        ["sharing=independent"],
        "sharing: ",
        "single-agent env",
    ),
    ("zero-checkpoint-every", ["checkpoint_every=0"], "checkpoint_every: ", "positive"),
    (
        "negative-checkpoint-every",
        ["checkpoint_every=-100"],
        "checkpoint_every: ",
        "positive",
    ),
    ("zero-eval-episodes", ["eval_episodes=0"], "eval_episodes: ", "positive integer"),
    ("zero-keep-checkpoints", ["keep_checkpoints=0"], "keep_checkpoints: ", "positive"),
    ("resume-missing-folder", ["resume={missing}"], "resume: ", "no run folder"),
    ("resume-without-checkpoints", ["resume={empty}"], "resume: ", "no checkpoint"),
    ("resume-truncated-state", ["resume={truncated}"], "resume: ", "truncated"),
    (
        "resume-another-agent",
        ["resume={run}", "agent=ppo", "total_steps=4000"],
        "resume: ",
        "checkpoint of agent 'dqn', not 'ppo'",
    ),
    (
        "resume-conflicting-override",
        ["resume={run}", "hp.gamma=0.5", "total_steps=4000"],
        "hp.gamma: ",
        "conflicts with the run in",
    ),
    (
        "resume-conflicting-num-envs",
        ["resume={run}", "num_envs=3", "total_steps=4000"],
        "num_envs: ",
        "conflicts with the run in",
    ),
    (
        "resume-fewer-steps",
        ["resume={run}", "total_steps=500"],
        "total_steps: ",
        "below the 1000",
    ),
    ("resume-finished-run", ["resume={run}"], "resume: ", "completed its total_steps"),
]

# One case of each kind through a real process: a name, a hyperparameter, a
# damaged checkpoint, a resumed run's conflicting override.
SUBPROCESS = {
    "unknown-agent",
    "tau-out-of-range",
    "resume-truncated-state",
    "resume-conflicting-override",
}


@contextlib.contextmanager
def _stderr_fd():
    """What is written to stderr meanwhile, at the file-descriptor level (and
    `sys.stderr`): the yielded list holds it afterwards."""
    import tempfile

    text: list[str] = []
    with tempfile.TemporaryFile("w+") as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            with contextlib.redirect_stderr(tmp):
                yield text
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.flush()
            tmp.seek(0)
            text.append(tmp.read())


def _env(cwd: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["EQUIZOO_CACHE_DIR"] = str(cwd / "jax-cache")
    return env


def _snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under `folder`: modification time and content hash."""
    return {
        str(p.relative_to(folder)): (
            p.stat().st_mtime_ns,
            hashlib.sha256(p.read_bytes()).hexdigest(),
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Run every case; return `{id: (CompletedProcess, seconds)}` and the
    working directory's state before and after."""
    from experiments.run import ex

    cwd = tmp_path_factory.mktemp("bad-input")
    runs = cwd / "runs"
    # A finished DQN run with checkpoints, in process (no compilation cache).
    ex.run(
        config_updates={
            "agent": "dqn",
            "num_envs": 10,
            "total_steps": 1000,
            "eval_episodes": 2,
            "checkpoint_every": 500,
            "hp": {
                "hidden_sizes": [16],
                "learning_starts": 100,
                "buffer_size": 1000,
                "train_frequency": 1,
                "gradient_steps": 1,
            },
            "progress": False,
            "compilation_cache": False,
        },
        options={"--file_storage": str(runs)},
    )
    assert (runs / "1" / "checkpoints" / "1000" / "state.eqx").is_file()
    empty = runs / "2"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    truncated = runs / "3"
    shutil.copytree(runs / "1", truncated)
    # Every checkpoint: resume= passes over one that does not verify to the
    # newest that does (tests/test_faults.py); with none left it refuses.
    for state in (truncated / "checkpoints").glob("*/state.eqx"):
        data = state.read_bytes()
        state.write_bytes(data[: len(data) // 2])
    paths = {
        "run": str(runs / "1"),
        "empty": str(empty),
        "truncated": str(truncated),
        "missing": str(runs / "99"),
    }
    before = _snapshot(runs)

    def one(case):
        _, args, _, _ = case
        args = [a.format(**paths) for a in args]
        t = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "experiments.run", "with", *args],
            cwd=cwd,
            env=_env(cwd),
            capture_output=True,
            text=True,
            timeout=120,
        )
        return out, time.monotonic() - t

    def in_process(case):
        _, args, _, _ = case
        args = [a.format(**paths) for a in args]
        out = io.StringIO()
        t = time.monotonic()
        here = os.getcwd()
        os.chdir(cwd)  # the default observer records to ./runs, as from a shell
        try:
            # Sacred prints its one line to the stream it captured in an earlier
            # run of this process: read file descriptor 2 itself.
            with _stderr_fd() as err, contextlib.redirect_stdout(out):
                try:
                    ex.run_commandline(["run.py", "with", *args])
                    code = 0
                except SystemExit as e:
                    code = e.code
        finally:
            os.chdir(here)
        done = subprocess.CompletedProcess(args, code, out.getvalue(), err[0])
        return done, time.monotonic() - t

    outs = {c[0]: in_process(c) for c in CASES if c[0] not in SUBPROCESS}
    real = [c for c in CASES if c[0] in SUBPROCESS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outs.update(zip([c[0] for c in real], pool.map(one, real), strict=True))
    assert set(outs) == {c[0] for c in CASES}
    return outs, before, _snapshot(runs), cwd


@pytest.mark.parametrize(
    ("name", "starts", "says"),
    [(c[0], c[2], c[3]) for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_bad_input_exits_before_compiling(results, name, starts, says):
    outs, _, _, _ = results
    out, seconds = outs[name]
    assert out.returncode != 0, out.stdout[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith(f"experiments.run.ConfigError: {starts}"), lines[0]
    assert says in lines[0], lines[0]
    assert "Compiling" not in out.stderr and "Traceback" not in out.stderr
    assert seconds < 30  # import, resolve, validate: no compilation


def test_bad_input_leaves_runs_untouched(results):
    _, before, after, cwd = results
    assert before == after
    assert sorted(p.name for p in (cwd / "runs").iterdir()) == [
        "1",
        "2",
        "3",
        "_sources",
    ]
    assert len(CASES) >= 15
