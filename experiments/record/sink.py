"""Where a training run's record goes: the `Sink` the one training core writes to.

`NullSink` records nothing and keeps `info` for the caller (`experiments.train`
from Python, `publish`, the benchmarks); `experiments.sacred.sink.SacredSink`
records into a Sacred run (its file record, MongoDB). The core never sees
Sacred: a recorder of another kind (TensorBoard, wandb) is one more subclass.
"""

import abc
from pathlib import Path
from typing import Any


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

    def close_failed(self, message: str) -> None:
        """Mark the record FAILED with `message` now, for a process about to exit
        at once (another process of its run was lost while this one waited on
        it). Nothing to do by default."""
        return None

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

    def members(self, members: list[dict[str, Any]]) -> None:
        """A sweep's members, before training: member `i`'s hyperparameters are
        `members[i]` (its series are named `member_<i>.<name>`). Nothing to do
        by default."""
        return None


class TeeSink(Sink):
    """The run's record (`record`, e.g. a `SacredSink`) and copies of it
    (`copies`: TensorBoard, W&B; `experiments.record.loggers`): every series,
    artifact and sweep member goes to all; the record alone has the run's id,
    folder, checkpoints and resume command. A copy that fails is dropped with a
    warning, and training goes on (the record keeps everything)."""

    def __init__(self, record: Sink, copies: list[Any]):
        self.record = record
        self.copies = list(copies)
        self.info = record.info
        self.config = record.config
        self.run_id = record.run_id

    @property
    def recording(self) -> bool:
        return self.record.recording

    @property
    def run_dir(self) -> Path | None:
        return self.record.run_dir

    def _each(self, method: str, *args: Any) -> None:
        for copy in list(self.copies):
            try:
                getattr(copy, method)(*args)
            except Exception as e:
                import warnings

                self.copies.remove(copy)
                warnings.warn(
                    f"{type(copy).__name__} failed ({type(e).__name__}: {e}); it "
                    "records no more of this run (the run's record keeps it all)",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def log(self, name: str, value: float, step: int) -> None:
        self.record.log(name, value, step)
        self._each("log", name, value, step)

    def artifact(self, path: Path, name: str | None = None) -> None:
        self.record.artifact(path, name)
        self._each("artifact", path, name)

    def members(self, members: list[dict[str, Any]]) -> None:
        self.record.members(members)
        self._each("members", members)

    def flush(self) -> None:
        self.record.flush()
        self._each("flush")

    def close_interrupted(self) -> None:
        self.record.close_interrupted()
        self._each("close_interrupted")

    def close_failed(self, message: str) -> None:
        self.record.close_failed(message)
        self._each("close_failed", message)

    def close(self, status: str) -> None:
        """End the copies with the run's `status` and `info` (the record ends
        as its own kind does: Sacred's when `main` returns)."""
        self._each("close", status, self.info)

    def where(self) -> str:
        return "; ".join([self.record.where()] + [c.where() for c in self.copies])

    def record_error(self) -> str | None:
        return self.record.record_error()

    def resume_command(self) -> str | None:
        return self.record.resume_command()


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
