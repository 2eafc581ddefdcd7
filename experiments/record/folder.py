"""A run's folder and the header of the states saved in it: the one place that
knows the layout.

    runs/<id>/
      config.json run.json info.json metrics.json cout.txt   Sacred's file record
      checkpoints/<env steps>/state.eqx, meta.json           a run; a one-program sweep
      checkpoints/program_<i>/<env steps>/                   a sweep of several programs
      final_state.eqx, final_state.json                      the final state (artifacts)
      eval_returns.json, learning_curve.png, members.json ...

Every checkpoint's `meta.json` and the `final_state.json` hold a `Header` (and
a checkpoint, its `env_steps`). `Header.read` takes every header written so
far, so old runs still load and resume. Importing this module imports neither
Sacred nor JAX.
"""

import dataclasses
import json
from pathlib import Path
from typing import Any

CONFIG = "config.json"
RECORD = "run.json"
INFO = "info.json"
METRICS = "metrics.json"
OUTPUT = "cout.txt"
CHECKPOINTS = "checkpoints"
FINAL_STATE = "final_state.eqx"
FINAL_META = "final_state.json"


@dataclasses.dataclass(frozen=True)
class Header:
    """What a saved training state records about the run that wrote it: enough
    to rebuild its agent, env and the state's structure (`experiments.load_run`)
    and to continue it (`resume=`).

    Fields a run folder of an older equizoo lacks read as: `env_params` `{}`
    (before env parameters), `num_runs` `None` (before sweeps: `num_seeds`
    runs), `plan`, `sweep` and `run_id` `None`, `config` `{}`.
    """

    agent: str
    env: str
    hp: dict[str, Any]
    seed: int
    num_seeds: int
    num_envs: int
    total_steps: int
    env_params: dict[str, Any] = dataclasses.field(default_factory=dict)
    num_runs: int | None = None  # a sweep's program: members x seeds
    plan: dict[str, Any] | None = None  # {"chunks": [n, iterations], "total_steps"}
    sweep: dict[str, Any] | None = None  # a sweep's program: index, floats, members
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    run_id: Any = None

    @property
    def runs(self) -> int:
        """Runs the state holds along its leading axis (members x seeds)."""
        return self.num_runs or self.num_seeds

    def to_json(self) -> dict[str, Any]:
        """The header as written (keys in this order; absent ones left out)."""
        out: dict[str, Any] = {
            "agent": self.agent,
            "env": self.env,
            "env_params": self.env_params,
            "hp": self.hp,
            "seed": self.seed,
            "num_seeds": self.num_seeds,
        }
        if self.num_runs is not None:
            out["num_runs"] = self.num_runs
        out.update(num_envs=self.num_envs, total_steps=self.total_steps)
        out["plan"] = self.plan
        if self.sweep is not None:
            out["sweep"] = self.sweep
        out.update(config=self.config, run_id=self.run_id)
        return out

    @classmethod
    def from_json(cls, meta: dict[str, Any]) -> "Header":
        """The header of a `meta.json` or `final_state.json` of any equizoo so
        far (extra keys, such as a checkpoint's `env_steps`, are ignored).

        **Raises:** `ValueError` naming the first required key it lacks."""
        names = {f.name for f in dataclasses.fields(cls)}
        for field in dataclasses.fields(cls):
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
                and field.name not in meta
            ):
                raise ValueError(f"the header records no {field.name!r}")
        given = {k: v for k, v in meta.items() if k in names and v is not None}
        return cls(**given)

    @classmethod
    def read(cls, path: Path) -> "Header":
        return cls.from_json(json.loads(Path(path).read_text()))


class RunFolder:
    """One run's folder (`runs/<id>`): its record, checkpoints and final state."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    @property
    def checkpoints(self) -> Path:
        """Where the run's checkpoints go (`checkpoints/<env steps>/`)."""
        return self.path / CHECKPOINTS

    def program_checkpoints(self, index: int, programs: int) -> Path:
        """Where program `index` of a sweep of `programs` programs checkpoints."""
        return (
            self.checkpoints / f"program_{index}" if programs > 1 else self.checkpoints
        )

    def latest_checkpoint(self) -> Path | None:
        """The newest complete checkpoint, if any."""
        import runners

        return runners.latest_checkpoint(self.checkpoints)

    def checkpointed_steps(self) -> int | None:
        """The env steps of the newest checkpoint whose `meta.json` is written
        (the last file a checkpoint writes), without importing JAX."""
        steps = [
            int(p.name)
            for p in self.checkpoints.glob("[0-9]*")
            if p.name.isdigit() and (p / "meta.json").is_file()
        ]
        return max(steps, default=None)

    def is_record(self) -> bool:
        """Whether Sacred's file observer recorded a run here."""
        return (self.path / CONFIG).is_file() and (self.path / RECORD).is_file()

    def read(self, name: str, default: Any = None) -> Any:
        """The JSON file `name` of the folder (`default` when absent)."""
        path = self.path / name
        return json.loads(path.read_text()) if path.is_file() else default

    def config(self) -> Any:
        return self.read(CONFIG)

    def record(self) -> Any:
        return self.read(RECORD)

    def saved_state(self) -> tuple[Path, Path]:
        """`(state file, header file)` of the final state, else of the newest
        checkpoint; or of the checkpoint folder this is.

        **Raises:** `FileNotFoundError` for a folder with nothing to load."""
        import runners

        path = self.path
        if (path / runners.META_FILE).is_file():
            return path / runners.STATE_FILE, path / runners.META_FILE
        if (path / FINAL_META).is_file() and (path / FINAL_STATE).is_file():
            return path / FINAL_STATE, path / FINAL_META
        latest = self.latest_checkpoint()
        if latest is not None:
            return latest / runners.STATE_FILE, latest / runners.META_FILE
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: no such run folder or checkpoint")
        raise FileNotFoundError(
            f"{path}: no final state ({FINAL_STATE}) and no checkpoint: the run was "
            "stopped before its first checkpoint, or is not an equizoo run folder"
        )

    @staticmethod
    def numbered(runs: Path) -> list["RunFolder"]:
        """The run folders `runs/<number>/`, by number."""
        found = [p for p in runs.iterdir() if p.is_dir() and p.name.isdigit()]
        return [RunFolder(p) for p in sorted(found, key=lambda p: int(p.name))]
