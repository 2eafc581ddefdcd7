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

from experiments import _distributed, _interrupt, _resume, jax_setup
from experiments._errors import ConfigError, TrainingError
from experiments._spec import RunSpec
from experiments.analysis import stats
from experiments.record import progress as _record
from experiments.record.folder import FINAL_META, FINAL_STATE, Header, RunFolder
from experiments.record.sink import NullSink, Sink


class WriteFailed(Exception):
    """A checkpoint or the run's file record could not be written (a full disk,
    a read-only folder): training stops (`write_failed` says how)."""


class Checkpoints:
    """The `checkpoint` callback of `runners.run`: each checkpoint goes to
    `root/<env steps>/` with the run's `header` (a temporary folder when the run
    keeps no file record), the newest `keep` stay, and `seconds` adds up the
    time spent. Before each, the run's record (`sink`) is brought up to date;
    after it, training stops if the record could not be written."""

    def __init__(
        self, root: Path | None, header: dict[str, Any], keep: int, sink: Sink
    ):
        self.root, self.header, self.keep, self.sink = root, header, keep, sink
        self.written: list[Path] = []
        self.seconds = 0.0

    def __call__(self, carry: Any, report: Any) -> None:
        import runners

        t = time.perf_counter()
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="equizoo-checkpoints-"))
        path = self.root / str(report.env_steps)
        meta = {**self.header, "env_steps": report.env_steps}
        # The record first: once a checkpoint exists, the record holds every
        # metric logged up to it, whenever the process dies after.
        self.sink.flush()
        try:
            runners.save_checkpoint(path, carry, meta)
        except OSError as e:
            # save_checkpoint has removed what it wrote; the others are intact.
            message = f"could not write the checkpoint {path} ({reason(e)})"
            raise WriteFailed(message) from None
        self.written.append(path)
        runners.prune_checkpoints(self.root, self.keep)
        self.seconds += time.perf_counter() - t
        problem = self.sink.record_error()
        if problem:
            raise WriteFailed(problem)

    def newest(self) -> Path | None:
        """The checkpoint this run wrote last."""
        return self.written[-1] if self.written else None

    def last(self) -> Path | None:
        """The newest complete checkpoint on disk (a resumed run's original's
        until this one writes)."""
        import runners

        return None if self.root is None else runners.latest_checkpoint(self.root)


def stop_on_signal(sink: Sink, checkpoints: list[Checkpoints]) -> Any:
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
        sink.close_interrupted()

    return _interrupt.StopOnSignal(first, second)


def failed(
    sink: Sink, error: Exception, last: Path | None, where: str = ""
) -> TrainingError:
    """The one-line error of a run that training stopped: a non-finite loss or
    parameter (naming the last good checkpoint), or a lost process."""
    import runners

    if isinstance(error, runners.PeerLostError):
        return TrainingError(_resume.peer_lost(sink, error, last))
    kept = f"the last good checkpoint is {last}" if last else "no checkpoint yet"
    return TrainingError(f"{where}{error}; {kept}")


def reason(error: OSError) -> str:
    """An `OSError` in a few words: `No space left on device: 'runs/1/x'`."""
    what = error.strerror or str(error)
    return f"{what}: {str(error.filename)!r}" if error.filename else what


def write_failed(sink: Sink, error: Exception, last: Path | None, where: str = ""):
    """The one line of a run stopped because it could not write: what failed,
    the last complete checkpoint, and how to go on."""
    if last is None:
        return TrainingError(
            f"{where}{error}; no checkpoint was completed: free space (or make the "
            "run folder writable) and start the run again"
        )
    command = sink.resume_command()
    then = f" and resume with: {command}" if command else ""
    return TrainingError(
        f"{where}{error}; the last complete checkpoint is {last}: free space (or "
        f"make the run folder writable){then}"
    )


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


@dataclasses.dataclass
class Outcome:
    """What `train` returns.

    - `value`: the final greedy return, averaged over episodes and seeds; for a
      sweep, the best member's mean (what Sacred stores as the run's result).
    - `results`: `runners.run`'s result of each job (one; a sweep's, one per
      program), with the final training state, reports and returns.
    - `agent`, `env`: what a plain run trained (a sweep's first program's agent).
    - `info`: what the run reported (its sink's `info`).
    """

    value: float
    results: list[Any]
    agent: Any
    env: Any
    info: dict[str, Any]


