"""Env throughput: random actions through an env's own `step` (auto-reset
included), vmapped over envs, in one compiled `lax.scan`.

    python benchmarks/env_speed.py --env HalfCheetah-v5 --num-envs 256
    python benchmarks/env_speed.py --env CartPole-v1 --num-envs 256 --repeats 5

Each repeat runs the scan once more on the state the last one ended in, so a
repeat times stepping alone; the first call's time, which includes compiling
the program, is reported apart as `compile_s` (XLA's persistent cache is off:
every compile is cold). Prints one JSON object.
"""

import argparse
import json
import time


def measure(env_name: str, num_envs: int, steps: int, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import envs

    env = envs.make(env_name)
    space = env.action_space

    def one(carry, key):
        states = carry
        k_act, k_step = jr.split(key)
        actions = jax.vmap(lambda k: space.sample(key=k))(jr.split(k_act, num_envs))
        keys = jr.split(k_step, num_envs)
        _, states, reward, _, _, _ = jax.vmap(env.step)(keys, states, actions)
        return states, jnp.mean(reward)

    @jax.jit
    def run(states, key):
        return jax.lax.scan(one, states, jr.split(key, steps))

    _, states = jax.jit(jax.vmap(env.reset))(jr.split(jr.PRNGKey(0), num_envs))
    t = time.perf_counter()
    states, rewards = jax.block_until_ready(run(states, jr.PRNGKey(1)))
    compile_s = time.perf_counter() - t
    seconds = []
    for i in range(repeats):
        t = time.perf_counter()
        states, rewards = jax.block_until_ready(run(states, jr.PRNGKey(2 + i)))
        seconds.append(time.perf_counter() - t)
    rates = sorted(num_envs * steps / s for s in seconds)
    return {
        "env": env_name,
        "num_envs": num_envs,
        "steps": steps,
        "compile_s": round(compile_s - min(seconds), 2),
        "steps_per_s_median": round(rates[len(rates) // 2]),
        "steps_per_s_min": round(rates[0]),
        "steps_per_s_max": round(rates[-1]),
        "repeats": repeats,
        "device": str(jax.devices()[0].platform),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Env throughput, random actions.")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200, help="steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(measure(args.env, args.num_envs, args.steps, args.repeats)))


if __name__ == "__main__":
    main()
