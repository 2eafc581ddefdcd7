"""The host loop: compiled chunks of iterations, evaluation and callbacks between."""

import dataclasses
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.random as jr
import numpy as np
from jaxtyping import PRNGKeyArray

from envs import AbstractEnv
from zoo import AbstractAgent

from ._evaluate import evaluate
from ._train import (
    TrainState,
    init,
    num_iterations,
    steps_per_iteration,
    train_chunk,
    validate,
)

# Summed over iterations rather than averaged when a chunk is reported.
_EPISODE_SUMS = ("episodes", "episode_return_sum", "episode_length_sum")


@dataclasses.dataclass(frozen=True)
class Report:
    """What the host loop tells a callback after each chunk; plain Python values.

    `train` holds the agent's training metrics averaged over the chunk and the
    seeds, plus `episode_return` / `episode_length` of the training episodes that
    finished in the chunk (NaN if none did). `eval_returns` holds each seed's mean
    greedy return when this chunk ended with an evaluation, else `None`.
    """

    env_steps: int
    total_steps: int
    chunk: int
    num_chunks: int
    wall_s: float
    steps_per_s: float
    train: dict[str, float]
    eval_returns: list[float] | None = None

    @property
    def eval_return_mean(self) -> float | None:
        return None if self.eval_returns is None else float(np.mean(self.eval_returns))

    @property
    def eval_return_std(self) -> float | None:
        return None if self.eval_returns is None else float(np.std(self.eval_returns))


@dataclasses.dataclass
class RunResult:
    """`state`: the final `TrainState`, with a leading seed axis. `final_returns`:
    `[num_seeds, eval_episodes]` greedy returns at the end. `reports`: one per chunk.
    `compile_s` / `train_s`: wall time compiling and running."""

    state: TrainState
    final_returns: np.ndarray
    reports: list[Report]
    compile_s: float
    train_s: float
    total_steps: int


def _init_seeds(agent, env, keys, *, num_envs, total_steps):
    return jax.vmap(
        lambda k: init(agent, env, key=k, num_envs=num_envs, total_steps=total_steps)
    )(keys)


def _chunk_seeds(agent, env, state, *, iterations):
    return jax.vmap(lambda s: train_chunk(agent, env, s, iterations))(state)


def _evaluate_seeds(agent, env, agent_state, keys, *, num_episodes):
    return jax.vmap(
        lambda s, k: evaluate(agent, s, env, key=k, num_episodes=num_episodes),
    )(agent_state, keys)


def _compile(fn: Callable, *shapes: Any) -> Any:
    """Compile `fn` (its static inputs bound by `partial`) for array arguments
    shaped like `shapes`. Nothing runs, so this can overlap with other work."""
    return jax.jit(fn).lower(*shapes).compile()


