"""Train the pretrained zoo from the tuned configs: `python -m experiments.publish`.

```bash
python -m experiments.publish                       # every tuned pair
python -m experiments.publish ppo:CartPole-v1 dqn:Acrobot-v1
python -m experiments.publish --out /tmp/zoo ppo:CartPole-v1   # elsewhere
```

For each `(agent, env)` with a tuned config it trains the tuned block with the
pair's `publish` seeds (`benchmarks/targets.yaml`: 4, 2 on MinAtar) from
`jr.PRNGKey(0)`, picks the seed with the best greedy return over 128 episodes,
measures that seed again on 128 fresh episodes (`EVAL_KEY`, so the selection
does not flatter the figure), and ships it (`zoo.save`, plus a provenance JSON)
when that return reaches the pair's target (`experiments.targets`, the table's)
and the pair passed the benchmark table's held-out check (its
`benchmarks/results/<agent>__<env>.json`, measured on the same block, has at
least 23 of 24 held-out seeds at the target; `--ignore-held-out` skips this for
a block of your own). `index.json` records every pair tried and why one was not
shipped.

The same command on the same commit, libraries and machine writes the same
files byte for byte: training and evaluation are seeded, the JSON is written with
sorted keys and holds no time stamps. The provenance names the commit, so the
code must be committed first (`--allow-dirty` records `+changes` instead).
"""

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from experiments import targets
from experiments._errors import PublishError
from experiments.record.progress import write_json
from experiments.versions import git_commit, versions

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
EPISODES = 128
TRAIN_KEY = 0  # seed i of the run trains with jr.split(jr.PRNGKey(0), seeds)[i]
SELECT_KEY = 1  # picks the best seed (`runners.evaluate`, seed i folds in i)
EVAL_KEY = 2  # the shipped seed's recorded return


def commit(allow_dirty: bool) -> str:
    """The commit the files are made from; refuses uncommitted code."""
    found = git_commit(["zoo", "envs", "runners", "experiments"])
    if found is None:
        if allow_dirty:
            return "unknown"
        raise PublishError(
            "not a git checkout: the provenance must name the commit that trains "
            "the files; publish from a clone, or pass --allow-dirty"
        )
    head, dirty = found
    changed = [line for line in dirty if "zoo/pretrained/" not in line[3:]]
    if changed and not allow_dirty:
        raise PublishError(
            f"uncommitted changes in the code ({changed[0][3:]}, ...): commit them "
            "first so the provenance names a commit that reproduces the files, or "
            "pass --allow-dirty"
        )
    return head + ("+changes" if changed else "")


def parse_pairs(specs: list[str]) -> list[tuple[str, str]]:
    import envs
    import experiments

    # The pretrained zoo holds single-agent agents: `zoo.pretrained` returns a
    # zoo agent, not multi-agent learners.
    tuned = [(a, e) for a, e in experiments.pairs() if not envs.is_multi_agent(e)]
    if not specs:
        return tuned
    pairs = []
    for spec in specs:
        agent, sep, env = spec.partition(":")
        if not sep or (agent, env) not in tuned:
            raise PublishError(
                f"{spec!r} is not a tuned agent:env pair; tuned pairs: "
                + ", ".join(f"{a}:{e}" for a, e in tuned)
            )
        pairs.append((agent, env))
    return pairs


def held_out_failure(agent: str, env: str) -> str | None:
    """Why the pair fails the benchmark table's held-out check, or `None` when
    its result (on today's tuned block) passed it."""
    import experiments

    path = RESULTS / f"{agent}__{env.replace('/', '_')}.json"
    command = f"python benchmarks/table.py --only {agent}:{env}"
    if not path.is_file():
        return f"it has no benchmark result with held-out seeds ({command})"
    result = json.loads(path.read_text())
    t = experiments.tuned(agent, env)
    block = {**t.run, "hp": t.hp, "env_params": t.env_params}
    recorded = {**t.run, **result.get("config", {})}
    recorded.setdefault("hp", {})
    recorded.setdefault("env_params", {})
    if {k: recorded.get(k) for k in block} != block:
        return f"its benchmark result is of another block ({command})"
    held = result.get("held_out")
    if held is None or "passed" not in held:
        return f"its benchmark result has no held-out seeds ({command})"
    if not held["passed"] and held.get("on") == "mean":
        return (
            f"the mean of its {held['seeds']} held-out seeds, {held['mean']:.1f}, "
            f"is below {held['target']:g}"
        )
    if not held["passed"]:
        return (
            f"{held['at_target']} of {held['seeds']} held-out seeds reached "
            f"{held['target']:g} (worst {held['worst']:.1f}); it needs 23 of 24"
        )
    return None


