"""The host loop: compiled chunks of iterations, evaluation and callbacks between.

`run` checks its arguments, lays the runs out (`_placement`), compiles every
program before training (`_compile`), then drives the loop: `_Loop.start`
(the evaluation before training), `_Loop.step` per chunk (metrics checked,
evaluation, report, checkpoint, stop) and `_Loop.result`; what it reports is in
`_reports`."""

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import PRNGKeyArray

from ._compile import BITWISE, RUN_ONCE, Compiler
from ._evaluate import evaluate
from ._hparams import Sweep, check_sweep, with_hparams
from ._placement import Placement, check_memory, place
from ._reports import (
    NonFiniteError as NonFiniteError,
    PeerLostError as PeerLostError,
    Report as Report,
    RunResult as RunResult,
    check_finite,
    summarise,
)
from ._state import init_seeds
from ._train import (
    Agent,
    Env,
    TrainState,
    num_iterations,
    steps_per_iteration,
    train_chunk,
    validate,
)

# Folded into the evaluation keys for the evaluation before training (the
# chunks' fold in their index, which never gets this large).
_START = 0x57A27


def _chunk_seeds(agent, env, state, hparams, *, iterations):
    state, metrics = jax.vmap(
        lambda s, h: train_chunk(with_hparams(agent, h), env, s, iterations)
    )(state, hparams)
    # One reduction over the parameters per chunk, fetched with the metrics: the
    # host checks it at the chunk boundary, so nothing inside the chunk syncs. It
    # reduces one concatenation, not each leaf: per-leaf checks were an eighth of
    # the program XLA compiled.
    params = jax.tree.leaves(eqx.filter(state.agent_state, eqx.is_inexact_array))
    flat = jnp.concatenate([p.reshape(p.shape[0], -1) for p in params], axis=1)
    return state, metrics, jnp.all(jnp.isfinite(flat), axis=1)


def _evaluate_seeds(agent, env, agent_state, keys, hparams, *, num_episodes):
    return jax.vmap(
        lambda s, k, h: evaluate(
            with_hparams(agent, h), s, env, key=k, num_episodes=num_episodes
        ),
    )(agent_state, keys, hparams)


