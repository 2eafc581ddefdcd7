"""equizoo and sbx (Stable Baselines Jax) on the same MuJoCo task, budget and
seeds, back to back: wall time and final returns.

    pip install -e '.[mujoco]' sbx-rl           # sbx brings stable-baselines3 and torch
    python benchmarks/vs_sbx.py --algo sac --env HalfCheetah-v5 --steps 100000 --seeds 4
    python benchmarks/vs_sbx.py --algo ppo --env Hopper-v5 --steps 200000 --seeds 4

Both train with sbx's default hyperparameters for the algorithm (equizoo's
agent set to the same values: `HPARAMS`), one env per seed. sbx trains one seed
per process, one after another (it has no seed axis); equizoo trains all seeds
in one compiled program (vmapped). Each side runs in fresh Python processes,
cold (no compilation cache), and its wall time counts everything a user waits
for: interpreter start, imports, compilation, training. The final return is
each seed's mean over `--episodes` deterministic (greedy) episodes: sbx's
policy on Gymnasium's env (`evaluate_policy`), equizoo's on its own env (the
same dynamics, `tests/test_mujoco.py`). Prints one JSON object per side, then
their ratio.
"""

import argparse
import json
import subprocess
import sys
import time

# sbx's defaults (sbx/sac/sac.py, sbx/ppo/ppo.py at sbx-rl 0.28.0), in equizoo's
# names, with `buffer_size` and `learning_starts` set on both sides alike.
HPARAMS = {
    "sac": {
        "learning_rate": 3e-4,
        "alpha_learning_rate": 3e-4,
        "batch_size": 256,
        "gamma": 0.99,
        "tau": 0.005,
        "train_frequency": 1,
        "gradient_steps": 1,
        "hidden_sizes": (256, 256),
        "alpha_init": 1.0,
        # sbx does not clip gradients.
        "max_grad_norm": 1e9,
    },
    "ppo": {
        "learning_rate": 3e-4,
        "num_steps": 2048,
        "num_minibatches": 32,  # sbx's batch_size 64
        "num_epochs": 10,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "clip_eps": 0.2,
        "ent_coef": 0.0,
        "vf_coef": 0.5,
        "max_grad_norm": 0.5,
        "hidden_sizes": (64, 64),
        "activation": "tanh",
        "anneal_lr": False,
    },
}
LEARNING_STARTS = 1000  # SAC, both sides (sbx's default is 100)


def equizoo_child(algo: str, env_name: str, steps: int, seeds: int, episodes: int):
    import jax.random as jr
    import numpy as np

    import envs
    import runners
    import zoo

    hp = dict(HPARAMS[algo])
    if algo == "sac":
        hp.update(buffer_size=steps, learning_starts=LEARNING_STARTS)
    result = runners.run(
        zoo.make(algo, **hp),
        envs.make(env_name),
        key=jr.PRNGKey(0),
        total_steps=steps,
        num_envs=1,
        num_seeds=seeds,
        eval_episodes=episodes,
    )
    returns = np.asarray(result.final_returns).mean(axis=1)
    return {"compile_s": result.compile_s, "returns": returns.tolist()}


def sbx_child(algo: str, env_name: str, steps: int, seed: int, episodes: int):
    import gymnasium as gym
    import numpy as np
    from sbx import PPO, SAC  # pyright: ignore[reportMissingImports]
    from stable_baselines3.common.evaluation import (  # pyright: ignore[reportMissingImports]
        evaluate_policy,
    )

    env = gym.make(env_name)
    if algo == "sac":
        model = SAC(
            "MlpPolicy",
            env,
            buffer_size=steps,
            learning_starts=LEARNING_STARTS,
            seed=seed,
            verbose=0,
        )
    else:
        model = PPO("MlpPolicy", env, seed=seed, verbose=0)
    model.learn(total_timesteps=steps)
    returns, _ = evaluate_policy(
        model, gym.make(env_name), n_eval_episodes=episodes, deterministic=True
    )
    return {"returns": [float(np.mean(returns))]}


def _child(args: list[str]) -> dict:
    """Run this file as a child with `args`; its last line of output."""
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - t
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="equizoo against sbx, same run.")
    parser.add_argument("--algo", choices=sorted(HPARAMS), default="sac")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--child", choices=("equizoo", "sbx"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "equizoo":
        out = equizoo_child(args.algo, args.env, args.steps, args.seeds, args.episodes)
        print(json.dumps(out))
        return
    if args.child == "sbx":
        out = sbx_child(args.algo, args.env, args.steps, args.seed, args.episodes)
        print(json.dumps(out))
        return
    for module in ("sbx", "mujoco"):
        try:
            __import__(module)
        except ImportError:
            raise SystemExit(
                f"{module} is not installed: pip install -e '.[mujoco]' sbx-rl"
            ) from None
    flags = ["--algo", args.algo, "--env", args.env, "--steps", str(args.steps)]
    flags += ["--episodes", str(args.episodes)]
    print(f"equizoo: {args.seeds} seeds in one program ...", file=sys.stderr)
    ours = _child([*flags, "--seeds", str(args.seeds), "--child", "equizoo"])
    theirs = {"wall_s": 0.0, "returns": []}
    for seed in range(args.seeds):
        print(f"sbx: seed {seed + 1} of {args.seeds} ...", file=sys.stderr)
        one = _child([*flags, "--seed", str(seed), "--child", "sbx"])
        theirs["wall_s"] += one["wall_s"]
        theirs["returns"] += one["returns"]
    for name, side in (("equizoo", ours), ("sbx", theirs)):
        returns = sorted(side["returns"])
        print(
            json.dumps(
                {
                    "library": name,
                    "algo": args.algo,
                    "env": args.env,
                    "steps": args.steps,
                    "seeds": args.seeds,
                    "wall_s": round(side["wall_s"], 1),
                    "returns": [round(r, 1) for r in side["returns"]],
                    "return_mean": round(sum(returns) / len(returns), 1),
                    "return_worst": round(returns[0], 1),
                }
            )
        )
    print(
        json.dumps({"wall_ratio_equizoo_over_sbx": ours["wall_s"] / theirs["wall_s"]})
    )


if __name__ == "__main__":
    main()
