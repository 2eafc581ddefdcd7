# Sacred's config scope defines its entries as local variables, unused to Python.
# ruff: noqa: F841
"""Play greedy episodes with a trained agent, as a Sacred experiment.

    python -m experiments.evaluate with run=runs/3              # its final state
    python -m experiments.evaluate with run=runs/3 seed=2 episodes=32
    python -m experiments.evaluate with agent=ppo env=CartPole-v1   # pretrained
    python -m experiments.evaluate with agent=ppo env=CartPole-v1 video=True
    python -m experiments.evaluate with run=runs/3 gymnasium=CartPole-v1

Reports the mean, std, min and every episode's return; records go where training
records go (`runs/`, `-F DIR`, `-m` MongoDB, `-u` none). With `video=True` the
first `video_episodes` episodes are drawn to a GIF (and an MP4 when imageio's
ffmpeg is installed), an artifact of the record (`videos/` when unobserved).
With `gymnasium=ID` the agent plays `gymnasium.make(ID)`, Gymnasium's own env,
through `zoo.gymnasium_policy` instead of ours.
"""

import time

_T_START = time.perf_counter()

from experiments import jax_setup  # noqa: E402

if __name__ == "__main__":
    jax_setup.set_xla_flags()  # before JAX starts, as for training

import sys  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from experiments import _load  # noqa: E402
from experiments._errors import EvaluateError as EvaluateError  # noqa: E402
from experiments.record.folder import Header, RunFolder  # noqa: E402
from experiments.record.sink import Sink  # noqa: E402
from experiments.sacred import experiment as _experiment  # noqa: E402
from experiments.sacred.sink import SacredSink  # noqa: E402

ex = _experiment.experiment("equizoo-evaluate")


@ex.config
def config():
    # a recorded run folder (e.g. "runs/3"): its final state, else its newest
    # checkpoint; or one checkpoint folder (runs/3/checkpoints/50000)
    run = None
    # which seed of the run (in a sweep, which run: member * num_seeds + seed)
    seed = 0
    # without `run`: the pretrained agent (zoo.pretrained(agent, env))
    agent = None
    env = None
    # greedy episodes to play (in parallel)
    episodes = 128
    # PRNG seed of the episodes (episode starts and env randomness)
    key = 0
    # steps after which an unfinished episode counts what it earned
    max_steps = 100_000
    # play on Gymnasium's env of this id (e.g. "CartPole-v1"), not on ours
    gymnasium = None
    # draw the first `video_episodes` episodes to a GIF (MP4 too with ffmpeg)
    video = False
    video_episodes = 1
    # frames per second of the video
    fps = 30
    # JAX persistent compilation cache (as for training)
    compilation_cache = jax_setup.cache_enabled_by_default()


# The keys the scope above defines, in its order (the scope run once, here).
KEYS = tuple(config())


def check(config: dict[str, Any]) -> dict[str, Any]:
    """Validate `config` without loading weights or compiling.

    **Returns:** what to load: `{"run": Path, "header": dict}` or
    `{"agent": str, "env": str}` (pretrained).

    **Raises:** `EvaluateError` naming the key and the fix.
    """
    unknown = sorted(set(config) - set(KEYS) - {"seed"})
    if unknown:
        raise EvaluateError(f"unknown config key(s) {unknown}; valid: {list(KEYS)}")
    for name in ("episodes", "max_steps", "video_episodes", "fps"):
        value = config[name]
        if type(value) is not int or value < 1:
            raise EvaluateError(f"{name}: expected a positive int, got {value!r}")
    if type(config["key"]) is not int or config["key"] < 0:
        raise EvaluateError(f"key: expected an int >= 0, got {config['key']!r}")
    if type(config["video"]) is not bool:
        raise EvaluateError(f"video: expected True or False, got {config['video']!r}")
    if config["video"] and config["video_episodes"] > config["episodes"]:
        raise EvaluateError(
            f"video_episodes: {config['video_episodes']} is more than the "
            f"{config['episodes']} episodes played; lower it or raise episodes"
        )
    _check_gymnasium(config)
    run = config["run"]
    if run is not None:
        target = _from_run(config)
    elif config["agent"] is None or config["env"] is None:
        raise EvaluateError(
            "nothing to evaluate: give a recorded run (with run=runs/3) or a "
            "pretrained agent (with agent=ppo env=CartPole-v1; zoo.pretrained() "
            "lists them)"
        )
    else:
        import zoo

        try:
            zoo.provenance(config["agent"], config["env"])
        except ValueError as e:
            raise EvaluateError(f"agent, env: {e}") from None
        target = {"agent": config["agent"], "env": config["env"]}
    if config["video"]:
        from envs.render import RENDERABLE, renderable

        if not renderable(target["env"]):
            raise EvaluateError(
                f"video: {target['env']} has no renderer; envs that render: "
                f"{', '.join(RENDERABLE)}"
            )
    return target


