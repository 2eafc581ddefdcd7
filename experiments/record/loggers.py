"""TensorBoard and Weights & Biases beside Sacred: `log=tensorboard`,
`log=wandb` (or both) of `python -m experiments.run`.

Each is a `Sink` that a `TeeSink` feeds with what the run's Sacred record gets:
every scalar series at the same steps, the config, the artifacts and, when the
run ends, its `info` and status. Sacred's record stays the run's record (its
id, folder, checkpoints and resume); these are copies in the formats the
tools read, written into the run's folder:

- TensorBoard: `<run>/tensorboard/` (`tensorboard --logdir runs` shows every
  run), through `tensorboardX`'s writer; scalars as float64 tensors (as
  TensorFlow 2 writes scalars, in double precision), so the values are
  Sacred's, not rounded to float32 as `add_scalar` would.
- W&B: a run in `<run>/wandb/`, online when W&B has an API key (`wandb login`,
  `WANDB_API_KEY`), else offline (`wandb sync <run>/wandb/offline-run-*` uploads
  it later); `WANDB_MODE` and `WANDB_PROJECT` (default `equizoo`) are honoured.

A sweep logs one run per member: its series (Sacred's `member_<i>.<name>`) go
to `tensorboard/member_<i>/` as `<name>`, and to a W&B run of their own (named
`<run>-member_<i>`, grouped under the sweep's name, with the member's
hyperparameters in its config); the series of the whole sweep
(`perf.steps_per_s`) stay in the sweep's own.
"""

import json
import os
import re
from pathlib import Path
from typing import Any

from experiments._errors import ConfigError
from experiments.record.sink import Sink

LOGGERS = ("tensorboard", "wandb")
"""What `log=` may name, besides Sacred's record, which is always kept."""

_MEMBER = re.compile(r"^member_(\d+)\.(.+)$")


def parse(value: Any) -> tuple[str, ...]:
    """The loggers `log=` names: `None`, `"tensorboard"`, `"wandb"`,
    `"tensorboard,wandb"` or a list of them.

    **Raises:** `ValueError` naming the valid values."""
    if value is None or value == "sacred":
        return ()
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not all(
        isinstance(n, str) for n in names
    ):
        raise ValueError(
            f"expected 'tensorboard', 'wandb' or 'tensorboard,wandb', got {value!r}"
        )
    names = tuple(dict.fromkeys(n.strip() for n in names if n.strip() != "sacred"))
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ValueError(
            f"unknown logger(s) {unknown}; valid: {', '.join(LOGGERS)} (Sacred's "
            "record is always kept)"
        )
    return names


def check_installed(names: tuple[str, ...]) -> None:
    """**Raises:** `ConfigError` with the install command for a logger whose
    package is missing (before anything trains)."""
    import importlib.util

    need = {"tensorboard": "tensorboardX", "wandb": "wandb"}
    missing = [n for n in names if importlib.util.find_spec(need[n]) is None]
    if missing:
        raise ConfigError(
            f"log: {', '.join(missing)} is not installed: pip install -e '.[log]' "
            "(or drop log=)"
        )


def open_loggers(
    names: tuple[str, ...], run_dir: Path | None, config: dict[str, Any], name: str
) -> list[Sink]:
    """A sink per logger, writing into `run_dir`.

    **Raises:** `ConfigError` when there is no run folder (`-u`)."""
    if not names:
        return []
    check_installed(names)
    if run_dir is None:
        raise ConfigError(
            f"log: {', '.join(names)} writes into the run's folder, and this run "
            "records nothing (-u); drop -u or log="
        )
    made: list[Sink] = []
    for logger in names:
        cls = TensorBoardSink if logger == "tensorboard" else WandbSink
        made.append(cls(run_dir, config, name))
    return made


def _member(name: str) -> tuple[int | None, str]:
    match = _MEMBER.match(name)
    if match is None:
        return None, name
    return int(match.group(1)), match.group(2)


def _flat(info: dict[str, Any]) -> dict[str, float]:
    """The numbers of `info` (nested dicts joined with dots)."""
    out: dict[str, float] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in _flat(value).items()})
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = float(value)
    return out


class _Logger(Sink):
    """What the two loggers share: they keep nothing of Sacred's duties."""

    def __init__(self, config: dict[str, Any]):
        self.info = {}
        self.config = dict(config)
        self.members_hp: dict[int, dict[str, Any]] = {}

    @property
    def recording(self) -> bool:
        return True

    def members(self, members: list[dict[str, Any]]) -> None:
        self.members_hp = dict(enumerate(members))

    def close_interrupted(self) -> None:
        self.close("INTERRUPTED", {})

    def close_failed(self, message: str) -> None:
        self.close("FAILED", {})

    def close(self, status: str, info: dict[str, Any]) -> None:
        """End the record with the run's `status` and its `info`."""
        raise NotImplementedError


