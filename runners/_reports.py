"""What the host loop reports: a `Report` per chunk, the `RunResult`, and the
errors that stop a run at a chunk boundary."""

import dataclasses

import numpy as np

from ._train import TrainState

# Summed over iterations rather than averaged when a chunk is reported.
_EPISODE_SUMS = ("episodes", "episode_return_sum", "episode_length_sum")
_AGENT_SUM = "episode_return_sum."  # + agent name, on a multi-agent env


@dataclasses.dataclass(frozen=True)
class Report:
    """What the host loop tells a callback after each chunk; plain Python values.

    `train` holds the agent's training metrics averaged over the chunk and the
    seeds, plus `episode_return` / `episode_length` of the training episodes that
    finished in the chunk (NaN if none did). `eval_returns` holds each seed's mean
    greedy return when this chunk ended with an evaluation, else `None`.

    In a sweep, "seeds" are runs (member `m`, seed `s` is run `m * num_seeds + s`),
    and `train_runs` holds each run's `train` (else it is `None`).

    With `run(..., eval_at_start=True)`, a first report (`chunk` 0, `env_steps`
    0, empty `train`) carries the untrained agent's evaluation.

    On a multi-agent env, returns are summed over the env's agents, and
    `eval_agent_returns` holds each agent's (`{agent_name: [per seed]}`); `train`
    has `episode_return.<agent_name>` too.
    """

    env_steps: int
    total_steps: int
    chunk: int
    num_chunks: int
    wall_s: float
    steps_per_s: float
    train: dict[str, float]
    eval_returns: list[float] | None = None
    train_runs: list[dict[str, float]] | None = None
    eval_agent_returns: dict[str, list[float]] | None = None

    @property
    def eval_return_mean(self) -> float | None:
        return None if self.eval_returns is None else float(np.mean(self.eval_returns))

    @property
    def eval_return_std(self) -> float | None:
        return None if self.eval_returns is None else float(np.std(self.eval_returns))


@dataclasses.dataclass
class RunResult:
    """`state`: the final `TrainState`, with a leading seed axis. `final_returns`:
    `[num_seeds, eval_episodes]` greedy returns at the end (`[num_seeds, 0]` when
    stopped early). `reports`: one per chunk run (after the one at step 0 with
    `eval_at_start`). `compile_s` / `train_s`: wall time
    compiling and running. `stopped`: `should_stop` ended the run before its last
    chunk. `chunks`: the plan, `(num_chunks, iterations_per_chunk)`.

    A sweep's result has a leading run axis instead of the seed axis (member `m`,
    seed `s` at `m * num_seeds + s`), and `sweep` holds its members' values.

    On a multi-agent env, `final_returns` sums the agents' returns and
    `agent_returns` holds each agent's, `{agent_name: [num_seeds, episodes]}`."""

    state: TrainState
    final_returns: np.ndarray
    reports: list[Report]
    compile_s: float
    train_s: float
    total_steps: int
    stopped: bool = False
    chunks: tuple[int, int] = (0, 0)
    sweep: dict[str, list[float]] | None = None
    agent_returns: dict[str, np.ndarray] | None = None

    @property
    def member_returns(self) -> np.ndarray:
        """`[members, seeds]` final greedy returns (a plain run: one member)."""
        members = 1 if not self.sweep else len(next(iter(self.sweep.values())))
        return self.final_returns.mean(axis=1).reshape(members, -1)


class PeerLostError(RuntimeError):
    """Another process of a multi-process run stopped answering (it crashed, was
    killed or lost its network). Raised at the chunk boundary where the processes
    next exchange results; every process of the run stops, and the last
    checkpoint resumes it."""

    @classmethod
    def of(cls, detail: str) -> "PeerLostError":
        """The error of this process, with `detail`: what it saw of the loss."""
        import jax

        return cls(
            f"process {jax.process_index()} of {jax.process_count()} lost contact "
            f"with the run's other processes ({detail}); every process stops here"
        )


class NonFiniteError(FloatingPointError):
    """Training produced a non-finite metric or parameter. Raised at the chunk
    boundary where it is found, before the callback and before any checkpoint of
    that chunk, so the last checkpoint written holds good values."""

    def __init__(self, message: str, *, env_steps: int, metric: str):
        super().__init__(message)
        self.env_steps = env_steps
        self.metric = metric


def check_finite(
    metrics: dict[str, np.ndarray],
    finite: np.ndarray,
    *,
    first_step: int,
    per_iter: int,
) -> None:
    """Raise `NonFiniteError` naming the first non-finite metric (and the env
    step of its iteration), else non-finite parameters at the chunk's end."""
    worst: tuple[int, str] | None = None
    for name, values in metrics.items():
        bad = ~np.isfinite(np.asarray(values, dtype=np.float64))  # [seeds, iters]
        if bad.any():
            iteration = int(np.argmax(bad.any(axis=0)))
            if worst is None or iteration < worst[0]:
                worst = (iteration, name)
    if worst is not None:
        iteration, name = worst
        step = first_step + iteration * per_iter
        values = np.asarray(metrics[name])[:, iteration]
        seeds = np.flatnonzero(~np.isfinite(values))
        raise NonFiniteError(
            f"train.{name} is {values[seeds[0]]} at env step {step:,} (seed(s) "
            f"{seeds.tolist()}); training stopped",
            env_steps=step,
            metric=f"train.{name}",
        )
    if not np.all(finite):
        iterations = next(iter(metrics.values())).shape[1]
        step = first_step + (iterations - 1) * per_iter
        seeds = np.flatnonzero(~np.asarray(finite)).tolist()
        raise NonFiniteError(
            f"parameters: non-finite agent parameters by env step {step:,} "
            f"(seed(s) {seeds}); training stopped",
            env_steps=step,
            metric="parameters",
        )


def summarise(metrics: dict[str, np.ndarray]) -> dict[str, float]:
    """Training metrics averaged over a chunk's iterations and the runs; episode
    returns and lengths (`episode_return_sum`, and per agent of a multi-agent
    env `episode_return_sum.<agent_name>`) over the episodes that ended."""
    per_agent = [k for k in metrics if k.startswith(_AGENT_SUM)]
    out = {
        k: float(np.mean(v))
        for k, v in metrics.items()
        if k not in _EPISODE_SUMS and k not in per_agent
    }
    episodes = float(np.sum(metrics["episodes"]))
    for key in ["episode_return_sum", "episode_length_sum", *per_agent]:
        total = float(np.sum(metrics[key]))
        name = key.replace("_sum", "", 1)
        out[name] = total / episodes if episodes else float("nan")
    out["episodes"] = episodes
    return out
