"""SIGINT and SIGTERM during training: stop cleanly at the next chunk boundary.

The first signal asks the host loop to stop after the chunk it is running (the
run then writes a checkpoint and ends INTERRUPTED); a second one exits at once.
While the main thread waits on a compiled chunk, Python runs no signal handler
until the chunk ends, so the signals are read by a watcher thread from the
wakeup file descriptor that the C-level handler writes to immediately.
"""

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """Training stopped on a signal, after writing a checkpoint. A
    `KeyboardInterrupt`, so that Sacred marks the run INTERRUPTED."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


class StopOnSignal:
    """Context manager: `stop.requested` turns true at the first SIGINT/SIGTERM;
    the second calls `on_second()` (for a last word) and exits with `128 + signum`.

    Outside the main thread (where signal handlers cannot be installed) it does
    nothing.
    """

    def __init__(self, on_first: Callable[[int], Any], on_second: Callable[[], Any]):
        self.on_first = on_first
        self.on_second = on_second
        self.signum: int | None = None
        self._count = 0
        self._active = False

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is not threading.main_thread():
            return self
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._old = {s: signal.signal(s, self._handler) for s in SIGNALS}
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._active:
            return
        self._active = False
        for s, handler in self._old.items():
            # After a first signal the run is stopping (writing its records): a
            # second one must still exit at once, not kill the process unannounced
            # with the default handler.
            signal.signal(s, self._exit_now if self.requested else handler)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._write)  # the watcher reads EOF and returns
        self._thread.join(timeout=5)
        os.close(self._read)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        pass  # the watcher thread acts on it, even while the main thread waits

    def _exit_now(self, signum: int, frame: FrameType | None) -> None:
        try:
            self.on_second()
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)

    def _watch(self) -> None:
        while True:
            try:
                data = os.read(self._read, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum not in SIGNALS:
                    continue
                self._count += 1
                if self._count == 1:
                    self.signum = signum
                    self.on_first(signum)
                else:
                    self._exit_now(signum, None)
