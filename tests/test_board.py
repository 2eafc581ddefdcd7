"""`python -m experiments.board` and the dashboard, end to end: file records
imported into a real MongoDB-wire server, Omniboard (Node.js) serving them on
127.0.0.1, and headless Chromium drawing them.

Node.js, Omniboard and Chromium come from `bash .ci/browser` (part of the test
command); the tests fail, saying so, where they are missing."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from experiments import board
from experiments._errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
TINY = ["total_steps=2000", "eval_episodes=4", "compilation_cache=False"]

pytestmark = [
    pytest.mark.serial,  # servers, a browser and Ctrl-C, with timeouts
    pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sacred"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _listening_on(port: int) -> list[str]:
    """The IPv4 and IPv6 addresses with a socket listening on `port` (Linux's
    /proc/net/tcp{,6}: state 0A is LISTEN)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:
                continue
            if len(address) == 8:
                found.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
            else:
                found.append(address)  # IPv6: any would mean every interface
    return found


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "headless Chromium is missing: bash .ci/browser installs it"
    return found


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, mongo_server):
    """Two short runs (PPO and DQN on CartPole) recorded with -m into a fresh
    database of the real server, and one recorded in files only."""
    from experiments.run import ex

    folder = tmp_path_factory.mktemp("board")
    spec = f"{mongo_server.address}:dashboard"
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        runs = [
            ex.run_commandline(["run.py", "-m", spec, "with", "agent=ppo", *TINY]),
            ex.run_commandline(["run.py", "-m", spec, "with", "agent=dqn", *TINY]),
            ex.run_commandline(["run.py", "with", "agent=dqn", "seed=1", *TINY]),
        ]
    finally:
        os.chdir(cwd)
    assert all(r is not None and r.status == "COMPLETED" for r in runs)
    return folder, spec, runs


def test_import_adds_file_records_once(recorded, mongo_server):
    import pymongo

    folder, spec, runs = recorded
    client = pymongo.MongoClient(mongo_server.address)
    try:
        db = client["dashboard"]
        before = db.runs.count_documents({})
        assert before == 2  # the -m runs
        # A record that cannot be read is named and skipped; the others import.
        broken = folder / "runs" / "9"
        broken.mkdir()
        (broken / "run.json").write_text("{not json")
        imported, present, skipped = board.import_records(folder / "runs", db)
        assert imported == [3] and present == 2
        assert len(skipped) == 1 and "runs/9" in skipped[0], skipped
        shutil.rmtree(broken)
        # Again: nothing new.
        assert board.import_records(folder / "runs", db) == ([], 3, [])

        # PPO's record holds PPO's code and the versions of what computed it.
        ppo = db.runs.find_one({"_id": runs[0]._id})["experiment"]
        assert "zoo/_ppo.py" in dict(ppo["sources"]), ppo["sources"]
        assert any(d.startswith("jax==") for d in ppo["dependencies"])

        doc = db.runs.find_one({"_id": 3})
        assert doc["status"] == "COMPLETED" and doc["config"]["seed"] == 1
        assert doc["result"] == pytest.approx(runs[2].result)
        assert doc["start_time"].year >= 2026  # a date, as Sacred's observer stores
        names = {a["name"] for a in doc["artifacts"]}
        assert "learning_curve.png" in names and "final_state.eqx" in names
        png = next(a for a in doc["artifacts"] if a["name"] == "learning_curve.png")
        assert db["fs.files"].find_one({"_id": png["file_id"]})["contentType"] == (
            "image/png"
        )
        sources = dict(doc["experiment"]["sources"])
        assert "zoo/_dqn.py" in sources
        stored = db["fs.files"].find_one({"_id": sources["zoo/_dqn.py"]})
        assert stored is not None
        metric = db.metrics.find_one({"run_id": 3, "name": "eval.return_mean"})
        assert metric is not None and len(metric["values"]) > 1
        assert {"id": str(metric["_id"]), "name": "eval.return_mean"} in doc["info"][
            "metrics"
        ]
    finally:
        client.close()


