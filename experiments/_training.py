"""Training a resolved config: one run of seeds, or a sweep of programs, with
metrics, checkpoints, signals and artifacts (`python -m experiments.run`'s
`main`)."""

import shlex
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from experiments import (
    _config,
    _distributed,
    _experiment,
    _interrupt,
    _jax_setup,
    _record,
    _resume,
    _stats,
)
from experiments._errors import ConfigError, TrainingError


def train(
    _run: Any,
    *,
    agent: str,
    env: str,
    env_params: dict[str, Any],
    seed: int,
    num_seeds: int,
    total_steps: int,
    num_envs: int,
    eval_every: int | None,
    eval_at_start: bool,
    eval_episodes: int,
    hp: dict[str, Any],
    checkpoint_every: int | None,
    keep_checkpoints: int,
    resume: str | None,
    progress: bool,
    compilation_cache: bool,
    sweep: dict[str, Any],
    sweep_samples: int,
    devices: int | None,
    bitwise: bool,
    video: bool,
    distributed: dict[str, Any],
    sharing: str | None,
    agent_id: bool,
    per_agent: dict[str, Any],
    t_start: float,
) -> float:
    """Train, logging metrics and writing checkpoints after compiled chunks; save
    artifacts.

    **Returns:** the final greedy return, averaged over episodes and seeds (Sacred
    stores it as the run's result); for a sweep, the best member's.

    **Raises:** `Interrupted` (a `KeyboardInterrupt`: Sacred marks the run
    INTERRUPTED) after a checkpoint when SIGINT or SIGTERM stopped training;
    `TrainingError` (FAILED) on a non-finite loss or parameter, or when another
    process of a multi-process run is lost.
    """
    t_main = time.perf_counter()
    if compilation_cache:
        _jax_setup.enable_compilation_cache()
    import jax
    import jax.random as jr

    import runners

    if _run.observers:
        # The learning-curve PNG needs matplotlib (~1 s to import): load it while
        # XLA compiles, which leaves the interpreter idle.
        threading.Thread(target=_record.preload_matplotlib, daemon=True).start()
    env_module = _config.make_env(env, env_params)
    agent_module = _config.make_agent(
        agent, hp, env_module, sharing, agent_id, per_agent
    )
    available = len(jax.devices())
    if devices is not None and jax.process_count() > 1:
        raise ConfigError(
            f"devices: a run of {jax.process_count()} processes trains on all their "
            f"{available} devices; leave devices unset"
        )
    if devices is not None and devices > available:
        raise ConfigError(
            f"devices: {devices} asked for, but this process sees {available} "
            f"{jax.devices()[0].platform} device(s)"
        )
    # Other processes of a multi-process run train their share quietly.
    progress = progress and _distributed.is_main()
    if sweep or sweep_samples:
        return _train_sweep(_run, agent_module, env_module, t_main, t_start)
    run_dir = _experiment.file_dir(_run)
    ckpt_root = None if run_dir is None else _resume.checkpoint_root(run_dir)
    chunks = runners.plan(agent_module, num_envs, total_steps, eval_every)
    state = None
    if resume is not None:
        state, chunks, resumed_meta = _resume.load(
            resume, agent_module, env_module, _run.config, chunks
        )
        _run.info["resumed_from"] = resumed_meta
    num_chunks, chunk_iters = chunks
    per_iter = num_envs * agent_module.num_steps
    planned = num_chunks * chunk_iters * per_iter
    config = dict(_run.config)
    header = {
        "agent": agent,
        "env": env,
        "env_params": env_params,
        "hp": hp,
        "seed": seed,
        "num_seeds": num_seeds,
        "num_envs": num_envs,
        "total_steps": planned,
        "plan": {"chunks": [num_chunks, chunk_iters], "total_steps": planned},
        "config": config,
        "run_id": _run._id,
    }
    written: list[Path] = []
    checkpoint_s = [0.0]

    def checkpoint(carry: Any, report: Any) -> None:
        t = time.perf_counter()
        root = ckpt_root if ckpt_root is not None else Path(tempfile.mkdtemp())
        path = root / str(report.env_steps)
        runners.save_checkpoint(path, carry, {**header, "env_steps": report.env_steps})
        written.append(path)
        runners.prune_checkpoints(root, keep_checkpoints)
        checkpoint_s[0] += time.perf_counter() - t

    def first_signal(signum: int) -> None:
        print(
            f"\n{signal.Signals(signum).name}: stopping after this chunk with a "
            "checkpoint; send it again to exit at once",
            file=sys.stderr,
            flush=True,
        )

    def second_signal() -> None:
        last = runners.latest_checkpoint(ckpt_root) if ckpt_root else None
        print(
            f"\nExiting now; the last complete checkpoint is {last or 'none'}",
            file=sys.stderr,
            flush=True,
        )
        _record.close_interrupted(_run)

    recorder = _record.Recorder(_run, num_seeds, progress)
    if progress:
        verb = f"Resuming {resume} at {state.env_steps[0]:,} steps:" if state else ""
        print(
            f"Compiling {agent} on {env}: {num_seeds} seed(s) x {num_envs} envs, "
            f"{planned:,} steps each ... {verb}".rstrip(" :"),
            file=sys.stderr,
            flush=True,
        )
    stop = _interrupt.StopOnSignal(first_signal, second_signal)
    try:
        with stop:
            result = runners.run(
                agent_module,
                env_module,
                key=jr.PRNGKey(seed),
                total_steps=total_steps,
                num_envs=num_envs,
                num_seeds=num_seeds,
                eval_every=eval_every,
                eval_episodes=eval_episodes,
                eval_at_start=eval_at_start,
                callback=recorder,
                state=state,
                chunks=chunks,
                checkpoint=checkpoint if _run.observers else None,
                checkpoint_every=checkpoint_every,
                should_stop=lambda: stop.requested,
                devices=devices,
                bitwise=bitwise,
            )
    except runners.NonFiniteError as e:
        last = runners.latest_checkpoint(ckpt_root) if ckpt_root else None
        kept = f"the last good checkpoint is {last}" if last else "no checkpoint yet"
        raise TrainingError(f"{e}; {kept}") from None
    except runners.PeerLostError as e:
        raise TrainingError(_resume.peer_lost(_run, e, ckpt_root)) from None
    finally:
        recorder.close()
    _run.info["checkpoint_s"] = round(checkpoint_s[0], 3)
    if result.stopped:
        _resume.interrupted(_run, stop.signum, written[-1] if written else None)
    per_seed = result.final_returns.mean(axis=1)
    mean, std = float(per_seed.mean()), float(per_seed.std())
    # Each seed's final greedy return and their IQM, as Python floats (Sacred
    # stores arrays as unreadable blobs): a sweep's search maximises the IQM.
    finals = [float(r) for r in per_seed.tolist()]
    _run.info["final_returns"] = finals
    _run.info["return_iqm"] = float(_stats.iqm(finals))
    env_steps = result.reports[-1].env_steps
    trained = env_steps - (0 if state is None else int(state.env_steps[0]))
    _run.info.update(
        wall_s=round(time.perf_counter() - t_main, 3),
        process_s=round(time.perf_counter() - t_start, 3),
        compile_s=round(result.compile_s, 3),
        train_s=round(result.train_s, 3),
        steps_per_s=round(trained * num_seeds / result.train_s, 1),
        env_steps=env_steps,
    )
    if _run.observers:
        save_artifacts(_run, result, recorder, written[-1], agent=agent, env=env)
        if video and _distributed.is_main():
            film(_run, agent_module, result.state, env_module, f"{agent}__{env}")
    print(
        f"{agent} on {env}: final greedy return {mean:.1f} ± {std:.1f} over "
        f"{num_seeds} seed(s) x {result.final_returns.shape[1]} episodes; "
        f"{env_steps:,} steps in {time.perf_counter() - t_start:.1f} s wall "
        f"(compile {result.compile_s:.1f} s, {_run.info['steps_per_s']:,.0f} "
        f"steps/s); {_experiment.where(_run)}",
        flush=True,
    )
    return mean