def plan(
    agent: AbstractAgent, num_envs: int, total_steps: int, eval_every: int | None
) -> tuple[int, int]:
    """`(num_chunks, iterations_per_chunk)` covering at least `total_steps` steps.

    Chunks have equal length so that one compilation serves them all; the last one
    may overshoot `total_steps` by less than one iteration per chunk.
    """
    iterations = num_iterations(agent, num_envs, total_steps)
    if eval_every is None:
        num_chunks = min(10, iterations)
    else:
        per_chunk = max(1, eval_every // steps_per_iteration(agent, num_envs))
        num_chunks = max(1, round(iterations / per_chunk))
    return num_chunks, math.ceil(iterations / num_chunks)


def run(
    agent: AbstractAgent,
    env: AbstractEnv,
    *,
    key: PRNGKeyArray,
    total_steps: int,
    num_envs: int = 8,
    num_seeds: int = 1,
    eval_every: int | None = None,
    eval_episodes: int = 32,
    final_eval_episodes: int | None = None,
    callback: Callable[[Report], Any] | None = None,
    state: TrainState | None = None,
) -> RunResult:
    """Train `num_seeds` seeds of `agent` on `env`, with a host loop around compiled
    chunks.

    One compiled chunk runs a block of iterations for all seeds; it is compiled once
    and called repeatedly. Between chunks (never inside them) the loop evaluates the
    greedy policy every `eval_every` env steps and calls `callback(Report)`.

    **Arguments:**

    - `key`: seed `i` trains with `jr.split(key, num_seeds)[i]`.
    - `total_steps`: env steps per seed (all its envs together).
    - `eval_every`: env steps between evaluations of `eval_episodes` episodes per
      seed; `None` evaluates only at the end.
    - `final_eval_episodes`: episodes of the final evaluation (default
      `eval_episodes`).
    - `state`: a `TrainState` (with seed axis) to continue from instead of a fresh
      one, e.g. from a checkpoint.

    **Returns:** a `RunResult`.
    """
    validate(agent, env, num_envs, total_steps)
    if not isinstance(num_seeds, int) or num_seeds <= 0:
        raise ValueError(f"num_seeds must be a positive integer, got {num_seeds!r}")
    if eval_every is not None and eval_every <= 0:
        raise ValueError(f"eval_every must be positive, got {eval_every}")
    if eval_episodes <= 0:
        raise ValueError(f"eval_episodes must be positive, got {eval_episodes}")
    final_eval_episodes = final_eval_episodes or eval_episodes
    num_chunks, chunk_iters = plan(agent, num_envs, total_steps, eval_every)
    per_iter = steps_per_iteration(agent, num_envs)
    total = num_chunks * chunk_iters * per_iter
    seed_keys = jr.split(key, num_seeds)
    eval_keys = jax.vmap(lambda k: jr.fold_in(k, 0x5EED))(seed_keys)

    t0 = time.perf_counter()
    init_fn = partial(_init_seeds, agent, env, num_envs=num_envs, total_steps=total)
    chunk_fn = partial(_chunk_seeds, agent, env, iterations=chunk_iters)
    if state is None:
        state_shape = jax.eval_shape(init_fn, seed_keys)
    else:
        state_shape = jax.eval_shape(lambda s: s, state)
    eval_sizes = {final_eval_episodes} | ({eval_episodes} if eval_every else set())
    # Everything is compiled before training starts, so that `compile_s` and
    # `train_s` are measured apart and no chunk waits on a compilation.
    chunk_compiled = _compile(chunk_fn, state_shape)
    eval_compiled = {
        n: _compile(
            partial(_evaluate_seeds, agent, env, num_episodes=n),
            state_shape.agent_state,
            eval_keys,
        )
        for n in sorted(eval_sizes)
    }
    carry: TrainState = (
        _compile(init_fn, seed_keys)(seed_keys) if state is None else state
    )
    compile_s = time.perf_counter() - t0
    start_iter = int(carry.iteration[0])

    reports: list[Report] = []
    t_train = time.perf_counter()
    first_chunk = start_iter // chunk_iters
    for chunk in range(first_chunk, num_chunks):
        carry, metrics = chunk_compiled(carry)
        last = chunk == num_chunks - 1
        eval_returns = None
        if last or eval_every is not None:
            n = final_eval_episodes if last else eval_episodes
            k = jax.vmap(lambda k: jr.fold_in(k, chunk))(eval_keys)
            returns = eval_compiled[n](carry.agent_state, k)
            eval_returns = [float(r) for r in np.asarray(returns).mean(axis=1)]
            if last:
                final_returns = np.asarray(returns)
        metrics = jax.device_get(metrics)
        env_steps = int(carry.env_steps[0])
        elapsed = time.perf_counter() - t_train
        report = Report(
            env_steps=env_steps,
            total_steps=total,
            chunk=chunk + 1,
            num_chunks=num_chunks,
            wall_s=time.perf_counter() - t0,
            steps_per_s=(env_steps - start_iter * per_iter) * num_seeds / elapsed,
            train=_summarise(metrics),
            eval_returns=eval_returns,
        )
        reports.append(report)
        if callback is not None:
            callback(report)
    train_s = time.perf_counter() - t_train
    return RunResult(carry, final_returns, reports, compile_s, train_s, total)


def _summarise(metrics: dict[str, np.ndarray]) -> dict[str, float]:
    out = {k: float(np.mean(v)) for k, v in metrics.items() if k not in _EPISODE_SUMS}
    episodes = float(np.sum(metrics["episodes"]))
    for name in ("return", "length"):
        total = float(np.sum(metrics[f"episode_{name}_sum"]))
        out[f"episode_{name}"] = total / episodes if episodes else float("nan")
    out["episodes"] = episodes
    return out
