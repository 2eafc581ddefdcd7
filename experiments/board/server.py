"""A local MongoDB-wire server for browsing and for the tests: SecantusDB.

`secantusdb` (PyPI, the `board` extra) is a MongoDB-compatible server on
WiredTiger that pymongo, Sacred and Omniboard's Node.js driver accept, GridFS
included. It is a beta under the GPL-2.0, so it stays an optional extra, runs as
a child process (never imported into a run), and listens on 127.0.0.1 only: it
has no authentication here. For a team, run a real MongoDB (docs/omniboard.md).
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from experiments._errors import ConfigError

_LISTENING = re.compile(r"listening on (\S+):(\d+)")
_MAIN = "import sys; from secantus.cli import main; sys.exit(main())"


def available() -> bool:
    """Whether secantusdb is installed."""
    import importlib.util

    return importlib.util.find_spec("secantus") is not None


def stop_process(
    process: subprocess.Popen[bytes] | None, timeout_s: float = 10.0
) -> None:
    """Stop a child process: SIGTERM, then SIGKILL after `timeout_s`."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class LocalServer:
    """A SecantusDB server in a child process on `127.0.0.1:port` (0: a free
    port, known once started), keeping its data in `storage` (reopened intact
    by the next server on the same folder) and its log next to it.

    Use as a context manager, or `start()` then `stop()`.
    """

    def __init__(self, storage: Path | str, port: int = 0):
        self.storage = Path(storage).resolve()
        self.port = port
        self.log = self.storage.parent / f"{self.storage.name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """`host:port`, for `-m host:port:db` and Omniboard's `-m`."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> "LocalServer":
        """Start the server and wait until it listens.

        **Raises:** `ConfigError` (one line) if secantusdb is missing, or the
        server exits or stays silent for `timeout_s` (its log's last line said).
        """
        if not available():
            raise ConfigError(
                "a local MongoDB server needs secantusdb: pip install -e '.[board]'"
            )
        self.storage.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-c", _MAIN, "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--storage-path", str(self.storage)]
        command += ["--standalone", "--log-level", "INFO"]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, not it
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = _LISTENING.search(self.log.read_text(errors="replace"))
            if found:
                self.port = int(found.group(2))
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        lines = self.log.read_text(errors="replace").strip().splitlines()
        last = lines[-1] if lines else "no output"
        self.stop()
        if "resource busy" in last:
            last = "its data folder is in use by another server; stop that one"
        raise ConfigError(
            f"the local MongoDB server on {self.storage} did not start "
            f"(port {self.port or 'any'}): {last}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `timeout_s`)."""
        process, self.process = self.process, None
        stop_process(process, timeout_s)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
