"""`log=tensorboard`, `log=wandb`: the run's record copied beside Sacred's, read
back with TensorBoard's event reader and W&B's own reader of an offline run
(`wandb leet inspect --json`). No mocks: the real writers, the real files."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.run import ConfigError

pytest.importorskip("tensorboardX")
pytest.importorskip("wandb")
event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator"
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Where the runs go, with W&B offline and its own folders kept out of the
    user's home."""
    root = tmp_path_factory.mktemp("loggers")
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")
    mp.delenv("WANDB_API_KEY", raising=False)
    for name in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        mp.setenv(name, str(root / name.lower()))
    yield root / "runs"
    mp.undo()


def _train(runs: Path, **config):
    from experiments.run import ex

    config = {"agent": "ppo", "total_steps": 2048, "eval_every": 1024, **config}
    config.update(progress=False, eval_episodes=4, compilation_cache=False)
    run = ex.run(config_updates=config, options={"--file_storage": str(runs)})
    assert run.status == "COMPLETED"
    return runs / str(run._id)


@pytest.fixture(scope="module")
def plain(runs):
    return _train(runs, num_seeds=2, log="tensorboard,wandb")


@pytest.fixture(scope="module")
def sweep(runs):
    return _train(
        runs, sweep={"learning_rate": [1e-3, 3e-3]}, log=["tensorboard", "wandb"]
    )


def _tensorboard(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.util import tensor_util

    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["tensors"]:
        events = acc.Tensors(tag)
        values = [tensor_util.make_ndarray(e.tensor_proto) for e in events]
        out[tag] = [
            (e.step, v.item() if v.ndim == 0 else v)
            for e, v in zip(events, values, strict=True)
        ]
    return out


def _wandb_records(run_dir: Path) -> list[list[dict]]:
    """Each W&B run's records (in `run_dir/wandb/`), read by W&B's reader."""
    found = []
    for folder in sorted((run_dir / "wandb").glob("offline-run-*")):
        out = subprocess.run(
            [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(folder)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        found.append([json.loads(line) for line in out.splitlines() if line.strip()])
    return found


def _history(records: list[dict]) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record.get("type") == "history":
            item = record["history"]["item"]
            for name, value in item.items():
                if not name.startswith("_"):
                    series.setdefault(name, []).append((item["_step"], value))
    return series


def _one(records: list[dict], kind: str) -> dict:
    return next(r[kind] for r in records if r.get("type") == kind)


def _sacred(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {
        n: list(zip(s["steps"], s["values"], strict=True)) for n, s in metrics.items()
    }


def test_tensorboard_and_wandb_get_every_metric_config_and_artifact(plain):
    sacred = _sacred(plain)
    assert {"train.loss", "eval.return_mean", "eval.return.seed_1"} <= set(sacred)
    config = json.loads((plain / "config.json").read_text())
    artifacts = json.loads((plain / "run.json").read_text())["artifacts"]
    assert "final_state.eqx" in artifacts and "learning_curve.png" in artifacts

    # TensorBoard: the same series, values equal (float64) at equal steps.
    board = _tensorboard(plain / "tensorboard")
    texts = {
        t: board.pop(t)[0][1] for t in ("config/text_summary", "info/text_summary")
    }
    assert board == sacred
    shown = json.loads(texts["config/text_summary"][0].decode().replace("\n    ", "\n"))
    assert json.loads(json.dumps(shown)) == config
    info = json.loads(texts["info/text_summary"][0].decode().replace("\n    ", "\n"))
    assert info["status"] == "COMPLETED" and sorted(info["artifacts"]) == sorted(
        artifacts
    )

    # W&B: one offline run, its history Sacred's series, its config Sacred's,
    # every artifact saved with it, ended with exit code 0 and the run's info.
    (records,) = _wandb_records(plain)
    assert _history(records) == sacred
    wandb_config = _one(records, "run")["config"]["update"]
    wandb_config.pop("_wandb")
    assert wandb_config == config
    saved = {
        f["path"]
        for r in records
        if r.get("type") == "files"
        for f in r["files"]["files"]
    }
    assert set(artifacts) <= saved
    assert _one(records, "exit")["exit_code"] == 0
    summary = {}
    for r in records:
        if r.get("type") == "summary":
            summary.update(r["summary"]["update"])
    recorded = json.loads((plain / "info.json").read_text())
    assert summary["status"] == "COMPLETED"
    assert summary["return_iqm"] == recorded["return_iqm"]


def test_a_sweep_logs_one_run_per_member(sweep):
    sacred = _sacred(sweep)
    members = {0: {}, 1: {}}
    for name, series in sacred.items():
        if name.startswith("member_"):
            member, rest = name.split(".", 1)
            members[int(member.removeprefix("member_"))][rest] = series
    assert all("eval.return_mean" in m for m in members.values())

    # TensorBoard: member i's series in member_<i>/, the sweep's own at the top.
    top = _tensorboard(sweep / "tensorboard")
    assert top["perf.steps_per_s"] == sacred["perf.steps_per_s"]
    for i, series in members.items():
        board = _tensorboard(sweep / "tensorboard" / f"member_{i}")
        hp = json.loads(board.pop("member/text_summary")[0][1][0].decode())
        assert hp == {"learning_rate": [1e-3, 3e-3][i]}
        assert board == series

    # W&B: the sweep's run and one run per member, grouped, with its values.
    runs = _wandb_records(sweep)
    assert len(runs) == 3
    by_name = {_one(r, "run")["display_name"]: r for r in runs}
    base = next(n for n in by_name if not n.endswith(("member_0", "member_1")))
    assert _history(by_name[base]) == {"perf.steps_per_s": sacred["perf.steps_per_s"]}
    for i, series in members.items():
        records = by_name[f"{base}-member_{i}"]
        assert _one(records, "run")["run_group"] == base
        config = _one(records, "run")["config"]["update"]
        assert config["member"] == i
        assert config["learning_rate"] == [1e-3, 3e-3][i]
        assert _history(records) == series


def test_bad_log_values_stop_before_training(tmp_path):
    from experiments.run import ex

    base = {"agent": "ppo", "total_steps": 1024, "compilation_cache": False}
    with pytest.raises(ConfigError, match=r"log: unknown logger\(s\) \['nope'\]"):
        ex.run(config_updates={**base, "log": "nope"}, options={"--unobserved": True})
    with pytest.raises(ConfigError, match=r"log: tensorboard writes into the run's"):
        ex.run(
            config_updates={**base, "log": "tensorboard"},
            options={"--unobserved": True},
        )


def test_wandb_goes_offline_without_a_key(monkeypatch, tmp_path):
    from experiments.record import loggers

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.delenv("NETRC", raising=False)
    assert not loggers._api_key_set()
    (tmp_path / ".netrc").write_text("machine api.wandb.ai login user password k\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert loggers._api_key_set()
    monkeypatch.setenv("WANDB_API_KEY", "k")
    assert loggers._api_key_set()
