"""Sacred, imported once without its import-time warnings.

sacred 0.8.7 imports `pkg_resources`, which setuptools deprecates (and whose
import warns about other packages' namespace declarations). Nothing to fix on our
side, and under `-W error` (our tests) the warning would abort the import.

Sacred also imports pandas eagerly if it is installed (gymnax pulls it in), only
to serialise pandas objects we never log: half a second of every run's start-up.
We hide pandas while Sacred loads; it stays importable for everyone else.
"""

import sys
import warnings

_hide_pandas = "pandas" not in sys.modules
if _hide_pandas:
    sys.modules["pandas"] = None  # type: ignore[assignment]  # import -> ImportError
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
    from sacred import Experiment as Experiment
    from sacred.arg_parser import get_config_updates as get_config_updates
    from sacred.config.config_scope import ConfigScope as ConfigScope
    from sacred.dependencies import (
        PackageDependency as PackageDependency,
        Source as Source,
        get_commit_if_possible as get_commit_if_possible,
        get_digest as get_digest,
    )
    from sacred.observers import (
        FileStorageObserver as FileStorageObserver,
        MongoObserver as MongoObserver,
    )
    from sacred.observers.mongo import force_bson_encodeable as force_bson_encodeable
    from sacred.utils import (
        SacredError as SacredError,
        apply_backspaces_and_linefeeds as apply_backspaces_and_linefeeds,
    )
if _hide_pandas:
    del sys.modules["pandas"]


def _serialise_captured_output() -> None:
    """Make Sacred's captured output safe between threads.

    Sacred 0.8.7 reads new captured output from both its heartbeat thread and the
    main thread (when the run ends), each doing read-append-assign on
    `captured_out` without a lock: one thread's increment can be overwritten by
    the other's. And a read seeks the capture file, which the main thread's
    prints write to at the file's position, back to where the last read ended:
    a print between that seek and the read lands over unread output. Either
    way a recorded `cout.txt` lacks what was printed (seen: the progress bar's
    final state). One lock now covers the reads and the writes.

    A patch, not a subclass: Sacred builds the `Run` and its stream proxies
    itself, with no hook to give it other classes.
    """
    import threading

    from sacred import stdout_capturing
    from sacred.run import Run

    lock = threading.RLock()

    def locked(method):
        def wrapper(*args, **kwargs):
            with lock:
                return method(*args, **kwargs)

        return wrapper

    Run._get_captured_output = locked(Run._get_captured_output)  # type: ignore[method-assign]
    stdout_capturing.CapturedStdout.get = locked(stdout_capturing.CapturedStdout.get)  # type: ignore[method-assign]
    proxy = stdout_capturing.TeeingStreamProxy
    proxy.write = locked(proxy.write)  # type: ignore[method-assign]
    proxy.flush = locked(proxy.flush)  # type: ignore[method-assign]


class FileRecords(FileStorageObserver):
    """Sacred's file observer, as every run records with it (`-F DIR` or
    `runs/`), with two changes:

    - Sacred rewrites `run.json`, `info.json` and `metrics.json` in place at
      every heartbeat: a process killed mid-write leaves a truncated file, and
      with it every metric recorded so far lost. `save_json` writes a temporary
      file and renames it over the old one, so a record is always whole (the
      old one or the new one).
    - The record's folder is locked from its creation, before its record says
      RUNNING, until its record says how the run ended; a record left RUNNING
      in an unlocked folder is a dead process's (`experiments.sacred.liveness`).
    """

    def save_json(self, obj, filename):
        import json
        import os
        import threading

        from sacred.observers import file_storage

        path = os.path.join(self._folder, filename)
        # One name per thread: the heartbeat thread and the main thread (an
        # artifact) may both write run.json; the last rename wins, whole.
        tmp = f"{path}.{threading.get_ident()}.writing"
        with open(tmp, "w") as f:
            flat = file_storage.flatten(obj)  # pyright: ignore[reportPrivateImportUsage]
            json.dump(flat, f, sort_keys=True, indent=2)
            f.flush()
        os.replace(tmp, path)

    def _make_run_dir(self, _id):
        from experiments.sacred import liveness as _liveness

        super()._make_run_dir(_id)
        _liveness.acquire(self._folder)

    def completed_event(self, *args, **kwargs):
        try:
            return super().completed_event(*args, **kwargs)
        finally:
            self._release()

    def interrupted_event(self, *args, **kwargs):
        try:
            return super().interrupted_event(*args, **kwargs)
        finally:
            self._release()

    def failed_event(self, *args, **kwargs):
        try:
            return super().failed_event(*args, **kwargs)
        finally:
            self._release()

    def _release(self) -> None:
        from experiments.sacred import liveness as _liveness

        _liveness.release(self._folder)

    @property
    def _folder(self) -> str:
        assert self.dir is not None  # set when the run's folder is made
        return self.dir


def _heartbeat_on_demand() -> None:
    """`Run._emit_heartbeat` under a lock, so that training can bring its record
    up to date after a checkpoint (`SacredSink.flush`) while Sacred's heartbeat
    thread may be beating too. A patch: Sacred builds the `Run` itself."""
    import threading

    from sacred.run import Run

    lock = threading.RLock()
    beat = Run._emit_heartbeat

    def locked(self):
        with lock:
            return beat(self)

    Run._emit_heartbeat = locked  # type: ignore[method-assign]


def _print_ours_in_one_line() -> None:
    """Sacred's command line prints a `SacredError` in one line and any other
    error with its traceback; it reads the name `SacredError` of its module when
    it does, so give it ours too (see `experiments._errors`). A patch: the test
    is inside `Experiment.run_commandline`, with no hook, and our errors are not
    Sacred's (they are raised where Sacred is not imported)."""
    import sacred.experiment

    from experiments._errors import EquizooError

    sacred.experiment.SacredError = (SacredError, EquizooError)  # type: ignore[assignment]


_serialise_captured_output()
_heartbeat_on_demand()
_print_ours_in_one_line()
