"""`-m [host:port:]db`: a MongoDB observer that fails fast when the server is away.

Sacred's own `-m` builds a `pymongo.MongoClient` with pymongo's 30 s server
selection timeout and first talks to the server when the run starts: a wrong URL
hangs for half a minute, then fails with a traceback. We build the observer
ourselves with a short timeout and ping the server before anything else runs.
Once a run has started, Sacred isolates observer failures (it logs them and
drops the observer), so a database lost mid-run does not stop training or the
file record.

The database numbers a run, and the file record (`runs/<id>/`, kept next to it)
takes the same number. Sacred's observer would number it after the database's
runs only, and a `runs/` folder holding other runs (recorded without `-m`, or
into another database) would then already have that folder: the run failed to
start. Ours numbers it after both.
"""

import hashlib
import os
from pathlib import Path
from typing import Any

from experiments._errors import ConfigError
from experiments.sacred.observers import MongoObserver

TIMEOUT_S = 3.0


def _last_run_id(folder: Path) -> int:
    """The largest run number recorded under a file observer's `folder`."""
    try:
        names = [p.name for p in folder.iterdir() if p.is_dir()]
    except OSError:  # not there yet
        return 0
    return max((int(n) for n in names if n.isdigit()), default=0)


def put_source(fs: Any, path: str, data: bytes) -> Any:
    """The GridFS id of a source file `path` with contents `data`, stored once
    per content: a file already there with the same name and md5 is reused."""
    md5 = hashlib.md5(data).hexdigest()
    found = fs.find_one({"filename": path, "md5": md5})
    if found is not None:
        return found._id
    return fs.put(data, filename=path, md5=md5, content_type="text/plain")


class _Observer(MongoObserver):
    """Sacred's `MongoObserver`, numbering a new run after every run of the
    database and of the file records in `equizoo_file_dirs`."""

    equizoo_file_dirs: tuple[Path, ...] = ()

    def insert(self):
        entry = self.run_entry
        assert isinstance(entry, dict)  # set by `started_event` before this
        if self.overwrite or entry.get("_id") is not None:
            return super().insert()
        import pymongo
        import pymongo.errors

        last = self.runs.find_one({}, {"_id": 1}, sort=[("_id", pymongo.DESCENDING)])
        candidate = max(
            [last["_id"] + 1 if last and isinstance(last["_id"], int) else 1]
            + [_last_run_id(d) + 1 for d in self.equizoo_file_dirs]
        )
        while True:  # another process may take a number first
            entry["_id"] = candidate
            try:
                return super().insert()
            except pymongo.errors.DuplicateKeyError:
                candidate += 1

    def save_sources(self, ex_info):
        # Sacred's looks a source up by name and md5 to store it once, but
        # pymongo 4 no longer records an md5: every run stored every source.
        base_dir = ex_info["base_dir"]
        out = []
        for name, _md5 in ex_info["sources"]:
            path = os.path.join(base_dir, name)
            with open(path, "rb") as f:
                out.append([name, put_source(self.fs, path, f.read())])
        return out

    # Sacred's `final_save` tries ten times, a second apart, each try waiting out
    # the server selection timeout (TIMEOUT_S, in which pymongo keeps looking for
    # the server): 40 s at the end of a run whose server went away. Two tries
    # cover a blip; the file record beside it holds the run either way.
    def final_save(self, attempts):
        return super().final_save(min(attempts, 2))

    # The run is over after any of these: let go of the client (and its sockets).
    def completed_event(self, *args, **kwargs):
        try:
            return super().completed_event(*args, **kwargs)
        finally:
            self._close()

    def interrupted_event(self, *args, **kwargs):
        try:
            return super().interrupted_event(*args, **kwargs)
        finally:
            self._close()

    def failed_event(self, *args, **kwargs):
        try:
            return super().failed_event(*args, **kwargs)
        finally:
            self._close()

    def _close(self):
        self.runs.database.client.close()


def mongo_observer(spec: str) -> Any:
    """A `MongoObserver` for the `-m` argument `spec`, its server reachable.

    **Raises:** `ConfigError` (one line) if `spec` is malformed, pymongo is missing,
    or the server does not answer within `TIMEOUT_S` seconds.
    """
    import re

    from sacred.observers.mongo import get_pattern, parse_mongo_db_arg

    if not isinstance(spec, str) or re.match(get_pattern(), spec) is None:
        raise ConfigError(
            f"-m {spec}: expected [host:port:]db_name, e.g. localhost:27017:equizoo"
        )
    try:
        import pymongo
        import pymongo.errors
    except ImportError:
        raise ConfigError(
            f"-m {spec}: MongoDB needs pymongo (pip install 'equizoo[mongo]')"
        ) from None
    kwargs = parse_mongo_db_arg(spec)
    where = kwargs.get("url") or "localhost:27017"
    ms = int(TIMEOUT_S * 1000)
    observer = None
    try:
        observer = _Observer(
            **kwargs,
            serverSelectionTimeoutMS=ms,
            connectTimeoutMS=ms,
        )
        observer.runs.database.client.admin.command("ping")
        # What `-m` said, for the command that resumes the run.
        observer.equizoo_spec = spec  # pyright: ignore[reportAttributeAccessIssue]
    except pymongo.errors.PyMongoError as e:
        if observer is not None:
            observer._close()
        reason = str(e).split(", Timeout:")[0].split(" (configured timeouts")[0]
        raise ConfigError(
            f"-m {spec}: cannot reach MongoDB at {where} within {TIMEOUT_S:g} s "
            f"({reason}); start it (see docs/omniboard.md) or drop -m"
        ) from None
    return observer
