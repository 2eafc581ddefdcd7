"""Every tuned (agent, env) pair measured the same way: results, table, figures.

    python benchmarks/table.py                      # every pair not yet current
    python benchmarks/table.py --only ppo:Breakout-MinAtar --only pqn:CartPole-v1
    python benchmarks/table.py --seeds 4            # another number of seeds
    python benchmarks/table.py --render             # table and figures only
    python benchmarks/table.py --no-held-out        # skip the held-out seeds

Each pair trains in a fresh Python process with JAX's compilation cache off, so
its wall time is the cold one: interpreter start, imports, compilation and
training. Classic-control pairs train 8 seeds, MinAtar pairs 4 (the seed counts
of `benchmarks/targets.yaml`; `--seeds` changes both), with the tuned block of
`experiments/configs/<agent>.yaml`. The greedy policy is evaluated on 128
episodes per seed at each tenth of training: the learning curves, and at the end
the final return.

**Held out.** Each pair then trains again on seeds no tuning saw: 24 seeds
(4 for MinAtar) split from `jr.PRNGKey(HELD_OUT_KEY)`, a key that tuning never
uses (`benchmarks/speed.py` refuses it as `--seed`), evaluated once at the end.
The table gives how many reach the pair's per-seed target
(`benchmarks/targets.yaml`) and the worst one; a row where fewer than 23 of 24
(all of 4) reach it, or whose target is on the mean and the held-out mean is
below it, is marked, and `python -m experiments.publish` does not
ship it.

**Protocols.** A MinAtar block trains with sticky actions (`env_params:
{sticky_prob: 0.1}`, the MinAtar paper's protocol); each such pair is measured
a second time without them (`VARIANTS`), for a second table to compare with
gymnax's figures: `benchmarks/results/<agent>__<env>__nosticky.json`.

One JSON file per pair goes to `benchmarks/results/<agent>__<env>.json`, with a
`fingerprint` of the settings that decide its figures (the tuned block, the
number of seeds, the evaluation, the XLA flags, the versions of the libraries)
and what computed them: a hash of each program it ran (`runners.lower`: the
initialisation, the chunk and the evaluations, lowered, not compiled) and of the
source of `zoo/`, `envs/` and `runners/` (as syntax trees: comments, docstrings
and formatting do not count). A pair is current while its fingerprint is today's
and its code is too, or, when the code changed, today's code lowers to the same
programs (a refactoring leaves results current); a current pair is skipped
(`--force` runs it anyway). Then the table in
docs/benchmarks.md (between its `table` markers) and one figure per env in
docs/figures/ are regenerated from the files of the pairs tuned today.

Statistics over seeds: the interquartile mean (the mean of the middle half,
`scipy.stats.trim_mean(x, 0.25)`), with a 95 % percentile-bootstrap confidence
interval (10,000 resamples of the seeds, `experiments.analysis.stats.iqm_ci`: the same
interval as `scipy.stats.bootstrap(method="percentile")`). With 4 or 8 seeds the
interval is wide by nature: it says how much the seeds disagree.
"""

import argparse
import ast
import functools
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from experiments import configs, targets
from experiments.analysis import stats
from experiments.versions import git_commit, versions

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
REFERENCES = ROOT / "benchmarks" / "references.yaml"
DOC = ROOT / "docs" / "benchmarks.md"
FIGURES = ROOT / "docs" / "figures"


def markers(variant: str = "") -> tuple[str, str]:
    """The comments around a variant's table in docs/benchmarks.md."""
    name = f"table-{variant}" if variant else "table"
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


BEGIN, END = markers()

# The table's seeds split from jr.PRNGKey(TABLE_KEY), the held-out ones from
# jr.PRNGKey(HELD_OUT_KEY): no tuning uses the latter.
TABLE_KEY = 0
HELD_OUT_KEY = configs.HELD_OUT_KEY
# A row passes the held-out check when this share of its seeds reach the target.
HELD_OUT_PASS = 23 / 24

# Variants, each measured beside the pairs it applies to: name -> what it
# overrides in the block (`env_params`, `hp`) and which blocks it applies to.
# "nosticky": MinAtar without sticky actions, for gymnax's figures;
# "memoryless": a recurrent block with the feed-forward torso, same budget,
# to show what memory buys.
VARIANTS: dict[str, dict] = {
    "nosticky": {
        "env_params": {"sticky_prob": 0},
        "when": lambda block: "sticky_prob" in (block.get("env_params") or {}),
    },
    "memoryless": {
        "hp": {"torso": "auto"},
        "when": lambda block: (block.get("hp") or {}).get("torso") in ("gru", "lstm"),
    },
}

