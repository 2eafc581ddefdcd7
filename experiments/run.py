# Sacred's config scope defines its entries as local variables, unused to Python.
# ruff: noqa: F841
"""Train an agent of the zoo with Sacred: tuned config, observers, metrics, artifacts.

    python -m experiments.run with agent=dqn                    # CartPole-v1, tuned
    python -m experiments.run with agent=ppo env=Pendulum-v1 num_seeds=8
    python -m experiments.run with agent=dqn hp.learning_rate=1e-3
    python -m experiments.run print_config with agent=ppo env=Acrobot-v1
    python -m experiments.run -m localhost:27017:equizoo with agent=dqn   # + MongoDB
    python -m experiments.run with resume=runs/1      # continue from its checkpoint

Records go to `runs/` (a `FileStorageObserver`) unless `-F DIR` picks another
folder; `-m` adds MongoDB (for Omniboard) and keeps the file record; `-u` records
nothing. Checkpoints go to `runs/<id>/checkpoints/<env_steps>/`; SIGINT or SIGTERM
stops at the next chunk boundary with a checkpoint. See docs/experiments.md.
"""

import time

_T_START = time.perf_counter()

import ast  # noqa: E402
import logging  # noqa: E402
import shlex  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from experiments import _jax_setup  # noqa: E402

if __name__ == "__main__":
    # Before anything imports JAX: XLA reads its flags when the backend starts.
    # Only as a program: importing this module must not change the importer's JAX.
    _jax_setup.set_xla_flags()

from experiments import (  # noqa: E402
    _config,
    _distributed,
    _interrupt,
    _mongo,
    _record,
    configs,
)
from experiments._config import ConfigError as ConfigError  # noqa: E402
from experiments._distributed import (  # noqa: E402
    DistributedError as DistributedError,
)
from experiments._interrupt import Interrupted as Interrupted  # noqa: E402
from experiments._load import load_state as load_state  # noqa: E402
from experiments._sacred import (  # noqa: E402
    Experiment,
    FileStorageObserver,
    MongoObserver,
    SacredError,
    apply_backspaces_and_linefeeds,
    get_config_updates,
)

ROOT = Path(__file__).resolve().parents[1]
RUNS_DIR = Path("runs")  # relative to the working directory, like `-F runs`


class TrainingError(SacredError):
    """Training failed (e.g. a non-finite loss); Sacred prints one line and marks
    the run FAILED."""

    def __init__(self, message: str):
        super().__init__(message, print_traceback=False)


TrainingError.__module__ = "experiments.run"


