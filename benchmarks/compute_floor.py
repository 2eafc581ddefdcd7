"""The least time any library can take for SAC's gradient steps on this machine.

    python benchmarks/compute_floor.py                # HalfCheetah's sizes
    python benchmarks/compute_floor.py --seeds 1 4 --steps 1000000

One SAC update with rl-baselines3-zoo's and sbx's sizes (a 256-256 actor and
two 256-256 critics with their targets, batch 256; HalfCheetah-v5's 17
observations and 6 actions) written as bare JAX: the twin critics' loss and
gradient (the target's next actions from the actor), the actor's loss and
gradient, SGD and the Polyak averages. It is a replica of the arithmetic, with
no replay buffer, environment, temperature or optimiser state: a real agent's
update does at least this much. XLA's cost analysis counts its FLOPs; timing it
vmapped over seeds gives the rate this machine sustains, and a 1024^3 float32
matrix product its peak. `hours_floor` is `steps` updates at the measured rate,
`hours_at_peak` at the peak. Prints one JSON object.
"""

import argparse
import json
import time


def measure(seeds_list: list[int], steps: int, repeats: int = 50) -> dict:
    import jax
    import jax.numpy as jnp

    obs_dim, act_dim, batch, width = 17, 6, 256, 256

    def init(key, sizes):
        keys = jax.random.split(key, len(sizes) - 1)
        return [
            (jax.random.normal(k, (a, b)) * 0.1, jnp.zeros(b))
            for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)
        ]

    def mlp(params, x):
        for i, (w, b) in enumerate(params):
            x = x @ w + b
            x = jax.nn.relu(x) if i < len(params) - 1 else x
        return x

    def policy(actor, obs, key):
        mean, log_std = jnp.split(mlp(actor, obs), 2, -1)
        u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        return jnp.tanh(u), jnp.sum(-log_std - 0.5 * u**2, -1)

    def q(critic, obs, act):
        return mlp(critic, jnp.concatenate([obs, act], -1))[..., 0]

    def update(params, data, key):
        actor, c1, c2, t1, t2 = params
        obs, act, reward, next_obs = data

        def critic_loss(critics):
            next_act, logp = policy(actor, next_obs, key)
            target = jnp.minimum(q(t1, next_obs, next_act), q(t2, next_obs, next_act))
            y = jax.lax.stop_gradient(reward + 0.99 * (target - 0.1 * logp))
            return sum(jnp.mean((q(c, obs, act) - y) ** 2) for c in critics)

        def actor_loss(actor):
            new_act, logp = policy(actor, obs, key)
            value = jnp.minimum(q(c1, obs, new_act), q(c2, obs, new_act))
            return jnp.mean(0.1 * logp - value)

        g_critics = jax.grad(critic_loss)((c1, c2))
        g_actor = jax.grad(actor_loss)(actor)

        def sgd(p, g):
            return jax.tree.map(lambda x, d: x - 1e-3 * d, p, g)

        def polyak(t, c):
            return jax.tree.map(lambda x, y: 0.995 * x + 0.005 * y, t, c)

        c1, c2 = sgd((c1, c2), g_critics)
        return (sgd(actor, g_actor), c1, c2, polyak(t1, c1), polyak(t2, c2))

    key = jax.random.PRNGKey(0)
    critic = init(key, [obs_dim + act_dim, width, width, 1])
    params = (init(key, [obs_dim, width, width, 2 * act_dim]), *[critic] * 4)
    data = (
        jnp.ones((batch, obs_dim)),
        jnp.ones((batch, act_dim)),
        jnp.ones(batch),
        jnp.ones((batch, obs_dim)),
    )
    x = jnp.ones((1024, 1024))
    matmul = jax.jit(lambda a: a @ a)
    matmul(x).block_until_ready()
    t = time.perf_counter()
    for _ in range(20):
        y = matmul(x)
    y.block_until_ready()
    peak = 20 * 2 * 1024**3 / (time.perf_counter() - t)

    rows = []
    for seeds in seeds_list:
        step = jax.jit(jax.vmap(update, in_axes=(0, 0, None)))
        p = jax.tree.map(lambda a: jnp.stack([a] * seeds), params)
        d = jax.tree.map(lambda a: jnp.stack([a] * seeds), data)
        cost = step.lower(p, d, key).compile().cost_analysis() or {}
        flops = (cost[0] if isinstance(cost, list) else cost)["flops"]
        p = jax.block_until_ready(step(p, d, key))
        t = time.perf_counter()
        for _ in range(repeats):
            p = step(p, d, key)
        jax.block_until_ready(p)
        seconds = (time.perf_counter() - t) / repeats
        rows.append(
            {
                "seeds": seeds,
                "mflop_per_update": round(flops / 1e6, 1),
                "ms_per_update": round(seconds * 1e3, 2),
                "gflop_per_s": round(flops / seconds / 1e9, 1),
                "hours_floor": round(steps * seconds / 3600, 2),
                "hours_at_peak": round(steps * flops / peak / 3600, 2),
            }
        )
    return {
        "steps": steps,
        "peak_matmul_gflop_per_s": round(peak / 1e9, 1),
        "device": str(jax.devices()[0].platform),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="SAC's compute floor.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--steps", type=int, default=1_000_000)
    args = parser.parse_args()
    print(json.dumps(measure(args.seeds, args.steps)))


if __name__ == "__main__":
    main()