def train(
    spec: RunSpec, sink: Sink | None = None, t_start: float | None = None
) -> Outcome:
    """Train `spec`, logging metrics to `sink` and (when it records into a run
    folder) writing checkpoints after compiled chunks and artifacts at the end.
    A plain run is one job; a sweep, one job per program, trained one after
    another. The one core under `python -m experiments.run` (a `SacredSink`),
    `experiments.publish` and the benchmarks (`NullSink`, the default: nothing
    recorded, no checkpoints).

    **Raises:** `Interrupted` (a `KeyboardInterrupt`: Sacred marks the run
    INTERRUPTED) after a checkpoint when SIGINT or SIGTERM stopped training;
    `TrainingError` (FAILED) on a non-finite loss or parameter, or when another
    process of a multi-process run is lost.
    """
    t_main = time.perf_counter()
    sink = NullSink(spec.config()) if sink is None else sink
    if spec.compilation_cache:
        jax_setup.enable_compilation_cache()
    if sink.recording:
        # The learning-curve PNG needs matplotlib (~1 s to import): load it while
        # XLA compiles, which leaves the interpreter idle.
        threading.Thread(target=_record.preload_matplotlib, daemon=True).start()
    agent, env = spec.build()
    _check_devices(spec)
    # Other processes of a multi-process run train their share quietly.
    progress = spec.progress and _distributed.is_main()
    state, chunks = _resumed(sink, spec, agent, env)
    sweep = _Sweep(sink, spec, agent, progress) if spec.is_sweep else None
    recorder = None if sweep else _record.Recorder(sink, spec.num_seeds, progress)
    if sweep is not None:
        jobs = sweep.jobs(chunks)
    else:
        jobs = [_plain_job(sink, spec, agent, recorder, state, chunks)]
    checkpoints: list[Checkpoints] = []
    stop = stop_on_signal(sink, checkpoints)
    t_train = time.perf_counter()
    results = []
    for job in jobs:
        results.append(_train_job(sink, spec, env, job, state, stop, checkpoints))
    times = {"t_main": t_main, "t_start": t_main if t_start is None else t_start}
    times["t_train"] = t_train
    if sweep is not None:
        value = sweep.finish(results, state, times)
        return Outcome(value, results, jobs[0].agent, env, sink.info)
    assert recorder is not None
    value = _finish_run(
        sink, spec, agent, env, results[0], recorder, checkpoints[0], state, times
    )
    return Outcome(value, results, agent, env, sink.info)


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


def _resumed(sink: Sink, spec: RunSpec, agent: Any, env: Any) -> tuple[Any, Any]:
    """`(state, plan)` of the checkpoint a resumed run continues from (recorded
    in `info.resumed_from`), else `(None, None)`."""
    import runners

    if spec.resume is None:
        return None, None
    plan = runners.plan(agent, spec.num_envs, spec.total_steps, spec.eval_every)
    state, chunks, resumed_from = _resume.load(
        spec.resume, agent, env, sink.config, plan
    )
    sink.info["resumed_from"] = resumed_from
    return state, chunks


