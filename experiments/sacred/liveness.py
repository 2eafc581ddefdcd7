"""Records of runs whose process died (SIGKILL, a lost machine): found and marked.

Sacred writes a run's record RUNNING when it starts and its final status when it
ends; a process killed in between leaves it RUNNING forever. Each recorded run
therefore holds an exclusive lock (`fcntl.flock`) on `<run folder>/.running.lock`
from the moment its folder exists (before its record says RUNNING) until its
record says how it ended (`experiments.sacred.observers` wires this into Sacred's file
observer); the kernel releases it when the process ends, however it ends.
Before a new run starts (`python -m experiments.run`, `resume=` too), the
records in its file-record folder and its MongoDB that say RUNNING are checked:

- a record whose lock file can be locked: its process is gone;
- a record without a lock file (another host's run on a shared folder, a file
  system without locks, a run of an equizoo before locks): gone when its last
  heartbeat (Sacred beats every 10 s) is older than `STALE_AFTER_S`.

Each one found is marked INTERRUPTED (its `stop_time`: its last heartbeat) and
named on stderr with the command that resumes it. Its metrics are kept: the
file record's JSON files are replaced atomically (`observers.FileRecords`), and
the record is brought up to date before every checkpoint, so it holds every metric
up to the last complete checkpoint (the resumed run logs the rest again).
"""

import contextlib
import datetime
import fcntl
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

LOCK = ".running.lock"
# A live run beats every 10 s; this leaves room for a machine under load.
STALE_AFTER_S = 300.0
_held: dict[str, Any] = {}  # the locks this process holds, by run folder


def acquire(run_dir: str | Path) -> None:
    """Lock the run folder `run_dir` for this process until `release` (or until
    the process ends, however it ends). The lock file appears already locked
    (locked under a temporary name, then renamed), so no other process finds it
    free while this one lives. Without a lock (a file system that refuses it)
    the record is judged by its heartbeat instead."""
    path = Path(run_dir) / LOCK
    tmp = path.with_name(f"{LOCK}.{os.getpid()}")
    f = None
    try:
        f = tmp.open("w")
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(tmp, path)
    except OSError:
        if f is not None:
            f.close()
        return
    _held[str(run_dir)] = f


def release(run_dir: str | Path) -> None:
    """Let go of `run_dir`'s lock (its record is final now)."""
    f = _held.pop(str(run_dir), None)
    if f is not None:
        f.close()


def _alive_by_lock(run_dir: Path) -> bool | None:
    """Whether the process holding `run_dir`'s lock lives (`None`: no lock file)."""
    path = run_dir / LOCK
    try:
        f = path.open("r")
    except FileNotFoundError:
        return None
    except OSError:
        return True  # cannot tell: take it as alive
    with f:
        if any(os.path.sameopenfile(f.fileno(), h.fileno()) for h in _held.values()):
            return True  # this very process
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return False


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)  # as Sacred


def _last_beat(record: dict[str, Any]) -> datetime.datetime | None:
    for key in ("heartbeat", "start_time"):
        value = record.get(key)
        if isinstance(value, datetime.datetime):
            return value
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return datetime.datetime.fromisoformat(value)
    return None


def _dead(run_dir: Path | None, record: dict[str, Any]) -> str | None:
    """Why the RUNNING `record` (of the folder `run_dir`) belongs to no live
    process, or `None` while it may."""
    alive = None if run_dir is None else _alive_by_lock(run_dir)
    if alive is False:
        return "its process has ended"
    if alive:
        return None
    beat = _last_beat(record)
    if beat is None:
        return None
    age = (_now() - beat).total_seconds()
    if age <= STALE_AFTER_S:
        return None
    return f"no heartbeat for {age / 60:.0f} min"


def _command(run_dir: Path) -> str:
    return shlex.join(["python", "-m", "experiments.run", "with", f"resume={run_dir}"])


def mark_dead_file_records(basedir: str | Path) -> list[Path]:
    """Mark INTERRUPTED every RUNNING file record under `basedir` whose process
    is gone, naming each on stderr. **Returns:** their folders."""
    basedir = Path(basedir)
    if not basedir.is_dir():
        return []
    marked = []
    for run_dir in sorted(
        (p for p in basedir.iterdir() if p.is_dir() and p.name.isdigit()),
        key=lambda p: int(p.name),
    ):
        path = run_dir / "run.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("status") != "RUNNING":
            continue
        why = _dead(run_dir, record)
        if why is None:
            continue
        beat = _last_beat(record)
        record["status"] = "INTERRUPTED"
        record["stop_time"] = (beat or _now()).isoformat()
        tmp = path.with_name("run.json.marking")
        try:
            tmp.write_text(json.dumps(record, sort_keys=True, indent=2))
            os.replace(tmp, path)
        except OSError as e:
            print(
                f"{run_dir}: left RUNNING by a dead process ({why}), and "
                f"could not be marked INTERRUPTED ({e})",
                file=sys.stderr,
            )
            continue
        marked.append(run_dir)
        print(
            f"{run_dir}: left RUNNING by a process that is gone ({why}): marked "
            f"INTERRUPTED. Resume it with: {_command(run_dir)}",
            file=sys.stderr,
            flush=True,
        )
    return marked


def mark_dead_mongo_records(observer: Any, file_dirs: tuple[Path, ...]) -> list[Any]:
    """Mark INTERRUPTED every RUNNING run of the MongoDB `observer`'s collection
    whose process is gone: its file record's lock (under one of `file_dirs`, same
    run number) says so, else its heartbeat's age. **Returns:** their ids."""
    marked = []
    for doc in observer.runs.find(
        {"status": "RUNNING"}, {"_id": 1, "heartbeat": 1, "start_time": 1}
    ):
        run_dir = next(
            (d / str(doc["_id"]) for d in file_dirs if (d / str(doc["_id"])).is_dir()),
            None,
        )
        why = _dead(run_dir, doc)
        if why is None:
            continue
        stop = _last_beat(doc) or _now()
        observer.runs.update_one(
            {"_id": doc["_id"], "status": "RUNNING"},
            {"$set": {"status": "INTERRUPTED", "stop_time": stop}},
        )
        marked.append(doc["_id"])
        print(
            f"MongoDB run {doc['_id']}: left RUNNING by a process that is gone "
            f"({why}): marked INTERRUPTED",
            file=sys.stderr,
            flush=True,
        )
    return marked
