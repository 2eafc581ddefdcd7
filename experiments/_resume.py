"""Resuming a recorded run: its config, its newest checkpoint, the plan that
continues it, and the command that resumes it after a stop."""

import copy
import functools
import signal
import sys
from pathlib import Path
from typing import Any

from experiments import _distributed
from experiments._errors import ConfigError
from experiments._interrupt import Interrupted
from experiments.record.folder import RunFolder


def resume_checkpoint(resume: Any, *, quiet: bool = False) -> Path:
    """The newest checkpoint of the run folder `resume` that verifies: its
    `meta.json` and `state.eqx` match their checksums, and `state.eqx` holds what
    `meta.json` lists. A damaged or incomplete newer one is passed over with a
    line on stderr that names it and the one used instead (`quiet`: no line).

    **Raises:** `ConfigError` naming `resume` and what is wrong.
    """
    if not isinstance(resume, str | Path) or not str(resume):
        raise ConfigError(
            f"resume: expected a run folder (e.g. runs/1), got {resume!r}"
        )
    run_dir = Path(resume)
    if not run_dir.is_dir():
        raise ConfigError(f"resume: no run folder {str(run_dir)!r}")
    root = RunFolder(run_dir).checkpoints
    path, damaged = _newest_verified(root)
    if path is None and not damaged:
        raise ConfigError(
            f"resume: {str(run_dir)!r} has no checkpoint (nothing complete in "
            f"{str(root)!r})"
        )
    if path is None:
        raise ConfigError(
            f"resume: no checkpoint of {str(run_dir)!r} verifies; the newest: "
            f"{damaged[0]}"
        )
    if damaged and not quiet:
        print(
            f"resume: {damaged[0]}; resuming from {path}, the newest checkpoint that "
            f"verifies ({len(damaged)} newer one(s) passed over)",
            file=sys.stderr,
            flush=True,
        )
    return path


def _newest_verified(root: Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint folder under `root` that verifies and records a
    run config, and why each newer one was passed over. A folder a write left
    unfinished (a temporary name) is not a checkpoint; one named by its env
    steps is, and is checked."""
    import runners

    if not root.is_dir():
        return None, []
    numbered = [p for p in root.iterdir() if p.is_dir() and p.name.isdigit()]
    damaged = []
    for path in sorted(numbered, key=lambda p: int(p.name), reverse=True):
        try:
            meta = runners.read_meta(path)
            runners.verify_checkpoint(path, meta)
        except runners.CheckpointError as e:
            damaged.append(str(e))
            continue
        if not isinstance(meta.get("config"), dict):
            damaged.append(f"{str(path)!r} records no run config")
            continue
        return path, damaged
    return None, damaged


@functools.lru_cache(maxsize=8)
def _resumed_config(resume: str) -> dict[str, Any] | None:
    import runners

    try:
        meta = runners.read_meta(resume_checkpoint(resume, quiet=True))
    except (ConfigError, runners.CheckpointError):
        return None
    config = meta.get("config")
    return config if isinstance(config, dict) else None


def resumed(resume: Any, key: str, default: Any) -> Any:
    """For the config scope: `key` of the config of the run `resume` continues,
    else `default` (no `resume`, or one `validate` will reject)."""
    if not isinstance(resume, str) or not resume:
        return default
    config = _resumed_config(resume)
    if config is None or key not in config:
        return default
    return copy.deepcopy(config[key])


def checkpoint_meta(latest: Path) -> dict[str, Any]:
    import runners

    meta = runners.read_meta(latest)
    for key in ("env_steps", "plan", "config"):
        if key not in meta:
            raise ConfigError(f"resume: {str(latest)!r} records no {key!r}")
    return meta


def load(
    resume: str,
    agent: Any,
    env: Any,
    config: dict[str, Any],
    chunks: tuple[int, int],
) -> tuple[Any, tuple[int, int], dict[str, Any]]:
    """The carry of the newest checkpoint of the run folder `resume`, the plan
    that continues it to `config["total_steps"]`, and what `info.resumed_from`
    records."""
    import math

    import runners

    latest = resume_checkpoint(resume)
    like = template(agent, env, config)
    try:
        state, meta = runners.load_checkpoint(
            latest, like, expect={"agent": config["agent"], "env": config["env"]}
        )
    except runners.CheckpointError as e:
        raise ConfigError(f"resume: {e}") from None
    num_chunks, chunk_iters = meta["plan"]["chunks"]
    # The original's chunks, so that evaluations and metrics fall where they
    # did; more of them if total_steps grew.
    iterations = runners.num_iterations(
        agent, config["num_envs"], config["total_steps"]
    )
    num_chunks = max(num_chunks, math.ceil(iterations / chunk_iters))
    info = {
        "run_dir": str(resume),
        "checkpoint": str(latest),
        "env_steps": int(meta["env_steps"]),
        "run_id": meta.get("run_id"),
    }
    return state, (num_chunks, chunk_iters), info


def template(agent: Any, env: Any, config: dict[str, Any]) -> Any:
    """Shapes and dtypes of the training carry the run `config` records (no
    computation)."""
    import runners

    return runners.state_template(
        agent,
        env,
        num_envs=config["num_envs"],
        total_steps=config["total_steps"],
        num_seeds=config.get("num_runs") or num_runs(config, agent),
    )


def num_runs(config: dict[str, Any], agent: Any) -> int:
    """Runs of a (one-program) sweep's state: members x seeds; else seeds."""
    if not (config.get("sweep") or config.get("sweep_samples")):
        return config["num_seeds"]
    from experiments.sweeps import members as _members

    members, _ = _members.of_config(config, agent)
    return len(members) * config["num_seeds"]


def peer_lost(sink: Any, error: Exception, last: Path | None) -> str:
    """What a process says when another of its run is lost; `last`: the newest
    complete checkpoint; `sink`: the run's record (`experiments.record.sink.Sink`)."""
    if not _distributed.is_main():
        return (
            f"{error}; resume from the last checkpoint in process 0's run folder "
            "(`with resume=<run folder>` on every process)"
        )
    if last is None:
        return f"{error}; no checkpoint yet, so start the run again"
    return (
        f"{error}; the last checkpoint is {last}. Resume with, on every process "
        f"(its distributed settings as before):\n  {sink.resume_command()}"
    )


def interrupted(sink: Any, signum: int | None, checkpoint: Path | None) -> None:
    """Raise `Interrupted` for a run stopped by signal `signum` (`None`: one sent
    to another process of a multi-process run), naming its checkpoint and the
    command that resumes its record `sink`."""
    name = "another process's signal" if signum is None else signal.Signals(signum).name
    signum = signal.SIGINT if signum is None else signum
    if not _distributed.is_main():
        message = f"{name}: training stopped; process 0 wrote the checkpoint"
    elif checkpoint is None:
        message = f"{name}: training stopped; not recorded, so it cannot be resumed"
    else:
        message = (
            f"{name}: training stopped at {int(checkpoint.name):,} env steps, "
            f"checkpoint in {checkpoint}. Resume with:\n  {sink.resume_command()}"
        )
    print(message, file=sys.stderr, flush=True)
    raise Interrupted(message, signum)