# Greedy episodes per seed at each tenth of training and at the end: one
# number, so that one evaluation program is compiled.
EVAL_EPISODES = 128
CURVE_POINTS = 10
# The code whose change makes a result stale (experiments/ only for the flags).
CODE = ["zoo", "envs", "runners", "experiments/jax_setup.py"]


def pairs() -> list[tuple[str, str]]:
    """Every `(agent, env)` with a tuned block, in the order of the configs."""
    from experiments import configs

    return [(a, e) for a in configs.agents() for e in configs.blocks(a)]


def variants(block: dict) -> list[str]:
    """The variants measured for a block besides its own (`""`)."""
    return [""] + [v for v, over in VARIANTS.items() if over["when"](block)]


def variant_block(block: dict, variant: str) -> dict:
    """`block` with the env parameters and hyperparameters of `variant`
    applied."""
    if not variant:
        return block
    out = dict(block)
    for part in ("env_params", "hp"):
        if part in VARIANTS[variant]:
            out[part] = {**(block.get(part) or {}), **VARIANTS[variant][part]}
    return out


def rows() -> list[tuple[str, str, str]]:
    """Every `(agent, env, variant)` measured: each tuned pair, then its variants."""
    from experiments.configs import tuned

    out = []
    for agent, env in pairs():
        block = tuned(agent, env)
        assert block is not None
        out += [(agent, env, v) for v in variants(block)]
    return out


def result_path(agent: str, env: str, variant: str = "") -> Path:
    suffix = f"__{variant}" if variant else ""
    return RESULTS / f"{agent}__{env.replace('/', '_')}{suffix}.json"


def held_out_summary(
    returns: list[float], target: float | None, *, on_mean: bool = False
) -> dict:
    """How many held-out seeds reach `target`, the worst, and whether the row
    passes: `HELD_OUT_PASS` of its seeds at the target, or, `on_mean`, the
    seeds' mean at it."""
    x = np.asarray(returns, dtype=np.float64)
    out: dict = {"worst": round(float(x.min()), 3), "seeds": int(x.size)}
    if target is not None:
        at = int((x >= target).sum())
        out.update(target=target, at_target=at, passed=at >= HELD_OUT_PASS * x.size)
        if on_mean:
            mean = round(float(x.mean()), 3)
            out.update(on="mean", mean=mean, passed=mean >= target)
    return out


def source_tree(text: str) -> str:
    """A Python source as what runs: its syntax tree without docstrings, so that
    comments, docstrings and formatting do not make a result stale."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if not isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ):
            continue
        if not node.body:
            continue
        first = node.body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False)


@functools.cache
def code_hash() -> str:
    """The source that trains: every Python file under `CODE`, by syntax tree."""
    digest = hashlib.sha256()
    for entry in CODE:
        path = ROOT / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(ROOT)).encode())
            digest.update(source_tree(file.read_text()).encode())
    return digest.hexdigest()[:16]


def fingerprint(block: dict, seeds: int, held_out: int | None = None) -> str:
    """What decides a pair's figures; a result with another fingerprint is stale.
    `held_out`: the number of held-out seeds, for the held-out run's own."""
    from experiments import jax_setup

    what = {
        "block": block,
        "seeds": seeds,
        **({} if held_out is None else {"held_out": [HELD_OUT_KEY, held_out]}),
        "eval": [EVAL_EPISODES, CURVE_POINTS],
        "xla": jax_setup.XLA_DEFAULTS,
        "versions": versions(),
    }
    text = json.dumps(what, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Instruction-set extensions that change the code XLA generates on a CPU.
_ISA = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile")


def machine() -> dict:
    """Where a result was measured. XLA compiles for the host's instruction set,
    and float rounding differs with it, so the same seeds follow other
    trajectories on another CPU: a result is bitwise reproducible only on the
    same kind of machine (docs/benchmarks.md)."""
    import platform

    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                cpu = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "isa": [f for f in _ISA if f in flags]}


