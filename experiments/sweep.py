"""Sweeps of separate runs, launched through submitit, searched with Optuna.

    python -m experiments.sweep --workers 2 with agent=ppo num_seeds=4 \\
        'grid.hp.learning_rate=[1e-3,3e-3]' 'grid.hp.hidden_sizes=[[64,64],[32,32]]'
    python -m experiments.sweep --trials 32 --workers 4 with agent=ppo \\
        'search.hp.learning_rate=loguniform(1e-4,1e-2)' \\
        'search.hp.num_epochs=intuniform(2,8)'

Every trial is its own Sacred run of `experiments.run`, recorded under
`<folder>/trials/<slot>/` (plus MongoDB with `-m`). `grid.<key>=[...]` runs every
combination; `search.<key>=loguniform(a,b) | uniform(a,b) | intuniform(a,b) |
[choices]` asks Optuna (TPE, a journal file in the folder: no database server)
for `--trials` trials. `--workers` jobs run the trials, through submitit: its
local executor on one machine, SLURM job arrays on a cluster. Relaunching the
same command continues the sweep: finished trials are kept, and a trial that
was killed or interrupted resumes from its last checkpoint.

A search maximises each trial's IQM (interquartile mean) over its seeds of the
final greedy return, which `experiments.run` records in the run's info
(`final_returns`, one per seed, and `return_iqm`; the run's result stays the
mean): its trials train 4 seeds unless `num_seeds` says more, and fewer are
refused. At the end the trials' table is printed and written to `summary.md`
and `summary.json` (each trial's IQM and, beside it, its worst seed), and the
best trial (its parameters, IQM and worst seed), the number of
trials completed and the sweep's command to `best.json`, for the record of a
tuned config.

One run with `sweep.<hp>=[...]` trains float hyperparameters in one program
(much faster); this launcher is for what that cannot do: shapes, envs, many
machines, and adaptive search.
"""

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from experiments._errors import ConfigError
from experiments.record.folder import CONFIG
from experiments.sweeps.trials import (
    MIN_SEEDS as MIN_SEEDS,
    SPEC_FILE as SPEC_FILE,
    STUDY_FILE as STUDY_FILE,
    _attempts,
    _bounds,
    _flatten,
    _resume_search,
    _study,
    attempt_value,
    attempt_worst,
    grid_points as grid_points,
    grid_worker as grid_worker,
    parse as parse,
    run_trial as run_trial,
    search_seeds as search_seeds,
    search_worker as search_worker,
    trial_state as trial_state,
    trial_updates as trial_updates,
    validate as validate,
)


def _arguments(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.sweep",
        description=__doc__.split("\n\n")[2] if __doc__ else None,
    )
    parser.add_argument(
        "--folder",
        help="where the sweep lives (default: sweeps/<hash of the command>); "
        "relaunching with the same folder continues the sweep",
    )
    parser.add_argument("--workers", type=int, default=2, help="jobs at once (2)")
    parser.add_argument(
        "--trials", type=int, help="Optuna trials in all (search.* only)"
    )
    parser.add_argument("--seed", type=int, default=0, help="Optuna sampler seed")
    parser.add_argument(
        "--executor",
        choices=("auto", "local", "slurm"),
        default="auto",
        help="submitit executor: auto (SLURM where sbatch exists, else local)",
    )
    parser.add_argument(
        "--timeout-min", type=int, default=24 * 60, help="per worker job (1440)"
    )
    parser.add_argument("--slurm-partition", help="SLURM partition")
    parser.add_argument("--gpus-per-worker", type=int, default=0)
    parser.add_argument("--cpus-per-worker", type=int, default=None)
    parser.add_argument("-m", "--mongo_db", help="also record to MongoDB (as -m)")
    argv = list(argv)
    if "with" not in argv:
        parser.parse_args(argv)  # --help, or an option's own error
        parser.error("give the trials' config after 'with', e.g. with agent=ppo ...")
    split = argv.index("with")
    args = parser.parse_args(argv[:split])
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.trials is not None and args.trials < 1:
        parser.error("--trials must be at least 1")
    return args, argv[split + 1 :]


