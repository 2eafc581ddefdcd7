"""Training a resolved config: one run of seeds, or a sweep of programs, with
metrics, checkpoints, signals and artifacts (`python -m experiments.run`'s
`main`)."""

import dataclasses
import shlex
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from experiments import (
    _distributed,
    _experiment,
    _interrupt,
    _record,
    _resume,
    jax_setup,
    stats,
)
from experiments._errors import ConfigError, TrainingError
from experiments._spec import RunSpec


class Checkpoints:
    """The `checkpoint` callback of `runners.run`: each checkpoint goes to
    `root/<env steps>/` with the run's `header` (a temporary folder when the run
    keeps no file record), the newest `keep` stay, and `seconds` adds up the
    time spent."""

    def __init__(self, root: Path | None, header: dict[str, Any], keep: int):
        self.root, self.header, self.keep = root, header, keep
        self.written: list[Path] = []
        self.seconds = 0.0

    def __call__(self, carry: Any, report: Any) -> None:
        import runners

        t = time.perf_counter()
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="equizoo-checkpoints-"))
        path = self.root / str(report.env_steps)
        meta = {**self.header, "env_steps": report.env_steps}
        runners.save_checkpoint(path, carry, meta)
        self.written.append(path)
        runners.prune_checkpoints(self.root, self.keep)
        self.seconds += time.perf_counter() - t

    def newest(self) -> Path | None:
        """The checkpoint this run wrote last."""
        return self.written[-1] if self.written else None

    def last(self) -> Path | None:
        """The newest complete checkpoint on disk (a resumed run's original's
        until this one writes)."""
        import runners

        return None if self.root is None else runners.latest_checkpoint(self.root)


def stop_on_signal(run: Any, checkpoints: list[Checkpoints]) -> Any:
    """SIGINT/SIGTERM: the first stops after the chunk (with a checkpoint), the
    second exits at once, naming the newest complete checkpoint of the
    programs trained so far (`checkpoints`, filled as they start)."""

    def first(signum: int) -> None:
        print(
            f"\n{signal.Signals(signum).name}: stopping after this chunk with a "
            "checkpoint; send it again to exit at once",
            file=sys.stderr,
            flush=True,
        )

    def second() -> None:
        found = (c.last() for c in reversed(checkpoints))
        last = next((path for path in found if path is not None), None)
        print(
            f"\nExiting now; the last complete checkpoint is {last or 'none'}",
            file=sys.stderr,
            flush=True,
        )
        _record.close_interrupted(run)

    return _interrupt.StopOnSignal(first, second)


def failed(
    run: Any, error: Exception, last: Path | None, where: str = ""
) -> TrainingError:
    """The one-line error of a run that training stopped: a non-finite loss or
    parameter (naming the last good checkpoint), or a lost process."""
    import runners

    if isinstance(error, runners.PeerLostError):
        return TrainingError(_resume.peer_lost(run, error, last))
    kept = f"the last good checkpoint is {last}" if last else "no checkpoint yet"
    return TrainingError(f"{where}{error}; {kept}")


@dataclasses.dataclass
class Job:
    """One compiled training of the driver: a plain run's seeds, or one program
    of a sweep (its members x seeds)."""

    agent: Any  # the module it trains
    header: dict[str, Any]  # what its checkpoints record
    root: Path | None  # where its checkpoints go
    callback: Any  # runners.run's callback
    floats: dict[str, list[float]] | None  # a sweep's float hyperparameters
    where: str  # what its errors start with
    announce: str  # its progress line
    plan: tuple[int, int]


