"""The Sacred wiring every equizoo experiment shares (`run`, `evaluate`): the
logger, the default observers (`runs/` files, `-m` MongoDB through ours), and
where a run is recorded."""

import logging
import sys
from pathlib import Path
from typing import Any

from experiments import _distributed, _mongo
from experiments._sacred import (
    Experiment,
    FileStorageObserver,
    MongoObserver,
    apply_backspaces_and_linefeeds,
    get_config_updates,
)

ROOT = Path(__file__).resolve().parents[1]
RUNS_DIR = Path("runs")  # relative to the working directory, like `-F runs`


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


def logger() -> logging.Logger:
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


def experiment(name: str) -> Any:
    """A Sacred `Experiment` with our logger, output filter and default
    observers (`observe`)."""
    ex = Experiment(name, base_dir=str(ROOT))
    ex.logger = logger()  # pyright: ignore[reportAttributeAccessIssue]
    # The progress bar redraws itself with carriage returns; keep only the final
    # state of each line in the recorded output.
    ex.captured_out_filter = apply_backspaces_and_linefeeds  # pyright: ignore[reportAttributeAccessIssue]
    observe(ex)
    return ex


def observe(ex: Any) -> None:
    """Sacred option hook of `ex`: records to `runs/` unless `-F DIR` or `-u`;
    `-m` adds our MongoDB observer; a multi-process run joins here, and only
    its process 0 records."""
    defaults: list[Any] = []

    @ex.option_hook
    def _observers(options):
        # Drop the default observers a previous run in this process added.
        ex.observers[:] = [o for o in ex.observers if o not in defaults]
        defaults.clear()
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
            # Its run numbers follow the file record's too (which takes the same).
            observer.equizoo_file_dirs = (
                Path(options.get("--file_storage") or RUNS_DIR),
            )
            options["--mongo_db"] = None
            defaults.append(observer)
            ex.observers.append(observer)
        # "sys" tees Python's streams; Sacred's default "fd" starts a `tee`
        # subprocess and redirects file descriptors, which buys nothing here.
        if not options.get("--capture"):
            options["--capture"] = "sys"
        if not options.get("--file_storage") and not options.get("--unobserved"):
            observer = FileStorageObserver(RUNS_DIR)
            defaults.append(observer)
            ex.observers.append(observer)

    ex.equizoo_default_observers = defaults


def file_dir(run: Any) -> Path | None:
    """The run's folder under a `FileStorageObserver`, if it has one."""
    for observer in run.observers:
        if isinstance(observer, FileStorageObserver):
            return Path(observer.dir or observer.basedir)
    return None


def where(run: Any) -> str:
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
