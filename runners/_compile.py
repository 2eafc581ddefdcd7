"""Compiling a run's programs: concurrently with tracing, kept for reuse, or only
lowered (`runners.lower`)."""

import re
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import jax

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
RUN_ONCE: dict[str, Any] = {
    "xla_backend_optimization_level": 0,
    "xla_cpu_use_fusion_emitters": False,
}


# XLA options under which a run's float rounding does not depend on the number of
# runs sharing a device: YNNPACK's fusions (reductions, dots) choose kernels by the
# whole batch's shape. An empty list turns every YNN fusion type off.
BITWISE: dict[str, Any] = {"xla_cpu_experimental_ynn_fusion_type": ""}


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


class Compiler:
    """Compiles programs while the next ones are traced.

    Tracing and lowering are Python (one core, the GIL held); XLA's compilation
    is C++ and releases the GIL. `submit` lowers a program here and compiles it on
    a worker thread, so the next program is traced while the previous compiles:
    on the 2-core CPU, PPO CartPole-v1's three programs are ready in about 1 s
    less than compiled one after another. Programs compiled before (same function,
    static inputs, shapes and options) are taken from `_COMPILED`.

    With `compile=False` nothing is compiled or taken from `_COMPILED`: each
    program is only lowered, and its canonical text and options are kept in
    `lowered` (`runners.lower`).
    """

    def __init__(self, *, compile: bool = True) -> None:
        self.compile = compile
        self.lowered: list[tuple[str, dict[str, Any]]] = []
        self._pool = (
            ThreadPoolExecutor(max_workers=4, thread_name_prefix="compile")
            if compile
            else None
        )
        self._pending: list[tuple[Any, Future]] = []

    def submit(
        self,
        fn: partial,
        *shapes: Any,
        options: dict[str, Any] | None = None,
        sharding: Any = None,
        check: Callable[[Any], None] | None = None,
    ) -> tuple[Future | None, Any]:
        """`(future of the compiled program, its output shapes)`; the future is
        `None` when not compiling. `sharding`: of every input and output (all
        have the run axis first); `check(out_shapes)` may raise before anything
        compiles."""
        key = _cache_key(fn, shapes, options, sharding) if self.compile else None
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
        if self._pool is None:
            self.lowered.append((canonical(lowered.as_text()), dict(options or {})))
            return None, lowered.out_info
        future = self._pool.submit(lowered.compile, options or None)
        self._pending.append((key, future))
        return future, lowered.out_info

    def wait(self) -> None:
        """Wait for every compilation (raising the first error) and keep each."""
        try:
            for key, future in self._pending:
                compiled = future.result()
                if key is None:
                    continue
                if len(_COMPILED) >= _COMPILED_MAX:
                    _COMPILED.pop(next(iter(_COMPILED)))
                _COMPILED[key] = compiled
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Stop the workers (after an error while submitting: the rest is not
        wanted)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
