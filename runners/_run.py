"""The host loop: compiled chunks of iterations, evaluation and callbacks between."""

import contextvars
import dataclasses
import math
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.experimental import multihost_utils
from jaxtyping import PRNGKeyArray

from ._evaluate import evaluate
from ._state import init_seeds
from ._sweep import Sweep, check_sweep, run_hparams, with_hparams
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


class NonFiniteError(FloatingPointError):
    """Training produced a non-finite metric or parameter. Raised at the chunk
    boundary where it is found, before the callback and before any checkpoint of
    that chunk, so the last checkpoint written holds good values."""

    def __init__(self, message: str, *, env_steps: int, metric: str):
        super().__init__(message)
        self.env_steps = env_steps
        self.metric = metric


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


# Compiled programs by what they were compiled for, so that calling `run` again
# with the same agent, env and shapes (a sweep over seeds, a test suite) does not
# compile again. Bounded: programs hold their constants.
_COMPILED: dict[Any, Any] = {}
_COMPILED_MAX = 32


# XLA options for a program that runs once (the initial state): on CPU, XLA's
# newer MLIR fusion emitters and LLVM's optimisations take most of a compilation
# and pay off only in programs that run many times. Measured on the 2-core CPU,
# PPO CartPole's init compiled in 1.3-1.8 s with the defaults and in 0.5-0.9 s
# with these; with them the training chunk would train 1.5-3x slower, so it keeps
# the defaults.
_RUN_ONCE: dict[str, Any] = {
    "xla_backend_optimization_level": 0,
    "xla_cpu_use_fusion_emitters": False,
}


# XLA options under which a run's float rounding does not depend on the number of
# runs sharing a device: YNNPACK's fusions (reductions, dots) choose kernels by the
# whole batch's shape. An empty list turns every YNN fusion type off.
_BITWISE: dict[str, Any] = {"xla_cpu_experimental_ynn_fusion_type": ""}


def _cache_key(
    fn: partial, shapes: tuple, options: dict[str, Any] | None, sharding: Any
) -> Any:
    """What a program is compiled for; `None` if unhashable (e.g. an agent with
    array hyperparameters), which is then compiled every time."""
    leaves, treedef = jax.tree.flatten(shapes)
    avals = tuple(
        (x.shape, str(x.dtype), getattr(x, "weak_type", False)) for x in leaves
    )
    opts = tuple(sorted((options or {}).items()))
    static = (fn.func, fn.args, tuple(sorted(fn.keywords.items())))
    key = (static, treedef, avals, opts, sharding)
    try:
        hash(key)
    except TypeError:
        return None
    return key


class _LoweredOnly(Exception):
    """What a program's compilation gives under `lower`: nothing, so that `run`
    stops once every program is lowered."""


# Under `lower`: the programs lowered so far, `(StableHLO text, XLA options)`.
_LOWERING: contextvars.ContextVar[list[tuple[str, dict[str, Any]]] | None] = (
    contextvars.ContextVar("lowering", default=None)
)


def lower(agent: Agent, env: Env, **run_kwargs: Any) -> list[tuple[str, dict]]:
    """The programs `run(agent, env, **run_kwargs)` would compile (initialisation
    unless `state` is given, the chunk, one evaluation per episode count), each
    as `(StableHLO text, XLA compile options)`: lowered, neither compiled nor
    run. Together with the machine, JAX's versions and XLA's flags they decide
    a run's numbers, so they tell whether a change to the code changes results
    (`benchmarks/table.py` keeps a result current while they stay the same).
    """
    token = _LOWERING.set([])
    try:
        run(agent, env, **run_kwargs)
    except _LoweredOnly:
        pass
    finally:
        programs = _LOWERING.get() or []
        _LOWERING.reset(token)
    return programs


_FUNC = re.compile(r"^  func\.func (?:public |private )?@([\w.$-]+)\(", re.M)
_SYMBOL = re.compile(r"@([\w.$-]+)")