def _require(*modules: str) -> None:
    """A `ConfigError` naming the extra to install when a module is missing."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} not installed: python -m experiments.sweep needs "
            "the cluster extra, pip install -e '.[cluster]'"
        )


def _executor(args: argparse.Namespace, folder: Path) -> Any:
    # submitit configures logging when imported, closing every handler that
    # exists (a host program's too); NOCONFIG leaves logging alone.
    os.environ.setdefault("SUBMITIT_LOG_LEVEL", "NOCONFIG")
    import submitit

    cluster = None if args.executor == "auto" else args.executor
    executor = submitit.AutoExecutor(folder=folder / "jobs", cluster=cluster)
    params: dict[str, Any] = {"timeout_min": args.timeout_min, "name": "equizoo-sweep"}
    if args.gpus_per_worker:
        params["gpus_per_node"] = args.gpus_per_worker
    if args.cpus_per_worker:
        params["cpus_per_task"] = args.cpus_per_worker
    if args.slurm_partition:
        params["slurm_partition"] = args.slurm_partition
    params["slurm_array_parallelism"] = args.workers
    executor.update_parameters(**params)
    return executor


def _summary(
    folder: Path, keys: list[str], fixed_args: list[str], command: str
) -> tuple[str, dict[str, Any] | None]:
    """The trials' table (Markdown) and the study's record (`best.json`): the
    sweep's command, the trials completed and the best trial (the highest IQM
    over its seeds: what a search maximises), or `None` when none completed."""
    rows = _trial_rows(folder, keys)
    done = [r for r in rows if isinstance(r["iqm"], int | float)]
    best = max(done, key=lambda r: r["iqm"]) if done else None
    columns = ["trial", *keys, "status", "iqm", "worst", "result", "attempts", "run"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [
            f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c])
            for c in columns
        ]
        lines.append("| " + " | ".join(cells) + " |")
    study = None
    if best is not None:
        best["command"] = shlex.join(
            ["python", "-m", "experiments.run", "with", *fixed_args]
            + [
                f"{k}={best[k]!r}" if isinstance(best[k], str) else f"{k}={best[k]}"
                for k in keys
            ]
        )
        study = {
            "command": command,
            "objective": "IQM over seeds of the final greedy return (maximised)",
            "trials": len(done),
            "failed": sum(1 for r in rows if r["status"] == "FAILED"),
            "value": best["iqm"],
            "worst": best["worst"],
            "trial": best["trial"],
            "params": {k: best[k] for k in keys},
            "num_seeds": best["num_seeds"],
            "mean": best["result"],
            "run": best["run"],
            "train_command": best["command"],
        }
        (folder / "best.json").write_text(json.dumps(study, indent=2) + "\n")
    (folder / "summary.md").write_text("\n".join(lines) + "\n")
    (folder / "summary.json").write_text(
        json.dumps({"trials": rows, "best": best}, indent=2, default=str) + "\n"
    )
    return "\n".join(lines), study


def _trial_rows(folder: Path, keys: list[str]) -> list[dict[str, Any]]:
    """One row per trial with a run: its values of `keys`, its last attempt's
    status, IQM, worst seed and mean, and how many attempts it took."""
    rows = []
    for slot_dir in sorted((folder / "trials").glob("[0-9]*")):
        attempts = _attempts(slot_dir)
        if not attempts:
            continue
        _, path, record = attempts[-1]
        flat = _flatten(json.loads((path / CONFIG).read_text()))
        rows.append(
            {
                "trial": int(slot_dir.name),
                **{k: flat.get(k) for k in keys},
                "status": record.get("status"),
                "iqm": attempt_value(path, record),
                "worst": attempt_worst(path, record),
                "result": record.get("result"),
                "num_seeds": flat.get("num_seeds"),
                "attempts": len(attempts),
                "run": str(path),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Launch (or continue) a sweep; print its table and best trial.

    **Returns:** the exit status: 0 when every trial completed."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = shlex.join(["python", "-m", "experiments.sweep", *argv])
    args, updates = _arguments(argv)
    fixed, grid, search = parse(updates)
    _require("submitit", *(["optuna"] if search else []))
    if search and args.trials is None:
        raise ConfigError("search.* needs --trials N (Optuna trials in all)")
    if grid and args.trials is not None:
        raise ConfigError("--trials is for search.*; a grid runs every combination")
    fixed_args = [u for u in updates if not u.startswith(("grid.", "search."))]
    if search:
        if "num_seeds" not in fixed and "num_seeds" not in search:
            fixed_args.append(f"num_seeds={MIN_SEEDS}")  # as the trials train
        fixed = search_seeds(fixed, search)
    spec = {"fixed": fixed, "grid": grid, "search": search, "trials": args.trials}
    folder = _folder(args, spec, updates)
    executor = _executor(args, folder)
    if grid:
        total, launch, to_run = _grid_jobs(args, folder, fixed, grid)
    else:
        total, launch, to_run = _search_jobs(args, folder, spec)
    workers = len(launch[1])
    print(
        f"Sweep in {folder}: {total} trial(s), {to_run} to run on {workers} "
        f"{executor.cluster} worker job(s)",
        file=sys.stderr,
        flush=True,
    )
    if workers:
        _follow(executor.map_array(*launch), folder, total)
    return _report(folder, list(grid or search), fixed_args, command, total)


def _folder(args: argparse.Namespace, spec: dict[str, Any], updates: list[str]) -> Path:
    """The sweep's folder, with its `sweep.json`: a relaunch must be the same
    sweep. Every trial's config is checked (`validate`) before it is made."""
    digest = hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    folder = Path(args.folder or f"sweeps/sweep-{digest}").resolve()
    spec_file = folder / SPEC_FILE
    if spec_file.is_file():
        before = json.loads(spec_file.read_text())
        if {k: before.get(k) for k in spec} != json.loads(json.dumps(spec)):
            raise ConfigError(
                f"--folder {folder} holds another sweep ({spec_file}); relaunch it "
                "with the same arguments, or choose another folder"
            )
    grid, search = spec["grid"], spec["search"]
    validate(spec["fixed"], grid_points(grid) if grid else _bounds(search))
    folder.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(json.dumps({**spec, "updates": updates}, indent=2) + "\n")
    return folder