def train(_run: Any, spec: RunSpec, t_start: float) -> float:
    """Train, logging metrics and writing checkpoints after compiled chunks; save
    artifacts. A plain run is one job; a sweep, one job per program, trained
    one after another.

    **Returns:** the final greedy return, averaged over episodes and seeds (Sacred
    stores it as the run's result); for a sweep, the best member's.

    **Raises:** `Interrupted` (a `KeyboardInterrupt`: Sacred marks the run
    INTERRUPTED) after a checkpoint when SIGINT or SIGTERM stopped training;
    `TrainingError` (FAILED) on a non-finite loss or parameter, or when another
    process of a multi-process run is lost.
    """
    t_main = time.perf_counter()
    if spec.compilation_cache:
        jax_setup.enable_compilation_cache()
    if _run.observers:
        # The learning-curve PNG needs matplotlib (~1 s to import): load it while
        # XLA compiles, which leaves the interpreter idle.
        threading.Thread(target=_record.preload_matplotlib, daemon=True).start()
    agent, env = spec.build()
    _check_devices(spec)
    # Other processes of a multi-process run train their share quietly.
    progress = spec.progress and _distributed.is_main()
    state, chunks = _resumed(_run, spec, agent, env)
    sweep = _Sweep(_run, spec, agent, progress) if spec.is_sweep else None
    recorder = None if sweep else _record.Recorder(_run, spec.num_seeds, progress)
    if sweep is not None:
        jobs = sweep.jobs(chunks)
    else:
        jobs = [_plain_job(_run, spec, agent, recorder, state, chunks)]
    checkpoints: list[Checkpoints] = []
    stop = stop_on_signal(_run, checkpoints)
    t_train = time.perf_counter()
    results = []
    for job in jobs:
        results.append(_train_job(_run, spec, env, job, state, stop, checkpoints))
    times = {"t_main": t_main, "t_start": t_start, "t_train": t_train}
    if sweep is not None:
        return sweep.finish(results, state, times)
    assert recorder is not None
    return _finish_run(
        _run, spec, agent, env, results[0], recorder, checkpoints[0], state, times
    )


def _check_devices(spec: RunSpec) -> None:
    import jax

    available = len(jax.devices())
    if spec.devices is not None and jax.process_count() > 1:
        raise ConfigError(
            f"devices: a run of {jax.process_count()} processes trains on all their "
            f"{available} devices; leave devices unset"
        )
    if spec.devices is not None and spec.devices > available:
        raise ConfigError(
            f"devices: {spec.devices} asked for, but this process sees {available} "
            f"{jax.devices()[0].platform} device(s)"
        )


def _resumed(run: Any, spec: RunSpec, agent: Any, env: Any) -> tuple[Any, Any]:
    """`(state, plan)` of the checkpoint a resumed run continues from (recorded
    in `info.resumed_from`), else `(None, None)`."""
    import runners

    if spec.resume is None:
        return None, None
    plan = runners.plan(agent, spec.num_envs, spec.total_steps, spec.eval_every)
    state, chunks, resumed_from = _resume.load(
        spec.resume, agent, env, dict(run.config), plan
    )
    run.info["resumed_from"] = resumed_from
    return state, chunks