def _header(
    sink: Sink,
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
    return Header(
        agent=spec.agent,
        env=spec.env,
        env_params=spec.env_params,
        hp=spec.hp if hp is None else hp,
        seed=spec.seed,
        num_seeds=spec.num_seeds,
        num_runs=num_runs,
        num_envs=spec.num_envs,
        total_steps=planned,
        plan={"chunks": list(plan), "total_steps": planned},
        sweep=sweep,
        config=sink.config,
        run_id=sink.run_id,
    ).to_json()


def _checkpoint_root(sink: Sink, index: int = 0, programs: int = 1) -> Path | None:
    """Where a job's checkpoints go: its run folder's, else nowhere yet."""
    run_dir = sink.run_dir
    if run_dir is None:
        return None
    return RunFolder(run_dir).program_checkpoints(index, programs)


def _plain_job(
    sink: Sink, spec: RunSpec, agent: Any, recorder: Any, state: Any, chunks: Any
) -> Job:
    import runners

    plan = chunks or runners.plan(
        agent, spec.num_envs, spec.total_steps, spec.eval_every
    )
    header = _header(sink, spec, plan, spec.num_envs * agent.num_steps)
    verb = f"Resuming {spec.resume} at {state.env_steps[0]:,} steps:" if state else ""
    if state is not None and int(state.env_steps[0]) >= header["total_steps"]:
        verb = (
            f"Finishing {spec.resume}: it trained all its {header['total_steps']:,} "
            "steps, so only its final evaluation, checkpoint and artifacts:"
        )
    announce = (
        f"Compiling {spec.agent} on {spec.env}: {spec.num_seeds} seed(s) x "
        f"{spec.num_envs} envs, {header['total_steps']:,} steps each ... {verb}"
    ).rstrip(" :")
    root = _checkpoint_root(sink)
    return Job(agent, header, root, recorder, None, "", announce, plan)


def _train_job(
    sink: Sink,
    spec: RunSpec,
    env: Any,
    job: Job,
    state: Any,
    stop: Any,
    checkpoints: list[Checkpoints],
) -> Any:
    """`runners.run` for one job, with its checkpoints, signals and errors."""
    import runners

    written = Checkpoints(job.root, job.header, spec.keep_checkpoints, sink)
    checkpoints.append(written)
    if spec.progress and _distributed.is_main():
        print(job.announce, file=sys.stderr, flush=True)

    def lost(what: str) -> None:
        # From the watch's thread, while the main thread may be blocked on a
        # collective that will never return: say what the main thread would
        # have said, mark the record FAILED, and end the process (whatever
        # the saying and marking raise: the watch's thread would swallow it,
        # and the process would wait on).
        try:
            error = failed(
                sink, runners.PeerLostError.of(what), written.last(), job.where
            )
            print(f"{TrainingError.__module__}.TrainingError: {error}", file=sys.stderr)
            sink.close_failed(str(error))
        finally:
            _interrupt.exit_now(1)

    try:
        with stop, _distributed.watching(lost):
            result = runners.run(
                job.agent,
                env,
                **spec.run_kwargs(),
                callback=job.callback,
                state=state,
                chunks=job.plan,
                checkpoint=written if sink.recording else None,
                should_stop=lambda: stop.requested,
                sweep=job.floats,
            )
    except (runners.NonFiniteError, runners.PeerLostError) as e:
        raise failed(sink, e, written.last(), job.where) from None
    except WriteFailed as e:
        raise write_failed(sink, e, written.last(), job.where) from None
    except runners.MemoryLimitError as e:
        raise ConfigError(f"{job.where}{e}") from None
    finally:
        job.callback.close()
    sink.info["checkpoint_s"] = round(sum(c.seconds for c in checkpoints), 3)
    if result.stopped:
        _resume.interrupted(sink, stop.signum, written.newest())
    return result


def _finish_run(
    sink: Sink,
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
    sink.info["final_returns"] = finals
    sink.info["return_iqm"] = float(stats.iqm(finals))
    env_steps = result.reports[-1].env_steps
    trained = env_steps - (0 if state is None else int(state.env_steps[0]))
    now = time.perf_counter()
    sink.info.update(
        wall_s=round(now - times["t_main"], 3),
        process_s=round(now - times["t_start"], 3),
        compile_s=round(result.compile_s, 3),
        train_s=round(result.train_s, 3),
        steps_per_s=round(trained * spec.num_seeds / result.train_s, 1),
        env_steps=env_steps,
    )
    if sink.recording:
        newest = checkpoints.newest()
        assert newest is not None  # a recorded run ends with a checkpoint
        try:
            save_artifacts(
                sink, result, recorder, newest, agent=spec.agent, env=spec.env
            )
        except OSError as e:
            error = WriteFailed(f"could not write the run's artifacts ({reason(e)})")
            raise write_failed(sink, error, checkpoints.last()) from None
        problem = sink.record_error()
        if problem:
            raise write_failed(sink, WriteFailed(problem), checkpoints.last())
        if spec.video and _distributed.is_main():
            stem = f"{spec.agent}__{spec.env}"
            film(sink, agent, result.state, env, stem)
    print(
        f"{spec.agent} on {spec.env}: final greedy return {mean:.1f} ± {std:.1f} "
        f"over {spec.num_seeds} seed(s) x {result.final_returns.shape[1]} episodes; "
        f"{env_steps:,} steps in {time.perf_counter() - times['t_start']:.1f} s wall "
        f"(compile {result.compile_s:.1f} s, {sink.info['steps_per_s']:,.0f} "
        f"steps/s); {sink.where()}",
        flush=True,
    )
    return mean


class _Sweep:
    """A sweep's jobs (one per program: its members x seeds in one compiled
    run), its members' series and curves, and its member table at the end.

    Checkpoints go to `<run>/checkpoints/` (one program) or
    `<run>/checkpoints/program_<i>/`; each records the program's `hp` and
    `num_runs`, so `load_state` reads it like any run's."""

    def __init__(self, sink: Sink, spec: RunSpec, agent: Any, progress: bool):
        from experiments.sweeps import members as _members

        self.sink, self.spec = sink, spec
        self.members, self.programs = _members.of_config(sink.config, agent)
        print(
            _members.describe(self.members, self.programs), file=sys.stderr, flush=True
        )
        sink.info["sweep_programs"] = len(self.programs)
        sink.members(list(self.members))
        self.bar = _record.Recorder(None, 1, progress)
        self.curves: dict[int, list[tuple[int, float]]] = {}

    def jobs(self, chunks: Any) -> list[Job]:
        """One job per program; `chunks`: a resumed run's plan."""
        return [self._job(i, p, chunks) for i, p in enumerate(self.programs)]

    def _job(self, index: int, program: Any, chunks: Any) -> Job:
        import runners
        import zoo

        spec, sink = self.spec, self.sink
        hp = {**spec.hp, **program.static}
        agent = zoo.make(spec.agent, **hp)
        plan = chunks or runners.plan(
            agent, spec.num_envs, spec.total_steps, spec.eval_every
        )
        sweep = {"program": index, "floats": program.floats, "members": program.members}
        header = _header(
            sink,
            spec,
            plan,
            spec.num_envs * agent.num_steps,
            hp=hp,
            num_runs=len(program.members) * spec.num_seeds,
            sweep=sweep,
        )
        root = _checkpoint_root(sink, index, len(self.programs))
        floats = ", ".join(program.floats) or "nothing"
        static = ", ".join(f"{k}={v}" for k, v in program.static.items())
        announce = (
            f"Compiling {spec.agent} on {spec.env}, program {index + 1}/"
            f"{len(self.programs)}{f' ({static})' if static else ''}: "
            f"{len(program.members)} member(s) x {spec.num_seeds} seed(s) varying "
            f"{floats}, {header['total_steps']:,} steps each ..."
        )
        callback = _record.SweepRecorder(
            sink, self.bar, program.members, spec.num_seeds, self.curves
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
        self.sink.info.update(
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
        if self.sink.recording:
            self._artifacts(table, lines)
        print(lines, flush=True)
        print(
            f"best: member {best['member']}, mean {best['return_mean']:.1f}, worst "
            f"seed {best['return_worst']:.1f} over {self.spec.num_seeds} seed(s); "
            f"train it alone with:\n  {command}\n{len(self.members)} members in "
            f"{time.perf_counter() - times['t_start']:.1f} s wall; "
            f"{self.sink.where()}",
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
                self.sink.artifact(out / name)


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
    sink: Sink, result: Any, recorder: Any, checkpoint: Path, **header: Any
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
        sink.artifact(checkpoint / runners.STATE_FILE, FINAL_STATE)
        sink.artifact(checkpoint / runners.META_FILE, FINAL_META)
        for name in ("eval_returns.json", "learning_curve.png"):
            sink.artifact(out / name)


def film(sink: Sink, agent: Any, state: Any, env: Any, stem: str) -> None:
    """`video=True`: one greedy episode of seed 0's final policy as a GIF (and
    MP4 with ffmpeg) artifact. Runs after training, so it costs nothing until
    then, and nothing to runs without it."""
    import jax.random as jr

    import runners
    from experiments.record import video as _video

    agent_state = runners.seed_state(state, 0).agent_state
    episodes = _video.record_episodes(
        agent, agent_state, env, key=jr.PRNGKey(0), num_episodes=1, max_steps=10_000
    )
    sink.info["video_return"] = float(episodes.returns[0])
    with tempfile.TemporaryDirectory() as tmp:
        stem = stem.replace("/", "_")
        for path in _video.write_video(episodes.frames[0], Path(tmp) / stem):
            sink.artifact(path)