def test_dashboard_end_to_end(recorded, tmp_path):
    """Omniboard lists the runs as COMPLETED with their results and metrics, and
    Chromium draws the runs list and a run's metrics plot."""
    folder, spec, runs = recorded
    command = board.find_omniboard()  # fails, naming the install, if missing
    port = _free_port()
    process = board.start_omniboard(command, spec, port, tmp_path / "omniboard.log")
    try:
        # Loopback only.
        assert _listening_on(port) == ["127.0.0.1"]
        api = f"http://127.0.0.1:{port}/sacred/api/v1"
        listed = _get(f"{api}/Runs?select=_id,status,result")
        by_id = {r["_id"]: r for r in listed}
        for run in runs[:2]:
            assert by_id[run._id]["status"] == "COMPLETED"
            assert by_id[run._id]["result"] == pytest.approx(run.result)
            query = urllib.parse.quote(json.dumps({"run_id": run._id}))
            metrics = _get(f"{api}/metrics?query={query}&select=name")
            assert "eval.return_mean" in {m["name"] for m in metrics}

        chromium = _chromium()
        page = f"http://127.0.0.1:{port}/sacred"
        flags = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--virtual-time-budget=15000",
        ]
        dom = subprocess.run(
            [chromium, *flags, "--dump-dom", page],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        assert f"{len(listed)} experiments" in dom, dom[-2000:]
        detail = f"{page}?showDrillDownRunModal=true&runIdToExpand={runs[0]._id}"
        detail += "&runIdStatus=COMPLETED"
        shots = {
            "omniboard_runs.png": (page, "1400,500"),
            "omniboard_metrics.png": (detail, "1400,900"),
        }
        out = FIGURES if os.environ.get("EQUIZOO_FIGURES") else tmp_path
        for name, (url, size) in shots.items():
            path = out / name
            shot = [f"--window-size={size}", f"--screenshot={path}", url]
            subprocess.run(
                [chromium, *flags, *shot],
                capture_output=True,
                timeout=120,
                check=True,
            )
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert path.stat().st_size > 20_000  # drawn, not a blank page
    finally:
        board.stop(process)


def _board(args, cwd, env=None):
    return subprocess.run(
        [sys.executable, "-m", "experiments.board", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("missing", "no such folder"),
        ("empty", "no run records"),
        ("port", "already in use"),
        ("no node", "needs Node.js"),
    ],
)
def test_board_bad_input_is_one_line(tmp_path, case, says):
    (tmp_path / "runs" / "1").mkdir(parents=True)
    (tmp_path / "runs" / "1" / "run.json").write_text("{}")
    args, env = ["runs"], None
    if case == "missing":
        args = ["nowhere"]
    elif case == "empty":
        (tmp_path / "empty").mkdir()
        args = ["empty"]
    elif case == "no node":
        env = {"PATH": str(tmp_path / "bin")}  # no node, no omniboard
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1] if case == "port" else _free_port()
        out = _board([*args, "--port", str(port)], tmp_path, env)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert says in lines[0], lines[0]
    assert not (tmp_path / "runs" / ".board").exists()  # nothing started


def test_missing_omniboard_names_the_install(monkeypatch):
    monkeypatch.setattr(board, "ROOT", Path("/nonexistent"))
    monkeypatch.setattr(
        board.shutil, "which", lambda name: "/usr/bin/node" if name == "node" else None
    )
    with pytest.raises(ConfigError, match="npm install omniboard"):
        board.find_omniboard()