class TensorBoardSink(_Logger):
    """The run's series as TensorBoard event files in `<run_dir>/tensorboard/`
    (a sweep member's in `member_<i>/` below it); the config, `info` and the
    list of artifacts as text, PNG artifacts as images."""

    def __init__(self, run_dir: Path, config: dict[str, Any], name: str):
        from tensorboardX import SummaryWriter

        super().__init__(config)
        self.logdir = Path(run_dir) / "tensorboard"
        self._writer_class = SummaryWriter
        self._writers: dict[int | None, Any] = {}
        self._artifacts: list[str] = []
        self._closed = False
        text = json.dumps(config, indent=2, default=str)
        self._writer(None).add_text("config", _code(text), 0)

    def _writer(self, member: int | None) -> Any:
        if member not in self._writers:
            where = self.logdir if member is None else self.logdir / f"member_{member}"
            writer = self._writer_class(str(where), flush_secs=30)
            if member is not None and member in self.members_hp:
                hp = json.dumps(self.members_hp[member], indent=2, default=str)
                writer.add_text("member", _code(hp), 0)
            self._writers[member] = writer
        return self._writers[member]

    def log(self, name: str, value: float, step: int) -> None:
        member, tag = _member(name)
        writer = self._writer(member)
        writer._get_file_writer().add_summary(_double_scalar(tag, value), step)

    def artifact(self, path: Path, name: str | None = None) -> None:
        name = name or Path(path).name
        self._artifacts.append(name)
        if Path(path).suffix == ".png":
            import numpy as np
            from PIL import Image

            with Image.open(path) as image:
                pixels = np.asarray(image.convert("RGB"))
            self._writer(None).add_image(name, pixels, 0, dataformats="HWC")

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def where(self) -> str:
        return f"TensorBoard: {self.logdir}"

    def close(self, status: str, info: dict[str, Any]) -> None:
        if self._closed:
            return
        self._closed = True
        main = self._writer(None)
        summary = {"status": status, "artifacts": self._artifacts, **info}
        main.add_text("info", _code(json.dumps(summary, indent=2, default=str)), 0)
        for writer in self._writers.values():
            writer.close()


def _double_scalar(tag: str, value: float) -> Any:
    """A scalar summary as TensorFlow 2 writes one (a tensor tagged for the
    scalars plugin), of dtype float64: `add_scalar` would round it to float32."""
    import importlib

    # Generated protobuf modules, whose classes type checkers cannot see.
    proto: Any = {
        name: importlib.import_module(f"tensorboardX.proto.{name}")
        for name in ("summary_pb2", "tensor_pb2", "types_pb2")
    }
    summary_pb2, tensor_pb2, types_pb2 = (
        proto["summary_pb2"],
        proto["tensor_pb2"],
        proto["types_pb2"],
    )
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, double_val=[value])
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    )
    return summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=metadata)]
    )


def _code(text: str) -> str:
    """Text that TensorBoard shows as written (it renders Markdown)."""
    return "\n".join("    " + line for line in text.splitlines())


def _api_key_set() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import netrc

        hosts = netrc.netrc().hosts
    except (OSError, netrc.NetrcParseError):
        return False
    base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    host = re.sub(r"^https?://", "", base).split("/")[0]
    return host in hosts


class WandbSink(_Logger):
    """The run as a W&B run in `<run_dir>/wandb/`: the config, every series
    (`step`: the env step, as Sacred's), artifacts saved with the run, `info`
    in its summary; one W&B run per sweep member."""

    def __init__(self, run_dir: Path, config: dict[str, Any], name: str):
        import wandb

        super().__init__(config)
        self._wandb = wandb
        self.dir = Path(run_dir)
        self.name = name
        self.mode: Any = os.environ.get("WANDB_MODE") or (
            "online" if _api_key_set() else "offline"
        )
        self.project = os.environ.get("WANDB_PROJECT", "equizoo")
        self._runs: dict[int | None, Any] = {}
        self._closed = False
        self._run(None)

    def _run(self, member: int | None) -> Any:
        if member not in self._runs:
            config = dict(self.config)
            name, group = self.name, None
            if member is not None:
                config.update(member=member, **self.members_hp.get(member, {}))
                name, group = f"{self.name}-member_{member}", self.name
            self._runs[member] = self._wandb.init(
                project=self.project,
                name=name,
                group=group,
                dir=str(self.dir),
                mode=self.mode,
                config=config,
                reinit="create_new",
                settings=self._wandb.Settings(
                    console="off", silent=True, x_disable_stats=True
                ),
            )
        return self._runs[member]

    def log(self, name: str, value: float, step: int) -> None:
        member, tag = _member(name)
        self._run(member).log({tag: value}, step=step)

    def artifact(self, path: Path, name: str | None = None) -> None:
        # A copy in the W&B run's folder (W&B would symlink a file from
        # elsewhere, and warn), saved with the run (uploaded when online).
        import shutil

        run = self._run(None)
        target = Path(run.dir) / (name or Path(path).name)
        shutil.copyfile(path, target)
        run.save(str(target), base_path=run.dir, policy="now")

    def close_interrupted(self) -> None:
        # The process exits at once: W&B's service process already holds
        # everything logged, and ends the run when this process is gone
        # (`finish` would wait for it).
        return None

    def close_failed(self, message: str) -> None:
        return None  # as `close_interrupted`

    def where(self) -> str:
        run = self._runs.get(None)
        where = Path(run.dir).parent if run is not None else self.dir / "wandb"
        return f"W&B ({self.mode}): {where}"

    def close(self, status: str, info: dict[str, Any]) -> None:
        if self._closed:
            return
        self._closed = True
        exit_code = 0 if status == "COMPLETED" else 1
        main = self._runs[None]
        main.summary.update({"status": status, **_flat(info)})
        for run in self._runs.values():
            run.finish(exit_code=exit_code)
