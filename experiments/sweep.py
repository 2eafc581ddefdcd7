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

One run with `sweep.<hp>=[...]` trains float hyperparameters in one program
(much faster); this launcher is for what that cannot do: shapes, envs, many
machines, and adaptive search.
"""

import argparse
import ast
import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

# Workers import `experiments.run` inside each trial (after setting XLA's flags).
from experiments import _jax_setup
from experiments._config import ConfigError
from experiments._sacred import get_config_updates

_DISTRIBUTION = re.compile(
    r"^\s*(loguniform|uniform|intuniform)\s*\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)\s*$"
)
SPEC_FILE = "sweep.json"
STUDY_FILE = "optuna.journal"
# Sacred statuses of a trial's latest attempt that a relaunch resumes.
_RESUMABLE = ("RUNNING", "INTERRUPTED", "QUEUED")


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    """`tree[a][b] = value` for `path` "a.b"."""
    *parents, leaf = path.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[leaf] = value


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def parse(updates: list[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """`(fixed, grid, search)` from `with` arguments: `fixed` nested config
    updates; `grid` `{key path: [values]}`; `search` `{key path: spec}` where a
    spec is `("loguniform"|"uniform"|"intuniform", low, high)` or
    `("choice", [values])`.

    **Raises:** `ConfigError` for an empty list, a bad distribution, or grid and
    search together."""
    parsed, named = get_config_updates(updates)
    if named:
        raise ConfigError(
            f"{named[0]}: not a 'key=value' update (named configs are not supported)"
        )
    grid = _flatten(parsed.pop("grid", {}) or {})
    search_raw = _flatten(parsed.pop("search", {}) or {})
    for key, values in grid.items():
        if not isinstance(values, list | tuple) or not values:
            raise ConfigError(
                f"grid.{key}: expected a non-empty list of values, got {values!r}"
            )
    search: dict[str, Any] = {}
    for key, spec in search_raw.items():
        if isinstance(spec, list | tuple):
            if not spec:
                raise ConfigError(f"search.{key}: the list of choices is empty")
            search[key] = ("choice", list(spec))
            continue
        match = _DISTRIBUTION.match(spec) if isinstance(spec, str) else None
        if match is None:
            raise ConfigError(
                f"search.{key}: expected loguniform(low,high), uniform(low,high), "
                f"intuniform(low,high) or a list of choices, got {spec!r}"
            )
        kind, low_text, high_text = match.groups()
        try:
            cast = int if kind == "intuniform" else float
            low, high = cast(low_text), cast(high_text)
        except ValueError:
            raise ConfigError(
                f"search.{key}: bounds of {spec!r} must be "
                f"{'integers' if kind == 'intuniform' else 'numbers'}"
            ) from None
        if not low < high or (kind == "loguniform" and low <= 0):
            raise ConfigError(
                f"search.{key}: {spec!r} needs low < high"
                + (" and positive bounds" if kind == "loguniform" else "")
            )
        search[key] = (kind, low, high)
    if grid and search:
        raise ConfigError(
            "grid.* and search.* together: a sweep is either a grid (every "
            "combination) or an Optuna search; put the grid's keys into search.* "
            "as lists of choices"
        )
    if not grid and not search:
        raise ConfigError(
            "nothing to sweep: give grid.<key>=[v1,v2] (every combination) or "
            "search.<key>=loguniform(low,high) with --trials N"
        )
    return parsed, grid, search


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination, the last key fastest."""
    names = list(grid)
    return [
        dict(zip(names, point, strict=True))
        for point in itertools.product(*(grid[n] for n in names))
    ]