def commit() -> str:
    found = git_commit(CODE, short=True)
    if found is None:
        return "unknown"
    head, changes = found
    return head + ("+changes" if changes else "")


# --- one pair, in a child process --------------------------------------------


def row_spec(
    agent_name: str,
    env_name: str,
    seeds: int,
    *,
    variant: str = "",
    held_out: bool = False,
) -> tuple[Any, dict]:
    """`(run spec, block)` of one row: what `python -m experiments.run with
    agent=... env=...` trains (on a multi-agent env, one agent shared by all, its
    default), on the table's seeds with a learning curve, or (`held_out`) on the
    held-out seeds, evaluated once at the end; compiled cold, unrecorded."""
    import dataclasses

    import experiments
    from experiments.configs import tuned

    block = tuned(agent_name, env_name)
    assert block is not None
    block = variant_block(block, variant)
    # A variant's hyperparameters update the tuned ones, as `with hp.x=...`.
    hp = {"hp": VARIANTS[variant]["hp"]} if "hp" in VARIANTS.get(variant, {}) else {}
    spec = experiments.RunSpec.resolve(
        agent=agent_name,
        env=env_name,
        env_params=block.get("env_params", {}),
        **hp,
        seed=HELD_OUT_KEY if held_out else TABLE_KEY,
        num_seeds=seeds,
        eval_episodes=EVAL_EPISODES,
        compilation_cache=False,
        progress=False,
    )
    every = None if held_out else max(spec.total_steps // CURVE_POINTS, 1)
    return dataclasses.replace(spec, eval_every=every), block


@functools.cache
def programs(
    agent_name: str, env_name: str, seeds: int, variant: str, held_out: bool
) -> list[str]:
    """A hash of each program a row trains and evaluates with (`runners.lower`:
    lowered, not compiled): a result stays current while they stay the same, so
    a change to the code that computes the same programs leaves it current."""
    import runners

    spec, _ = row_spec(agent_name, env_name, seeds, variant=variant, held_out=held_out)
    agent, env = spec.build()
    return [
        hashlib.sha256(
            (text + json.dumps(sorted(options.items()))).encode()
        ).hexdigest()[:16]
        for text, options in runners.lower(agent, env, **spec.run_kwargs())
    ]


def child(
    agent_name: str,
    env_name: str,
    seeds: int,
    t_launch: float,
    *,
    variant: str = "",
    held_out: bool = False,
) -> dict:
    """Train and evaluate one row (see `row_spec`) with the experiments' core."""
    import experiments

    spec, block = row_spec(
        agent_name, env_name, seeds, variant=variant, held_out=held_out
    )
    result = experiments.train(spec).results[0]
    total_s = time.time() - t_launch
    returns = result.final_returns.mean(axis=1)
    curve = [
        {"env_steps": r.env_steps, "eval_returns": r.eval_returns}
        for r in result.reports
        if r.eval_returns is not None
    ]
    if held_out:
        return {
            "key": HELD_OUT_KEY,
            "returns": [round(float(r), 3) for r in returns],
            "total_s": round(total_s, 3),
        }
    return {
        "agent": agent_name,
        "env": env_name,
        **({"variant": variant} if variant else {}),
        "num_seeds": seeds,
        "total_steps": result.total_steps,
        "num_envs": block["num_envs"],
        "eval_returns": [round(float(r), 3) for r in returns],
        "eval_episodes": EVAL_EPISODES,
        "curve": curve,
        "compile_s": round(result.compile_s, 3),
        "train_s": round(result.train_s, 3),
        "total_s": round(total_s, 3),
        "steps_per_s": round(result.total_steps * seeds / result.train_s),
        "cache": "off",
        "config": block,
        **(
            {}
            if result.agent_returns is None
            else {
                "sharing": "shared",
                "agent_returns": {
                    a: [round(float(r), 3) for r in v.mean(axis=1)]
                    for a, v in result.agent_returns.items()
                },
            }
        ),
    }


def run_pair(
    agent: str, env: str, seeds: int, variant: str = "", held_out: bool = False
) -> dict:
    cmd = [sys.executable, __file__, "--child", f"{agent}:{env}"]
    cmd += ["--seeds", str(seeds), "--t-launch", repr(time.time())]
    cmd += ["--variant", variant] if variant else []
    cmd += ["--held-out-child"] if held_out else []
    out = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True)
    if out.returncode:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"{agent}:{env} failed (exit {out.returncode}); see above")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- statistics, table, figures ----------------------------------------------


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The interquartile mean over seeds (`experiments.analysis.stats.iqm`)."""
    return stats.iqm(x, axis=axis)


def iqm_ci(x, level: float = 0.95, resamples: int = 10_000) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the IQM over seeds: one
    stratum of `experiments.analysis.stats.iqm_ci`, the same interval as
    `scipy.stats.bootstrap` with `method="percentile"` and seed 0."""
    return stats.iqm_ci([np.asarray(x, dtype=np.float64)], level, resamples)


