"""The trials of `python -m experiments.sweep`: parsing `grid.`/`search.` keys,
one trial's folder and state, the workers that run trials (pickled by
submitit by reference to this module), and the Optuna study.
"""

import ast
import contextlib
import io
import itertools
import json
import sys
from pathlib import Path
from typing import Any

# Workers import `experiments.run` inside each trial (after setting XLA's flags).
from experiments import jax_setup
from experiments._errors import ConfigError
from experiments.analysis import stats
from experiments.record.folder import INFO, RECORD, RunFolder
from experiments.sacred.observers import get_config_updates
from experiments.sweeps.members import distribution

SPEC_FILE = "sweep.json"
STUDY_FILE = "optuna.journal"
# Sacred statuses of a trial's latest attempt that a relaunch resumes.
_RESUMABLE = ("RUNNING", "INTERRUPTED", "QUEUED")
# A search ranks trials by the IQM of their seeds' final greedy returns, which
# cuts the lowest and highest quarter: with fewer than 4 seeds it cuts nothing
# (the mean of 1-3 seeds, one lucky seed deciding).
MIN_SEEDS = 4


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
        found = distribution(
            f"search.{key}", spec, kinds=("loguniform", "uniform", "intuniform")
        )
        if found is None:
            raise ConfigError(
                f"search.{key}: expected loguniform(low,high), uniform(low,high), "
                f"intuniform(low,high) or a list of choices, got {spec!r}"
            )
        search[key] = found
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


def search_seeds(fixed: dict[str, Any], search: dict[str, Any]) -> dict[str, Any]:
    """`fixed` for a search's trials: `num_seeds` is `MIN_SEEDS` unless given.

    **Raises:** `ConfigError` when `num_seeds` (given, or the low end of
    `search.num_seeds`) is below `MIN_SEEDS`."""
    spec = search.get("num_seeds")
    if spec is None:
        low = fixed.get("num_seeds", MIN_SEEDS)
        given = f"num_seeds={low!r}"
    elif spec[0] == "choice":
        low = min((v for v in spec[1] if isinstance(v, int | float)), default=None)
        given = f"search.num_seeds={spec[1]!r}"
    else:
        low = spec[1]
        given = f"search.num_seeds={spec[0]}({spec[1]},{spec[2]})"
    if isinstance(low, int | float) and low < MIN_SEEDS:
        fix = (
            f"set num_seeds={MIN_SEEDS} (or more)"
            if spec is None
            else f"search num_seeds over values of {MIN_SEEDS} or more"
        )
        raise ConfigError(
            f"{given}: a search ranks trials by the IQM of their seeds' final "
            f"returns, which needs at least {MIN_SEEDS} seeds; {fix}"
        )
    if spec is not None or "num_seeds" in fixed:
        return fixed
    return {**fixed, "num_seeds": MIN_SEEDS}


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
            record = path / RECORD
            if path.name.isdigit() and record.is_file():
                with contextlib.suppress(ValueError, OSError):
                    out.append((int(path.name), path, json.loads(record.read_text())))
    return sorted(out, key=lambda a: a[0])


def objective(info: dict[str, Any], result: Any) -> float | None:
    """A completed run's objective: the IQM over its seeds of the final greedy
    return, from its info (`info.json`). **Returns:** `None` without one."""
    if isinstance(info.get("return_iqm"), int | float):
        return float(info["return_iqm"])
    finals = info.get("final_returns")
    if isinstance(finals, list) and finals:
        return float(stats.iqm(finals))
    # A run recorded before runs recorded their seeds' returns (or a run of a
    # `sweep.<hp>` program, which records its members instead): its result, the
    # mean over seeds. That is the IQM for fewer than 4 seeds (searches trained
    # one by default then); with more it is only the mean, the best we have.
    return float(result) if isinstance(result, int | float) else None


def _info(attempt: Path) -> dict[str, Any]:
    with contextlib.suppress(ValueError, OSError):
        info = json.loads((attempt / INFO).read_text())
        if isinstance(info, dict):
            return info
    return {}


def attempt_worst(attempt: Path, record: dict[str, Any]) -> float | None:
    """The worst seed's final greedy return of a COMPLETED attempt (`None`
    otherwise, or for a run that recorded no per-seed returns): what an IQM
    hides, shown beside it so that a study can prefer the reliable trial."""
    finals = _info(attempt).get("final_returns")
    if (
        record.get("status") != "COMPLETED"
        or not isinstance(finals, list)
        or not finals
    ):
        return None
    return float(min(finals))


def attempt_value(attempt: Path, record: dict[str, Any]) -> float | None:
    """The objective (`objective`) of an attempt whose `run.json` is `record`;
    `None` unless it COMPLETED."""
    if record.get("status") != "COMPLETED":
        return None
    return objective(_info(attempt), record.get("result"))


def trial_state(slot_dir: Path) -> tuple[str, Any, Path | None]:
    """`(status, value, folder)` of a trial: `status` is the latest attempt's
    Sacred status ("NEW" if none); `value` its objective when it COMPLETED (the
    IQM over its seeds, `objective`), else `None`; `folder` is the latest
    attempt, or when that was cut short, the attempt to resume from (the one
    with the newest checkpoint)."""
    attempts = _attempts(slot_dir)
    if not attempts:
        return "NEW", None, None
    _, latest, record = attempts[-1]
    status = record.get("status", "RUNNING")
    if status not in _RESUMABLE:
        return status, attempt_value(latest, record), latest
    best: tuple[int, Path] | None = None
    for _, path, _ in attempts:
        done = RunFolder(path).checkpointed_steps()
        if done is not None and (best is None or done >= best[0]):
            best = (done, path)
    return status, None, None if best is None else best[1]


def run_trial(
    folder: str, slot: int, updates: dict[str, Any], mongo: str | None
) -> float:
    """Run (or resume, or reuse) trial `slot` as a Sacred run of
    `experiments.run`; its objective: the IQM over its seeds of the final greedy
    return (`objective`), read from the run's info as a reused trial's is from
    its `info.json`. The run's result stays the mean.

    **Raises:** what the run raises (`TrainingError`, `Interrupted`, ...)."""
    slot_dir = Path(folder).resolve() / "trials" / f"{slot:04d}"
    status, value, resume = trial_state(slot_dir)
    if status == "COMPLETED" and value is not None:
        return value
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
    value = objective(run.info, run.result)
    assert value is not None
    return value


# -- Workers: one submitit job each ----------------------------------------------


def grid_worker(
    folder: str, jobs: list[tuple[int, dict[str, Any]]], mongo: str | None
) -> int:
    """Run grid trials one after another; a trial that fails is recorded as
    FAILED and the next one runs. **Returns:** trials completed."""
    jax_setup.set_xla_flags()
    from experiments._errors import EquizooError
    from experiments.sacred.observers import SacredError

    done = 0
    for slot, updates in jobs:
        try:
            run_trial(folder, slot, updates, mongo)
            done += 1
        except (SacredError, EquizooError) as e:  # recorded as FAILED by Sacred
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
    """Run `n_trials` Optuna trials (enqueued resumptions first), maximising
    each trial's IQM over its seeds (`run_trial`). **Returns:** trials
    completed."""
    jax_setup.set_xla_flags()
    import optuna

    from experiments._errors import EquizooError
    from experiments.sacred.observers import SacredError

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
    study.optimize(objective, n_trials=n_trials, catch=(SacredError, EquizooError))
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
