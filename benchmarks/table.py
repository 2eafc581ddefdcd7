"""Every tuned (agent, env) pair measured the same way: results, table, figures.

    python benchmarks/table.py                      # every pair not yet current
    python benchmarks/table.py --only ppo:Breakout-MinAtar --only pqn:CartPole-v1
    python benchmarks/table.py --seeds 4            # another number of seeds
    python benchmarks/table.py --render             # table and figures only

Each pair trains in a fresh Python process with JAX's compilation cache off, so
its wall time is the cold one: interpreter start, imports, compilation and
training. Classic-control pairs train 8 seeds, MinAtar pairs 4 (`--seeds`
changes both), with the tuned block of `experiments/configs/<agent>.yaml`. The
greedy policy is evaluated on 128 episodes per seed at each tenth of training:
the learning curves, and at the end the final return.

One JSON file per pair goes to `benchmarks/results/<agent>__<env>.json`, with a
`fingerprint` of everything that decides its figures: the tuned block, the number
of seeds, the evaluation, the source of `zoo/`, `envs/` and `runners/` (as syntax
trees: comments, docstrings and formatting do not count), the XLA flags and the
versions of the libraries. A pair whose file carries the current
fingerprint is skipped (`--force` runs it anyway). Then the table in
docs/benchmarks.md (between its `table` markers) and one figure per env in
docs/figures/ are regenerated from the files of the pairs tuned today.

Statistics over seeds: the interquartile mean (the mean of the middle half,
`scipy.stats.trim_mean(x, 0.25)`), with a 95 % percentile-bootstrap confidence
interval (10,000 resamples of the seeds, `experiments._stats.iqm_ci`: the same
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

import numpy as np

from experiments import _stats
from experiments._versions import versions

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
REFERENCES = ROOT / "benchmarks" / "references.yaml"
DOC = ROOT / "docs" / "benchmarks.md"
FIGURES = ROOT / "docs" / "figures"
BEGIN, END = "<!-- table:begin -->", "<!-- table:end -->"

# Greedy episodes per seed at each tenth of training and at the end: one
# number, so that one evaluation program is compiled.
EVAL_EPISODES = 128
CURVE_POINTS = 10
# The code whose change makes a result stale (experiments/ only for the flags).
CODE = ["zoo", "envs", "runners", "experiments/_jax_setup.py"]


def pairs() -> list[tuple[str, str]]:
    """Every `(agent, env)` with a tuned block, in the order of the configs."""
    from experiments import configs

    return [(a, e) for a in configs.agents() for e in configs.blocks(a)]


def default_seeds(env: str) -> int:
    return 4 if "MinAtar" in env else 8


def result_path(agent: str, env: str) -> Path:
    return RESULTS / f"{agent}__{env.replace('/', '_')}.json"


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


def fingerprint(block: dict, seeds: int) -> str:
    """What decides a pair's figures; a result with another fingerprint is stale."""
    from experiments import _jax_setup

    what = {
        "block": block,
        "seeds": seeds,
        "eval": [EVAL_EPISODES, CURVE_POINTS],
        "code": code_hash(),
        "xla": _jax_setup.XLA_DEFAULTS,
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
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", *CODE],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# --- one pair, in a child process --------------------------------------------


def child(agent_name: str, env_name: str, seeds: int, t_launch: float) -> dict:
    import jax.random as jr

    import runners
    from experiments import _config
    from experiments.configs import tuned

    block = tuned(agent_name, env_name)
    assert block is not None
    env = _config.make_env(env_name, {})
    # On a multi-agent env: one agent shared by all (experiments.run's default).
    agent = _config.make_agent(agent_name, block.get("hp", {}), env)
    total = block["total_steps"]
    result = runners.run(
        agent,
        env,
        key=jr.PRNGKey(0),
        total_steps=total,
        num_envs=block["num_envs"],
        num_seeds=seeds,
        eval_every=max(total // CURVE_POINTS, 1),
        eval_episodes=EVAL_EPISODES,
    )
    total_s = time.time() - t_launch
    returns = result.final_returns.mean(axis=1)
    curve = [
        {"env_steps": r.env_steps, "eval_returns": r.eval_returns}
        for r in result.reports
        if r.eval_returns is not None
    ]
    return {
        "agent": agent_name,
        "env": env_name,
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


def run_pair(agent: str, env: str, seeds: int) -> dict:
    cmd = [sys.executable, __file__, "--child", f"{agent}:{env}"]
    cmd += ["--seeds", str(seeds), "--t-launch", repr(time.time())]
    out = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True)
    if out.returncode:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"{agent}:{env} failed (exit {out.returncode}); see above")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- statistics, table, figures ----------------------------------------------


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The interquartile mean over seeds (`experiments._stats.iqm`)."""
    return _stats.iqm(x, axis=axis)


def iqm_ci(x, level: float = 0.95, resamples: int = 10_000) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the IQM over seeds: one
    stratum of `experiments._stats.iqm_ci`, the same interval as
    `scipy.stats.bootstrap` with `method="percentile"` and seed 0."""
    return _stats.iqm_ci([np.asarray(x, dtype=np.float64)], level, resamples)


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


def render_table(results: list[dict], references: dict[str, dict]) -> str:
    lines = [
        "| agent | env | env steps | seeds | IQM [95 % CI] | worst seed "
        "| published | cold s | steps/s |",
        "|---|---|---|---|---|---|---|---|---|",
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
            f"| {_fmt(float(x.min()))} | {published} | {r['total_s']:.1f} "
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


def render(tuned_pairs: list[tuple[str, str]]) -> None:
    """Regenerate the table and figures from the results of `tuned_pairs`."""
    results = []
    for agent, env in tuned_pairs:
        path = result_path(agent, env)
        if path.exists():
            results.append(json.loads(path.read_text()))
    from experiments.configs import tuned

    for r in results:  # marked in the table when the config or code has moved on
        block = tuned(r["agent"], r["env"])
        current = block is not None and r.get("fingerprint") == fingerprint(
            block, r["num_seeds"]
        )
        r["stale"] = not current
    table = render_table(results, load_references())
    missing = [f"{a}:{e}" for a, e in tuned_pairs if not result_path(a, e).exists()]
    if missing:
        table += "\n\nNot yet measured: " + ", ".join(missing) + "."
    if any(r["stale"] for r in results):
        table += (
            "\n\n(stale): measured on an earlier config or code; "
            "`python benchmarks/table.py` measures it again."
        )
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC} has no {BEGIN} ... {END} markers for the table")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
    figures = render_figures(results)
    show = lambda p: p.relative_to(ROOT) if p.is_relative_to(ROOT) else p
    print(
        f"table of {len(results)} pairs -> {show(DOC)}; "
        f"{len(figures)} figures -> {show(FIGURES)}/",
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
        "--render", action="store_true", help="only regenerate table and figures"
    )
    parser.add_argument("--child", metavar="AGENT:ENV", help=argparse.SUPPRESS)
    parser.add_argument("--t-launch", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        agent, env = args.child.split(":", 1)
        print(json.dumps(child(agent, env, args.seeds, args.t_launch)))
        return

    from experiments import _jax_setup
    from experiments.configs import tuned

    tuned_pairs = pairs()
    chosen = tuned_pairs
    if args.only:
        known = {f"{a}:{e}" for a, e in tuned_pairs}
        unknown = [p for p in args.only if p not in known]
        if unknown:
            raise SystemExit(
                f"no tuned block for {', '.join(unknown)}; tuned pairs: "
                + ", ".join(sorted(known))
            )
        chosen = [tuple(p.split(":", 1)) for p in args.only]
    if args.seeds is not None and args.seeds <= 0:
        raise SystemExit(f"--seeds must be positive, got {args.seeds}")
    if args.render:
        render(tuned_pairs)
        return

    _jax_setup.set_xla_flags()  # inherited by the children
    RESULTS.mkdir(parents=True, exist_ok=True)
    for i, (agent, env) in enumerate(chosen, 1):
        seeds = args.seeds or default_seeds(env)
        block = tuned(agent, env)
        assert block is not None
        mark = fingerprint(block, seeds)
        path = result_path(agent, env)
        where = f"[{i}/{len(chosen)}] {agent}:{env}, {seeds} seeds"
        if path.exists() and not args.force:
            old = json.loads(path.read_text())
            if old.get("fingerprint") == mark:
                print(f"{where}: current, skipped", flush=True)
                continue
        print(f"{where}: training {block['total_steps']:,} steps ...", flush=True)
        out = run_pair(agent, env, seeds)
        out.update(fingerprint=mark, commit=commit(), versions=versions())
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
    render(tuned_pairs)


if __name__ == "__main__":
    main()
