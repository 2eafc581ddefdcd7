"""Kill a run with SIGKILL at random moments, resume it each time, and compare its
final state with the run never killed.

    python benchmarks/soak.py                      # 100 kills: DQN and PPO, 50 each
    python benchmarks/soak.py --kills 10 --agents dqn
    python benchmarks/soak.py --kills 200 --seed 3 --keep /tmp/soak

For each agent (DQN with its replay buffer, PPO; two seeds each, small networks,
checkpoints every 2,000 steps) it trains the run once uninterrupted (`reference/`),
then again in `soak/`, killing the process with SIGKILL and continuing it
(`with resume=<the newest run folder with a checkpoint>`, or from the start when
no checkpoint was written yet) until a run completes. Each kill aims at one
moment, in turn:

- `startup`: a random instant of the first seconds (imports, config, compiling),
  at the latest when training first reports progress;
- `chunk`: a random instant once training has reported progress;
- `checkpoint`: as soon as a checkpoint's temporary folder appears (the write);
- `record`: as soon as one of the record's JSON files is being replaced, once
  training has reported progress (a record written at start-up is `startup`'s).

Where each kill landed is read from what it left: a checkpoint's temporary
folder (`checkpoint`), a record file's temporary copy (`record`), no record or no
progress line yet (`startup`), else `chunk`. It then checks:

- every launch ends killed or completed: none is refused (a refusal prints its
  one line and fails the soak); a run killed after its last checkpoint is
  finished by the next (its final evaluation and artifacts, nothing trained);
- the final state of the run killed N times is byte for byte the reference's
  (`final_state.eqx`), as are its last run's metrics from its checkpoint on;
- every record is whole JSON, none is left RUNNING (the next launch marks each
  killed one INTERRUPTED), and each killed run's metrics hold the reference's
  up to its last complete checkpoint;
- `resume=` on every run folder left behind finds a checkpoint that verifies,
  or says in one line that the folder has none (killed before its first).

Prints one line per kill and a summary (a JSON object with `--json`). Exits 1 on
any failure. The quick version (one kill at each moment) runs in the test suite.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Small runs whose checkpoints still take a moment to write (DQN's replay). A
# chunk (= evaluation and checkpoint interval, `EVERY` steps per seed) trains for
# about a fifth of a second here; `total_steps` is set from the number of kills
# (`config`), so that the run outlasts them.
CONFIGS = {
    "dqn": [
        "agent=dqn",
        "env=CartPole-v1",
        "num_seeds=2",
        "num_envs=8",
        "eval_episodes=2",
        "hp.hidden_sizes=[16]",
        "hp.learning_starts=500",
        "hp.buffer_size=20000",
        "hp.batch_size=32",
        "hp.train_frequency=4",
    ],
    "ppo": [
        "agent=ppo",
        "env=CartPole-v1",
        "num_seeds=2",
        "num_envs=8",
        "eval_episodes=2",
        "hp.hidden_sizes=[16]",
        "hp.num_steps=32",
        "hp.num_minibatches=2",
    ],
}
EVERY = {"dqn": 16000, "ppo": 16384}


def config(agent: str, kills: int) -> list[str]:
    """`agent`'s soak run for `kills` kills: three chunks per kill and a few
    more (a kill lets the run train a chunk or two), so that the run outlasts
    its kills (one landing after its last checkpoint is still resumed: the
    next launch only finishes it)."""
    every = EVERY[agent]
    total = every * (3 * kills + 4)
    return [
        *CONFIGS[agent],
        f"total_steps={total}",
        f"eval_every={every}",
        f"checkpoint_every={every}",
    ]


MOMENTS: tuple[str, ...] = ("startup", "chunk", "checkpoint", "record")
TIMEOUT_S = 300.0  # one launch


class SoakError(Exception):
    pass


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["EQUIZOO_CACHE_DIR"] = str(cache)
    return env


def _launch(args: list[str], cwd: Path, cache: Path, err: Path) -> subprocess.Popen:
    with err.open("w") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "experiments.run", "-F", "runs", "with", *args],
            cwd=cwd,
            env=_env(cache),
            stdout=subprocess.DEVNULL,
            stderr=f,
        )


def _runs(cwd: Path) -> list[Path]:
    runs = cwd / "runs"
    if not runs.is_dir():
        return []
    found = [p for p in runs.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(found, key=lambda p: int(p.name))


def _checkpoints(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [
        p for p in root.iterdir() if p.name.isdigit() and (p / "meta.json").exists()
    ]
    return sorted(found, key=lambda p: int(p.name))


def _newest_with_checkpoint(cwd: Path) -> Path | None:
    best, steps = None, -1
    for run_dir in _runs(cwd):
        found = _checkpoints(run_dir)
        if found and int(found[-1].name) > steps:
            best, steps = run_dir, int(found[-1].name)
    return best


def _writing(run_dir: Path | None) -> str | None:
    """What a write in progress in `run_dir` is: `checkpoint`, `record`, or None."""
    if run_dir is None or not run_dir.is_dir():
        return None
    root = run_dir / "checkpoints"
    if root.is_dir() and any(".tmp-" in name for name in os.listdir(root)):
        return "checkpoint"
    if any(name.endswith(".writing") for name in os.listdir(run_dir)):
        return "record"
    return None


def _kill_at(
    proc: subprocess.Popen, moment: str, cwd: Path, err: Path, rng: random.Random
) -> bool:
    """Wait for `moment` and SIGKILL `proc`; False when it completed first."""
    before = {p.name for p in _runs(cwd)}
    deadline = time.monotonic() + TIMEOUT_S
    end = time.monotonic() + rng.uniform(0.0, 6.0) if moment == "startup" else None
    started = None
    while proc.poll() is None:
        now = time.monotonic()
        if now > deadline:
            proc.kill()
            raise SoakError(f"a launch ran past {TIMEOUT_S:.0f} s")
        new = [p for p in _runs(cwd) if p.name not in before]
        run_dir = new[-1] if new else None
        if moment == "startup" and end is not None and now >= end:
            break
        if moment == "startup" and "steps/s" in err.read_text(errors="replace"):
            break  # start-up is over: kill now, before training gets further
        if moment == "chunk":
            if started is None and "steps/s" in err.read_text(errors="replace"):
                started = now
                end = now + rng.uniform(0.0, 0.5)
            if end is not None and now >= end:
                break
        if moment == "checkpoint" and _writing(run_dir) == moment:
            break
        if moment == "record" and _writing(run_dir) == moment:
            # A write while training, not the record's first (at start-up).
            if started is None and "steps/s" in err.read_text(errors="replace"):
                started = now
            if started is not None:
                break
        time.sleep(0.0005 if moment in ("checkpoint", "record") else 0.01)
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


def _landed(cwd: Path, before: set[str], err: Path) -> str:
    """Where a kill landed, from what it left behind."""
    new = [p for p in _runs(cwd) if p.name not in before]
    writing = _writing(new[-1]) if new else None
    if writing:
        return writing
    if not new or "steps/s" not in err.read_text(errors="replace"):
        return "startup"
    return "chunk"


def _metrics(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    data = json.loads((run_dir / "metrics.json").read_text())
    return {
        name: list(zip(series["steps"], series["values"], strict=True))
        for name, series in data.items()
        if not name.startswith("perf.")
    }


def _reference(cwd: Path, args: list[str], cache: Path) -> Path:
    err = cwd / "reference.err"
    proc = _launch(args, cwd, cache, err)
    if proc.wait(timeout=TIMEOUT_S) != 0:
        raise SoakError(f"the reference run failed: {err.read_text()[-2000:]}")
    return _runs(cwd)[-1]


def soak(
    agent: str,
    kills: int,
    workdir: Path,
    rng: random.Random,
    *,
    log=print,
) -> dict:
    """Kill `agent`'s soak run `kills` times; return the counts (see module)."""
    args = config(agent, kills)
    cache = workdir / "jax-cache"
    (workdir / "reference").mkdir(parents=True)
    (workdir / "soak").mkdir()
    reference = _reference(workdir / "reference", args, cache)
    cwd = workdir / "soak"
    landed: dict[str, int] = dict.fromkeys(MOMENTS, 0)
    aimed: dict[str, int] = dict.fromkeys(MOMENTS, 0)
    killed, launches, fresh = [], 0, 0
    done = None
    while done is None:
        source = _newest_with_checkpoint(cwd)
        resume = [f"resume={Path('runs') / source.name}"] if source else []
        launch_args = resume or args
        fresh += source is None
        err = cwd / f"launch_{launches}.err"
        before = {p.name for p in _runs(cwd)}
        proc = _launch(launch_args, cwd, cache, err)
        launches += 1
        if len(killed) < kills:
            moment = MOMENTS[len(killed) % len(MOMENTS)]
            if _kill_at(proc, moment, cwd, err, rng):
                where = _landed(cwd, before, err)
                aimed[moment] += 1
                landed[where] += 1
                new = [p for p in _runs(cwd) if p.name not in before]
                start = int(_checkpoints(source)[-1].name) if source else -1
                killed.append((new[-1] if new else None, start))
                log(
                    f"{agent} kill {len(killed)}/{kills}: aimed at {moment}, landed "
                    f"in {where} ({'from ' + source.name if source else 'fresh'})"
                )
                continue
        code = proc.wait(timeout=TIMEOUT_S)
        if code == 0 and len(killed) < kills:
            raise SoakError(
                f"the run completed after {len(killed)} of {kills} kills: make it "
                "longer (soak.config)"
            )
        text = err.read_text(errors="replace")
        if code != 0:
            last = text.strip().splitlines()[-1] if text.strip() else "(no output)"
            raise SoakError(f"launch {launches} exited {code}: {last}")
        done = _runs(cwd)[-1]
    # The final state, and the metrics from the checkpoint it resumed from.
    same_state = (done / "final_state.eqx").read_bytes() == (
        reference / "final_state.eqx"
    ).read_bytes()
    info = json.loads((done / "info.json").read_text())
    at = info.get("resumed_from", {}).get("env_steps", -1)
    ref_metrics = _metrics(reference)
    # A run killed after its last checkpoint is finished by its resume: nothing
    # trained, its final evaluation again (the same keys, the same returns).
    finish = at >= max(s for p in ref_metrics.values() for s, _ in p)
    after = {
        k: [
            (s, v)
            for s, v in p
            if s > at or (finish and s == at and k.startswith("eval."))
        ]
        for k, p in ref_metrics.items()
    }
    same_metrics = _metrics(done) == {k: v for k, v in after.items() if v}
    # Every record whole and closed; each killed run's metrics kept up to its
    # last complete checkpoint (and none that differ from the reference's).
    statuses: dict[str, int] = {}
    for run_dir in _runs(cwd):
        path = run_dir / "run.json"
        # Killed between the folder and its record: nothing to keep or close.
        status = json.loads(path.read_text())["status"] if path.exists() else "none"
        statuses[status] = statuses.get(status, 0) + 1
    kept = recorded = 0
    for run_dir, start in killed:
        if run_dir is None or not (run_dir / "run.json").exists():
            continue
        recorded += 1
        path = run_dir / "metrics.json"
        have = _metrics(run_dir) if path.exists() else {}
        ckpt = _checkpoints(run_dir)
        reached = int(ckpt[-1].name) if ckpt else start
        ok = True
        for name, pairs in ref_metrics.items():
            want = [(s, v) for s, v in pairs if s > start]
            got = have.get(name, [])
            ok &= got == want[: len(got)]  # the reference's, in order
            ok &= len(got) >= sum(start < s <= reached for s, _ in pairs)
        kept += ok
    # `resume=` on every run folder left behind: a checkpoint that verifies, or
    # one line (a folder killed before its first checkpoint has none).
    import experiments
    from experiments.run import ConfigError

    resumable = refused = 0
    for run_dir in _runs(cwd):
        try:
            experiments.resume_checkpoint(run_dir, quiet=True)
            resumable += 1
        except ConfigError as e:
            if "\n" in str(e) or "has no checkpoint" not in str(e):
                raise SoakError(f"resume={run_dir} is refused with: {e}") from None
            refused += 1
    out = {
        "agent": agent,
        "kills": len(killed),
        "aimed": aimed,
        "landed": landed,
        "launches": launches,
        "fresh_starts": fresh,
        "resumes": launches - fresh,
        "last_launch_only_finished": finish,
        "identical_final_state": same_state,
        "identical_metrics": same_metrics,
        "records": statuses,
        "killed_runs_recorded": recorded,
        "killed_runs_with_metrics_kept": kept,
        "folders_resumable": resumable,
        "folders_without_checkpoint": refused,
    }
    out["ok"] = bool(
        same_state
        and same_metrics
        and statuses.get("RUNNING", 0) == 0
        and statuses.get("COMPLETED", 0) == 1
        and kept == recorded
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SIGKILL a run, resume it, compare.")
    parser.add_argument("--kills", type=int, default=100, help="in all (default 100)")
    parser.add_argument("--agents", default="dqn,ppo", help="comma-separated")
    parser.add_argument("--seed", type=int, default=0, help="of the kill times")
    parser.add_argument("--keep", type=Path, help="work here and keep it")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    agents = args.agents.split(",")
    unknown = [a for a in agents if a not in CONFIGS]
    if unknown or args.kills < 1:
        parser.error(f"agents from {sorted(CONFIGS)}, kills >= 1 (got {args.agents})")
    rng = random.Random(args.seed)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="equizoo-soak-"))
    results = []
    t = time.monotonic()
    try:
        for i, agent in enumerate(agents):
            share = args.kills // len(agents) + (i < args.kills % len(agents))
            results.append(soak(agent, share, workdir / agent, rng))
    except SoakError as e:
        print(f"soak failed: {e} (work in {workdir})", file=sys.stderr)
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    summary = {"results": results, "seconds": round(time.monotonic() - t, 1)}
    if args.json:
        print(json.dumps(summary, indent=1))
    for r in results:
        print(
            f"{r['agent']}: {r['kills']} kills (landed: "
            + ", ".join(f"{k} {v}" for k, v in r["landed"].items())
            + f"), {r['resumes']} resumes, {r['fresh_starts']} fresh starts; final "
            f"state {'identical' if r['identical_final_state'] else 'DIFFERENT'}, "
            f"metrics {'identical' if r['identical_metrics'] else 'DIFFERENT'}; "
            f"records {r['records']}; recorded killed runs with their metrics "
            f"kept {r['killed_runs_with_metrics_kept']}/{r['killed_runs_recorded']}; "
            f"resume= on every folder: {r['folders_resumable']} from a verified "
            f"checkpoint, {r['folders_without_checkpoint']} refused (no checkpoint "
            "yet): " + ("ok" if r["ok"] else "FAILED")
        )
    print(f"{summary['seconds']:.0f} s")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
