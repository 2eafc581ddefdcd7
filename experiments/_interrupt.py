"""SIGINT and SIGTERM during training: stop cleanly at the next chunk boundary.

The first signal asks the host loop to stop after the chunk it is running (the
run then writes a checkpoint and ends INTERRUPTED); a second one exits at once.
While the main thread waits on a compiled chunk, Python runs no signal handler
until the chunk ends, so the signals are read by a watcher thread from the
wakeup file descriptor that the C-level handler writes to immediately.
"""

import contextlib
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


# Held by whoever ends the process: a second signal's last word, once begun, is
# said before the main thread's own exit can cut it short.
_EXITING = threading.Lock()


def exit_now(code: int) -> None:
    """Flush stdout and stderr and end the process with `code`, skipping
    interpreter shutdown (which would reset signal handlers to the default)."""
    _EXITING.acquire()
    _exit(code)


def _exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken
            stream.flush()
    os._exit(code)


def signalled() -> bool:
    """Whether a `StopOnSignal` in this process has received a signal."""
    return _SIGNALLED[0]


_SIGNALLED = [False]


class StopOnSignal:
    """Context manager: `stop.requested` turns true at the first SIGINT/SIGTERM;
    the second calls `on_second()` (for a last word) and exits with `128 + signum`.

    Once a signal has arrived, leaving the context keeps the watcher: the process
    is expected to end (`exit_now`), and a second signal until then still exits
    at once. Outside the main thread (where signal handlers cannot be installed) it does
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
        if self.requested:
            # The run is stopping and the process will end with it: keep the
            # watcher, so that a second signal exits at once wherever the main
            # thread is (writing records, blocked in C, shutting down). Python
            # handlers alone would not do: they run only between bytecodes of
            # the main thread, and interpreter shutdown resets them to the
            # default action, which kills the process unannounced.
            return
        self._active = False
        for s, handler in self._old.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._write)  # the watcher reads EOF and returns
        self._thread.join(timeout=5)
        os.close(self._read)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        pass  # the watcher thread acts on it, even while the main thread waits

    def _exit_now(self, signum: int) -> None:
        _EXITING.acquire()
        try:
            self.on_second()
        finally:
            _exit(128 + signum)

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
                    _SIGNALLED[0] = True
                    self.signum = signum
                    self.on_first(signum)
                else:
                    self._exit_now(signum)
