"""What Sacred costs: `python -m experiments.run` against the same training through
the library API.

    python benchmarks/experiment_overhead.py                  # dqn on CartPole-v1
    python benchmarks/experiment_overhead.py --agent ppo --repeats 5 --cache

Each measurement is a fresh Python process timed from launch to exit, so both
sides pay interpreter start, imports and compilation. The experiment side also
pays Sacred (imports, config, host info, source and dependency discovery,
observer files, captured output), the progress bar, metrics and artifacts. Both
use the same XLA flags and tuned config; the JAX persistent compilation cache is
off on both sides unless `--cache`, which warms it first. The two sides alternate,
so that load from other processes hits both alike.

Prints one JSON object per measurement, then a summary with the median overhead.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def library_child(agent_name: str, env_name: str, cache: bool) -> dict:
    """The experiment's training, through `runners.run` alone."""
    import experiments
    from experiments import jax_setup

    if cache:
        jax_setup.enable_compilation_cache()
    import jax.random as jr

    import runners

    spec = experiments.RunSpec.resolve(agent=agent_name, env=env_name)
    agent, env = spec.build()
    result = runners.run(
        agent,
        env,
        key=jr.PRNGKey(0),
        total_steps=spec.total_steps,
        num_envs=spec.num_envs,
        eval_every=spec.eval_every,
        eval_episodes=spec.eval_episodes,
    )
    return {
        "compile_s": round(result.compile_s, 3),
        "train_s": round(result.train_s, 3),
        "return": round(float(result.final_returns.mean()), 2),
    }


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of one process. CPU time is the steadier figure when
    other jobs share the machine."""
    t0, cpu0 = time.perf_counter(), _cpu()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    if out.returncode:
        sys.stderr.write(out.stderr[-5000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return wall, cpu, out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    parser.add_argument("--agent", default="dqn")
    parser.add_argument("--env", help="default: the agent's default env")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache", action="store_true", help="warm JAX cache")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from experiments import configs, jax_setup

    env_name = args.env or configs.default_env(args.agent)
    if args.child:
        print(json.dumps(library_child(args.agent, env_name, args.cache)))
        return

    jax_setup.set_xla_flags()  # the same flags for both sides
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        env["EQUIZOO_CACHE_DIR"] = str(Path(tmp) / "jax-cache")
        env["EQUIZOO_COMPILATION_CACHE"] = "1" if args.cache else "0"
        library = [sys.executable, __file__, "--child", "--agent", args.agent]
        library += ["--env", env_name] + (["--cache"] if args.cache else [])
        experiment = [sys.executable, "-m", "experiments.run", "-F", str(tmp)]
        experiment += ["with", f"agent={args.agent}", f"env={env_name}"]
        if args.cache:  # fill the cache for both sides
            _measure(library, env)
            _measure(experiment, env)
        walls: dict[str, list[float]] = {"library": [], "experiment": []}
        cpus: dict[str, list[float]] = {"library": [], "experiment": []}
        for repeat in range(args.repeats):
            for side, cmd in (("library", library), ("experiment", experiment)):
                wall, cpu, stdout = _measure(cmd, env)
                walls[side].append(wall)
                cpus[side].append(cpu)
                row = {"side": side, "repeat": repeat, "wall_s": round(wall, 3)}
                row["cpu_s"] = round(cpu, 3)
                if side == "library":
                    row.update(json.loads(stdout.strip().splitlines()[-1]))
                else:
                    row["summary"] = stdout.strip().splitlines()[-1]
                print(json.dumps(row), flush=True)
    lib = statistics.median(walls["library"])
    exp = statistics.median(walls["experiment"])
    lib_cpu = statistics.median(cpus["library"])
    exp_cpu = statistics.median(cpus["experiment"])
    summary = {
        "agent": args.agent,
        "env": env_name,
        "cache": args.cache,
        "repeats": args.repeats,
        "library_wall_s": round(lib, 3),
        "experiment_wall_s": round(exp, 3),
        "overhead_s": round(exp - lib, 3),
        "overhead": round((exp - lib) / lib, 4),
        "library_cpu_s": round(lib_cpu, 3),
        "experiment_cpu_s": round(exp_cpu, 3),
        "cpu_overhead": round((exp_cpu - lib_cpu) / lib_cpu, 4),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
