"""A learning-rate sweep as one program against the same sweep as separate runs.

    python benchmarks/sweep.py                    # 16 members x 4 seeds, cold
    python benchmarks/sweep.py --members 2 --seeds 4 --devices 2   # + 2 devices
    python benchmarks/sweep.py --members 4 --seeds 2 --cache on

Both sides go through `python -m experiments.run` (unobserved, `-u`), each in a
fresh process, and are timed from process start to exit: the sweep is one
process (`sweep.learning_rate=[...]`), the separate runs are one process per
learning rate (`hp.learning_rate=...`), one after another. PPO on CartPole-v1 with
its tuned block; learning rates log-spaced from 3e-4 to 1e-2. With `--cache off`
(the default) every program compiles cold. Prints one JSON object per
measurement, then `ratio <sweep / separate>`.

`--devices N` also times the sweep on N forced CPU devices, which share this
machine's cores (correctness, not speed). On a 2-core CPU, XLA's runtime hangs
with more than about 4 runs per forced device (docs/scale.md), so use it with a
small sweep there.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _experiment(args: list[str], *, cache: str, devices: int | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    if devices is not None:
        flag = f"--xla_force_host_platform_device_count={devices}"
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
    cmd = [sys.executable, "-m", "experiments.run", "-u", "with", *args]
    cmd += ["progress=False", f"compilation_cache={cache == 'on'}"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return {"wall_s": round(wall, 3), "stdout": out.stdout}


def main() -> None:
    parser = argparse.ArgumentParser(
        description="A sweep as one program against separate runs."
    )
    parser.add_argument("--members", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--cache", choices=["on", "off"], default="off")
    parser.add_argument(
        "--devices", type=int, help="also time the sweep on this many CPU devices"
    )
    args = parser.parse_args()
    if args.members <= 0 or args.seeds <= 0:
        raise SystemExit("--members and --seeds must be positive")
    if args.devices is not None and args.devices <= 1:
        raise SystemExit("--devices must be at least 2")
    rates = [float(f"{r:.3g}") for r in np.geomspace(3e-4, 1e-2, args.members)]
    base = ["agent=ppo", "env=CartPole-v1", f"num_seeds={args.seeds}"]

    sweep = _experiment(
        [*base, f"sweep.learning_rate={rates}"], cache=args.cache, devices=None
    )
    row = {"mode": "one program", "members": args.members, "seeds": args.seeds}
    print(json.dumps({**row, "cache": args.cache, "wall_s": sweep["wall_s"]}))
    if args.devices:
        sharded = _experiment(
            [*base, f"sweep.learning_rate={rates}", f"devices={args.devices}"],
            cache=args.cache,
            devices=args.devices,
        )
        print(
            json.dumps(
                {
                    **row,
                    "mode": f"one program, {args.devices} forced CPU devices",
                    "cache": args.cache,
                    "wall_s": sharded["wall_s"],
                }
            )
        )
    walls = []
    for rate in rates:
        one = _experiment(
            [*base, f"hp.learning_rate={rate}"], cache=args.cache, devices=None
        )
        walls.append(one["wall_s"])
    separate = round(sum(walls), 3)
    print(
        json.dumps(
            {
                "mode": "separate runs",
                "members": args.members,
                "seeds": args.seeds,
                "cache": args.cache,
                "wall_s": separate,
                "per_run_s": walls,
            }
        )
    )
    print(f"ratio {sweep['wall_s'] / separate:.3f}")


if __name__ == "__main__":
    main()
