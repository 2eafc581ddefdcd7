"""One run across several processes: joining them with `jax.distributed`.

The processes of a run are joined before JAX starts a backend, from the
`distributed` config (`coordinator`, `num_processes`, `process_id`) or, when
that is empty, from a cluster's environment (`srun` under SLURM, `mpirun` of
Open MPI) with more than one process. Only process 0 records the run.

Once joined, each process posts a sign of life to the coordinator's key-value
store every second (`PeerWatch`). A process that waits on a collective whose
peer was killed or froze may never hear an error from it: JAX's coordination
service would end it after 100 s with a C++ abort. While training, a peer
silent for `LOST_AFTER_S` instead stops this process with the run's usual
lost-peer error, its record FAILED and the command that resumes it.
"""

import atexit
import contextlib
import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ._errors import DistributedError

KEYS = ("coordinator", "num_processes", "process_id")
# Seconds a process waits for the others to join, as JAX's default.
JOIN_TIMEOUT_S = 300
# Seconds between a process's signs of life, and the silence after which a
# peer counts as lost while training: well inside JAX's heartbeat timeout
# (100 s), after which its coordination service aborts the process.
BEAT_S = 1.0
LOST_AFTER_S = 30.0
# Seconds a peer may say it left training on an error before this process,
# still training, stops too: time for an error that every process meets at
# the same chunk (a non-finite loss) to reach this one's main thread first.
FAILED_AFTER_S = 10.0


@dataclasses.dataclass(frozen=True)
class Join:
    """How this process joins its run. `coordinator` is `None` when JAX reads it
    from the cluster's environment (`source`)."""

    coordinator: str | None
    num_processes: int
    process_id: int
    source: str


# The run this process joined; a process joins one run in its lifetime.
_JOINED: list[Join] = []


def plan(distributed: Any, environ: Mapping[str, str] = os.environ) -> Join | None:
    """How this process joins a multi-process run, or `None` for one process.

    **Raises:** `DistributedError` for a bad `distributed` config (unknown key,
    missing coordinator, a process id outside `0..num_processes-1`), before
    anything starts."""
    distributed = {} if distributed is None else distributed
    if not isinstance(distributed, Mapping):
        raise DistributedError(
            f"distributed: expected a dict with keys {list(KEYS)}, got {distributed!r}"
        )
    unknown = sorted(set(distributed) - set(KEYS))
    if unknown:
        raise DistributedError(
            f"distributed.{unknown[0]}: unknown key; valid keys: {list(KEYS)}"
        )
    given = {k: distributed.get(k) for k in KEYS if distributed.get(k) is not None}
    if not given:
        return _from_cluster(environ)
    coordinator = given.get("coordinator")
    missing = [k for k in KEYS if k not in given]
    if missing:
        raise DistributedError(
            f"distributed.{missing[0]} is missing: a multi-process run needs "
            "distributed.coordinator (host:port of process 0, reachable by all), "
            "distributed.num_processes and distributed.process_id (0 on the "
            "coordinator's host)"
        )
    host, _, port = str(coordinator).rpartition(":")
    if not isinstance(coordinator, str) or not host or not port.isdigit():
        raise DistributedError(
            f"distributed.coordinator: expected 'host:port' (e.g. "
            f"'10.0.0.1:1234', process 0's address), got {coordinator!r}"
        )
    num, pid = given["num_processes"], given["process_id"]
    if type(num) is not int or num < 1:
        raise DistributedError(
            f"distributed.num_processes: expected a positive integer, got {num!r}"
        )
    if type(pid) is not int or not 0 <= pid < num:
        raise DistributedError(
            f"distributed.process_id: {pid!r} is outside 0..{num - 1} "
            f"(num_processes={num}); give each process its own id, 0 to {num - 1}"
        )
    return Join(coordinator, num, pid, "config")