def _check_gymnasium(config: dict[str, Any]) -> None:
    name = config["gymnasium"]
    if name is None:
        return
    if not isinstance(name, str) or not name:
        raise EvaluateError(
            f"gymnasium: expected a Gymnasium env id (e.g. 'CartPole-v1'), got {name!r}"
        )
    if config["video"]:
        raise EvaluateError(
            "video: films our env, not Gymnasium's; drop video=True or gymnasium"
        )
    import gymnasium

    try:
        gymnasium.spec(name)
    except gymnasium.error.Error as e:
        raise EvaluateError(f"gymnasium: {e}") from None


def _from_run(config: dict[str, Any]) -> dict[str, Any]:
    run = config["run"]
    if not isinstance(run, str | Path) or not str(run):
        raise EvaluateError(f"run: expected a run folder (e.g. runs/3), got {run!r}")
    try:
        _, header_file = RunFolder(run).saved_state()
        header = Header.read(header_file)
    except FileNotFoundError as e:
        raise EvaluateError(f"run: {e}") from None
    except (OSError, ValueError) as e:
        raise EvaluateError(f"run: cannot read {run}'s record ({e})") from None
    for name in ("agent", "env"):
        if config[name] is not None and config[name] != getattr(header, name):
            raise EvaluateError(
                f"{name}: {run} trained {name} {getattr(header, name)!r}, not "
                f"{config[name]!r}; leave {name} unset to evaluate the run"
            )
    num_runs = header.runs
    seed = config["seed"]
    if type(seed) is not int or not 0 <= seed < num_runs:
        raise EvaluateError(
            f"seed: {seed!r} is not a seed of {run}, which trained {num_runs} "
            f"run(s): 0 to {num_runs - 1}"
        )
    return {"run": Path(run), "agent": header.agent, "env": header.env}


@ex.config_hook
def _validate(config, command_name, logger):
    check(config)  # before observers start, for every command
    return {}


@ex.main
def main(_run: Any) -> float:
    """Play `episodes` greedy episodes; log and print their returns.

    **Returns:** the mean return (Sacred stores it as the run's result).
    """
    sink = SacredSink(_run)
    config = sink.config
    target = check(config)
    if config["compilation_cache"]:
        jax_setup.enable_compilation_cache()
    import jax.random as jr

    import runners

    agent, state, env, what = _agent_of(target, config["seed"])
    if config["gymnasium"] is not None:
        what += f", played on Gymnasium's {config['gymnasium']}"
        target = {**target, "gymnasium": config["gymnasium"]}
        out = _on_gymnasium(agent, state, env, config)
    else:
        out = runners.evaluate(
            agent,
            state,
            env,
            key=jr.PRNGKey(config["key"]),
            num_episodes=config["episodes"],
            max_steps=config["max_steps"],
        )
    name = f"{target['agent']} on {target['env']} ({what})"
    returns, per_agent = _record_returns(sink, env, out, target, what)
    videos = []
    if config["video"]:
        videos = _video(sink, agent, state, env, name, config)
    mean, std = float(returns.mean()), float(returns.std())
    episodes = " ".join(f"{r:g}" for r in returns.round(1))
    print(
        f"{name}: greedy return {mean:.1f} ± {std:.1f}, min {returns.min():.1f}, "
        f"over {len(returns)} episodes\nper episode: "
        + textwrap.fill(episodes, 88, subsequent_indent="  ")
        + "".join(
            f"\n{a}: mean {r_a.mean():.1f} ± {r_a.std():.1f}"
            for a, r_a in per_agent.items()
        )
        + "".join(f"\nvideo: {v}" for v in videos)
        + f"\n{sink.where()}; {time.perf_counter() - _T_START:.1f} s",
        flush=True,
    )
    return mean


