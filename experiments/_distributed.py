"""One run across several processes: joining them with `jax.distributed`.

The processes of a run are joined before JAX starts a backend, from the
`distributed` config (`coordinator`, `num_processes`, `process_id`) or, when
that is empty, from a cluster's environment (`srun` under SLURM, `mpirun` of
Open MPI) with more than one process. Only process 0 records the run.
"""

import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import Any

from ._errors import DistributedError

KEYS = ("coordinator", "num_processes", "process_id")
# Seconds a process waits for the others to join, as JAX's default.
JOIN_TIMEOUT_S = 300


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


def joined() -> Join | None:
    """The run this process joined, if any."""
    return _JOINED[0] if _JOINED else None


def is_main() -> bool:
    """Whether this process records the run: process 0, or a lone process."""
    return not _JOINED or _JOINED[0].process_id == 0