def load_references() -> dict[str, dict]:
    import yaml

    if not REFERENCES.exists():
        return {}
    return yaml.safe_load(REFERENCES.read_text()) or {}


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.1f}"


def _published(references: dict[str, dict], agent: str, env: str) -> str:
    """The reference for `agent` on `env`, else another agent's on `env` (named)."""
    ref = references.get(f"{agent}:{env}")
    if ref:
        return f"{ref['return']} ({ref['source']})"
    for key, ref in references.items():
        other, _, ref_env = key.partition(":")
        if ref_env == env:
            return f"{other.upper()}: {ref['return']} ({ref['source']})"
    return "-"


def _held_out_cells(r: dict) -> str:
    h = r.get("held_out")
    if not h:
        return "| - | - "
    if "target" not in h:
        return f"| {h['seeds']} seeds, no target | {_fmt(h['worst'])} "
    mark = "" if h["passed"] else " ✗"
    if h.get("on") == "mean":
        return (
            f"| mean {_fmt(h['mean'])} of {h['seeds']} ≥ {h['target']:g}{mark} "
            f"| {_fmt(h['worst'])} "
        )
    return (
        f"| {h['at_target']}/{h['seeds']} ≥ {h['target']:g}{mark} | {_fmt(h['worst'])} "
    )


