"""The one targets file, `benchmarks/targets.yaml`: what each pair must reach
and on how many seeds. The benchmark table (its held-out check),
`python -m experiments.publish` (what ships) and the learning tests read it
here. YAML only: no JAX, no Sacred.

```python
t = experiments.targets.target("ppo", "Breakout-MinAtar")
t.value, t.on_mean, t.source   # 7.5, False, "75 % of the MinAtar paper's DQN (10)"
t.seeds.table, t.seeds.held_out, t.seeds.publish   # 4, 4, 2
```
"""

import dataclasses
import functools
from pathlib import Path
from typing import Any

FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "targets.yaml"


@dataclasses.dataclass(frozen=True)
class Seeds:
    """How many seeds a pair trains: `table` for its benchmark row, `held_out`
    for the row's held-out check, `publish` to pick the shipped agent from."""

    table: int
    held_out: int
    publish: int


@dataclasses.dataclass(frozen=True)
class Target:
    """A pair's target return: every held-out seed must reach `value` (a row
    passes at 23 of 24), or with `on_mean` their mean must; the shipped agent's
    return must reach it too. `source`: where the figure comes from."""

    value: float
    on_mean: bool
    source: str
    seeds: Seeds


@functools.cache
def _load(path: Path = FILE) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load(path.read_text()) or {}
    for key in ("seeds", "targets"):
        if not isinstance(data.get(key), dict):
            raise ValueError(f"{path}: expected a {key!r} mapping")
    return data


def _entry(scope: dict[str, Any], agent: str, env: str) -> dict[str, Any] | None:
    return scope.get(f"{agent}:{env}") or scope.get(env)


def seeds(agent: str, env: str) -> Seeds:
    """The seed counts of a pair: its entry's `seeds` over the file's defaults
    (the defaults where the pair has no target)."""
    data = _load()
    own = (_entry(data["targets"], agent, env) or {}).get("seeds", {})
    return Seeds(**{**data["seeds"], **own})


def target(agent: str, env: str, variant: str = "") -> Target | None:
    """The target of `agent` on `env` (an `agent:env` entry wins over the env's),
    in protocol `variant`'s section for a variant row; `None` where none is set
    (multi-agent envs, a variant without its own figures)."""
    data = _load()
    scope = data.get("variants", {}).get(variant, {}) if variant else data["targets"]
    entry = _entry(scope, agent, env)
    if entry is None:
        return None
    on_mean = "mean" in entry
    return Target(
        value=float(entry["mean" if on_mean else "seed"]),
        on_mean=on_mean,
        source=str(entry["source"]),
        seeds=seeds(agent, env),
    )