def _target(agent: str, env: str) -> tuple[float, str, int]:
    """The pair's target, where it comes from, and how many seeds it trains."""
    target = targets.target(agent, env)
    assert target is not None  # `main` refuses pairs without one
    return target.value, target.source, target.seeds.publish


def publish_pair(
    agent_name: str, env_name: str, out: Path, head: str, held_out: bool = True
) -> dict:
    """Train, select, measure and (when it reaches the target and passed the
    held-out check) write one pair. **Returns:** its `index.json` entry."""
    import experiments
    import zoo

    tuned = experiments.tuned(agent_name, env_name)
    target, target_source, seeds = _target(agent_name, env_name)
    t0 = time.perf_counter()
    agent, env, state, best, select_means, returns = _train_and_select(tuned, seeds)
    mean = float(returns.mean())
    entry: dict[str, Any] = {
        "agent": agent_name,
        "env": env_name,
        "return_mean": round(mean, 4),
        "target": target,
        "seed_means": [round(float(m), 4) for m in select_means],
    }
    failed = held_out_failure(agent_name, env_name) if held_out else None
    if failed is None and mean < target:
        failed = (
            f"its best of {seeds} seeds returned {mean:.1f} over {EPISODES} "
            f"episodes, short of the target {target:g} ({target_source})"
        )
    elif failed is not None:
        failed = f"the held-out check: {failed}"
    stem = out / zoo.pretrained_stem(agent_name, env_name)
    entry["shipped"] = failed is None
    if failed is not None:
        entry["reason"] = failed
        for suffix in (".eqx", ".json"):
            stem.with_name(stem.name + suffix).unlink(missing_ok=True)
    else:
        space = (env.observation_space, env.action_space)
        zoo.save(stem.with_name(stem.name + ".eqx"), agent, state, *space)
        prov = _provenance(tuned, seeds, best, returns, head)
        write_json(stem.with_name(stem.name + ".json"), prov, indent=1, sort_keys=True)
    entry["seconds"] = round(time.perf_counter() - t0, 1)
    return entry


def _provenance(tuned: Any, seeds: int, best: int, returns: Any, head: str) -> dict:
    """What the shipped agent's JSON records: how it was trained, chosen and
    measured."""
    target, target_source, _ = _target(tuned.agent, tuned.env)
    return {
        "agent": tuned.agent,
        "env": tuned.env,
        "command": f"python -m experiments.publish {tuned.agent}:{tuned.env}",
        "hp": tuned.hp,
        "env_params": tuned.env_params,
        "total_steps": tuned.run["total_steps"],
        "num_envs": tuned.run["num_envs"],
        "train_key": f"jr.split(jr.PRNGKey({TRAIN_KEY}), {seeds})[{best}]",
        "seed": best,
        "num_seeds": seeds,
        "selected_by": (
            f"best mean greedy return over {EPISODES} episodes with "
            f"runners.evaluate(key=jr.PRNGKey({SELECT_KEY})) (all seeds)"
        ),
        "eval_key": EVAL_KEY,
        "episodes": EPISODES,
        "return_mean": round(float(returns.mean()), 4),
        "return_std": round(float(returns.std()), 4),
        "return_min": round(float(returns.min()), 4),
        "target": target,
        "target_source": target_source,
        "commit": head,
        "versions": versions(),
    }


