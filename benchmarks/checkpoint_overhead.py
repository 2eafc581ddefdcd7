"""What checkpoints cost: training time with and without them.

    python benchmarks/checkpoint_overhead.py                       # dqn, CartPole-v1
    python benchmarks/checkpoint_overhead.py --agent ppo --env Pendulum-v1
    python benchmarks/checkpoint_overhead.py --total-steps 500000 --num-seeds 8

Trains the tuned config through `runners.run` (as `python -m experiments.run`
does), alternately without checkpoints and with them written the way the
experiment writes them (`save_checkpoint` then `prune_checkpoints`, every
`checkpoint_every` env steps and at the end), and compares the training time
(`RunResult.train_s`: compilation excluded; the chunks, evaluations and
checkpoints included). Compilation is shared through a temporary persistent
compilation cache, so that every repeat runs the same executables.

Prints one JSON object per measurement, then a summary: median training time
each way, the overhead in percent, and the time and size of one checkpoint.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments import jax_setup  # noqa: E402

jax_setup.set_xla_flags()


def main() -> None:
    parser = argparse.ArgumentParser(description="What checkpoints cost.")
    parser.add_argument("--agent", default="dqn")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--total-steps", type=int, default=None)
    parser.add_argument("--num-seeds", type=int, default=1)
    parser.add_argument("--checkpoint-every", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import experiments

    os.environ["EQUIZOO_CACHE_DIR"] = tempfile.mkdtemp(prefix="equizoo-bench-cache-")
    jax_setup.enable_compilation_cache()
    import jax.random as jr

    import runners

    given = {} if args.total_steps is None else {"total_steps": args.total_steps}
    spec = experiments.RunSpec.resolve(agent=args.agent, env=args.env, **given)
    every = args.checkpoint_every or spec.checkpoint_every
    agent, env = spec.build()
    kwargs: dict = dict(
        key=jr.PRNGKey(0),
        total_steps=spec.total_steps,
        num_envs=spec.num_envs,
        num_seeds=args.num_seeds,
        eval_every=spec.eval_every,
        eval_episodes=spec.eval_episodes,
    )

    def measure(with_checkpoints: bool) -> dict:
        root = Path(tempfile.mkdtemp(prefix="equizoo-bench-ckpt-"))
        times: list[float] = []

        def checkpoint(state, report):
            t = time.perf_counter()
            meta = {"agent": args.agent, "env": args.env, "env_steps": report.env_steps}
            runners.save_checkpoint(root / str(report.env_steps), state, meta)
            runners.prune_checkpoints(root, spec.keep_checkpoints)
            times.append(time.perf_counter() - t)

        result = runners.run(
            agent,
            env,
            **kwargs,
            checkpoint=checkpoint if with_checkpoints else None,
            checkpoint_every=every if with_checkpoints else None,
        )
        latest = runners.latest_checkpoint(root)
        return {
            "checkpoints": with_checkpoints,
            "train_s": round(result.train_s, 4),
            "compile_s": round(result.compile_s, 3),
            "num_checkpoints": len(times),
            "checkpoint_s": round(sum(times), 4),
            "checkpoint_bytes": (latest / "state.eqx").stat().st_size if latest else 0,
        }

    measure(True)  # compile (and fill the cache) once
    rows = []
    for _ in range(args.repeats):
        for flag in (False, True):
            row = measure(flag)
            rows.append(row)
            print(json.dumps(row), flush=True)
    without = statistics.median(r["train_s"] for r in rows if not r["checkpoints"])
    with_ = statistics.median(r["train_s"] for r in rows if r["checkpoints"])
    ckpt_rows = [r for r in rows if r["checkpoints"]]
    per = statistics.median(r["checkpoint_s"] / r["num_checkpoints"] for r in ckpt_rows)
    share = statistics.median(r["checkpoint_s"] / r["train_s"] for r in ckpt_rows)
    summary = {
        "agent": args.agent,
        "env": args.env,
        "total_steps": spec.total_steps,
        "num_seeds": args.num_seeds,
        "checkpoint_every": every,
        "checkpoints_per_run": ckpt_rows[0]["num_checkpoints"],
        "checkpoint_bytes": ckpt_rows[0]["checkpoint_bytes"],
        "train_s_without": without,
        "train_s_with": with_,
        "overhead_pct": round(100 * (with_ - without) / without, 2),
        "checkpoint_share_pct": round(100 * share, 2),
        "ms_per_checkpoint": round(1000 * per, 2),
    }
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