def _agent_of(target: dict[str, Any], seed: int) -> tuple[Any, Any, Any, str]:
    """`(agent, state, env, what)`: one seed of a recorded run, or the
    pretrained agent on the env it was trained on (sticky actions on MinAtar)."""
    import envs
    import zoo

    if "run" in target:
        try:
            agent, state, env = _load.load_run(target["run"], seed=seed)
        except Exception as e:  # a damaged checkpoint, another agent's data
            raise EvaluateError(f"run: cannot load {target['run']}: {e}") from None
        return agent, state, env, f"{target['run']} seed {seed}"
    agent, state = zoo.pretrained(target["agent"], target["env"])
    prov = zoo.provenance(target["agent"], target["env"])
    env = envs.make(target["env"], **prov.get("env_params", {}))
    return agent, state, env, "pretrained"


def _on_gymnasium(agent: Any, state: Any, env: Any, config: dict[str, Any]) -> Any:
    """The returns of `episodes` episodes on Gymnasium's env, from
    `reset(seed=key)`."""
    import envs
    import zoo

    if isinstance(env, envs.AbstractMultiAgentEnv):
        raise EvaluateError(
            f"gymnasium: {env.name} is multi-agent; Gymnasium's envs are single-agent"
        )
    try:
        policy = zoo.gymnasium_policy(agent, state)
        return zoo.gymnasium_returns(
            policy,
            config["gymnasium"],
            episodes=config["episodes"],
            seed=config["key"],
            max_steps=config["max_steps"],
        )
    except ValueError as e:
        raise EvaluateError(f"gymnasium: {e}") from None


def _record_returns(
    sink: Sink, env: Any, out: Any, target: dict[str, Any], what: str
) -> tuple[Any, dict[str, Any]]:
    """Log each episode's return (and each agent's, summed into the return on a
    multi-agent env) and the summary in `info`; `(returns, per agent)`."""
    import numpy as np

    import envs

    names = env.agents if isinstance(env, envs.AbstractMultiAgentEnv) else ()
    per_agent = {a: np.asarray(out[a]) for a in names}
    summed = np.sum(list(per_agent.values()), axis=0) if per_agent else None
    returns = np.asarray(out) if summed is None else summed
    for i, r in enumerate(returns):
        sink.log("eval.return", float(r), i)
        for a, r_a in per_agent.items():
            sink.log(f"eval.return.{a}", float(r_a[i]), i)
    if per_agent:
        sink.info["agent_returns"] = {
            a: [float(r) for r in r_a] for a, r_a in per_agent.items()
        }
    if "gymnasium" in target:
        sink.info["gymnasium"] = target["gymnasium"]
    sink.info.update(
        agent=target["agent"],
        env=target["env"],
        source=what,
        return_mean=float(returns.mean()),
        return_std=float(returns.std()),
        return_min=float(returns.min()),
        return_max=float(returns.max()),
        returns=[float(r) for r in returns],
    )
    return returns, per_agent


def _video(
    sink: Sink,
    agent: Any,
    state: Any,
    env: Any,
    name: str,
    config: dict[str, Any],
) -> list[str]:
    """Film the first `video_episodes` episodes (the same starts as the first
    evaluated episodes' only when `video_episodes == episodes`)."""
    import jax.random as jr

    from experiments.record import video as _video

    episodes = _video.record_episodes(
        agent,
        state,
        env,
        key=jr.PRNGKey(config["key"]),
        num_episodes=config["video_episodes"],
        max_steps=min(config["max_steps"], 10_000),
    )
    frames = episodes.joined()
    stem = f"{sink.info['agent']}__{sink.info['env']}".replace("/", "_")
    sink.info["video_returns"] = [float(r) for r in episodes.returns]
    if not sink.recording:
        out = Path("videos")
        out.mkdir(exist_ok=True)
        return [str(p) for p in _video.write_video(frames, out / stem, config["fps"])]
    with tempfile.TemporaryDirectory() as tmp:
        paths = _video.write_video(frames, Path(tmp) / stem, config["fps"])
        for path in paths:
            sink.artifact(path)
    where = sink.run_dir
    return [str(where / p.name) if where else p.name for p in paths]


if __name__ == "__main__":
    ex.run_commandline()
    sys.exit(0)