def _header(
    run: Any,
    spec: RunSpec,
    plan: tuple[int, int],
    steps: int,
    *,
    hp: dict[str, Any] | None = None,
    num_runs: int | None = None,
    sweep: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What every checkpoint of a job records; a sweep's program adds its `hp`,
    `num_runs` and `sweep` (`steps`: env steps per iteration)."""
    planned = plan[0] * plan[1] * steps
    header = {
        "agent": spec.agent,
        "env": spec.env,
        "env_params": spec.env_params,
        "hp": spec.hp if hp is None else hp,
        "seed": spec.seed,
        "num_seeds": spec.num_seeds,
    }
    if num_runs is not None:
        header["num_runs"] = num_runs
    header.update(
        num_envs=spec.num_envs,
        total_steps=planned,
        plan={"chunks": list(plan), "total_steps": planned},
    )
    if sweep is not None:
        header["sweep"] = sweep
    header.update(config=dict(run.config), run_id=run._id)
    return header


def _checkpoint_root(run: Any) -> Path | None:
    run_dir = _experiment.file_dir(run)
    return None if run_dir is None else _resume.checkpoint_root(run_dir)


def _plain_job(
    run: Any, spec: RunSpec, agent: Any, recorder: Any, state: Any, chunks: Any
) -> Job:
    import runners

    plan = chunks or runners.plan(
        agent, spec.num_envs, spec.total_steps, spec.eval_every
    )
    header = _header(run, spec, plan, spec.num_envs * agent.num_steps)
    verb = f"Resuming {spec.resume} at {state.env_steps[0]:,} steps:" if state else ""
    announce = (
        f"Compiling {spec.agent} on {spec.env}: {spec.num_seeds} seed(s) x "
        f"{spec.num_envs} envs, {header['total_steps']:,} steps each ... {verb}"
    ).rstrip(" :")
    root = _checkpoint_root(run)
    return Job(agent, header, root, recorder, None, "", announce, plan)


def _train_job(
    run: Any,
    spec: RunSpec,
    env: Any,
    job: Job,
    state: Any,
    stop: Any,
    checkpoints: list[Checkpoints],
) -> Any:
    """`runners.run` for one job, with its checkpoints, signals and errors."""
    import jax.random as jr

    import runners

    written = Checkpoints(job.root, job.header, spec.keep_checkpoints)
    checkpoints.append(written)
    if spec.progress and _distributed.is_main():
        print(job.announce, file=sys.stderr, flush=True)
    try:
        with stop:
            result = runners.run(
                job.agent,
                env,
                key=jr.PRNGKey(spec.seed),
                total_steps=spec.total_steps,
                num_envs=spec.num_envs,
                num_seeds=spec.num_seeds,
                eval_every=spec.eval_every,
                eval_episodes=spec.eval_episodes,
                eval_at_start=spec.eval_at_start,
                callback=job.callback,
                state=state,
                chunks=job.plan,
                checkpoint=written if run.observers else None,
                checkpoint_every=spec.checkpoint_every,
                should_stop=lambda: stop.requested,
                sweep=job.floats,
                devices=spec.devices,
                bitwise=spec.bitwise,
            )
    except (runners.NonFiniteError, runners.PeerLostError) as e:
        raise failed(run, e, written.last(), job.where) from None
    finally:
        job.callback.close()
    run.info["checkpoint_s"] = round(sum(c.seconds for c in checkpoints), 3)
    if result.stopped:
        _resume.interrupted(run, stop.signum, written.newest())
    return result


def _finish_run(
    run: Any,
    spec: RunSpec,
    agent: Any,
    env: Any,
    result: Any,
    recorder: Any,
    checkpoints: Checkpoints,
    state: Any,
    times: dict[str, float],
) -> float:
    """A plain run's info, artifacts and summary line."""
    per_seed = result.final_returns.mean(axis=1)
    mean, std = float(per_seed.mean()), float(per_seed.std())
    # Each seed's final greedy return and their IQM, as Python floats (Sacred
    # stores arrays as unreadable blobs): a sweep's search maximises the IQM.
    finals = [float(r) for r in per_seed.tolist()]
    run.info["final_returns"] = finals
    run.info["return_iqm"] = float(stats.iqm(finals))
    env_steps = result.reports[-1].env_steps
    trained = env_steps - (0 if state is None else int(state.env_steps[0]))
    now = time.perf_counter()
    run.info.update(
        wall_s=round(now - times["t_main"], 3),
        process_s=round(now - times["t_start"], 3),
        compile_s=round(result.compile_s, 3),
        train_s=round(result.train_s, 3),
        steps_per_s=round(trained * spec.num_seeds / result.train_s, 1),
        env_steps=env_steps,
    )
    if run.observers:
        newest = checkpoints.newest()
        assert newest is not None  # a recorded run ends with a checkpoint
        save_artifacts(run, result, recorder, newest, agent=spec.agent, env=spec.env)
        if spec.video and _distributed.is_main():
            stem = f"{spec.agent}__{spec.env}"
            film(run, agent, result.state, env, stem)
    print(
        f"{spec.agent} on {spec.env}: final greedy return {mean:.1f} ± {std:.1f} "
        f"over {spec.num_seeds} seed(s) x {result.final_returns.shape[1]} episodes; "
        f"{env_steps:,} steps in {time.perf_counter() - times['t_start']:.1f} s wall "
        f"(compile {result.compile_s:.1f} s, {run.info['steps_per_s']:,.0f} "
        f"steps/s); {_experiment.where(run)}",
        flush=True,
    )
    return mean


class _Sweep:
    """A sweep's jobs (one per program: its members x seeds in one compiled
    run), its members' series and curves, and its member table at the end.

    Checkpoints go to `<run>/checkpoints/` (one program) or
    `<run>/checkpoints/program_<i>/`; each records the program's `hp` and
    `num_runs`, so `load_state` reads it like any run's."""

    def __init__(self, run: Any, spec: RunSpec, agent: Any, progress: bool):
        from experiments import _members

        self.run, self.spec = run, spec
        self.members, self.programs = _members.of_config(dict(run.config), agent)
        print(
            _members.describe(self.members, self.programs), file=sys.stderr, flush=True
        )
        run.info["sweep_programs"] = len(self.programs)
        self.bar = _record.Recorder(None, 1, progress)
        self.curves: dict[int, list[tuple[int, float]]] = {}

    def jobs(self, chunks: Any) -> list[Job]:
        """One job per program; `chunks`: a resumed run's plan."""
        return [self._job(i, p, chunks) for i, p in enumerate(self.programs)]

    def _job(self, index: int, program: Any, chunks: Any) -> Job:
        import runners
        import zoo

        spec, run = self.spec, self.run
        hp = {**spec.hp, **program.static}
        agent = zoo.make(spec.agent, **hp)
        plan = chunks or runners.plan(
            agent, spec.num_envs, spec.total_steps, spec.eval_every
        )
        sweep = {"program": index, "floats": program.floats, "members": program.members}
        header = _header(
            run,
            spec,
            plan,
            spec.num_envs * agent.num_steps,
            hp=hp,
            num_runs=len(program.members) * spec.num_seeds,
            sweep=sweep,
        )
        root = _checkpoint_root(run)
        if root is not None and len(self.programs) > 1:
            root = root / f"program_{index}"
        floats = ", ".join(program.floats) or "nothing"
        static = ", ".join(f"{k}={v}" for k, v in program.static.items())
        announce = (
            f"Compiling {spec.agent} on {spec.env}, program {index + 1}/"
            f"{len(self.programs)}{f' ({static})' if static else ''}: "
            f"{len(program.members)} member(s) x {spec.num_seeds} seed(s) varying "
            f"{floats}, {header['total_steps']:,} steps each ..."
        )
        callback = _record.SweepRecorder(
            run, self.bar, program.members, spec.num_seeds, self.curves
        )
        where = f"program {index + 1} of the sweep: "
        floats_or_none = program.floats or None
        return Job(agent, header, root, callback, floats_or_none, where, announce, plan)

    def finish(self, results: list[Any], state: Any, times: dict[str, float]) -> float:
        """The member table (info, artifacts, printed) and the best member's
        command; returns its mean final return."""
        table = self._table(results)
        best = max(table, key=lambda row: row["return_mean"])
        chosen = self.members[best["member"]]
        command = self._command(chosen)
        start = 0 if state is None else int(state.env_steps[0])
        trained = sum(
            (r.reports[-1].env_steps - start) * len(p.members) * self.spec.num_seeds
            for r, p in zip(results, self.programs, strict=True)
        )
        now = time.perf_counter()
        self.run.info.update(
            members=table,
            best_member=best["member"],
            best_hp={**self.spec.hp, **chosen},
            best_command=command,
            wall_s=round(now - times["t_main"], 3),
            process_s=round(now - times["t_start"], 3),
            compile_s=round(sum(r.compile_s for r in results), 3),
            train_s=round(sum(r.train_s for r in results), 3),
            steps_per_s=round(trained / max(now - times["t_train"], 1e-9), 1),
        )
        lines = _member_table(table)
        if self.run.observers:
            self._artifacts(table, lines)
        print(lines, flush=True)
        print(
            f"best: member {best['member']}, mean {best['return_mean']:.1f}, worst "
            f"seed {best['return_worst']:.1f} over {self.spec.num_seeds} seed(s); "
            f"train it alone with:\n  {command}\n{len(self.members)} members in "
            f"{time.perf_counter() - times['t_start']:.1f} s wall; "
            f"{_experiment.where(self.run)}",
            flush=True,
        )
        return float(best["return_mean"])

    def _table(self, results: list[Any]) -> list[dict[str, Any]]:
        """One row per member: its values and its seeds' final returns."""
        finals = {}  # member -> per-seed final mean return
        for result, program in zip(results, self.programs, strict=True):
            per_run = result.final_returns.mean(axis=1).reshape(-1, self.spec.num_seeds)
            finals.update(zip(program.members, per_run, strict=True))
        table = []
        for i, member in enumerate(self.members):
            returns = finals[i]
            values = {
                k: float(v) if isinstance(v, float) else v for k, v in member.items()
            }
            table.append(
                {
                    "member": i,
                    **values,
                    "return_mean": round(float(returns.mean()), 3),
                    "return_worst": round(float(returns.min()), 3),
                    "return_std": round(float(returns.std()), 3),
                }
            )
        return table

    def _command(self, chosen: dict[str, Any]) -> str:
        """The command that trains member `chosen` alone."""
        spec = self.spec
        return shlex.join(
            ["python", "-m", "experiments.run", "with"]
            + [f"agent={spec.agent}", f"env={spec.env}"]
            + [f"env_params.{k}={v!r}" for k, v in spec.env_params.items()]
            + [
                f"hp.{k}={v!r}" if isinstance(v, str) else f"hp.{k}={v}"
                for k, v in chosen.items()
            ]
        )

    def _artifacts(self, table: list[dict[str, Any]], lines: str) -> None:
        """members.md, members.json and the members' learning curves."""
        spec, curves = self.spec, self.curves
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            (out / "members.md").write_text(lines + "\n")
            _record.write_json(out / "members.json", table)
            steps = sorted({s for c in curves.values() for s, _ in c})
            members = range(len(self.members))
            means = [
                [dict(curves[m]).get(s, float("nan")) for m in members] for s in steps
            ]
            title = f"{spec.agent} on {spec.env} (sweep)"
            path = out / "learning_curve.png"
            _record.plot_curve(path, steps, means, title, series="member")
            for name in ("members.md", "members.json", "learning_curve.png"):
                _experiment.add_artifact(self.run, out / name)


def _member_table(table: list[dict[str, Any]]) -> str:
    """The member table in Markdown."""
    columns = list(table[0])
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in table:
        rows.append(
            "| "
            + " | ".join(
                f"{v:.4g}" if isinstance(v, float) else str(v) for v in row.values()
            )
            + " |"
        )
    return "\n".join(rows)


def save_artifacts(
    run: Any, result: Any, recorder: Any, checkpoint: Path, **header: Any
) -> None:
    import runners

    returns = result.final_returns
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        _record.write_json(
            out / "eval_returns.json",
            {
                "env_steps": result.reports[-1].env_steps,
                "return_mean": float(returns.mean(axis=1).mean()),
                "return_std": float(returns.mean(axis=1).std()),
                "returns": returns.tolist(),  # [seed][episode]
            },
        )
        _record.plot_curve(
            out / "learning_curve.png",
            recorder.curve_steps,
            recorder.curve_returns,
            f"{header['agent']} on {header['env']}",
        )
        # The final checkpoint: its state.eqx, and its meta.json, which also
        # says how to rebuild the state's structure (see `load_state`).
        _experiment.add_artifact(
            run, checkpoint / runners.STATE_FILE, "final_state.eqx"
        )
        _experiment.add_artifact(
            run, checkpoint / runners.META_FILE, "final_state.json"
        )
        for name in ("eval_returns.json", "learning_curve.png"):
            _experiment.add_artifact(run, out / name)


def film(run: Any, agent: Any, state: Any, env: Any, stem: str) -> None:
    """`video=True`: one greedy episode of seed 0's final policy as a GIF (and
    MP4 with ffmpeg) artifact. Runs after training, so it costs nothing until
    then, and nothing to runs without it."""
    import jax.random as jr

    import runners
    from experiments import _video

    agent_state = runners.seed_state(state, 0).agent_state
    episodes = _video.record_episodes(
        agent, agent_state, env, key=jr.PRNGKey(0), num_episodes=1, max_steps=10_000
    )
    run.info["video_return"] = float(episodes.returns[0])
    with tempfile.TemporaryDirectory() as tmp:
        stem = stem.replace("/", "_")
        for path in _video.write_video(episodes.frames[0], Path(tmp) / stem):
            _experiment.add_artifact(run, path)