def _grid_jobs(
    args: argparse.Namespace,
    folder: Path,
    fixed: dict[str, Any],
    grid: dict[str, Any],
) -> tuple[int, tuple, int]:
    """`(trials, map_array's arguments, trials to run)`: the grid points not yet
    run, shared out between the workers."""
    points = grid_points(grid)
    pending = []
    for slot, params in enumerate(points):
        status, _, _ = trial_state(folder / "trials" / f"{slot:04d}")
        if status not in ("COMPLETED", "FAILED"):
            pending.append((slot, trial_updates(fixed, params)))
    workers = min(args.workers, len(pending))
    shares = [pending[w::workers] for w in range(workers)]
    launch = (grid_worker, [str(folder)] * workers, shares, [args.mongo_db] * workers)
    return len(points), launch, len(pending)


def _search_jobs(
    args: argparse.Namespace, folder: Path, spec: dict[str, Any]
) -> tuple[int, tuple, int]:
    """Like `_grid_jobs`, for the Optuna trials of `spec["search"]` still to
    run (interrupted ones first)."""
    fixed, search = spec["fixed"], spec["search"]
    study = _study(str(folder), args.seed)
    enqueued = _resume_search(study, folder)
    slots = {
        t.user_attrs.get("slot", t.number) for t in study.get_trials(deepcopy=False)
    }
    assert args.trials is not None
    todo = enqueued + max(0, args.trials - len(slots))
    workers = min(args.workers, todo)
    shares = [todo // workers + (w < todo % workers) for w in range(workers)]
    launch = (
        search_worker,
        [str(folder)] * workers,
        [fixed] * workers,
        [search] * workers,
        shares,
        [args.seed + 1 + w + 7919 * len(slots) for w in range(workers)],
        [args.mongo_db] * workers,
    )
    return args.trials, launch, sum(shares)


def _report(
    folder: Path, keys: list[str], fixed_args: list[str], command: str, total: int
) -> int:
    """Print the trial table and the best trial; the exit status."""
    table, study = _summary(folder, keys, fixed_args, command)
    print(table, flush=True)
    statuses = json.loads((folder / "summary.json").read_text())["trials"]
    completed = sum(1 for row in statuses if row["status"] == "COMPLETED")
    if study is not None:
        mean = study["mean"]
        mean = f" (mean {mean:.1f})" if isinstance(mean, int | float) else ""
        print(
            f"best: trial {study['trial']} of {study['trials']} completed, IQM "
            f"{study['value']:.1f} over {study['num_seeds']} seed(s){mean}: "
            f"{json.dumps(study['params'])}\n  with this command in "
            f"{folder / 'best.json'}; train it with:\n  {study['train_command']}",
            flush=True,
        )
    print(f"{completed}/{total} trials completed; {folder / 'summary.md'}", flush=True)
    return 0 if completed >= total else 1


def _follow(jobs: list[Any], folder: Path, total: int) -> None:
    """Wait for the worker jobs, printing each change in the trials' count;
    a job that crashed is named with its log."""
    said = None
    while not all(job.done() for job in jobs):
        done = sum(
            1
            for slot_dir in (folder / "trials").glob("[0-9]*")
            if trial_state(slot_dir)[0] in ("COMPLETED", "FAILED")
        )
        if done != said:
            print(f"  {done}/{total} trials finished", file=sys.stderr, flush=True)
            said = done
        time.sleep(1.0)
    for job in jobs:
        try:
            job.result()
        except Exception as e:  # submitit's FailedJobError and kin
            print(
                f"worker job {job.job_id} failed ({type(e).__name__}); its log: "
                f"{job.paths.stderr}",
                file=sys.stderr,
                flush=True,
            )


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