def _train_sweep(
    run: Any, agent_module: Any, env_module: Any, t_main: float, t_start: float
) -> float:
    """`main` for a sweep: each program trains its members x seeds in one
    compiled run, one program after another; then the member table.

    Checkpoints go to `<run>/checkpoints/` (one program) or
    `<run>/checkpoints/program_<i>/`; each records the program's `hp` and
    `num_runs`, so `load_state` reads it like any run's."""
    import jax.random as jr
    import numpy as np

    import runners
    import zoo

    config = dict(run.config)
    config["progress"] = config["progress"] and _distributed.is_main()
    agent, env, num_seeds = config["agent"], config["env"], config["num_seeds"]
    from experiments import _sweep

    sweep_members, programs = _sweep.of_config(config, agent_module)

    print(_sweep.describe(sweep_members, programs), file=sys.stderr, flush=True)
    run.info["sweep_programs"] = len(programs)
    run_dir = _experiment.file_dir(run)
    ckpt_root = None if run_dir is None else _resume.checkpoint_root(run_dir)
    state, chunks = None, None
    if config["resume"] is not None:
        state, chunks, resumed_meta = _resume.load(
            config["resume"],
            agent_module,
            env_module,
            config,
            runners.plan(
                agent_module,
                config["num_envs"],
                config["total_steps"],
                config["eval_every"],
            ),
        )
        run.info["resumed_from"] = resumed_meta
    recorder = _record.Recorder(None, 1, config["progress"])
    curves: dict[int, list[tuple[int, float]]] = {}
    finals: dict[int, np.ndarray] = {}  # member -> per-seed final mean return
    written: list[Path] = []
    results = []
    stop = _interrupt.StopOnSignal(
        lambda signum: print(
            f"\n{signal.Signals(signum).name}: stopping after this chunk with a "
            "checkpoint; send it again to exit at once",
            file=sys.stderr,
            flush=True,
        ),
        lambda: (
            print(
                "\nExiting now; the last complete checkpoint is "
                f"{written[-1] if written else 'none'}",
                file=sys.stderr,
                flush=True,
            ),
            _record.close_interrupted(run),
        ),
    )
    t_train = time.perf_counter()
    for index, program in enumerate(programs):
        program_hp = {**config["hp"], **program.static}
        program_agent = zoo.make(agent, **program_hp)
        plan = chunks or runners.plan(
            program_agent,
            config["num_envs"],
            config["total_steps"],
            config["eval_every"],
        )
        num_runs = len(program.members) * num_seeds
        planned = plan[0] * plan[1] * config["num_envs"] * program_agent.num_steps
        header = {
            "agent": agent,
            "env": env,
            "env_params": config["env_params"],
            "hp": program_hp,
            "seed": config["seed"],
            "num_seeds": num_seeds,
            "num_runs": num_runs,
            "num_envs": config["num_envs"],
            "total_steps": planned,
            "plan": {"chunks": list(plan), "total_steps": planned},
            "sweep": {
                "program": index,
                "floats": program.floats,
                "members": program.members,
            },
            "config": config,
            "run_id": run._id,
        }
        root = None
        if ckpt_root is not None:
            root = ckpt_root if len(programs) == 1 else ckpt_root / f"program_{index}"

        def checkpoint(carry: Any, report: Any, root=root, header=header) -> None:
            base = root if root is not None else Path(tempfile.mkdtemp())
            path = base / str(report.env_steps)
            runners.save_checkpoint(
                path, carry, {**header, "env_steps": report.env_steps}
            )
            written.append(path)
            runners.prune_checkpoints(base, config["keep_checkpoints"])

        if config["progress"]:
            floats = ", ".join(program.floats) or "nothing"
            static = ", ".join(f"{k}={v}" for k, v in program.static.items())
            print(
                f"Compiling {agent} on {env}, program {index + 1}/{len(programs)}"
                f"{f' ({static})' if static else ''}: "
                f"{len(program.members)} member(s) x {num_seeds} seed(s) varying "
                f"{floats}, {planned:,} steps each ...",
                file=sys.stderr,
                flush=True,
            )
        callback = _record.SweepRecorder(
            run, recorder, program.members, num_seeds, curves
        )
        try:
            with stop:
                result = runners.run(
                    program_agent,
                    env_module,
                    key=jr.PRNGKey(config["seed"]),
                    total_steps=config["total_steps"],
                    num_envs=config["num_envs"],
                    num_seeds=num_seeds,
                    eval_every=config["eval_every"],
                    eval_episodes=config["eval_episodes"],
                    eval_at_start=config["eval_at_start"],
                    callback=callback,
                    state=state,
                    chunks=plan,
                    checkpoint=checkpoint if run.observers else None,
                    checkpoint_every=config["checkpoint_every"],
                    should_stop=lambda: stop.requested,
                    sweep=program.floats or None,
                    devices=config["devices"],
                    bitwise=config["bitwise"],
                )
        except runners.NonFiniteError as e:
            raise TrainingError(f"program {index + 1} of the sweep: {e}") from None
        except runners.PeerLostError as e:
            raise TrainingError(_resume.peer_lost(run, e, root)) from None
        finally:
            recorder.close()
        results.append(result)
        if result.stopped:
            _resume.interrupted(run, stop.signum, written[-1] if written else None)
        per_run = result.final_returns.mean(axis=1).reshape(-1, num_seeds)
        for j, member in enumerate(program.members):
            finals[member] = per_run[j]
    table = []
    for i, member in enumerate(sweep_members):
        returns = finals[i]
        table.append(
            {
                "member": i,
                **{
                    k: (float(v) if isinstance(v, float) else v)
                    for k, v in member.items()
                },
                "return_mean": round(float(returns.mean()), 3),
                "return_worst": round(float(returns.min()), 3),
                "return_std": round(float(returns.std()), 3),
            }
        )
    best = max(table, key=lambda row: row["return_mean"])
    best_hp = {**config["hp"], **sweep_members[best["member"]]}
    command = shlex.join(
        ["python", "-m", "experiments.run", "with", f"agent={agent}", f"env={env}"]
        + [f"env_params.{k}={v!r}" for k, v in config["env_params"].items()]
        + [
            f"hp.{k}={v!r}" if isinstance(v, str) else f"hp.{k}={v}"
            for k, v in sweep_members[best["member"]].items()
        ]
    )
    trained = sum(
        (r.reports[-1].env_steps - (0 if state is None else int(state.env_steps[0])))
        * len(p.members)
        * num_seeds
        for r, p in zip(results, programs, strict=True)
    )
    run.info.update(
        members=table,
        best_member=best["member"],
        best_hp=best_hp,
        best_command=command,
        wall_s=round(time.perf_counter() - t_main, 3),
        process_s=round(time.perf_counter() - t_start, 3),
        compile_s=round(sum(r.compile_s for r in results), 3),
        train_s=round(sum(r.train_s for r in results), 3),
        steps_per_s=round(trained / max(time.perf_counter() - t_train, 1e-9), 1),
    )
    lines = _member_table(table)
    if run.observers:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            (out / "members.md").write_text(lines + "\n")
            _record.write_json(out / "members.json", table)
            steps = sorted({s for c in curves.values() for s, _ in c})
            means = [
                [
                    dict(curves[m]).get(s, float("nan"))
                    for m in range(len(sweep_members))
                ]
                for s in steps
            ]
            _record.plot_curve(
                out / "learning_curve.png",
                steps,
                means,
                f"{agent} on {env} (sweep)",
                series="member",
            )
            for name in ("members.md", "members.json", "learning_curve.png"):
                _experiment.add_artifact(run, out / name)
    print(lines, flush=True)
    print(
        f"best: member {best['member']}, mean {best['return_mean']:.1f}, worst seed "
        f"{best['return_worst']:.1f} over {num_seeds} seed(s); train it alone "
        f"with:\n  {command}\n{len(sweep_members)} members in "
        f"{time.perf_counter() - t_start:.1f} s wall; {_experiment.where(run)}",
        flush=True,
    )
    return float(best["return_mean"])


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