def _from_cluster(environ: Mapping[str, str]) -> Join | None:
    """A run of several tasks started by `srun` or `mpirun` (JAX reads the
    coordinator from the same variables)."""
    launchers = (
        ("SLURM", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID"),
        (
            "Open MPI",
            "OMPI_MCA_orte_hnp_uri",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_RANK",
        ),
    )
    for source, marker, count, rank in launchers:
        if marker in environ and count in environ and rank in environ:
            num, pid = int(environ[count]), int(environ[rank])
            if num > 1:
                return Join(None, num, pid, source)
    return None


def join(how: Join) -> None:
    """Join the run's other processes (`jax.distributed.initialize`); a no-op
    when this process already joined the same way.

    **Raises:** `DistributedError` when this process already joined another
    run, or has started JAX already (joining must come first)."""
    if _JOINED:
        if _JOINED[0] != how:
            raise DistributedError(
                f"distributed: this process already joined {_JOINED[0]}; a process "
                "joins one multi-process run in its lifetime"
            )
        return
    import jax

    where = how.coordinator or f"the {how.source} job's coordinator"
    print(
        f"Joining {how.num_processes} processes at {where} as process "
        f"{how.process_id} (waiting up to {JOIN_TIMEOUT_S} s for the others) ...",
        file=sys.stderr,
        flush=True,
    )
    try:
        if how.coordinator is None:
            jax.distributed.initialize(initialization_timeout=JOIN_TIMEOUT_S)
        else:
            jax.distributed.initialize(
                how.coordinator,
                how.num_processes,
                how.process_id,
                initialization_timeout=JOIN_TIMEOUT_S,
            )
    except RuntimeError as e:
        raise DistributedError(
            f"distributed: could not join ({str(e).splitlines()[0]}); joining must "
            "come before anything in the process uses JAX"
        ) from None
    _JOINED.append(how)
    from jax._src import distributed

    watch = PeerWatch(
        distributed.global_state.client, how.process_id, jax.process_count()
    )
    watch.start()
    _WATCH.append(watch)


_WATCH: list["PeerWatch"] = []
_KEY = "equizoo/alive/"


class PeerWatch:
    """Signs of life between the processes of a run, through the coordinator's
    key-value store (`client`: JAX's `DistributedRuntimeClient`).

    Every `beat_s` this process posts `<state>:<n>` (`state`: `train` inside
    `watching`, `fail` after leaving it on an exception, `idle` otherwise; `n`
    counts up) and reads the others'. A peer is lost when its post has not
    changed for `lost_after_s` while it said `train` (or never posted), or when
    it has said `fail` for `failed_after_s`. Silence is timed by this process's
    own reads, so a pause of this process alone never condemns a peer. Only
    inside `watching` is a lost peer acted on: there this process may be
    blocked on a collective that will never return. (Process 0 holds the store:
    when it is gone, JAX's coordination service ends the others at once, with
    its own message.)"""

    def __init__(
        self,
        client: Any,
        me: int,
        count: int,
        *,
        beat_s: float = BEAT_S,
        lost_after_s: float = LOST_AFTER_S,
        failed_after_s: float = FAILED_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.client, self.me, self.count = client, me, count
        self.beat_s, self.lost_after_s, self.clock = beat_s, lost_after_s, clock
        self.failed_after_s = failed_after_s
        self.state = "idle"
        self._n = 0
        self._since = clock()
        self._seen: dict[int, tuple[str, float]] = {}  # peer: (post, read at)
        self._failed: dict[int, float] = {}  # peer: when it was first read `fail`
        self._on_lost: Callable[[str], Any] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> str | None:
        """Post this process's sign of life and read the others'; what is lost,
        in words, or `None`."""
        now = self.clock()
        try:
            self._post()
            posts = dict(self.client.key_value_dir_get(_KEY))
        except Exception:
            # The store is in process 0: when that process is gone, JAX's
            # coordination service ends this one at once.
            return None
        for peer in range(self.count):
            if peer == self.me:
                continue
            post = posts.get(f"{_KEY}{peer}", "")
            if post.startswith("fail:"):
                since = self._failed.setdefault(peer, now)
                if now - since >= self.failed_after_s:
                    return (
                        f"process {peer} stopped training on an error; its log names it"
                    )
            else:
                self._failed.pop(peer, None)
            seen = self._seen.get(peer)
            if post and (seen is None or seen[0] != post):
                self._seen[peer] = (post, now)
                continue
            if post.startswith(("idle:", "fail:")):
                continue
            quiet = now - (seen[1] if seen else self._since)
            if quiet >= self.lost_after_s:
                return f"process {peer} has given no sign of life for {quiet:.0f} s"
        return None

    def _post(self) -> None:
        """This process's state, with a new count (a post and a change of state
        are serialised, so that a peer never reads `train` after `idle`)."""
        with self._lock:
            self._n += 1
            self.client.key_value_set(
                f"{_KEY}{self.me}", f"{self.state}:{self._n}", allow_overwrite=True
            )

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="equizoo-peer-watch", daemon=True
        )
        self._thread.start()
        atexit.register(self.stop)  # before JAX's own shutdown of the client

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * self.beat_s)

    def _run(self) -> None:
        while not self._stop.wait(self.beat_s):
            lost = self.beat()
            if lost is None:
                continue
            with self._lock:
                act, self._on_lost = self._on_lost, None
            if act is not None:
                act(lost)

    def watching(self, on_lost: Callable[[str], Any]) -> "_Watching":
        """Context manager: while inside, this process says `train` (`fail`
        after leaving on an exception, until it enters again), and a lost peer
        calls `on_lost(what)` from the watch's thread (once): it is
        expected to end the process, since the main thread may be blocked."""
        return _Watching(self, on_lost)


class _Watching:
    def __init__(self, watch: PeerWatch, on_lost: Callable[[str], Any]):
        self.watch, self.on_lost = watch, on_lost

    def __enter__(self) -> None:
        with self.watch._lock:
            self.watch.state = "train"
            self.watch._on_lost = self.on_lost
        with contextlib.suppress(Exception):
            self.watch._post()

    def __exit__(self, kind: type | None, *exc: object) -> None:
        with self.watch._lock:
            self.watch.state = "idle" if kind is None else "fail"
            self.watch._on_lost = None
        # Said at once, as on entering: this process may end before the next
        # beat, while its peers still train (process 0 writes the last
        # checkpoint).
        with contextlib.suppress(Exception):
            self.watch._post()


def watching(on_lost: Callable[[str], Any]) -> Any:
    """`PeerWatch.watching` of this process's run; nothing for a lone process."""
    return _WATCH[0].watching(on_lost) if _WATCH else contextlib.nullcontext()


def joined() -> Join | None:
    """The run this process joined, if any."""
    return _JOINED[0] if _JOINED else None


def is_main() -> bool:
    """Whether this process records the run: process 0, or a lone process."""
    return not _JOINED or _JOINED[0].process_id == 0