def trial_updates(fixed: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A trial's config updates: the fixed ones with its `{key path: value}`."""
    updates = json.loads(json.dumps(fixed))
    for key, value in params.items():
        _set(updates, key, value)
    return updates


def validate(fixed: dict[str, Any], trials: list[dict[str, Any]]) -> None:
    """Resolve every trial's config as `experiments.run` would (no compiling).

    **Raises:** `ConfigError` naming the trial and the problem."""
    from experiments.run import ex

    for params in trials:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                ex.run(
                    "print_config",
                    config_updates=trial_updates(fixed, params),
                    options={"--loglevel": "ERROR"},
                )
        except ConfigError as e:
            where = ", ".join(f"{k}={v!r}" for k, v in params.items())
            raise ConfigError(f"trial {where}: {e}") from None


def _bounds(search: dict[str, Any]) -> list[dict[str, Any]]:
    """Trials at the search's low and high ends, to validate before launching."""
    ends = []
    for end in (0, 1):
        ends.append(
            {
                k: spec[1][end if end < len(spec[1]) else 0]
                if spec[0] == "choice"
                else spec[1 + end]
                for k, spec in search.items()
            }
        )
    choices = [
        {k: v} for k, spec in search.items() if spec[0] == "choice" for v in spec[1]
    ]
    return ends + choices


# -- Trials: each a Sacred run in its own folder --------------------------------


def _attempts(slot_dir: Path) -> list[tuple[int, Path, dict[str, Any]]]:
    """`(run id, folder, run.json)` of every attempt at a trial, oldest first."""
    out = []
    if slot_dir.is_dir():
        for path in slot_dir.iterdir():
            record = path / "run.json"
            if path.name.isdigit() and record.is_file():
                with contextlib.suppress(ValueError, OSError):
                    out.append((int(path.name), path, json.loads(record.read_text())))
    return sorted(out, key=lambda a: a[0])


def trial_state(slot_dir: Path) -> tuple[str, Any, Path | None]:
    """`(status, result, folder)` of a trial: `status` is the latest attempt's
    Sacred status ("NEW" if none); `folder` is the attempt to resume from (the
    one with the newest checkpoint) when the latest attempt was cut short."""
    attempts = _attempts(slot_dir)
    if not attempts:
        return "NEW", None, None
    _, latest, record = attempts[-1]
    status = record.get("status", "RUNNING")
    if status not in _RESUMABLE:
        return status, record.get("result"), latest
    best: tuple[int, Path] | None = None
    for _, path, _ in attempts:
        steps = [int(p.name) for p in (path / "checkpoints").glob("[0-9]*")]
        done = [
            s for s in steps if (path / "checkpoints" / str(s) / "meta.json").is_file()
        ]
        if done and (best is None or max(done) >= best[0]):
            best = (max(done), path)
    return status, None, None if best is None else best[1]


def run_trial(
    folder: str, slot: int, updates: dict[str, Any], mongo: str | None
) -> float:
    """Run (or resume, or reuse) trial `slot` as a Sacred run of
    `experiments.run`; its result (the final greedy return).

    **Raises:** what the run raises (`TrainingError`, `Interrupted`, ...)."""
    slot_dir = Path(folder).resolve() / "trials" / f"{slot:04d}"
    status, result, resume = trial_state(slot_dir)
    if status == "COMPLETED" and isinstance(result, int | float):
        return float(result)
    from experiments.run import ex

    config = {**updates, "progress": False}
    if status in _RESUMABLE and resume is not None:
        config["resume"] = str(resume)
        print(f"trial {slot}: resuming {resume}", file=sys.stderr, flush=True)
    options: dict[str, Any] = {"--capture": "sys", "--file_storage": str(slot_dir)}
    if mongo:
        options["--mongo_db"] = mongo
    run = ex.run(config_updates=config, options=options)
    assert isinstance(run.result, float), run.result  # main's return value
    return run.result


# -- Workers: one submitit job each ----------------------------------------------


def grid_worker(
    folder: str, jobs: list[tuple[int, dict[str, Any]]], mongo: str | None
) -> int:
    """Run grid trials one after another; a trial that fails is recorded as
    FAILED and the next one runs. **Returns:** trials completed."""
    _jax_setup.set_xla_flags()
    from experiments._sacred import SacredError

    done = 0
    for slot, updates in jobs:
        try:
            run_trial(folder, slot, updates, mongo)
            done += 1
        except SacredError as e:  # recorded as FAILED by Sacred
            print(f"trial {slot} failed: {e}", file=sys.stderr, flush=True)
    return done


def search_worker(
    folder: str,
    fixed: dict[str, Any],
    search: dict[str, Any],
    n_trials: int,
    seed: int,
    mongo: str | None,
) -> int:
    """Run `n_trials` Optuna trials (enqueued resumptions first). **Returns:**
    trials completed."""
    _jax_setup.set_xla_flags()
    import optuna

    from experiments._sacred import SacredError

    study = _study(folder, seed)

    def objective(trial: optuna.Trial) -> float:
        params = {}
        for key, spec in search.items():
            kind = spec[0]
            if kind == "choice":
                reprs = [repr(v) for v in spec[1]]
                params[key] = ast.literal_eval(trial.suggest_categorical(key, reprs))
            elif kind == "intuniform":
                params[key] = trial.suggest_int(key, spec[1], spec[2])
            else:
                log = kind == "loguniform"
                params[key] = trial.suggest_float(key, spec[1], spec[2], log=log)
        slot = trial.user_attrs.get("slot", trial.number)
        trial.set_user_attr("slot", slot)
        return run_trial(folder, slot, trial_updates(fixed, params), mongo)

    before = len(_finished(study))
    study.optimize(objective, n_trials=n_trials, catch=(SacredError,))
    return len(_finished(study)) - before


def _study(folder: str, seed: int) -> Any:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(Path(folder) / STUDY_FILE)))
    return optuna.create_study(
        study_name="sweep",
        storage=storage,
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=seed),
        load_if_exists=True,
    )


def _finished(study: Any) -> list[Any]:
    import optuna

    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def _resume_search(study: Any, folder: Path) -> int:
    """Enqueue a trial for every slot whose latest Optuna trial did not complete
    (the previous launch was killed or interrupted), unless its run FAILED; the
    stale trial is marked FAIL. **Returns:** slots enqueued."""
    import optuna

    State = optuna.trial.TrialState
    latest: dict[int, Any] = {}
    for trial in study.get_trials(deepcopy=False):
        slot = trial.user_attrs.get("slot", trial.number)
        if slot not in latest or trial.number > latest[slot].number:
            latest[slot] = trial
    enqueued = 0
    for slot, trial in sorted(latest.items()):
        if trial.state in (State.COMPLETE, State.WAITING):
            continue
        status, _, _ = trial_state(folder / "trials" / f"{slot:04d}")
        if status == "FAILED":
            continue  # training failed (a non-finite loss): not retried
        # Killed or interrupted: `run_trial` resumes it from its newest
        # checkpoint, or starts it again if it wrote none; a run that completed
        # before Optuna heard of it is only reported.
        if trial.state == State.RUNNING:
            study.tell(trial.number, state=State.FAIL)
        study.enqueue_trial(trial.params, user_attrs={"slot": slot})
        enqueued += 1
    return enqueued


