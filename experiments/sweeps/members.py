"""A sweep's members from its config: grids, random search, and the programs they
need.

`sweep` maps hyperparameter names to a list of values (a grid: every combination)
or to a distribution, `loguniform(low,high)` or `uniform(low,high)` (random
search: `sweep_samples` draws, crossed with the grid). Float hyperparameters vary
inside one compiled program (`runners.run(sweep=...)`); the others (sizes,
`num_steps`, booleans, names) split the sweep into one program per distinct
value, trained one after another.
"""

import dataclasses
import itertools
import math
import re
from typing import Any

import numpy as np

from experiments._errors import ConfigError

# The one grammar of a distribution, for `sweep=` and `python -m
# experiments.sweep`'s `search.` keys: `kind(low,high)`.
_DISTRIBUTION = re.compile(
    r"^\s*(loguniform|uniform|intuniform)\s*\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)\s*$"
)


def distribution(
    where: str, spec: Any, *, kinds: tuple[str, ...]
) -> tuple[str, float, float] | None:
    """`(kind, low, high)` of a spec such as `"loguniform(1e-4,1e-2)"`, the
    kind one of `kinds` (`intuniform` has integer bounds); `None` when `spec`
    is not of that form (the caller says what else the key may hold). `where`
    names the key in errors.

    **Raises:** `ConfigError` for bounds that are not numbers (integers), not
    finite or not `low < high`, or loguniform's below zero."""
    match = _DISTRIBUTION.match(spec) if isinstance(spec, str) else None
    if match is None or match.group(1) not in kinds:
        return None
    kind, low_text, high_text = match.groups()
    cast = int if kind == "intuniform" else float
    try:
        low, high = cast(low_text), cast(high_text)
    except ValueError:
        what = "integers" if cast is int else "numbers"
        raise ConfigError(f"{where}: bounds of {spec!r} must be {what}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError(f"{where}: {spec!r} needs finite bounds, low < high")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{where}: loguniform needs positive bounds, got {spec!r}")
    return kind, low, high


@dataclasses.dataclass(frozen=True)
class Program:
    """Members trained together: `static` hyperparameters shared by all, and
    `floats` (`{name: [value per member]}`) varied inside the program;
    `members`: their indices in the whole sweep."""

    static: dict[str, Any]
    floats: dict[str, list[float]]
    members: list[int]


def of_config(config: dict[str, Any], agent: Any) -> tuple[list, list]:
    """`(members, programs)` of a run config's sweep."""
    found = members(agent, config["sweep"], config["sweep_samples"], config["seed"])
    return found, programs(agent, found)


def members(
    agent: Any, sweep: dict[str, Any], samples: int, seed: int
) -> list[dict[str, Any]]:
    """Every member's hyperparameters, in order: the grid (last name fastest),
    each grid point crossed with `samples` random draws (from `seed`).

    **Raises:** `ConfigError` naming the key, for an unknown hyperparameter, an
    empty list, a bad distribution, a distribution on a hyperparameter that is not
    a float, or `sweep_samples` without a distribution (or the reverse).
    """
    if not isinstance(sweep, dict):
        raise ConfigError(f"sweep: expected a dict of hyperparameters, got {sweep!r}")
    if type(samples) is not int or samples < 0:
        raise ConfigError(f"sweep_samples: expected an integer >= 0, got {samples!r}")
    grid, random = _split(agent, sweep)
    if random and samples == 0:
        raise ConfigError(
            f"sweep.{next(iter(random))} is a distribution: set sweep_samples=N "
            "(the number of members to draw)"
        )
    if samples and not random:
        raise ConfigError(
            "sweep_samples is set but no sweep entry is a distribution; use e.g. "
            "'sweep.learning_rate=loguniform(1e-4,1e-2)'"
        )
    rng = np.random.default_rng(seed)
    draws = [
        {
            name: float(
                np.exp(rng.uniform(math.log(low), math.log(high)))
                if kind == "loguniform"
                else rng.uniform(low, high)
            )
            for name, (kind, low, high) in random.items()
        }
        for _ in range(samples or 1)
    ]
    names = list(grid)
    return [
        {**dict(zip(names, point, strict=True)), **draw}
        for point in itertools.product(*(grid[n] for n in names))
        for draw in draws
    ]


def _split(
    agent: Any, sweep: dict[str, Any]
) -> tuple[dict[str, list[Any]], dict[str, tuple[str, float, float]]]:
    """`(grid, distributions)` of the sweep's entries, each checked."""
    import runners

    fields = {f.name for f in dataclasses.fields(agent)}
    floats = set(runners.sweepable(agent))
    grid: dict[str, list[Any]] = {}
    random: dict[str, tuple[str, float, float]] = {}
    for name, values in sweep.items():
        if name not in fields:
            raise ConfigError(
                f"sweep.{name}: {type(agent).__name__} has no such hyperparameter; "
                f"it has {sorted(fields)}"
            )
        if isinstance(values, str):
            if name not in floats:
                raise ConfigError(
                    f"sweep.{name}: random search draws floats, and {name} is not "
                    "one; give a list of values instead"
                )
            found = distribution(
                f"sweep.{name}", values, kinds=("loguniform", "uniform")
            )
            if found is None:
                raise ConfigError(
                    f"sweep.{name}: {values!r} is neither a list of values nor "
                    "loguniform(low,high) / uniform(low,high)"
                )
            random[name] = found
        elif isinstance(values, list | tuple):
            if not values:
                raise ConfigError(f"sweep.{name}: the list of values is empty")
            grid[name] = list(values)
        else:
            raise ConfigError(
                f"sweep.{name}: expected a list of values or loguniform(low,high) / "
                f"uniform(low,high), got {values!r}"
            )
    return grid, random


def programs(agent: Any, sweep_members: list[dict[str, Any]]) -> list[Program]:
    """The members grouped into programs, in order of first appearance.

    **Raises:** `ConfigError` for a float hyperparameter given a non-number.
    """
    import runners

    floats = set(runners.sweepable(agent))
    groups: dict[str, Program] = {}
    for index, member in enumerate(sweep_members):
        static = {k: v for k, v in member.items() if k not in floats}
        for k, v in member.items():
            if k in floats and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise ConfigError(f"sweep.{k}: expected numbers, got {v!r}")
        key = repr(sorted(static.items()))
        if key not in groups:
            groups[key] = Program(static, {k: [] for k in member if k in floats}, [])
        program = groups[key]
        for k in program.floats:
            program.floats[k].append(float(member[k]))
        program.members.append(index)
    return list(groups.values())


def describe(sweep_members: list[dict[str, Any]], progs: list[Program]) -> str:
    """One line on how the sweep trains."""
    line = f"Sweep: {len(sweep_members)} member(s)"
    if len(progs) == 1:
        return line + " in one program"
    varying = sorted({k for p in progs for k in p.static})
    values = " | ".join(
        ", ".join(f"{k}={p.static[k]}" for k in varying if k in p.static) for p in progs
    )
    return (
        f"{line} in {len(progs)} programs, one per value of {', '.join(varying)} "
        f"(these set shapes or control flow), run one after another: {values}"
    )
