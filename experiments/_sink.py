"""Where a training run's record goes: the `Sink` the one training core writes to.

`SacredSink` records into a Sacred run (its file record, MongoDB); `NullSink`
records nothing and keeps `info` for the caller (`experiments.train` from
Python, `publish`, the benchmarks). The core never sees Sacred: a recorder of
another kind (TensorBoard, wandb) is one more subclass.
"""

import abc
import contextlib
import datetime
from pathlib import Path
from typing import Any

from experiments import _experiment


class Sink(abc.ABC):
    """A run's record: scalar series, artifacts, `info` (a dict written with the
    record) and its status.

    - `info`: what the run reports besides its series (final returns, timings).
    - `config`: the run's resolved config, as recorded.
    - `run_id`: the record's id (`None` when not recorded).
    - `recording`: whether anything is kept; training writes checkpoints only then.
    - `run_dir`: the run's folder, where checkpoints go (`None`: none on disk).
    """

    info: dict[str, Any]
    config: dict[str, Any]
    run_id: Any = None

    @property
    def recording(self) -> bool:
        return False

    @property
    def run_dir(self) -> Path | None:
        return None

    @abc.abstractmethod
    def log(self, name: str, value: float, step: int) -> None:
        """One point of the series `name` (a Python float, never a `jax.Array`)."""

    @abc.abstractmethod
    def artifact(self, path: Path, name: str | None = None) -> None:
        """Keep the file `path` with the record, as `name` (default its name)."""

    @abc.abstractmethod
    def close_interrupted(self) -> None:
        """Mark the record INTERRUPTED now, for a process about to exit at once."""

    def where(self) -> str:
        """Where the record is, for the run's last line."""
        return "not recorded"

    def flush(self) -> None:
        """Bring the record up to date now (after a checkpoint: a process killed
        later keeps every metric logged until then). Nothing to do by default."""
        return None

    def record_error(self) -> str | None:
        """What went wrong when the run's file record could not be written (a
        full disk, a read-only folder); `None` while it is written. (A record in
        MongoDB that fails does not stop training: the file record is kept.)"""
        return None

    def resume_command(self) -> str | None:
        """The command that continues this run from its newest checkpoint."""
        return None


class NullSink(Sink):
    """Records nothing; `info` stays with the caller."""

    def __init__(self, config: dict[str, Any] | None = None):
        self.info = {}
        self.config = dict(config or {})

    def log(self, name: str, value: float, step: int) -> None:
        pass

    def artifact(self, path: Path, name: str | None = None) -> None:
        pass

    def close_interrupted(self) -> None:
        pass


class SacredSink(Sink):
    """A Sacred run (`_run` of `main`) and its observers."""

    def __init__(self, run: Any):
        self.run = run
        self.info = run.info
        self.config = dict(run.config)
        self.run_id = run._id

    @property
    def recording(self) -> bool:
        return bool(self.run.observers)

    @property
    def run_dir(self) -> Path | None:
        return _experiment.file_dir(self.run)

    def log(self, name: str, value: float, step: int) -> None:
        self.run.log_scalar(name, value, step)

    def artifact(self, path: Path, name: str | None = None) -> None:
        _experiment.add_artifact(self.run, path, name)

    def where(self) -> str:
        return _experiment.where(self.run)

    def flush(self) -> None:
        self.run._emit_heartbeat()  # locked against Sacred's own (_sacred)

    def record_error(self) -> str | None:
        from experiments._sacred import FileStorageObserver

        # Sacred stops writing to an observer that raised once, with a warning.
        for observer in getattr(self.run, "_failed_observers", []):
            if isinstance(observer, FileStorageObserver):
                where = observer.dir or observer.basedir
                return (
                    f"the run's file record in {where} could not be written (see "
                    "Sacred's warning above)"
                )
        return None

    def resume_command(self) -> str | None:
        from experiments import _resume

        return _resume.resume_command(self.run)

    def close_interrupted(self) -> None:
        """Sacred would leave the record RUNNING. Best effort: a record that
        cannot be written quickly stays as it is. The file record is replaced
        atomically (Sacred's heartbeat thread may be writing it); MongoDB gets
        one update, within the observer's timeouts."""
        from experiments._sacred import FileStorageObserver, MongoObserver

        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)  # as Sacred
        for observer in list(self.run.observers):
            with contextlib.suppress(Exception):
                entry = observer.run_entry
                if isinstance(observer, FileStorageObserver) and observer.dir:
                    entry["status"], entry["stop_time"] = "INTERRUPTED", now.isoformat()
                    observer.save_json(entry, "run.json")  # atomic (_sacred)
                elif isinstance(observer, MongoObserver):
                    observer.runs.update_one(
                        {"_id": entry["_id"]},
                        {"$set": {"status": "INTERRUPTED", "stop_time": now}},
                    )
