"""Training speed and final greedy return, per case and number of seeds.

    python benchmarks/speed.py                       # the quick cases, 1 then 8 seeds
    python benchmarks/speed.py --case sac:Pendulum-v1 --seeds 8 --cache off
    python benchmarks/speed.py --all --seeds 8       # every tuned agent:env pair
    python benchmarks/speed.py --case dqn:CartPole-v1 --hp prioritized=true
    python benchmarks/speed.py --case ppo:CartPole-v1 --total-steps 76800 --seed 1
    python benchmarks/speed.py --case ppo:playground/CheetahRun --num-envs 2048 \
        --total-steps 6144000 --hp num_steps=30 --seeds 1  # a pair with no tuned block

Each (case, seeds) pair runs in a fresh Python process, so that `total_s` counts
everything a user waits for: interpreter start, imports, compilation, training.
Hyperparameters are the tuned ones in `experiments/configs/<agent>.yaml` (a
pair without a tuned block runs the agent's defaults and `--hp`, and needs
`--total-steps` and `--num-envs`; its line says `"tuned": false`), and the
XLA flags and persistent compilation cache are those `experiments.run` uses: the
first run of a case compiles cold and fills the cache, later runs load from it.
`--cache off` measures a cold compilation every time.
Prints one JSON object per line.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

# A quick run by default; `--all` or `--case` reach every tuned pair.
QUICK = ["ppo:CartPole-v1", "dqn:CartPole-v1", "ppo:Pendulum-v1", "sac:Pendulum-v1"]


def all_cases() -> list[str]:
    """Every `agent:env` pair with a tuned block in `experiments/configs/`."""
    from experiments import configs

    return [
        f"{agent}:{env}" for agent in configs.agents() for env in configs.blocks(agent)
    ]


EVAL_EPISODES = 128
# The run settings a block holds, which a pair without one must be given.
RUN_KEYS = ("total_steps", "num_envs")


def check_case(case: str, run: dict) -> None:
    """Refuse a malformed `agent:env`, an unknown agent or env, and a pair
    without a tuned block whose run settings (`total_steps`, `num_envs`) are
    not all given, before any case runs."""
    import envs
    import zoo
    from experiments.configs import tuned

    agent, sep, env = case.partition(":")
    if not sep or not agent or not env:
        raise SystemExit(f"--case takes agent:env, got {case!r}")
    if agent not in zoo.names():
        raise SystemExit(f"--case {case}: unknown agent {agent!r}; {zoo.names()}")
    if envs.suite_of(env) is None:
        raise SystemExit(f"--case {case}: unknown env {env!r} (see envs.names())")
    missing = [f"--{k.replace('_', '-')}" for k in RUN_KEYS if run.get(k) is None]
    if tuned(agent, env) is None and missing:
        raise SystemExit(
            f"--case {case} has no tuned block (experiments/configs/{agent}.yaml): "
            f"give {' and '.join(missing)}, and hyperparameters with --hp"
        )


def parse_hp(items: list[str]) -> dict:
    """`["name=value", ...]` (`--hp` or `--env-param`) to overrides, each value
    read as YAML
    (`prioritized=true`, `learning_rate=1e-3`, `hidden_sizes=[32,32]`)."""
    import yaml

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--hp and --env-param take name=value, got {item!r}")
        parsed = yaml.safe_load(value)
        if isinstance(parsed, str):
            # YAML 1.1 reads `1e-3` (no dot) as a string; a number was meant.
            with contextlib.suppress(ValueError):
                parsed = float(parsed)
        out[name] = parsed
    return out


def child(
    case: str,
    num_seeds: int,
    t_launch: float,
    seed: int,
    cache: str,
    hp: dict,
    run: dict,
    env_params: dict,
) -> dict:
    import experiments
    from experiments.configs import tuned

    agent_name, env_name = case.split(":")
    block = tuned(agent_name, env_name)
    is_tuned = block is not None
    block = {**(block or {}), **run}
    env_params = {**block.get("env_params", {}), **env_params}
    # The experiments' core, unrecorded, evaluating once at the end.
    spec = experiments.RunSpec.resolve(
        agent=agent_name,
        env=env_name,
        hp=hp,
        env_params=env_params,
        total_steps=block["total_steps"],
        num_envs=block["num_envs"],
        seed=seed,
        num_seeds=num_seeds,
        eval_every=None,
        eval_episodes=EVAL_EPISODES,
        compilation_cache=cache == "on",
        progress=False,
    )
    result = experiments.train(spec).results[0]
    total_s = time.time() - t_launch
    returns = result.final_returns.mean(axis=1)
    return {
        "agent": agent_name,
        "env": env_name,
        "tuned": is_tuned,
        "num_seeds": num_seeds,
        "hp": hp,
        "env_params": env_params,
        "total_steps": result.total_steps,
        "num_envs": block["num_envs"],
        "cache": cache,
        "compile_s": round(result.compile_s, 3),
        "train_s": round(result.train_s, 3),
        "total_s": round(total_s, 3),
        "steps_per_s": round(result.total_steps * num_seeds / result.train_s),
        "eval_returns": [round(float(r), 2) for r in returns],
        "eval_return_mean": round(float(returns.mean()), 2),
        "eval_return_worst": round(float(returns.min()), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Training speed and final return.")
    parser.add_argument(
        "--case",
        action="append",
        help="agent:env: a tuned pair (--all lists them), or any other with "
        "--total-steps and --num-envs",
    )
    parser.add_argument("--all", action="store_true", help="every tuned pair")
    parser.add_argument("--seeds", type=int, action="append", help="number of seeds")
    parser.add_argument("--seed", type=int, default=0, help="base PRNG seed")
    parser.add_argument(
        "--hp",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a tuned hyperparameter (YAML value), e.g. prioritized=true",
    )
    parser.add_argument(
        "--env-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override an env parameter of the block (YAML value), e.g. "
        "sticky_prob=0 for MinAtar without sticky actions",
    )
    parser.add_argument(
        "--total-steps", type=int, help="override the tuned env steps per seed"
    )
    parser.add_argument(
        "--num-envs", type=int, help="override the tuned number of envs per seed"
    )
    parser.add_argument(
        "--cache",
        choices=["on", "off"],
        default="on",
        help="JAX's persistent compilation cache, as experiments.run uses it",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--t-launch", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        hp = parse_hp(args.hp)
        run = {"total_steps": args.total_steps, "num_envs": args.num_envs}
        run = {name: value for name, value in run.items() if value is not None}
        env_params = parse_hp(args.env_param)
        out = child(
            args.case[0],
            args.seeds[0],
            args.t_launch,
            args.seed,
            args.cache,
            hp,
            run,
            env_params,
        )
        print(json.dumps(out))
        return
    from experiments.configs import HELD_OUT_KEY

    if args.seed == HELD_OUT_KEY:
        raise SystemExit(
            f"--seed {HELD_OUT_KEY} is the benchmark table's held-out key, which no "
            "tuning may see; choose another seed"
        )
    parse_hp(args.hp)  # a malformed override fails before any case runs
    parse_hp(args.env_param)
    for flag, value in [
        ("--total-steps", args.total_steps),
        ("--num-envs", args.num_envs),
    ]:
        if value is not None and value <= 0:
            raise SystemExit(f"{flag} must be a positive integer, got {value}")
    for case in args.case or []:
        check_case(case, {"total_steps": args.total_steps, "num_envs": args.num_envs})
    from experiments import jax_setup

    jax_setup.set_xla_flags()  # inherited by the child processes
    env = dict(os.environ)
    cases = all_cases() if args.all else args.case or QUICK
    for case in cases:
        for seeds in args.seeds or [1, 8]:
            cmd = [sys.executable, __file__, "--child", "--case", case]
            cmd += ["--seeds", str(seeds), "--seed", str(args.seed)]
            cmd += ["--cache", args.cache]
            cmd += [f"--hp={item}" for item in args.hp]
            cmd += [f"--env-param={item}" for item in args.env_param]
            if args.total_steps is not None:
                cmd += ["--total-steps", str(args.total_steps)]
            if args.num_envs is not None:
                cmd += ["--num-envs", str(args.num_envs)]
            cmd += ["--t-launch", repr(time.time())]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if out.returncode:
                sys.stderr.write(out.stderr)
                raise SystemExit(f"benchmark {case} with {seeds} seeds failed")
            print((out.stdout or "").strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