def _train_and_select(tuned: Any, seeds: int) -> tuple:
    """Train `seeds` seeds of the tuned pair; pick the best on `SELECT_KEY`'s
    episodes and measure it on `EVAL_KEY`'s: `(agent, env, its state, its seed,
    every seed's selection mean, its returns)`."""
    import jax.random as jr
    import numpy as np

    import runners
    from experiments import _training
    from experiments._spec import RunSpec

    # `python -m experiments.run`'s training, unrecorded: one evaluation, at
    # the end (the selection below evaluates again, on its own key).
    spec = RunSpec.resolve(
        agent=tuned.agent,
        env=tuned.env,
        seed=TRAIN_KEY,
        num_seeds=seeds,
        eval_every=None,
        eval_episodes=1,
        progress=False,
    )
    outcome = _training.train(spec)
    agent, env, result = outcome.agent, outcome.env, outcome.results[0]
    select = runners.evaluate(
        agent, result.state, env, key=jr.PRNGKey(SELECT_KEY), num_episodes=EPISODES
    )
    select_means = np.asarray(select).mean(axis=1)
    best = int(np.argmax(select_means))
    state = runners.seed_state(result.state, best).agent_state
    returns = np.asarray(
        runners.evaluate(
            agent, state, env, key=jr.PRNGKey(EVAL_KEY), num_episodes=EPISODES
        )
    )
    return agent, env, state, best, select_means, returns


DOCS = ROOT / "docs" / "using.md"


def docs_table(index: dict[str, Any]) -> str:
    """The table of `docs/using.md`: every pair tried, shipped or not."""
    rows = [
        "| agent | env | greedy return (128 episodes) | target | shipped |",
        "|---|---|---|---|---|",
    ]
    for entry in index.values():
        rows.append(
            f"| {entry['agent']} | {entry['env']} | {entry['return_mean']:.1f} | "
            f"{entry['target']:g} | {'yes' if entry['shipped'] else 'no'} |"
        )
    return "\n".join(rows)


def update_docs(index: dict[str, Any]) -> None:
    """Rewrite the table between the markers of `docs/using.md`."""
    begin, end = "<!-- pretrained:begin -->", "<!-- pretrained:end -->"
    text = DOCS.read_text()
    if begin not in text or end not in text:
        return
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    DOCS.write_text(f"{head}{begin}\n{docs_table(index)}\n{end}{tail}")


def _parser() -> argparse.ArgumentParser:
    from zoo import PRETRAINED_DIR

    parser = argparse.ArgumentParser(
        prog="python -m experiments.publish",
        description="Train the pretrained zoo from the tuned configs.",
    )
    parser.add_argument(
        "pairs", nargs="*", metavar="AGENT:ENV", help="pairs to publish (default: all)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=PRETRAINED_DIR,
        help=f"folder of the files (default {PRETRAINED_DIR})",
    )
    parser.add_argument(
        "--ignore-held-out",
        action="store_true",
        help="ship pairs without the benchmark table's held-out check",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="publish from uncommitted code (the provenance says +changes)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    from zoo import PRETRAINED_DIR, PRETRAINED_INDEX

    args = _parser().parse_args(argv)
    try:
        pairs = parse_pairs(args.pairs)
        missing = [f"{a}:{e}" for a, e in pairs if targets.target(a, e) is None]
        if missing:
            raise PublishError(
                f"no target for {missing}: add them to {targets.FILE.name}"
            )
        head = commit(args.allow_dirty)
        args.out.mkdir(parents=True, exist_ok=True)
    except PublishError as error:
        print(f"publish: {error}", file=sys.stderr)
        return 2
    from experiments import jax_setup

    jax_setup.set_xla_flags()  # the flags every equizoo run trains with
    jax_setup.enable_compilation_cache()
    index_path = args.out / PRETRAINED_INDEX
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    for i, (agent, env) in enumerate(pairs, 1):
        print(f"[{i}/{len(pairs)}] {agent} on {env} ...", flush=True)
        entry = publish_pair(
            agent, env, args.out, head, held_out=not args.ignore_held_out
        )
        seconds = entry.pop("seconds")
        index[f"{agent}:{env}"] = entry
        write_json(index_path, dict(sorted(index.items())), indent=1, sort_keys=True)
        verdict = "shipped" if entry["shipped"] else "not shipped"
        print(
            f"    {entry['return_mean']:.1f} (target {entry['target']:g}): "
            f"{verdict}, {seconds:.0f} s",
            flush=True,
        )
    if args.out.resolve() == PRETRAINED_DIR.resolve() and DOCS.is_file():
        update_docs(dict(sorted(index.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
