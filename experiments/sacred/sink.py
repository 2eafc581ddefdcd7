"""`SacredSink`: a training run's record in a Sacred run (its file record,
MongoDB), and the command that resumes it."""

import ast
import contextlib
import datetime
import shlex
from pathlib import Path
from typing import Any

from experiments.record.sink import Sink
from experiments.sacred import experiment as _experiment
from experiments.sacred.observers import FileStorageObserver, MongoObserver


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
        return resume_command(self.run)

    def close_interrupted(self) -> None:
        self._close_now({"status": "INTERRUPTED"})

    def close_failed(self, message: str) -> None:
        self._close_now({"status": "FAILED", "fail_trace": [message]})

    def _close_now(self, fields: dict[str, Any]) -> None:
        """Sacred would leave the record RUNNING. Best effort: a record that
        cannot be written quickly stays as it is. The file record is replaced
        atomically (Sacred's heartbeat thread may be writing it); MongoDB gets
        one update, within the observer's timeouts."""
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)  # as Sacred
        for observer in list(self.run.observers):
            with contextlib.suppress(Exception):
                entry = observer.run_entry
                if isinstance(observer, FileStorageObserver) and observer.dir:
                    entry.update(fields, stop_time=now.isoformat())
                    observer.save_json(entry, "run.json")  # atomic (_sacred)
                elif isinstance(observer, MongoObserver):
                    observer.runs.update_one(
                        {"_id": entry["_id"]}, {"$set": {**fields, "stop_time": now}}
                    )


def resume_command(run: Any) -> str:
    """The shell command that continues `run` from its newest checkpoint."""
    run_dir = _experiment.file_dir(run)
    assert run_dir is not None
    parts = ["python", "-m", "experiments.run"]
    basedir = run_dir.parent
    if basedir != _experiment.RUNS_DIR:
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
