"""equizoo's IQN and rejax's on CartPole-v1, back to back: wall time and final
returns, each library with its own tuned settings.

    python -m venv /tmp/rejax && /tmp/rejax/bin/pip install rejax==0.1.3 gymnax==0.0.9
    python benchmarks/vs_rejax.py --rejax-python /tmp/rejax/bin/python --seeds 8

rejax 0.1.3 needs gymnax 0.0.9's step signature, which equizoo's gymnax (1.0)
changed, so it runs from its own environment (`--rejax-python`). rejax's side
trains the `iqn` block of its `configs/gymnax/cartpole.yaml` (copied below:
`REJAX`); equizoo's trains its tuned block (`experiments/configs/iqn.yaml`).
Both train every seed in one compiled program (vmapped), in a fresh Python
process, cold (no compilation cache); the wall time counts everything a user
waits for: interpreter start, imports, compilation, training and the final
evaluation. Each seed's final return is its library's own final evaluation:
rejax's 128 episodes (its policy acts with epsilon 0.005), equizoo's 128
greedy episodes. Prints one JSON object per side, then their ratio.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

# rejax's `iqn` block for CartPole-v1 (configs/gymnax/cartpole.yaml, rejax at
# 4954fbf), with its evaluation interval.
REJAX = {
    "env": "CartPole-v1",
    "agent_kwargs": {"activation": "swish"},
    "num_envs": 1,
    "buffer_size": 100_000,
    "fill_buffer": 1000,
    "batch_size": 1,
    "num_tau_samples": 64,
    "num_tau_prime_samples": 64,
    "learning_rate": 0.0003,
    "num_epochs": 1,
    "total_timesteps": 100_000,
    "eval_freq": 5000,
    "target_update_freq": 1,
    "polyak": 0.99,
    "kappa": 1.0,
    "eps_start": 1,
    "eps_end": 0.01,
    "exploration_fraction": 0.5,
    "gamma": 0.99,
    "normalize_observations": False,
}
EPISODES = 128


def equizoo_child(seeds: int) -> dict:
    import jax.random as jr
    import numpy as np

    import envs
    import runners
    import zoo
    from experiments.configs import tuned

    block = tuned("iqn", "CartPole-v1")
    assert block is not None
    result = runners.run(
        zoo.make("iqn", **block["hp"]),
        envs.make("CartPole-v1"),
        key=jr.PRNGKey(0),
        total_steps=block["total_steps"],
        num_envs=block["num_envs"],
        num_seeds=seeds,
        eval_episodes=EPISODES,
    )
    returns = np.asarray(result.final_returns).mean(axis=1)
    return {"steps": block["total_steps"], "returns": returns.tolist()}


def rejax_child(seeds: int) -> dict:
    import jax
    from rejax import IQN  # pyright: ignore[reportMissingImports]

    algo = IQN.create(**REJAX)
    train = jax.jit(jax.vmap(algo.train))
    _, (_, returns) = train(jax.random.split(jax.random.PRNGKey(0), seeds))
    # `returns`: [seeds, evaluations, episodes]; the last evaluation is final.
    final = returns[:, -1].mean(axis=-1)
    return {"steps": REJAX["total_timesteps"], "returns": final.tolist()}


def _child(python: str, args: list[str]) -> dict:
    """Run this file as a child with `args`; its last line of output."""
    t = time.perf_counter()
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [python, __file__, *args], capture_output=True, text=True, cwd=root
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - t
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="equizoo's IQN against rejax's.")
    parser.add_argument(
        "--rejax-python",
        help="a Python interpreter with rejax 0.1.3 and gymnax 0.0.9 (required)",
    )
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--child", choices=("equizoo", "rejax"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "equizoo":
        print(json.dumps(equizoo_child(args.seeds)))
        return
    if args.child == "rejax":
        print(json.dumps(rejax_child(args.seeds)))
        return
    if args.rejax_python is None:
        parser.error("--rejax-python is required: the rejax environment's python")
    probe = subprocess.run(
        [args.rejax_python, "-c", "import rejax"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        raise SystemExit(
            f"{args.rejax_python} cannot import rejax: make an environment with "
            "`pip install rejax==0.1.3 gymnax==0.0.9` and pass its python"
        )
    flags = ["--seeds", str(args.seeds)]
    print(f"equizoo: {args.seeds} seeds in one program ...", file=sys.stderr)
    ours = _child(sys.executable, [*flags, "--child", "equizoo"])
    print(f"rejax: {args.seeds} seeds in one program ...", file=sys.stderr)
    theirs = _child(args.rejax_python, [*flags, "--child", "rejax"])
    for name, side in (("equizoo", ours), ("rejax", theirs)):
        returns = sorted(side["returns"])
        print(
            json.dumps(
                {
                    "library": name,
                    "algo": "iqn",
                    "env": "CartPole-v1",
                    "steps": side["steps"],
                    "seeds": args.seeds,
                    "wall_s": round(side["wall_s"], 1),
                    "returns": [round(r, 1) for r in side["returns"]],
                    "return_mean": round(sum(returns) / len(returns), 1),
                    "return_worst": round(returns[0], 1),
                }
            )
        )
    ratio = ours["wall_s"] / theirs["wall_s"]
    print(json.dumps({"wall_ratio_equizoo_over_rejax": round(ratio, 3)}))


if __name__ == "__main__":
    main()
