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
    from sacred.observers import (
        FileStorageObserver as FileStorageObserver,
        MongoObserver as MongoObserver,
    )
    from sacred.utils import (
        SacredError as SacredError,
        apply_backspaces_and_linefeeds as apply_backspaces_and_linefeeds,
    )
if _hide_pandas:
    del sys.modules["pandas"]


def _serialise_captured_output() -> None:
    """Make `Run._get_captured_output` safe between threads.

    Sacred 0.8.7 reads new captured output from both its heartbeat thread and the
    main thread (when the run ends), each doing read-append-assign on
    `captured_out` without a lock. When a heartbeat fires as the run ends, one
    thread's increment can be overwritten by the other's: a recorded `cout.txt`
    then lacks lines that were printed (seen once: the progress bar's final state).
    """
    import threading

    from sacred.run import Run

    original = Run._get_captured_output
    lock = threading.Lock()

    def _get_captured_output(self: Run) -> None:
        with lock:
            original(self)

    Run._get_captured_output = _get_captured_output  # type: ignore[method-assign]


_serialise_captured_output()