def canonical(text: str) -> str:
    """A lowered module's StableHLO text in a form that depends only on what it
    computes: functions that differ only in name are merged, and the rest are
    named `f1, f2, ...` in the order `main` reaches them. How JAX splits a
    program into functions, and what it names them, depends on what the process
    traced before."""
    starts = [(m.start(), m.group(1)) for m in _FUNC.finditer(text)]
    if not starts:
        return text
    end = text.rindex("\n}") + 1  # the module's closing brace
    bodies = {}
    for i, (pos, name) in enumerate(starts):
        bodies[name] = text[pos : starts[i + 1][0] if i + 1 < len(starts) else end]
    while True:
        seen: dict[str, str] = {}
        same = {
            name: seen.setdefault(body.replace(f"@{name}(", "@(", 1), name)
            for name, body in bodies.items()
        }
        if all(same[name] == name for name in bodies):
            break
        bodies = {
            name: _SYMBOL.sub(lambda m: "@" + same.get(m[1], m[1]), body)
            for name, body in bodies.items()
            if same[name] == name
        }
    names: dict[str, str] = {}
    order: list[str] = []

    def visit(name: str) -> None:
        if name in names or name not in bodies:
            return
        names[name] = "main" if name == "main" else f"f{len(names)}"
        order.append(name)
        for callee in _SYMBOL.findall(bodies[name].split("(", 1)[1]):
            visit(callee)

    visit("main")
    body = "".join(
        _SYMBOL.sub(lambda m: "@" + names.get(m[1], m[1]), bodies[name])
        for name in order
    )
    return text[: starts[0][0]] + body + text[end:]