def plan(
    agent: Agent, num_envs: int, total_steps: int, eval_every: int | None
) -> tuple[int, int]:
    """`(num_chunks, iterations_per_chunk)` covering at least `total_steps` steps.

    Chunks have equal length so that one compilation serves them all. The number
    of chunks (about ten, or one per `eval_every` steps) is moved by up to a quarter
    to divide the iterations exactly; only when no such number exists does the last
    chunk overshoot `total_steps`, by less than one iteration per chunk.
    """
    iterations = num_iterations(agent, num_envs, total_steps)
    if eval_every is None:
        target = min(10, iterations)
    else:
        per_chunk = max(1, eval_every // steps_per_iteration(agent, num_envs))
        target = max(1, round(iterations / per_chunk))
    near = range(max(1, math.floor(target * 0.75)), math.ceil(target * 1.25) + 1)
    divisors = [n for n in near if iterations % n == 0]
    num_chunks = min(divisors, key=lambda n: abs(n - target)) if divisors else target
    return num_chunks, math.ceil(iterations / num_chunks)


def lower(agent: Agent, env: Env, **run_kwargs: Any) -> list[tuple[str, dict]]:
    """The programs `run(agent, env, **run_kwargs)` would compile (initialisation
    unless `state` is given, the chunk, one evaluation per episode count), each
    as `(StableHLO text, XLA compile options)`: lowered, neither compiled nor
    run. The text is canonical: how JAX splits a program into functions, and
    names them, depends on what the process traced before; the canonical text
    does not (functions that differ only in name are merged, the rest named in
    the order `main` reaches them). Together with the machine, JAX's versions
    and XLA's flags they decide a run's numbers, so they tell whether a change
    to the code changes results (`benchmarks/table.py` keeps a result current
    while they stay the same).
    """
    return prepare(agent, env, compile=False, **run_kwargs).lowered


def run(
    agent: Agent,
    env: Env,
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
    chunks: tuple[int, int] | None = None,
    checkpoint: Callable[[TrainState, Report], Any] | None = None,
    checkpoint_every: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    sweep: Sweep | None = None,
    devices: int | Sequence[Any] | None = None,
    bitwise: bool = False,
    eval_at_start: bool = False,
) -> RunResult:
    """Train `num_seeds` seeds of `agent` on `env`, with a host loop around compiled
    chunks.

    One compiled chunk runs a block of iterations for all seeds; it is compiled once
    and called repeatedly. Between chunks (never inside them) the loop checks that
    the metrics and parameters are finite, evaluates the greedy policy every
    `eval_every` env steps, calls `callback(Report)`, writes checkpoints, and asks
    `should_stop()`.

    **Arguments:**

    - `key`: seed `i` trains with `jr.split(key, num_seeds)[i]`.
    - `total_steps`: env steps per seed (all its envs together).
    - `eval_every`: env steps between evaluations of `eval_episodes` episodes per
      seed; `None` evaluates only at the end.
    - `final_eval_episodes`: episodes of the final evaluation (default
      `eval_episodes`).
    - `state`: a `TrainState` (with seed axis) to continue from instead of a fresh
      one, e.g. from a checkpoint. It must sit on a chunk boundary of the plan.
      A state at the end of its plan (its run was killed after its last
      checkpoint) trains nothing: it gets the final evaluation it missed, with
      the keys its last chunk used, and is reported and checkpointed as that
      chunk (with empty `train` metrics).
    - `chunks`: the plan `(num_chunks, iterations_per_chunk)` instead of
      `plan(agent, num_envs, total_steps, eval_every)`. A resumed run passes its
      original's (`RunResult.chunks`), so that its chunks, evaluations and
      metrics fall where the original's did; `total_steps` is then ignored.
    - `checkpoint`: called as `checkpoint(state, report)` after the callback of
      each chunk that crosses a multiple of `checkpoint_every` env steps, after
      the last chunk, and when `should_stop` stops the run.
    - `checkpoint_every`: env steps between checkpoints (rounded up to chunk
      boundaries); `None`: only at the end and when stopped.
    - `should_stop`: asked after each chunk; `True` writes a checkpoint and
      returns early (`RunResult.stopped`), skipping the final evaluation.
    - `sweep`: `{name: [value per member]}` of float hyperparameters
      (`runners.sweepable(agent)`; `runners.grid(...)` builds every combination):
      every member trains `num_seeds` seeds in the same program, as runs
      `m * num_seeds + s`; seed `s` of every member uses seed `s`'s key.
    - `devices`: the devices the runs are sharded over (a number: the first that
      many of `jax.devices()`); default all, at most one per run. Runs are
      padded to a multiple of the device count; the padding trains and is
      dropped.
    - `eval_at_start`: also evaluate the untrained agent (`eval_episodes` per
      seed) before the first chunk, reported to the callback as chunk 0 at env
      step 0 (with empty `train` metrics) and kept first in `reports`. A resumed
      run starts where it stopped, without it.
    - `bitwise`: compile so that a run's numbers do not depend on how many runs
      share a device, so that any number of devices (or seeds, or members)
      gives bitwise the same state for the same run. On CPU, XLA's YNNPACK
      fusions pick reduction kernels by shape, which changes float rounding
      (about 1e-7 per update) with the runs per device; `bitwise` turns them off
      and trains about 1.1-1.5x slower. A device given a single run compiles
      its batch of one differently, so `bitwise` also pads every device to at
      least two runs (the padding trains and is dropped). Other platforms: only
      the padding.

    **Several processes** (after `jax.distributed.initialize`, every process
    calling `run` with the same arguments): the runs are sharded over every
    process's devices, each process trains its share, and the metrics,
    evaluation returns and (at checkpoints and the end) the state are gathered
    at chunk boundaries, so every process sees every run's values and the
    callback runs on each. `checkpoint` is called on process 0 only;
    `should_stop` stops every process when any says so.

    **Returns:** a `RunResult`.

    **Raises:** `ValueError` for bad input (a sweep that would not fit in memory
    too), before compiling; `NonFiniteError` when a training metric or parameter
    is NaN or infinite (checked per chunk); `PeerLostError` when another process
    of a multi-process run stops answering.
    """
    return execute(
        prepare(
            agent,
            env,
            key=key,
            total_steps=total_steps,
            num_envs=num_envs,
            num_seeds=num_seeds,
            eval_every=eval_every,
            eval_episodes=eval_episodes,
            final_eval_episodes=final_eval_episodes,
            callback=callback,
            state=state,
            chunks=chunks,
            checkpoint=checkpoint,
            checkpoint_every=checkpoint_every,
            should_stop=should_stop,
            sweep=sweep,
            devices=devices,
            bitwise=bitwise,
            eval_at_start=eval_at_start,
        )
    )


@dataclasses.dataclass
class Programs:
    """A run prepared by `prepare`: its programs lowered (and compiling on
    worker threads, unless prepared with `compile=False`), its initial state
    when one was given, and what the host loop needs. `execute` runs it;
    `lowered` holds each program's canonical text and XLA options when not
    compiled."""

    compiler: Compiler
    init: Future | None
    chunk: Future | None
    evals: dict[int, Future | None]
    state: TrainState | None
    loop: dict[str, Any]
    eval_at_start: bool

    @property
    def lowered(self) -> list[tuple[str, dict[str, Any]]]:
        return self.compiler.lowered


def prepare(
    agent: Agent,
    env: Env,
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
    chunks: tuple[int, int] | None = None,
    checkpoint: Callable[[TrainState, Report], Any] | None = None,
    checkpoint_every: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    sweep: Sweep | None = None,
    devices: int | Sequence[Any] | None = None,
    bitwise: bool = False,
    eval_at_start: bool = False,
    compile: bool = True,
) -> Programs:
    """`run`'s first half: check the arguments, place the runs and lower every
    program (initialisation unless `state` is given, the chunk, one evaluation
    per episode count), compiling each on a worker thread while the next is
    traced. `execute` waits for them and trains. With `compile=False` the
    programs are only lowered (`Programs.lowered`; `runners.lower`), and the
    result cannot be executed. Arguments as for `run`.

    **Raises:** `ValueError` for bad input, before anything is compiled.
    """
    validate(agent, env, num_envs, total_steps)
    _check_arguments(num_seeds, eval_every, eval_episodes, checkpoint_every)
    final_eval_episodes = final_eval_episodes or eval_episodes
    if chunks is None:
        chunks = plan(agent, num_envs, total_steps, eval_every)
    num_chunks, chunk_iters = chunks
    if num_chunks <= 0 or chunk_iters <= 0:
        raise ValueError(f"chunks must be two positive integers, got {chunks}")
    num_members = 1 if sweep is None else check_sweep(agent, sweep)
    placement = place(
        key,
        num_seeds=num_seeds,
        num_members=num_members,
        sweep=sweep,
        devices=devices,
        bitwise=bitwise,
    )
    per_iter = steps_per_iteration(agent, num_envs)
    total = num_chunks * chunk_iters * per_iter
    t0 = time.perf_counter()
    init_fn = partial(
        init_seeds,
        agent,
        env,
        num_envs=num_envs,
        total_steps=total,
        sequential=placement.sharding is None,
    )
    start_iter = _check_state(init_fn, placement, state, chunks)
    evaluates = eval_every is not None or (eval_at_start and start_iter == 0)
    eval_sizes = {final_eval_episodes} | ({eval_episodes} if evaluates else set())
    if state is not None:
        state = placement.pad(state)
    exact = BITWISE if bitwise and placement.devices[0].platform == "cpu" else {}
    compiler = Compiler(compile=compile)
    try:
        init, chunk, evals = _submit_programs(
            compiler,
            agent,
            env,
            placement,
            init_fn,
            state,
            chunk_iters,
            eval_sizes,
            exact,
        )
    except BaseException:
        compiler.abandon()
        raise
    loop = dict(
        placement=placement,
        agent_names=getattr(env, "agents", None),
        total=total,
        chunks=(num_chunks, chunk_iters),
        per_iter=per_iter,
        start_iter=start_iter,
        eval_every=eval_every,
        eval_episodes=eval_episodes,
        final_eval_episodes=final_eval_episodes,
        callback=callback,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        should_stop=should_stop,
        sweep=sweep,
        t0=t0,
    )
    return Programs(
        compiler,
        init,
        chunk,
        evals,
        state,
        loop,
        eval_at_start,
    )


def execute(programs: Programs) -> RunResult:
    """`run`'s second half: wait for the programs `prepare` compiles, build the
    initial state (or take the given one) and run the host loop.

    **Raises:** `ValueError` for programs prepared with `compile=False`;
    otherwise as `run`.
    """
    if not programs.compiler.compile:
        raise ValueError(
            "these programs were prepared with compile=False (only lowered); "
            "prepare them again with compile=True to execute them"
        )
    programs.compiler.wait()
    assert programs.chunk is not None
    evals = {n: f.result() for n, f in programs.evals.items() if f is not None}
    spec = programs.loop
    if programs.init is not None:
        placement = spec["placement"]
        carry: TrainState = programs.init.result()(
            placement.seed_keys, placement.hparams
        )
    else:
        assert programs.state is not None
        carry = programs.state
    loop = _Loop(
        chunk_compiled=programs.chunk.result(),
        eval_compiled=evals,
        compile_s=time.perf_counter() - spec["t0"],
        **spec,
    )
    num_chunks, chunk_iters = loop.chunks
    if programs.eval_at_start and loop.start_iter == 0:
        loop.start(carry)
    if loop.start_iter == num_chunks * chunk_iters:
        loop.finish(carry)
    for chunk in range(loop.start_iter // chunk_iters, num_chunks):
        carry = loop.step(carry, chunk)
        if loop.stopped:
            break
    return loop.result(carry)


def _check_arguments(
    num_seeds: Any, eval_every: Any, eval_episodes: Any, checkpoint_every: Any
) -> None:
    if not isinstance(num_seeds, int) or num_seeds <= 0:
        raise ValueError(f"num_seeds must be a positive integer, got {num_seeds!r}")
    if eval_every is not None and eval_every <= 0:
        raise ValueError(f"eval_every must be positive, got {eval_every}")
    if eval_episodes <= 0:
        raise ValueError(f"eval_episodes must be positive, got {eval_episodes}")
    if checkpoint_every is not None and checkpoint_every <= 0:
        raise ValueError(f"checkpoint_every must be positive, got {checkpoint_every}")


def _check_state(
    init_fn: Any,
    placement: Placement,
    state: TrainState | None,
    chunks: tuple[int, int],
) -> int:
    """The iteration a given state starts at (0 for none), checked to fit the
    runs and to sit on a chunk boundary of the plan (at its end at the latest)."""
    num_chunks, chunk_iters = chunks
    if state is not None:
        runs = placement.num_runs
        state_shape = jax.eval_shape(
            init_fn,
            placement.seed_keys[:runs],
            {n: h[:runs] for n, h in placement.hparams.items()},
        )
        given = jax.eval_shape(lambda s: s, state)
        if jax.tree.structure(given) != jax.tree.structure(state_shape) or any(
            (a.shape, a.dtype) != (b.shape, b.dtype)
            for a, b in zip(
                jax.tree.leaves(given), jax.tree.leaves(state_shape), strict=True
            )
        ):
            raise ValueError(
                "state does not fit this agent, env, num_envs, num_seeds and sweep"
            )
    start_iter = 0 if state is None else int(np.asarray(state.iteration).ravel()[0])
    if start_iter % chunk_iters:
        raise ValueError(
            f"state is at iteration {start_iter}, not on a boundary of chunks of "
            f"{chunk_iters} iterations: pass the plan it was trained with (chunks=)"
        )
    if start_iter > num_chunks * chunk_iters:
        raise ValueError(
            f"state is at iteration {start_iter}: past the end of a plan of "
            f"{num_chunks} chunks x {chunk_iters} iterations"
        )
    return start_iter


def _submit_programs(
    compiler: Compiler,
    agent: Any,
    env: Any,
    placement: Placement,
    init_fn: Any,
    state: TrainState | None,
    chunk_iters: int,
    eval_sizes: set[int],
    exact: dict[str, Any],
) -> tuple[Future | None, Future | None, dict[int, Future | None]]:
    """Every program lowered (and compiling) before training starts, so that
    `compile_s` and `train_s` are measured apart and no chunk waits on a
    compilation: `(initialisation or None, chunk, {episodes: evaluation})`."""
    sharding, hparams = placement.sharding, placement.hparams
    fits = partial(check_memory, num_runs=placement.padded, devices=placement.devices)
    chunk_fn = partial(_chunk_seeds, agent, env, iterations=chunk_iters)
    init: Future | None = None
    if state is None:
        init, state_shape = compiler.submit(
            init_fn,
            placement.seed_keys,
            hparams,
            options={**RUN_ONCE, **exact},
            sharding=sharding,
            check=fits,
        )
    else:
        # Compile for the given state's exact types (a state read from disk
        # has no weak types), so a resumed run runs what the original ran.
        state_shape = jax.eval_shape(lambda s: s, state)
        fits(state_shape)
    chunk, _ = compiler.submit(
        chunk_fn, state_shape, hparams, options=exact, sharding=sharding
    )
    evals = {
        n: compiler.submit(
            partial(_evaluate_seeds, agent, env, num_episodes=n),
            state_shape.agent_state,
            placement.eval_keys,
            hparams,
            options=exact,
            sharding=sharding,
        )[0]
        for n in sorted(eval_sizes)
    }
    return init, chunk, evals


@dataclasses.dataclass
class _Loop:
    """The host loop around the compiled chunks: what it needs, and what it has
    gathered so far (`reports`, the final returns, whether it stopped)."""

    placement: Placement
    chunk_compiled: Any
    eval_compiled: dict[int, Any]
    agent_names: Sequence[str] | None
    total: int
    chunks: tuple[int, int]
    per_iter: int
    start_iter: int
    eval_every: int | None
    eval_episodes: int
    final_eval_episodes: int
    callback: Callable[[Report], Any] | None
    checkpoint: Callable[[TrainState, Report], Any] | None
    checkpoint_every: int | None
    should_stop: Callable[[], bool] | None
    sweep: Sweep | None
    t0: float
    compile_s: float
    reports: list[Report] = dataclasses.field(default_factory=list)
    stopped: bool = False
    gathered: Any = None

    def __post_init__(self) -> None:
        num_runs = self.placement.num_runs
        self.final_returns = np.zeros((num_runs, 0), np.float32)
        self.final_agent_returns = (
            None
            if self.agent_names is None
            else {a: self.final_returns for a in self.agent_names}
        )
        self.steps = self.start_iter * self.per_iter
        self.t_train = time.perf_counter()

    def greedy(
        self, agent_state: Any, num_episodes: int, fold: int
    ) -> tuple[np.ndarray, dict[str, np.ndarray] | None]:
        """`[num_runs, num_episodes]` greedy returns (summed over the agents of a
        multi-agent env), with the evaluation keys folded with `fold`; and each
        agent's, or `None` on a single-agent env."""
        p = self.placement
        k = jax.vmap(lambda k: jr.fold_in(k, fold))(p.eval_keys)
        out = p.fetch(self.eval_compiled[num_episodes](agent_state, k, p.hparams))
        if self.agent_names is None:
            return np.asarray(out)[: p.num_runs], None
        per_agent = {a: np.asarray(out[a])[: p.num_runs] for a in self.agent_names}
        return np.sum(list(per_agent.values()), axis=0), per_agent

    def start(self, carry: TrainState) -> None:
        """The untrained agent's evaluation, reported as chunk 0 at env step 0."""
        # Keys of their own: the chunks' evaluations fold in the chunk index.
        returns, per_agent = self.greedy(carry.agent_state, self.eval_episodes, _START)
        self._report_untrained(0, 0, returns, per_agent)
        self.t_train = time.perf_counter()  # steps_per_s counts training only

    def finish(self, carry: TrainState) -> None:
        """A state that trained its whole plan: the final evaluation, with the keys
        of the last chunk's, reported (empty `train` metrics) and checkpointed as
        that chunk, so that a run killed after its last checkpoint ends as it
        would have."""
        num_chunks = self.chunks[0]
        returns, per_agent = self.greedy(
            carry.agent_state, self.final_eval_episodes, num_chunks - 1
        )
        self.final_returns = np.asarray(returns)
        self.final_agent_returns = per_agent
        report = self._report_untrained(self.steps, num_chunks, returns, per_agent)
        self._stop_and_checkpoint(carry, report, self.steps, last=True)

    def _report_untrained(
        self,
        env_steps: int,
        chunk: int,
        returns: np.ndarray,
        per_agent: dict[str, np.ndarray] | None,
    ) -> Report:
        """Report an evaluation with nothing trained since (empty `train`)."""
        num_runs = self.placement.num_runs
        report = Report(
            env_steps=env_steps,
            total_steps=self.total,
            chunk=chunk,
            num_chunks=self.chunks[0],
            wall_s=time.perf_counter() - self.t0,
            steps_per_s=0.0,
            train={},
            eval_returns=[float(r) for r in returns.mean(axis=1)],
            train_runs=None if self.sweep is None else [{} for _ in range(num_runs)],
            eval_agent_returns=_seed_means(per_agent),
        )
        self.reports.append(report)
        if self.callback is not None:
            self.callback(report)
        return report

    def step(self, carry: TrainState, chunk: int) -> TrainState:
        """Run chunk `chunk`; check, evaluate, report, checkpoint, ask to stop."""
        p = self.placement
        num_chunks, chunk_iters = self.chunks
        carry, metrics, finite = self.chunk_compiled(carry, p.hparams)
        metrics, finite = p.unpad(p.fetch((metrics, finite)))
        first_step = self.steps + self.per_iter
        check_finite(metrics, finite, first_step=first_step, per_iter=self.per_iter)
        last = chunk == num_chunks - 1
        eval_returns = per_agent = None
        if last or self.eval_every is not None:
            n = self.final_eval_episodes if last else self.eval_episodes
            returns, per_agent = self.greedy(carry.agent_state, n, chunk)
            eval_returns = [float(r) for r in returns.mean(axis=1)]
            if last:
                self.final_returns = np.asarray(returns)
                self.final_agent_returns = per_agent
        prev_steps = self.steps
        self.steps = (chunk + 1) * chunk_iters * self.per_iter
        report = self._report(chunk, metrics, eval_returns, per_agent)
        self.reports.append(report)
        if self.callback is not None:
            self.callback(report)
        self._stop_and_checkpoint(carry, report, prev_steps, last)
        return carry

    def _report(
        self,
        chunk: int,
        metrics: dict[str, np.ndarray],
        eval_returns: list[float] | None,
        per_agent: dict[str, np.ndarray] | None,
    ) -> Report:
        elapsed = time.perf_counter() - self.t_train
        num_runs = self.placement.num_runs
        trained = self.steps - self.start_iter * self.per_iter
        return Report(
            env_steps=self.steps,
            total_steps=self.total,
            chunk=chunk + 1,
            num_chunks=self.chunks[0],
            wall_s=time.perf_counter() - self.t0,
            steps_per_s=trained * num_runs / elapsed,
            train=summarise(metrics),
            eval_returns=eval_returns,
            train_runs=None
            if self.sweep is None
            else [
                summarise({k: v[r : r + 1] for k, v in metrics.items()})
                for r in range(num_runs)
            ],
            eval_agent_returns=_seed_means(per_agent),
        )

    def _stop_and_checkpoint(
        self, carry: TrainState, report: Report, prev_steps: int, last: bool
    ) -> None:
        p, should_stop, every = self.placement, self.should_stop, self.checkpoint_every
        stopped = not last and should_stop is not None and bool(should_stop())
        if p.multi_process and not last:
            # Every process stops at the same chunk when any is asked to.
            stopped = bool(np.any(p.fetch(np.asarray(stopped))))
        self.stopped = stopped
        due = every is not None and self.steps // every > prev_steps // every
        if not (last or stopped or due):
            return
        if p.multi_process:
            # Every process takes part in gathering the state; process 0 writes it.
            self.gathered = p.unpad(p.fetch(carry))
            if self.checkpoint is not None and jax.process_index() == 0:
                self.checkpoint(self.gathered, report)
        elif self.checkpoint is not None:
            self.checkpoint(p.unpad(carry), report)

    def result(self, carry: TrainState) -> RunResult:
        p = self.placement
        return RunResult(
            self.gathered if p.multi_process else p.unpad(carry),
            self.final_returns,
            self.reports,
            self.compile_s,
            time.perf_counter() - self.t_train,
            self.total,
            self.stopped,
            self.chunks,
            None
            if self.sweep is None
            else {n: [float(v) for v in self.sweep[n]] for n in self.sweep},
            self.final_agent_returns,
        )


def _seed_means(
    per_agent: dict[str, np.ndarray] | None,
) -> dict[str, list[float]] | None:
    if per_agent is None:
        return None
    return {a: [float(r) for r in v.mean(axis=1)] for a, v in per_agent.items()}