def test_the_board_installs_omniboard_once_where_there_is_none(
    recorded, tmp_path, monkeypatch, capfd
):
    """A fresh clone (no `node_modules`), no `omniboard` on PATH, Node.js and npm
    present: the board installs Omniboard into the per-user cache, saying so on
    one line, and it serves; the next use finds that install and says nothing.
    (npm takes the packages from its cache when `.ci/browser` filled it.)"""
    _, spec, _ = recorded
    monkeypatch.setattr(board, "ROOT", tmp_path / "clone")
    cache = tmp_path / "cache" / "omniboard"
    monkeypatch.setenv("EQUIZOO_OMNIBOARD_DIR", str(cache))
    which = shutil.which
    monkeypatch.setattr(
        board.shutil, "which", lambda name: None if name == "omniboard" else which(name)
    )
    command = board.find_omniboard(install=True)
    assert command[-1] == str(cache / "node_modules/omniboard/dist/start.js")
    said = capfd.readouterr().err.split("\r")[-1].strip()
    assert re.fullmatch(
        rf"Installing Omniboard {board.OMNIBOARD_VERSION} into {cache} with npm "
        r"\(once\) \.\.\. done in \d+ s",
        said,
    ), said
    assert [p.name for p in cache.parent.iterdir()] == ["omniboard"]  # no leftovers
    port = _free_port()
    process = board.start_omniboard(command, spec, port, tmp_path / "omniboard.log")
    try:
        assert _get(f"http://127.0.0.1:{port}/sacred/api/v1/Runs/count")["count"] > 0
    finally:
        board.stop(process)
    assert board.find_omniboard(install=True) == command
    assert capfd.readouterr().err == ""


def test_the_board_refuses_in_one_line_when_omniboard_cannot_be_installed(
    tmp_path, monkeypatch, capfd
):
    """npm missing, or npm unable to reach a registry (an empty npm cache and a
    registry that refuses): one line with the manual command, nothing left in
    the cache folder."""
    monkeypatch.setattr(board, "ROOT", tmp_path / "clone")
    cache = tmp_path / "cache" / "omniboard"
    monkeypatch.setenv("EQUIZOO_OMNIBOARD_DIR", str(cache))
    which = shutil.which
    monkeypatch.setattr(
        board.shutil,
        "which",
        lambda name: None if name in ("omniboard", "npm") else which(name),
    )
    manual = f"npm install --prefix {cache} omniboard@{board.OMNIBOARD_VERSION}"
    with pytest.raises(ConfigError, match=r"npm \(which would install it\) is not"):
        board.find_omniboard(install=True)
    monkeypatch.setattr(
        board.shutil, "which", lambda name: None if name == "omniboard" else which(name)
    )
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        registry = f"http://127.0.0.1:{closed.getsockname()[1]}/"
    monkeypatch.setenv("npm_config_registry", registry)
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "empty-npm-cache"))
    with pytest.raises(ConfigError) as refused:
        board.find_omniboard(install=True)
    message = str(refused.value)
    assert message.startswith("could not install Omniboard (") and "\n" not in message
    assert message.endswith(f"install it yourself: {manual}")
    assert "ECONNREFUSED" in message, message
    assert not cache.exists() and list(cache.parent.iterdir()) == []
    assert capfd.readouterr().err.rstrip().endswith("... failed")


def test_board_imports_serves_and_stops_on_ctrl_c(recorded, tmp_path):
    """The command itself: a local server on a data folder, the import, Omniboard
    answering, and Ctrl-C (SIGINT) stopping all of it."""
    import signal
    import time

    folder, _, runs = recorded
    shutil.copytree(folder / "runs", tmp_path / "runs")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "experiments.board", "--port", str(port)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Omniboard: "):
                break
        assert lines and lines[-1].startswith(f"Omniboard: http://127.0.0.1:{port}/"), (
            lines,
            process.stderr.read() if process.poll() is not None else "",
        )
        assert "Imported 3 run(s)" in "".join(lines), lines
        listed = _get(f"http://127.0.0.1:{port}/sacred/api/v1/Runs?select=_id,status")
        assert sorted(r["_id"] for r in listed) == [1, 2, 3]
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "Stopped Omniboard and the server" in out
    assert _listening_on(port) == []  # Omniboard is gone
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "runs" / ".board") not in ps  # and the server too
    log = (tmp_path / "runs" / ".board" / "db.log").read_text()
    assert "listening on 127.0.0.1:" in log