# -- The launcher ----------------------------------------------------------------


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


def _summary(folder: Path, keys: list[str], fixed_args: list[str]) -> tuple[str, Any]:
    """The trials' table (Markdown) and the best row."""
    rows = []
    for slot_dir in sorted((folder / "trials").glob("[0-9]*")):
        attempts = _attempts(slot_dir)
        if not attempts:
            continue
        _, path, record = attempts[-1]
        config = json.loads((path / "config.json").read_text())
        flat = _flatten(config)
        rows.append(
            {
                "trial": int(slot_dir.name),
                **{k: flat.get(k) for k in keys},
                "status": record.get("status"),
                "result": record.get("result"),
                "attempts": len(attempts),
                "run": str(path),
            }
        )
    done = [r for r in rows if isinstance(r["result"], int | float)]
    best = max(done, key=lambda r: r["result"]) if done else None
    columns = ["trial", *keys, "status", "result", "attempts", "run"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [
            f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c])
            for c in columns
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if best is not None:
        best["command"] = shlex.join(
            ["python", "-m", "experiments.run", "with", *fixed_args]
            + [
                f"{k}={best[k]!r}" if isinstance(best[k], str) else f"{k}={best[k]}"
                for k in keys
            ]
        )
    (folder / "summary.md").write_text("\n".join(lines) + "\n")
    (folder / "summary.json").write_text(
        json.dumps({"trials": rows, "best": best}, indent=2, default=str) + "\n"
    )
    return "\n".join(lines), best


def main(argv: list[str] | None = None) -> int:
    """Launch (or continue) a sweep; print its table and best trial.

    **Returns:** the exit status: 0 when every trial completed."""
    args, updates = _arguments(sys.argv[1:] if argv is None else argv)
    fixed, grid, search = parse(updates)
    _require("submitit", *(["optuna"] if search else []))
    if search and args.trials is None:
        raise ConfigError("search.* needs --trials N (Optuna trials in all)")
    if grid and args.trials is not None:
        raise ConfigError("--trials is for search.*; a grid runs every combination")
    spec = {"fixed": fixed, "grid": grid, "search": search, "trials": args.trials}
    digest = hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    folder = Path(args.folder or f"sweeps/sweep-{digest}").resolve()
    fixed_args = [u for u in updates if not u.startswith(("grid.", "search."))]
    spec_file = folder / SPEC_FILE
    if spec_file.is_file():
        before = json.loads(spec_file.read_text())
        if {k: before.get(k) for k in spec} != json.loads(json.dumps(spec)):
            raise ConfigError(
                f"--folder {folder} holds another sweep ({spec_file}); relaunch it "
                "with the same arguments, or choose another folder"
            )
    points = grid_points(grid) if grid else _bounds(search)
    validate(fixed, points)
    folder.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(json.dumps({**spec, "updates": updates}, indent=2) + "\n")

    executor = _executor(args, folder)
    if grid:
        pending = []
        for slot, params in enumerate(points):
            status, _, _ = trial_state(folder / "trials" / f"{slot:04d}")
            if status not in ("COMPLETED", "FAILED"):
                pending.append((slot, trial_updates(fixed, params)))
        total = len(points)
        workers = min(args.workers, len(pending))
        shares = [pending[w::workers] for w in range(workers)]
        launch = (
            grid_worker,
            [str(folder)] * workers,
            shares,
            [args.mongo_db] * workers,
        )
        keys = list(grid)
    else:
        study = _study(str(folder), args.seed)
        enqueued = _resume_search(study, folder)
        slots = {
            t.user_attrs.get("slot", t.number) for t in study.get_trials(deepcopy=False)
        }
        assert args.trials is not None
        total = args.trials
        todo = enqueued + max(0, total - len(slots))
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
        keys = list(search)
    to_run = sum(len(s) if isinstance(s, list) else s for s in shares)
    print(
        f"Sweep in {folder}: {total} trial(s), {to_run} to run on {workers} "
        f"{executor.cluster} worker job(s)",
        file=sys.stderr,
        flush=True,
    )
    if workers:
        jobs = executor.map_array(*launch)
        _follow(jobs, folder, total)
    table, best = _summary(folder, keys, fixed_args)
    print(table, flush=True)
    statuses = json.loads((folder / "summary.json").read_text())["trials"]
    completed = sum(1 for row in statuses if row["status"] == "COMPLETED")
    if best is not None:
        print(
            f"best: trial {best['trial']}, result {best['result']:.1f}; train it "
            f"with:\n  {best['command']}",
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