class _Compiler:
    """Compiles programs while the next ones are traced.

    Tracing and lowering are Python (one core, the GIL held); XLA's compilation
    is C++ and releases the GIL. `submit` lowers a program here and compiles it on
    a worker thread, so the next program is traced while the previous compiles:
    on the 2-core CPU, PPO CartPole-v1's three programs are ready in about 1 s
    less than compiled one after another. Programs compiled before (same function,
    static inputs, shapes and options) are taken from `_COMPILED`.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="compile")
        self._pending: list[tuple[Any, Future]] = []

    def submit(
        self,
        fn: partial,
        *shapes: Any,
        options: dict[str, Any] | None = None,
        sharding: Any = None,
        check: Callable[[Any], None] | None = None,
    ) -> tuple[Future, Any]:
        """`(future of the compiled program, its output shapes)`. `sharding`: of
        every input and output (all have the run axis first); `check(out_shapes)`
        may raise before anything compiles."""
        lowering = _LOWERING.get()
        key = _cache_key(fn, shapes, options, sharding) if lowering is None else None
        if key is not None and key in _COMPILED:
            if check is not None:
                check(_COMPILED[key].out_info)
            done: Future = Future()
            done.set_result(_COMPILED[key])
            return done, _COMPILED[key].out_info
        jitted = (
            jax.jit(fn)
            if sharding is None
            else jax.jit(fn, in_shardings=sharding, out_shardings=sharding)
        )
        lowered = jitted.lower(*shapes)
        if check is not None:
            check(lowered.out_info)
        if lowering is not None:
            lowering.append((canonical(lowered.as_text()), dict(options or {})))
            future: Future = Future()
            future.set_exception(_LoweredOnly())
            self._pending.append((None, future))
            return future, lowered.out_info
        future = self._pool.submit(lowered.compile, options or None)
        self._pending.append((key, future))
        return future, lowered.out_info

    def __enter__(self) -> "_Compiler":
        return self

    def __exit__(self, error_type: Any, *_: Any) -> None:
        """Wait for every compilation (raising the first error) and keep each; on
        an error while submitting, abandon the rest."""
        if error_type is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            return
        try:
            for key, future in self._pending:
                compiled = future.result()
                if key is None:
                    continue
                if len(_COMPILED) >= _COMPILED_MAX:
                    _COMPILED.pop(next(iter(_COMPILED)))
                _COMPILED[key] = compiled
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)


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
    validate(agent, env, num_envs, total_steps)
    if not isinstance(num_seeds, int) or num_seeds <= 0:
        raise ValueError(f"num_seeds must be a positive integer, got {num_seeds!r}")
    if eval_every is not None and eval_every <= 0:
        raise ValueError(f"eval_every must be positive, got {eval_every}")
    if eval_episodes <= 0:
        raise ValueError(f"eval_episodes must be positive, got {eval_episodes}")
    if checkpoint_every is not None and checkpoint_every <= 0:
        raise ValueError(f"checkpoint_every must be positive, got {checkpoint_every}")
    final_eval_episodes = final_eval_episodes or eval_episodes
    if chunks is None:
        chunks = plan(agent, num_envs, total_steps, eval_every)
    num_chunks, chunk_iters = chunks
    if num_chunks <= 0 or chunk_iters <= 0:
        raise ValueError(f"chunks must be two positive integers, got {chunks}")
    num_members = 1 if sweep is None else check_sweep(agent, sweep)
    sweep_values = (
        None if sweep is None else {n: [float(v) for v in sweep[n]] for n in sweep}
    )
    num_runs = num_members * num_seeds
    # By default all devices, but never more than there are runs to place (in a
    # multi-process run, all: every process trains its devices' share).
    multi = jax.process_count() > 1
    limit = num_runs if devices is None and not multi else None
    run_devices = _devices(devices)[:limit]
    fetch = partial(_fetch, multi=multi)
    per_device = -(-num_runs // len(run_devices))
    if bitwise:
        # XLA compiles a batch of one run apart (its size-1 axis is dropped, and
        # other kernels round differently): give every device at least two.
        per_device = max(per_device, 2)
    padded = per_device * len(run_devices)
    sharding = None
    if len(run_devices) > 1:
        mesh = jax.make_mesh(
            (len(run_devices),),
            ("runs",),
            axis_types=(jax.sharding.AxisType.Auto,),
            devices=run_devices,
        )
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))
    per_iter = steps_per_iteration(agent, num_envs)
    total = num_chunks * chunk_iters * per_iter
    seed_keys = jr.split(key, num_seeds)
    if padded != num_seeds:
        # Run r is member r // num_seeds with seed r % num_seeds; padding repeats
        # the last run.
        seed_keys = seed_keys[np.minimum(np.arange(padded), num_runs - 1) % num_seeds]
    hparams = {
        n: jnp.asarray(v) for n, v in run_hparams(sweep, num_seeds, padded).items()
    }
    if sharding is not None:
        seed_keys, hparams = jax.device_put((seed_keys, hparams), sharding)
    eval_keys = jax.vmap(lambda k: jr.fold_in(k, 0x5EED))(seed_keys)

    t0 = time.perf_counter()
    init_fn = partial(
        init_seeds,
        agent,
        env,
        num_envs=num_envs,
        total_steps=total,
        sequential=sharding is None,
    )
    chunk_fn = partial(_chunk_seeds, agent, env, iterations=chunk_iters)
    if state is not None:
        state_shape = jax.eval_shape(
            init_fn,
            seed_keys[:num_runs],
            {n: h[:num_runs] for n, h in hparams.items()},
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
    if start_iter >= num_chunks * chunk_iters:
        raise ValueError(
            f"state is at iteration {start_iter}: nothing left of a plan of "
            f"{num_chunks} chunks x {chunk_iters} iterations"
        )
    evaluates = eval_every is not None or (eval_at_start and start_iter == 0)
    eval_sizes = {final_eval_episodes} | ({eval_episodes} if evaluates else set())
    if state is not None and padded != num_runs:
        state = jax.tree.map(
            lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], padded - num_runs, 0)]),
            state,
        )
    if state is not None and sharding is not None:
        state = jax.device_put(state, sharding)
    fits = partial(_check_memory, num_runs=padded, devices=run_devices)
    exact = _BITWISE if bitwise and run_devices[0].platform == "cpu" else {}
    # Everything is compiled before training starts, so that `compile_s` and
    # `train_s` are measured apart and no chunk waits on a compilation.
    with _Compiler() as compiler:
        init_compiled: Future | None = None
        if state is None:
            init_compiled, state_shape = compiler.submit(
                init_fn,
                seed_keys,
                hparams,
                options={**_RUN_ONCE, **exact},
                sharding=sharding,
                check=fits,
            )
        else:
            # Compile for the given state's exact types (a state read from disk
            # has no weak types), so a resumed run runs what the original ran.
            state_shape = jax.eval_shape(lambda s: s, state)
            fits(state_shape)
        chunk_future, _ = compiler.submit(
            chunk_fn, state_shape, hparams, options=exact, sharding=sharding
        )
        eval_futures = {
            n: compiler.submit(
                partial(_evaluate_seeds, agent, env, num_episodes=n),
                state_shape.agent_state,
                eval_keys,
                hparams,
                options=exact,
                sharding=sharding,
            )[0]
            for n in sorted(eval_sizes)
        }
    chunk_compiled = chunk_future.result()
    eval_compiled = {n: f.result() for n, f in eval_futures.items()}
    if init_compiled is not None:
        carry: TrainState = init_compiled.result()(seed_keys, hparams)
    else:
        assert state is not None
        carry = state
    compile_s = time.perf_counter() - t0

    unpad = (
        (lambda tree: tree)
        if padded == num_runs
        else (lambda tree: jax.tree.map(lambda x: x[:num_runs], tree))
    )
    reports: list[Report] = []
    final_returns = np.zeros((num_runs, 0), np.float32)
    agent_names = getattr(env, "agents", None)
    final_agent_returns = (
        None if agent_names is None else {a: final_returns for a in agent_names}
    )
    stopped = False
    gathered: Any = None
    t_train = time.perf_counter()
    steps = start_iter * per_iter

    def greedy(
        agent_state: Any, num_episodes: int, fold: int
    ) -> tuple[np.ndarray, dict[str, np.ndarray] | None]:
        """`[num_runs, num_episodes]` greedy returns (summed over the agents of a
        multi-agent env), with the evaluation keys folded with `fold`; and each
        agent's, or `None` on a single-agent env."""
        k = jax.vmap(lambda k: jr.fold_in(k, fold))(eval_keys)
        out = fetch(eval_compiled[num_episodes](agent_state, k, hparams))
        if agent_names is None:
            return np.asarray(out)[:num_runs], None
        per_agent = {a: np.asarray(out[a])[:num_runs] for a in agent_names}
        return np.sum(list(per_agent.values()), axis=0), per_agent

    def seed_means(per_agent: dict[str, np.ndarray] | None):
        if per_agent is None:
            return None
        return {a: [float(r) for r in v.mean(axis=1)] for a, v in per_agent.items()}

    if eval_at_start and start_iter == 0:
        # Keys of their own: the chunks' evaluations fold in the chunk index.
        returns, per_agent = greedy(carry.agent_state, eval_episodes, _START)
        report = Report(
            env_steps=0,
            total_steps=total,
            chunk=0,
            num_chunks=num_chunks,
            wall_s=time.perf_counter() - t0,
            steps_per_s=0.0,
            train={},
            eval_returns=[float(r) for r in returns.mean(axis=1)],
            train_runs=None if sweep is None else [{} for _ in range(num_runs)],
            eval_agent_returns=seed_means(per_agent),
        )
        reports.append(report)
        if callback is not None:
            callback(report)
        t_train = time.perf_counter()  # steps_per_s counts training only
    for chunk in range(start_iter // chunk_iters, num_chunks):
        carry, metrics, finite = chunk_compiled(carry, hparams)
        metrics, finite = unpad(fetch((metrics, finite)))
        _check_finite(metrics, finite, first_step=steps + per_iter, per_iter=per_iter)
        last = chunk == num_chunks - 1
        eval_returns = per_agent = None
        if last or eval_every is not None:
            n = final_eval_episodes if last else eval_episodes
            returns, per_agent = greedy(carry.agent_state, n, chunk)
            eval_returns = [float(r) for r in returns.mean(axis=1)]
            if last:
                final_returns = np.asarray(returns)
                final_agent_returns = per_agent
        prev_steps, steps = steps, (chunk + 1) * chunk_iters * per_iter
        elapsed = time.perf_counter() - t_train
        report = Report(
            env_steps=steps,
            total_steps=total,
            chunk=chunk + 1,
            num_chunks=num_chunks,
            wall_s=time.perf_counter() - t0,
            steps_per_s=(steps - start_iter * per_iter) * num_runs / elapsed,
            train=_summarise(metrics),
            eval_returns=eval_returns,
            train_runs=None
            if sweep is None
            else [
                _summarise({k: v[r : r + 1] for k, v in metrics.items()})
                for r in range(num_runs)
            ],
            eval_agent_returns=seed_means(per_agent),
        )
        reports.append(report)
        if callback is not None:
            callback(report)
        stopped = not last and should_stop is not None and bool(should_stop())
        if multi and not last:
            # Every process stops at the same chunk when any is asked to.
            stopped = bool(np.any(fetch(np.asarray(stopped))))
        due = checkpoint_every is not None and (
            steps // checkpoint_every > prev_steps // checkpoint_every
        )
        if last or stopped or due:
            if multi:
                # Every process takes part in gathering the state; process 0
                # writes it.
                gathered = unpad(fetch(carry))
                if checkpoint is not None and jax.process_index() == 0:
                    checkpoint(gathered, report)
            elif checkpoint is not None:
                checkpoint(unpad(carry), report)
        if stopped:
            break
    train_s = time.perf_counter() - t_train
    return RunResult(
        gathered if multi else unpad(carry),
        final_returns,
        reports,
        compile_s,
        train_s,
        total,
        stopped,
        (num_chunks, chunk_iters),
        sweep_values,
        final_agent_returns,
    )


def _fetch(tree: Any, *, multi: bool) -> Any:
    """`tree` as NumPy arrays on the host. In a multi-process run each process
    holds only its devices' runs: every process must call this at the same point,
    and gets every run's values."""
    if not multi:
        return jax.device_get(tree)
    try:
        return multihost_utils.process_allgather(tree, tiled=True)
    except jax.errors.JaxRuntimeError as e:
        raise PeerLostError(
            f"process {jax.process_index()} of {jax.process_count()} lost contact "
            f"with the run's other processes ({str(e).splitlines()[0]}); every "
            "process stops here"
        ) from None


def _devices(devices: int | Sequence[Any] | None) -> list[Any]:
    available = jax.devices()
    if devices is None:
        return list(available)
    if jax.process_count() > 1 and devices not in (len(available), available):
        raise ValueError(
            f"devices={devices!r}: a run of {jax.process_count()} processes trains "
            f"on all their {len(available)} devices; leave devices unset (None)"
        )
    if isinstance(devices, int) and not isinstance(devices, bool):
        if not 1 <= devices <= len(available):
            raise ValueError(
                f"devices={devices}: this process sees {len(available)} "
                f"{available[0].platform} device(s); pass 1 to {len(available)}, "
                "or None for all"
            )
        return list(available[:devices])
    chosen = [] if isinstance(devices, bool | int) else list(devices)
    if not chosen or any(d not in available for d in chosen):
        raise ValueError(
            f"devices must be a number or a non-empty list of jax.devices(), got "
            f"{devices!r}"
        )
    return chosen


def _available_bytes(devices: list[Any]) -> int | None:
    """Memory this process's share of the runs can use: what its accelerators
    report, else the host's."""
    stats = [d.memory_stats() for d in devices]
    if all(s and "bytes_limit" in s for s in stats):
        return sum(s["bytes_limit"] - s.get("bytes_in_use", 0) for s in stats)  # pyright: ignore[reportOptionalSubscript, reportOptionalMemberAccess]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _check_memory(state_shape: Any, *, num_runs: int, devices: list[Any]) -> None:
    """A `ValueError` when the training state (held twice: a chunk's input and
    output) would not fit in the memory left, before anything compiles."""
    total = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state_shape))
    # This process holds its own devices' share of the runs.
    local = [d for d in devices if d.process_index == jax.process_index()]
    nbytes = total * len(local) // len(devices)
    available = _available_bytes(local)
    if available is None or 2 * nbytes <= available:
        return
    gib = 2**30
    share = "" if len(local) == len(devices) else "this process's share of "
    raise ValueError(
        f"{num_runs} run(s) need about {2 * total / gib:.1f} GiB for their "
        f"training state ({total / num_runs / 2**20:.0f} MiB per run, held twice); "
        f"{share}that is more than the {available / gib:.1f} GiB available on "
        f"{devices[0].platform}: train fewer seeds or sweep members at once, "
        "shrink the replay buffer (buffer_size), or add devices"
    )


def _check_finite(
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


def _summarise(metrics: dict[str, np.ndarray]) -> dict[str, float]:
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