class _CurrentStderr(logging.StreamHandler):
    """A handler writing to whatever `sys.stderr` is now, so that Sacred's
    captured output (which swaps `sys.stderr`) includes our log lines."""

    @property
    def stream(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _not_a_sweep_entry(record: logging.LogRecord) -> bool:
    # `sweep.<name>=...` and `env_params.<name>=...` add entries to dicts that
    # start empty by design; Sacred would warn about each one.
    return not record.getMessage().startswith(
        ('Added new config entry: "sweep.', 'Added new config entry: "env_params.')
    )


def _logger() -> logging.Logger:
    logger = logging.getLogger("equizoo")
    if not logger.handlers:
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(levelname)s - %(message)s"))
        handler.addFilter(_not_a_sweep_entry)
        logger.addHandler(handler)
        logger.propagate = False
    # Sacred's INFO lines (run ID, "Completed after") would follow our summary
    # line; `-l INFO` brings them back.
    logger.setLevel(logging.WARNING)
    return logger


ex = Experiment("equizoo", base_dir=str(ROOT))
ex.logger = _logger()  # pyright: ignore[reportAttributeAccessIssue]
# The progress bar redraws itself with carriage returns; keep only the final
# state of each line in the recorded output.
ex.captured_out_filter = apply_backspaces_and_linefeeds  # pyright: ignore[reportAttributeAccessIssue]


@ex.config
def config():
    # continue the run recorded in this folder (e.g. "runs/1") from its newest
    # checkpoint, with its config; only total_steps may grow
    resume = None
    # agent name, one of zoo.names()
    agent = _config.resumed(resume, "agent", "dqn")
    # env name (envs.names()); default: experiments.configs.DEFAULT_ENV[agent]
    env = _config.resumed(resume, "env", configs.default_env(agent))
    # env parameters, envs.make(env, **env_params): `env_params.<name>=value`,
    # e.g. env_params.max_steps_in_episode=1000
    env_params = _config.resumed(resume, "env_params", {})
    # base PRNG seed: seed i of num_seeds trains with split(PRNGKey(seed))[i]
    seed = _config.resumed(resume, "seed", 0)
    # independent seeds, trained together (vmapped)
    num_seeds = _config.resumed(resume, "num_seeds", 1)
    # env steps per seed (tuned block, else 100000)
    total_steps = _config.resumed(
        resume, "total_steps", _config.run_default(agent, env, "total_steps")
    )
    # parallel envs per seed (tuned block, else 8)
    num_envs = _config.resumed(
        resume, "num_envs", _config.run_default(agent, env, "num_envs")
    )
    # env steps between greedy evaluations (default ~10 per run); None: at the end
    eval_every = _config.resumed(
        resume, "eval_every", _config.eval_every(agent, env, total_steps)
    )
    # also evaluate the untrained agent, logged at env step 0
    eval_at_start = _config.resumed(resume, "eval_at_start", False)
    # greedy episodes per seed in each evaluation (tuned block, else 32)
    eval_episodes = _config.resumed(
        resume, "eval_episodes", _config.run_default(agent, env, "eval_episodes")
    )
    # zoo.make(agent, **hp): agent defaults < tuned block < `with hp.<name>=...`
    hp = _config.resumed(resume, "hp", _config.resolved_hp(agent, env))
    # hyperparameter sweep: `sweep.<name>=[v1,v2]` (a grid: every combination) or
    # `sweep.<name>=loguniform(low,high)` / `uniform(low,high)` (random search,
    # sweep_samples draws); float hyperparameters vary inside one program
    sweep = _config.resumed(resume, "sweep", {})
    # members drawn for the distributions of `sweep` (random search)
    sweep_samples = _config.resumed(resume, "sweep_samples", 0)
    # devices the runs (members x seeds) are sharded over: None (all) or a number
    devices = None
    # one run across processes (jax.distributed), each started with the same
    # command and its own process_id; empty: from srun/mpirun's environment
    distributed = {"coordinator": None, "num_processes": None, "process_id": None}
    # the same numbers on any number of devices (CPU: trains ~1.1-1.5x slower)
    bitwise = _config.resumed(resume, "bitwise", False)
    # env steps per seed between checkpoints (at chunk ends); None: only at the end
    checkpoint_every = _config.resumed(
        resume, "checkpoint_every", _config.CHECKPOINT_EVERY
    )
    # checkpoints kept in <run_dir>/checkpoints/, newest first
    keep_checkpoints = _config.resumed(
        resume, "keep_checkpoints", _config.KEEP_CHECKPOINTS
    )
    # show a progress bar (stderr)
    progress = True
    # JAX persistent compilation cache (~/.cache/equizoo/jax; EQUIZOO_CACHE_DIR)
    compilation_cache = _jax_setup.cache_enabled_by_default()


@ex.config_hook
def _validate(config, command_name, logger):
    # Runs for every command (print_config too), before observers start and
    # before anything compiles.
    join = _distributed.plan(config["distributed"])
    if join is not None and command_name == "main":
        # From Python (`ex.run(config_updates=...)`); a command line joined in
        # the option hook already.
        _distributed.join(join)
        if not _distributed.is_main():
            ex.observers[:] = [o for o in ex.observers if o not in _DEFAULT_OBSERVERS]
    for warning in _config.validate(config):
        logger.warning(warning)
    return {}


@ex.option_hook
def _observers(options):
    # Drop the default observers a previous run in this process added.
    ex.observers[:] = [o for o in ex.observers if o not in _DEFAULT_OBSERVERS]
    _DEFAULT_OBSERVERS.clear()
    # A multi-process run joins before anything starts JAX (the config hook
    # builds agents), and only its process 0 records.
    updates, _ = get_config_updates(options.get("UPDATE") or [])
    join = _distributed.plan(updates.get("distributed"))
    if join is not None and options.get("COMMAND") in (None, "main"):
        _distributed.join(join)
        if not _distributed.is_main():
            options["--unobserved"] = True
            options["--mongo_db"] = None
            options["--file_storage"] = None
    mongo = options.get("--mongo_db")
    if mongo and not options.get("--unobserved"):
        # Ours instead of Sacred's: a short timeout and a ping before anything.
        observer = _mongo.mongo_observer(mongo)
        options["--mongo_db"] = None
        _DEFAULT_OBSERVERS.append(observer)
        ex.observers.append(observer)
    # "sys" tees Python's streams; Sacred's default "fd" starts a `tee`
    # subprocess and redirects file descriptors, which buys nothing here.
    if not options.get("--capture"):
        options["--capture"] = "sys"
    if not options.get("--file_storage") and not options.get("--unobserved"):
        observer = FileStorageObserver(RUNS_DIR)
        _DEFAULT_OBSERVERS.append(observer)
        ex.observers.append(observer)


_DEFAULT_OBSERVERS: list[Any] = []


@ex.main
def main(
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
    distributed: dict[str, Any],
    _run: Any,
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

    import envs
    import runners
    import zoo

    if _run.observers:
        # The learning-curve PNG needs matplotlib (~1 s to import): load it while
        # XLA compiles, which leaves the interpreter idle.
        threading.Thread(target=_record.preload_matplotlib, daemon=True).start()
    agent_module = zoo.make(agent, **hp)
    env_module = envs.make(env, **env_params)
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
        return _train_sweep(_run, agent_module, env_module, t_main)
    run_dir = _file_dir(_run)
    ckpt_root = None if run_dir is None else _config.checkpoint_root(run_dir)
    chunks = runners.plan(agent_module, num_envs, total_steps, eval_every)
    state = None
    if resume is not None:
        state, chunks, resumed_meta = _load_resume(
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
        raise TrainingError(_peer_lost(_run, e, ckpt_root)) from None
    finally:
        recorder.close()
    _run.info["checkpoint_s"] = round(checkpoint_s[0], 3)
    if result.stopped:
        _interrupted(_run, stop.signum, written[-1] if written else None)
    per_seed = result.final_returns.mean(axis=1)
    mean, std = float(per_seed.mean()), float(per_seed.std())
    env_steps = result.reports[-1].env_steps
    trained = env_steps - (0 if state is None else int(state.env_steps[0]))
    _run.info.update(
        wall_s=round(time.perf_counter() - t_main, 3),
        process_s=round(time.perf_counter() - _T_START, 3),
        compile_s=round(result.compile_s, 3),
        train_s=round(result.train_s, 3),
        steps_per_s=round(trained * num_seeds / result.train_s, 1),
        env_steps=env_steps,
    )
    if _run.observers:
        _save_artifacts(_run, result, recorder, written[-1], agent=agent, env=env)
    print(
        f"{agent} on {env}: final greedy return {mean:.1f} ± {std:.1f} over "
        f"{num_seeds} seed(s) x {result.final_returns.shape[1]} episodes; "
        f"{env_steps:,} steps in {time.perf_counter() - _T_START:.1f} s wall "
        f"(compile {result.compile_s:.1f} s, {_run.info['steps_per_s']:,.0f} "
        f"steps/s); {_where(_run)}",
        flush=True,
    )
    return mean


def _train_sweep(run: Any, agent_module: Any, env_module: Any, t_main: float) -> float:
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
    sweep_members, programs = _config.sweep_programs(config, agent_module)
    from experiments import _sweep

    print(_sweep.describe(sweep_members, programs), file=sys.stderr, flush=True)
    run.info["sweep_programs"] = len(programs)
    run_dir = _file_dir(run)
    ckpt_root = None if run_dir is None else _config.checkpoint_root(run_dir)
    state, chunks = None, None
    if config["resume"] is not None:
        state, chunks, resumed_meta = _load_resume(
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
            raise TrainingError(_peer_lost(run, e, root)) from None
        finally:
            recorder.close()
        results.append(result)
        if result.stopped:
            _interrupted(run, stop.signum, written[-1] if written else None)
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
        process_s=round(time.perf_counter() - _T_START, 3),
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
                run.add_artifact(str(out / name), name)
    print(lines, flush=True)
    print(
        f"best: member {best['member']}, mean {best['return_mean']:.1f}, worst seed "
        f"{best['return_worst']:.1f} over {num_seeds} seed(s); train it alone "
        f"with:\n  {command}\n{len(sweep_members)} members in "
        f"{time.perf_counter() - _T_START:.1f} s wall; {_where(run)}",
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


def _file_dir(run: Any) -> Path | None:
    """The run's folder under a `FileStorageObserver`, if it has one."""
    for observer in run.observers:
        if isinstance(observer, FileStorageObserver):
            return Path(observer.dir or observer.basedir)
    return None


def _load_resume(
    resume: str,
    agent: Any,
    env: Any,
    config: dict[str, Any],
    chunks: tuple[int, int],
) -> tuple[Any, tuple[int, int], dict[str, Any]]:
    """The carry of the newest checkpoint of the run folder `resume`, the plan
    that continues it to `config["total_steps"]`, and what `info.resumed_from`
    records."""
    import math

    import runners

    latest = _config.resume_checkpoint(resume)
    like = _template(agent, env, config)
    try:
        state, meta = runners.load_checkpoint(
            latest, like, expect={"agent": config["agent"], "env": config["env"]}
        )
    except runners.CheckpointError as e:
        raise ConfigError(f"resume: {e}") from None
    num_chunks, chunk_iters = meta["plan"]["chunks"]
    # The original's chunks, so that evaluations and metrics fall where they
    # did; more of them if total_steps grew.
    iterations = runners.num_iterations(
        agent, config["num_envs"], config["total_steps"]
    )
    num_chunks = max(num_chunks, math.ceil(iterations / chunk_iters))
    info = {
        "run_dir": str(resume),
        "checkpoint": str(latest),
        "env_steps": int(meta["env_steps"]),
        "run_id": meta.get("run_id"),
    }
    return state, (num_chunks, chunk_iters), info


def _template(agent: Any, env: Any, config: dict[str, Any]) -> Any:
    """Shapes and dtypes of the training carry the run `config` records (no
    computation)."""
    import runners

    return runners.state_template(
        agent,
        env,
        num_envs=config["num_envs"],
        total_steps=config["total_steps"],
        num_seeds=config.get("num_runs") or _num_runs(config, agent),
    )


def _num_runs(config: dict[str, Any], agent: Any) -> int:
    """Runs of a (one-program) sweep's state: members x seeds; else seeds."""
    if not (config.get("sweep") or config.get("sweep_samples")):
        return config["num_seeds"]
    members, _ = _config.sweep_programs(config, agent)
    return len(members) * config["num_seeds"]


def resume_command(run: Any) -> str:
    """The shell command that continues `run` from its newest checkpoint."""
    run_dir = _file_dir(run)
    assert run_dir is not None
    parts = ["python", "-m", "experiments.run"]
    basedir = run_dir.parent
    if basedir != RUNS_DIR:
        parts += ["-F", str(basedir)]
    for observer in run.observers:
        spec = getattr(observer, "equizoo_spec", None)
        if isinstance(observer, MongoObserver) and spec:
            parts += ["-m", spec]  # the resumed run records there too
    value = str(run_dir)
    try:
        ast.literal_eval(value)
        value = repr(value)  # Sacred would read it as a Python literal
    except (ValueError, SyntaxError):
        pass
    parts += ["with", f"resume={value}"]
    return shlex.join(parts)


def _peer_lost(run: Any, error: Exception, root: Path | None) -> str:
    """What a process says when another of its run is lost."""
    import runners

    if not _distributed.is_main():
        return (
            f"{error}; resume from the last checkpoint in process 0's run folder "
            "(`with resume=<run folder>` on every process)"
        )
    last = runners.latest_checkpoint(root) if root is not None else None
    if last is None:
        return f"{error}; no checkpoint yet, so start the run again"
    return (
        f"{error}; the last checkpoint is {last}. Resume with, on every process "
        f"(its distributed settings as before):\n  {resume_command(run)}"
    )


def _interrupted(run: Any, signum: int | None, checkpoint: Path | None) -> None:
    """Raise `Interrupted` for a run stopped by signal `signum` (`None`: one sent
    to another process of a multi-process run), naming its checkpoint."""
    name = "another process's signal" if signum is None else signal.Signals(signum).name
    signum = signal.SIGINT if signum is None else signum
    if not _distributed.is_main():
        message = f"{name}: training stopped; process 0 wrote the checkpoint"
    elif checkpoint is None:
        message = f"{name}: training stopped; not recorded, so it cannot be resumed"
    else:
        message = (
            f"{name}: training stopped at {int(checkpoint.name):,} env steps, "
            f"checkpoint in {checkpoint}. Resume with:\n  {resume_command(run)}"
        )
    print(message, file=sys.stderr, flush=True)
    raise Interrupted(message, signum)


def _save_artifacts(
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
        run.add_artifact(str(checkpoint / runners.STATE_FILE), "final_state.eqx")
        run.add_artifact(str(checkpoint / runners.META_FILE), "final_state.json")
        for name in ("eval_returns.json", "learning_curve.png"):
            run.add_artifact(str(out / name), name)


def _where(run: Any) -> str:
    if not _distributed.is_main():
        return "recorded by process 0"
    places = []
    for observer in run.observers:
        if isinstance(observer, FileStorageObserver):
            places.append(str(observer.dir))
        elif isinstance(observer, MongoObserver):
            places.append(f"MongoDB {observer.runs.full_name} _id={run._id}")
        else:
            places.append(type(observer).__name__)
    return "recorded in " + " and ".join(places) if places else "not recorded"


if __name__ == "__main__":
    try:
        ex.run_commandline()
    except Interrupted as e:
        _interrupt.exit_now(128 + e.signum)
    except SystemExit as e:
        if _distributed.joined() is not None and e.code:
            # A failed process of a multi-process run: JAX's exit would wait
            # for the others at a shutdown barrier, then abort.
            _interrupt.exit_now(e.code if isinstance(e.code, int) else 1)
        raise
    if _interrupt.signalled():
        # A signal came during the last chunk: the run completed, but a second
        # signal must still exit at once, so skip interpreter shutdown.
        _interrupt.exit_now(0)
