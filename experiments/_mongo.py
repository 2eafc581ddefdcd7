"""`-m [host:port:]db`: a MongoDB observer that fails fast when the server is away.

Sacred's own `-m` builds a `pymongo.MongoClient` with pymongo's 30 s server
selection timeout and first talks to the server when the run starts: a wrong URL
hangs for half a minute, then fails with a traceback. We build the observer
ourselves with a short timeout and ping the server before anything else runs.
Once a run has started, Sacred isolates observer failures (it logs them and
drops the observer), so a database lost mid-run does not stop training or the
file record.
"""

from typing import Any

from ._config import ConfigError
from ._sacred import MongoObserver

TIMEOUT_S = 3.0


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
    try:
        observer = MongoObserver(
            **kwargs,
            serverSelectionTimeoutMS=ms,
            connectTimeoutMS=ms,
        )
        observer.runs.database.client.admin.command("ping")
        # What `-m` said, for the command that resumes the run.
        observer.equizoo_spec = spec  # pyright: ignore[reportAttributeAccessIssue]
    except pymongo.errors.PyMongoError as e:
        reason = str(e).split(", Timeout:")[0].split(" (configured timeouts")[0]
        raise ConfigError(
            f"-m {spec}: cannot reach MongoDB at {where} within {TIMEOUT_S:g} s "
            f"({reason}); start it (see docs/omniboard.md) or drop -m"
        ) from None
    return observer
