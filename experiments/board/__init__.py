"""Browse the recorded runs in Omniboard, with one command.

    python -m experiments.board [RUNS] [--port 9000] [-m HOST:PORT:DB] [--data DIR]

Starts a local MongoDB-wire server (SecantusDB) on a data folder, unless `-m`
names a running MongoDB; imports the file records under `RUNS` (default `runs/`)
that the database does not hold yet, with their config, metrics, artifacts,
captured output and source files; starts Omniboard on 127.0.0.1 and prints its
address. Ctrl-C stops both. Run it again later to import the runs recorded since:
runs already in the database (imported before, or recorded there with `-m`) are
not imported twice.

Needs the `board` extra (`pip install -e '.[board]'`: pymongo and secantusdb)
and Node.js with npm. Omniboard is found in the repository's `node_modules`, a
per-user install (`~/.cache/equizoo/omniboard`) or on `PATH`; where there is
none, the first use installs it there with npm (once). See docs/omniboard.md.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from experiments._errors import ConfigError
from experiments.board.server import stop_process as stop
from experiments.record.folder import CONFIG, INFO, METRICS, OUTPUT, RECORD, RunFolder
from experiments.sacred import mongo as _mongo
from experiments.sacred.experiment import CONTENT_TYPES, ROOT

LOOPBACK_JS = Path(__file__).parent / "loopback.js"
NODE_INSTALL = "apt-get install nodejs npm (or https://nodejs.org)"
OMNIBOARD_INSTALL = f"npm install omniboard (in {ROOT}) or npm install -g omniboard"


# -- importing file records ---------------------------------------------------


def _time(value: Any) -> Any:
    """A record's ISO time string as the datetime Sacred's MongoDB observer stores."""
    if isinstance(value, str):
        try:
            return datetime.datetime.fromisoformat(value)
        except ValueError:
            return value
    return value


def _same_time(a: Any, b: Any) -> bool:
    """Equal to the millisecond (MongoDB's precision)."""
    if not isinstance(a, datetime.datetime) or not isinstance(b, datetime.datetime):
        return False
    return abs((a.replace(tzinfo=None) - b.replace(tzinfo=None)).total_seconds()) < 1e-3


def record_folders(runs: Path) -> list[Path]:
    """The run folders under `runs` (`<number>/`), by number."""
    return [folder.path for folder in RunFolder.numbered(runs)]


def _document(folder: Path, db: Any, fs: Any, _id: int) -> tuple[dict, list[dict]]:
    """The run document Sacred's MongoDB observer would have written for the
    file record `folder`, numbered `_id`, and its metrics. Puts the artifacts
    and sources into GridFS."""
    record = RunFolder(folder)
    run = json.loads((folder / RECORD).read_text())
    config = json.loads((folder / CONFIG).read_text())
    info = record.read(INFO, {})
    cout = folder / OUTPUT
    metrics = record.read(METRICS, {})
    experiment = dict(run["experiment"])
    sources = []
    for name, stored in experiment.get("sources", []):
        data = (folder.parent / stored).read_bytes()
        path = os.path.join(experiment.get("base_dir", ""), name)
        sources.append([name, _mongo.put_source(fs, path, data)])
    experiment["sources"] = sources
    artifacts = []
    for name in run.get("artifacts", []):
        path = folder / name
        if not path.is_file():
            continue
        content_type = CONTENT_TYPES.get(
            path.suffix.lower(), "application/octet-stream"
        )
        file_id = fs.put(
            path.read_bytes(),
            filename=f"artifact://runs/{_id}/{name}",
            content_type=content_type,
        )
        artifacts.append({"name": name, "file_id": file_id})
    doc = {k: v for k, v in run.items() if k not in ("artifacts", "experiment")}
    doc.update(
        _id=_id,
        experiment=experiment,
        config=config,
        info=info,
        artifacts=artifacts,
        captured_out=cout.read_text(errors="replace") if cout.exists() else "",
    )
    for key in ("start_time", "heartbeat", "stop_time"):
        doc[key] = _time(doc.get(key))
    doc.setdefault("meta", {})["file_record"] = str(folder.resolve())
    entries = [
        {
            "run_id": _id,
            "name": name,
            "steps": list(m.get("steps", [])),
            "timestamps": [_time(t) for t in m.get("timestamps", [])],
            "values": list(m.get("values", [])),
        }
        for name, m in metrics.items()
    ]
    return doc, entries


def import_records(runs: Path, db: Any) -> tuple[list[int], int, list[str]]:
    """Import the file records under `runs` that `db` does not hold.

    A record is already there if a run was imported from its folder before, or
    if the database's run of the same number started at the same time (recorded
    there with `-m`). An imported run keeps its folder's number where the
    database has it free, else takes the next free one.

    **Returns:** the numbers given to the imported runs, how many were already
    there, and one line per record that could not be read (skipped).
    """
    import gridfs
    import pymongo

    from experiments.sacred.observers import force_bson_encodeable

    fs = gridfs.GridFS(db)
    imported, present, skipped = [], 0, []
    for folder in record_folders(runs):
        where = str(folder.resolve())
        try:
            run = json.loads((folder / RECORD).read_text())
            start = _time(run.get("start_time"))
            if db.runs.find_one({"meta.file_record": where}, {"_id": 1}):
                present += 1
                continue
            same = db.runs.find_one({"_id": int(folder.name)}, {"start_time": 1})
            if same is not None and _same_time(same.get("start_time"), start):
                present += 1
                continue
            _id = int(folder.name)
            if same is not None:
                last = db.runs.find_one(
                    {}, {"_id": 1}, sort=[("_id", pymongo.DESCENDING)]
                )
                _id = max(_id, int(last["_id"])) + 1
            doc, metrics = _document(folder, db, fs, _id)
        except (OSError, ValueError, KeyError, TypeError) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            skipped.append(f"skipped {folder}: cannot read its record ({reason})")
            continue
        ids = []
        if metrics:
            ids = db.metrics.insert_many(metrics).inserted_ids
        doc["info"]["metrics"] = [
            {"id": str(i), "name": m["name"]} for i, m in zip(ids, metrics, strict=True)
        ]
        db.runs.insert_one(force_bson_encodeable(doc))
        imported.append(_id)
    return imported, present, skipped


# -- the processes --------------------------------------------------------------


OMNIBOARD_VERSION = "2.16.1"
"""The Omniboard the board installs when none is found (the one it is tested with)."""


def omniboard_cache() -> Path:
    """Where the board installs Omniboard when none is found:
    `$EQUIZOO_OMNIBOARD_DIR`, else `~/.cache/equizoo/omniboard` (under
    `$XDG_CACHE_HOME` when set)."""
    if os.environ.get("EQUIZOO_OMNIBOARD_DIR"):
        return Path(os.environ["EQUIZOO_OMNIBOARD_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "equizoo" / "omniboard"


def _start_js(prefix: Path) -> Path:
    return prefix / "node_modules" / "omniboard" / "dist" / "start.js"


def find_omniboard(install: bool = False) -> list[str]:
    """The command that starts Omniboard through Node.js, loopback-bound: the
    repository's `node_modules`, the per-user install (`omniboard_cache()`), or
    an `omniboard` on `PATH`; with `install`, none found, it installs Omniboard
    into the per-user cache with npm first (`install_omniboard`).

    **Raises:** `ConfigError` naming what to install if Node.js is missing, or
    Omniboard is and cannot be installed.
    """
    node = shutil.which("node")
    if node is None:
        raise ConfigError(
            f"Omniboard needs Node.js, which is not installed: {NODE_INSTALL}"
        )
    candidates = [_start_js(ROOT), _start_js(omniboard_cache())]
    on_path = shutil.which("omniboard")
    if on_path is not None:
        candidates.append(Path(on_path).resolve())
    for start in candidates:
        if start.is_file():
            return [node, "-r", str(LOOPBACK_JS), str(start)]
    if not install:
        raise ConfigError(f"Omniboard is not installed: {OMNIBOARD_INSTALL}")
    start = install_omniboard(omniboard_cache())
    return [node, "-r", str(LOOPBACK_JS), str(start)]


def install_omniboard(prefix: Path, timeout_s: float = 600.0) -> Path:
    """Install Omniboard `OMNIBOARD_VERSION` with npm into `prefix` (a folder of
    its own, made whole or not at all: npm installs into a temporary folder
    beside it, renamed when complete), saying so on one line on stderr with
    the seconds elapsed. npm reuses its cache (`--prefer-offline`).

    **Returns:** Omniboard's `start.js`.

    **Raises:** `ConfigError` in one line with the manual command when npm is
    missing, or fails (offline, no registry), or takes over `timeout_s`.
    """
    manual = f"npm install --prefix {prefix} omniboard@{OMNIBOARD_VERSION}"
    npm = shutil.which("npm")
    if npm is None:
        raise ConfigError(
            f"Omniboard is not installed, and npm (which would install it) is not "
            f"either: {NODE_INSTALL}; then {manual}"
        )
    import tempfile
    import threading

    prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".omniboard-", dir=prefix.parent))
    command = [
        npm,
        "install",
        "--prefix",
        str(tmp),
        "--no-audit",
        "--no-fund",
        "--prefer-offline",
        "--loglevel=error",
        "--fetch-retries=1",
        "--fetch-retry-mintimeout=2000",
        "--fetch-retry-maxtimeout=10000",
        f"omniboard@{OMNIBOARD_VERSION}",
    ]
    what = f"Installing Omniboard {OMNIBOARD_VERSION} into {prefix} with npm (once)"
    done = threading.Event()
    t0 = time.monotonic()

    def show() -> None:  # the one line, with the seconds elapsed
        while not done.wait(1.0):
            print(
                f"\r{what} ... {time.monotonic() - t0:.0f} s",
                end="",
                file=sys.stderr,
                flush=True,
            )

    print(f"{what} ...", end="", file=sys.stderr, flush=True)
    ticker = threading.Thread(target=show, daemon=True)
    ticker.start()
    try:
        out = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        failed = None if out.returncode == 0 else _npm_error(out.stderr)
    except subprocess.TimeoutExpired:
        failed = f"npm took over {timeout_s:.0f} s"
    finally:
        done.set()
        ticker.join()
    start = _start_js(tmp)
    if failed is None and not start.is_file():
        failed = "npm finished, but Omniboard's start.js is not where it should be"
    if failed is not None:
        print(f"\r{what} ... failed", file=sys.stderr, flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(
            f"could not install Omniboard ({failed}); install it yourself: {manual}"
        )
    try:
        tmp.rename(prefix)
    except OSError:  # another board installed it meanwhile (or a stale folder)
        shutil.rmtree(tmp, ignore_errors=True)
        if not _start_js(prefix).is_file():
            raise ConfigError(
                f"could not install Omniboard: {prefix} exists without it; remove "
                f"it and run again, or: {manual}"
            ) from None
    print(
        f"\r{what} ... done in {time.monotonic() - t0:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return _start_js(prefix)


def _npm_error(stderr: str) -> str:
    """npm's error in a few words: its first `npm error` line with a code."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in lines:
        if "code" in line or "ENOTFOUND" in line or "ECONNREFUSED" in line:
            return line
    return lines[0] if lines else "npm failed without a message"


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As Node.js binds: a port whose last connections linger is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_omniboard(
    command: list[str], mongo: str, port: int, log: Path, timeout_s: float = 60.0
) -> subprocess.Popen[bytes]:
    """Omniboard on 127.0.0.1:`port` reading `mongo` (`host:port:db`), answering.

    **Raises:** `ConfigError` with its log's last line if it exits or does not
    answer within `timeout_s`.
    """
    env = dict(os.environ, PORT=str(port), NODE_ENV="production")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*command, "-m", mongo],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/sacred/api/v1/Runs/count"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return process
        except OSError:
            time.sleep(0.2)
    lines = log.read_text(errors="replace").strip().splitlines()
    stop(process)
    last = lines[-1] if lines else "no output"
    raise ConfigError(f"Omniboard did not start on port {port}: {last} (log: {log})")


# -- the command ------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.board",
        description=(
            "Import the file records under RUNS into MongoDB (a local server on "
            "--data, or -m) and browse them in Omniboard on 127.0.0.1. Ctrl-C "
            "stops everything it started."
        ),
    )
    parser.add_argument(
        "runs", nargs="?", default="runs", help="the run records (runs)"
    )
    parser.add_argument(
        "--port", type=int, default=9000, help="Omniboard's port (9000)"
    )
    parser.add_argument(
        "-m",
        "--mongo-db",
        help="an existing MongoDB as HOST:PORT:DB instead of the local server",
    )
    parser.add_argument(
        "--data",
        help="the local server's data folder (default: RUNS/.board); kept between uses",
    )
    return parser


def _check(args: argparse.Namespace) -> tuple[Path, list[str]]:
    """Everything that can be wrong before anything starts, one line each."""
    runs = Path(args.runs)
    if not runs.is_dir():
        raise ConfigError(
            f"{runs}: no such folder; record a run first (python -m experiments.run)"
        )
    if not record_folders(runs):
        raise ConfigError(
            f"{runs}: no run records (<number>/run.json) in this folder; record a run "
            "first (python -m experiments.run) or name the folder that holds them"
        )
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port}: expected a port number, 1-65535")
    if not port_free(args.port):
        raise ConfigError(
            f"--port {args.port}: already in use on 127.0.0.1; choose another "
            "(--port 9001) or stop what listens there"
        )
    if args.mongo_db is None:
        from experiments.board import server as _mongo_server

        if not _mongo_server.available():
            raise ConfigError(
                "the local MongoDB server needs secantusdb: pip install -e '.[board]' "
                "(or give -m HOST:PORT:DB)"
            )
    # Last: where none is found, Omniboard is installed (once, with npm).
    omniboard = find_omniboard(install=True)
    return runs, omniboard


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _database(args: Any, runs: Path) -> tuple[Any, str]:
    """`(local server or None, host:port:db)`: the MongoDB `--mongo-db` names
    (checked reachable), else a SecantusDB server started on `runs`' data."""
    if args.mongo_db is None:
        from experiments.board.server import LocalServer

        data = Path(args.data) if args.data else runs / ".board"
        server = LocalServer(data / "db").start()
        print(f"MongoDB (SecantusDB) on {server.address}, data in {data}", flush=True)
        return server, f"{server.address}:equizoo"
    _mongo.mongo_observer(args.mongo_db)._close()  # reachable, or one line
    spec = args.mongo_db
    return None, spec if ":" in spec else f"localhost:27017:{spec}"


def _import(runs: Path, spec: str) -> None:
    """Import the file records of `runs` into the database `spec`, saying how many."""
    import pymongo

    host, port, db_name = spec.rsplit(":", 2)
    client = pymongo.MongoClient(host, int(port), serverSelectionTimeoutMS=5000)
    try:
        imported, present, skipped = import_records(runs, client[db_name])
    finally:
        client.close()
    for line in skipped:
        print(line, file=sys.stderr)
    print(
        f"Imported {len(imported)} run(s) from {runs} into {spec}; "
        f"{present} already there",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    server = omniboard = None
    try:
        runs, command = _check(args)
        server, spec = _database(args, runs)
        _import(runs, spec)
        log = (server.storage.parent if server else runs) / "omniboard.log"
        omniboard = start_omniboard(command, spec, args.port, log)
        print(
            f"Omniboard: http://127.0.0.1:{args.port}/sacred  (Ctrl-C stops it"
            + (" and the server)" if server else ")"),
            flush=True,
        )
        # Ctrl-C (even where a launcher ignored SIGINT) and SIGTERM stop it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
        while omniboard.poll() is None:
            time.sleep(0.5)
        print(f"Omniboard exited ({omniboard.returncode}); see {log}", file=sys.stderr)
        return 1
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("Stopped Omniboard" + (" and the server" if server else ""), flush=True)
        return 0
    finally:
        stop(omniboard)
        if server is not None:
            server.stop()