def render_table(results: list[dict], references: dict[str, dict]) -> str:
    lines = [
        "| agent | env | env steps | seeds | IQM [95 % CI] | worst seed "
        "| held out at target | held-out worst | published | cold s | steps/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        x = np.asarray(r["eval_returns"])
        low, high = iqm_ci(x)
        published = _published(references, r["agent"], r["env"])
        stale = " (stale)" if r.get("stale") else ""
        lines.append(
            f"| {r['agent']} | {r['env']}{stale} | {r['total_steps']:,} "
            f"| {r['num_seeds']} "
            f"| {_fmt(float(iqm(x)))} [{_fmt(low)}, {_fmt(high)}] "
            f"| {_fmt(float(x.min()))} {_held_out_cells(r)}"
            f"| {published} | {r['total_s']:.1f} "
            f"| {r['steps_per_s']:,} |"
        )
    return "\n".join(lines)


def render_figures(results: list[dict]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    FIGURES.mkdir(parents=True, exist_ok=True)
    by_env: dict[str, list[dict]] = {}
    for r in results:
        by_env.setdefault(r["env"], []).append(r)
    written = []
    for env, rs in by_env.items():
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for r in rs:
            steps = [p["env_steps"] for p in r["curve"]]
            points = [np.asarray(p["eval_returns"]) for p in r["curve"]]
            centre = [float(iqm(p)) for p in points]
            bands = np.array([iqm_ci(p, resamples=2_000) for p in points])
            (line,) = ax.plot(steps, centre, label=r["agent"])
            ax.fill_between(
                steps, bands[:, 0], bands[:, 1], color=line.get_color(), alpha=0.2
            )
        ax.set_title(f"{env}: IQM of greedy return, 95 % bootstrap band")
        ax.title.set_fontsize(9)
        ax.set_xlabel("env steps per seed")
        ax.set_ylabel("return")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = FIGURES / f"{env.replace('/', '_')}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def same_programs(r: dict, row: tuple[str, str, str], seeds: int, held_out: bool):
    """Whether result `r` was measured by today's code, or by code that lowers
    to the same programs (checked only when the code changed: seconds a row)."""
    if r.get("code") == code_hash():
        return True
    agent, env, variant = row
    return r.get("programs") == programs(agent, env, seeds, variant, held_out)


def is_current(r: dict) -> bool:
    """Whether a result (and its held-out run) matches today's block and
    programs."""
    from experiments.configs import tuned

    block = tuned(r["agent"], r["env"])
    if block is None:
        return False
    row = (r["agent"], r["env"], r.get("variant", ""))
    block = variant_block(block, row[2])
    if r.get("fingerprint") != fingerprint(block, r["num_seeds"]):
        return False
    if not same_programs(r, row, r["num_seeds"], held_out=False):
        return False
    h = r.get("held_out")
    return h is None or (
        h.get("fingerprint") == fingerprint(block, r["num_seeds"], h["seeds"])
        and same_programs(h, row, h["seeds"], held_out=True)
    )


def _replace_between(text: str, variant: str, table: str) -> str:
    begin, end = markers(variant)
    if begin not in text or end not in text:
        raise SystemExit(f"{DOC} has no {begin} ... {end} markers for the table")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{table}\n{end}{tail}"


def render(tuned_pairs: list[tuple[str, str]]) -> None:
    """Regenerate the tables and figures from the results of `tuned_pairs` and
    their protocol variants."""
    from experiments.configs import tuned

    all_rows = []
    for agent, env in tuned_pairs:
        block = tuned(agent, env)
        assert block is not None
        all_rows += [(agent, env, v) for v in variants(block)]
    text = DOC.read_text()
    figures: list[Path] = []
    for variant in ["", *VARIANTS]:
        chosen = [(a, e, v) for a, e, v in all_rows if v == variant]
        if variant and not chosen and markers(variant)[0] not in text:
            continue  # no rows, and no place for them: nothing to write
        results = [
            json.loads(result_path(a, e, v).read_text())
            for a, e, v in chosen
            if result_path(a, e, v).exists()
        ]
        for r in results:  # marked in the table when the config or code moved on
            r["stale"] = not is_current(r)
        table = render_table(results, load_references())
        missing = [
            f"{a}:{e}" for a, e, v in chosen if not result_path(a, e, v).exists()
        ]
        if missing:
            table += "\n\nNot yet measured: " + ", ".join(missing) + "."
        if any(r["stale"] for r in results):
            table += (
                "\n\n(stale): measured on an earlier config, or by code that "
                "lowers to other programs (`runners.lower`; a change that computes "
                "the same programs keeps a result current); `python "
                "benchmarks/table.py` measures it again."
            )
        if any(r.get("held_out", {}).get("passed") is False for r in results):
            table += (
                "\n\n✗: fewer than 23 of 24 held-out seeds (all of 4 for "
                "MinAtar) reach the target, or their mean is below a target set "
                "on the mean; "
                + (
                    "not shipped as a pretrained agent."
                    if not variant
                    else "what ships is decided by the main table's row."
                )
            )
        text = _replace_between(text, variant, table)
        if not variant:
            figures = render_figures(results)
    DOC.write_text(text)
    show = lambda p: p.relative_to(ROOT) if p.is_relative_to(ROOT) else p
    print(
        f"tables of {len(all_rows)} rows -> {show(DOC)}; "
        f"{len(figures)} figures -> {show(FIGURES)}/",
        flush=True,
    )


def measure(agent: str, env: str, variant: str, seeds: int, args) -> None:
    """Train one row on the table's seeds and then the held-out ones, each
    skipped where its result is current."""
    from experiments.configs import tuned

    block = tuned(agent, env)
    assert block is not None
    block = variant_block(block, variant)
    path = result_path(agent, env, variant)
    name = f"{agent}:{env}" + (f" ({variant})" if variant else "")
    where = f"{name}, {seeds} seeds"
    mark, row = fingerprint(block, seeds), (agent, env, variant)
    old = json.loads(path.read_text()) if path.exists() else None
    if (
        old is not None
        and old.get("fingerprint") == mark
        and same_programs(old, row, seeds, held_out=False)
        and not args.force
    ):
        out = old
        print(f"{where}: current, skipped", flush=True)
    else:
        # What the result records of the code is taken before it trains: a
        # failure here costs nothing, and nothing changed later is recorded.
        made_by = {
            "fingerprint": mark,
            "code": code_hash(),
            "programs": programs(agent, env, seeds, variant, False),
            "commit": commit(),
            "versions": versions(),
        }
        print(f"{where}: training {block['total_steps']:,} steps ...", flush=True)
        out = run_pair(agent, env, seeds, variant)
        out.update(made_by)
        out["machine"] = machine()
        out["date"] = time.strftime("%Y-%m-%d")
        path.write_text(json.dumps(out, indent=1) + "\n")
        x = np.asarray(out["eval_returns"])
        low, high = iqm_ci(x)
        print(
            f"{where}: IQM {_fmt(float(iqm(x)))} [{_fmt(low)}, {_fmt(high)}], "
            f"worst {_fmt(float(x.min()))}, {out['total_s']:.1f} s cold",
            flush=True,
        )
    if args.no_held_out:
        return
    target = targets.target(agent, env, variant)
    if target is None:
        # Nothing to check: the held-out run counts seeds at a target.
        print(f"{name}: no per-seed target, no held-out seeds", flush=True)
        return
    n = target.seeds.held_out
    h_mark = fingerprint(block, seeds, n)
    h = out.get("held_out")
    if (
        h is not None
        and h.get("fingerprint") == h_mark
        and same_programs(h, row, n, held_out=True)
        and not args.force
    ):
        print(f"{name}, {n} held-out seeds: current, skipped", flush=True)
        return
    made_by = {
        "fingerprint": h_mark,
        "code": code_hash(),
        "programs": programs(agent, env, n, variant, True),
    }
    print(f"{name}, {n} held-out seeds: training ...", flush=True)
    h = run_pair(agent, env, n, variant, held_out=True)
    on_mean = target.on_mean
    h.update(held_out_summary(h["returns"], target.value, on_mean=on_mean))
    h.update(made_by)
    out["held_out"] = h
    path.write_text(json.dumps(out, indent=1) + "\n")
    at = f"{h['at_target']}/{n} at >= {h['target']:g}, " if "target" in h else ""
    if on_mean:
        at = f"mean {_fmt(h['mean'])} (target {h['target']:g}), "
    print(
        f"{name}, {n} held-out seeds: {at}worst {_fmt(h['worst'])}, "
        f"{h['total_s']:.1f} s cold",
        flush=True,
    )


# --- main ---------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Train every tuned pair; regenerate the benchmark table."
    )
    parser.add_argument(
        "--only", action="append", metavar="AGENT:ENV", help="just these pairs"
    )
    parser.add_argument(
        "--seeds", type=int, help="seeds per pair (default 8, 4 MinAtar)"
    )
    parser.add_argument("--force", action="store_true", help="run current pairs too")
    parser.add_argument(
        "--no-held-out", action="store_true", help="skip the held-out seeds"
    )
    parser.add_argument(
        "--variant",
        choices=["", "main", *VARIANTS],
        help="only the tuned protocol (main) or only this variant",
    )
    parser.add_argument(
        "--render", action="store_true", help="only regenerate table and figures"
    )
    parser.add_argument("--child", metavar="AGENT:ENV", help=argparse.SUPPRESS)
    parser.add_argument("--held-out-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--t-launch", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        agent, env = args.child.split(":", 1)
        out = child(
            agent,
            env,
            args.seeds,
            args.t_launch,
            variant=args.variant or "",
            held_out=args.held_out_child,
        )
        print(json.dumps(out))
        return

    from experiments import jax_setup

    tuned_pairs = pairs()
    chosen = rows()
    if args.only:
        known = {f"{a}:{e}" for a, e in tuned_pairs}
        unknown = [p for p in args.only if p not in known]
        if unknown:
            raise SystemExit(
                f"no tuned block for {', '.join(unknown)}; tuned pairs: "
                + ", ".join(sorted(known))
            )
        chosen = [(a, e, v) for a, e, v in chosen if f"{a}:{e}" in args.only]
    if args.variant is not None:
        want = "" if args.variant == "main" else args.variant
        chosen = [(a, e, v) for a, e, v in chosen if v == want]
    if args.seeds is not None and args.seeds <= 0:
        raise SystemExit(f"--seeds must be positive, got {args.seeds}")
    if args.render:
        render(tuned_pairs)
        return

    jax_setup.set_xla_flags()  # inherited by the children
    RESULTS.mkdir(parents=True, exist_ok=True)
    for i, (agent, env, variant) in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}]", end=" ", flush=True)
        seeds = args.seeds or targets.seeds(agent, env).table
        measure(agent, env, variant, seeds, args)
    render(tuned_pairs)


if __name__ == "__main__":
    main()
