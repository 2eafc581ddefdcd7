# Sacred's config scope defines its entries as local variables, unused to Python.
# ruff: noqa: F841
"""Train an agent of the zoo with Sacred: tuned config, observers, metrics, artifacts.

    python -m experiments.run with agent=dqn                    # CartPole-v1, tuned
    python -m experiments.run with agent=ppo env=Pendulum-v1 num_seeds=8
    python -m experiments.run with agent=dqn hp.learning_rate=1e-3
    python -m experiments.run print_config with agent=ppo env=Acrobot-v1
    python -m experiments.run -m localhost:27017:equizoo with agent=dqn   # + MongoDB

Records go to `runs/` (a `FileStorageObserver`) unless `-F DIR` picks another
folder; `-m` adds MongoDB (for Omniboard) and keeps the file record; `-u` records
nothing. See docs/experiments.md.
"""

import time

_T_START = time.perf_counter()

import logging  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from experiments import _jax_setup  # noqa: E402

if __name__ == "__main__":
    # Before anything imports JAX: XLA reads its flags when the backend starts.
    # Only as a program: importing this module must not change the importer's JAX.
    _jax_setup.set_xla_flags()

from experiments import _config, _record, configs  # noqa: E402
from experiments._config import ConfigError as ConfigError  # noqa: E402
from experiments._sacred import (  # noqa: E402
    Experiment,
    FileStorageObserver,
    MongoObserver,
    apply_backspaces_and_linefeeds,
)

ROOT = Path(__file__).resolve().parents[1]
RUNS_DIR = Path("runs")  # relative to the working directory, like `-F runs`


class _CurrentStderr(logging.StreamHandler):
    """A handler writing to whatever `sys.stderr` is now, so that Sacred's
    captured output (which swaps `sys.stderr`) includes our log lines."""

    @property
    def stream(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _logger() -> logging.Logger:
    logger = logging.getLogger("equizoo")
    if not logger.handlers:
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(levelname)s - %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    # Sacred's INFO lines (run ID, "Completed after") would follow our summary
    # line; `-l INFO` brings them back.
    logger.setLevel(logging.WARNING)
    return logger


ex = Experiment("equizoo", base_dir=str(ROOT))
ex.logger = _logger()  # pyright: ignore[reportAttributeAccessIssue]
# The progress bar redraws itself with carriage returns; keep only the final
# state of each line in the recorded output.
ex.captured_out_filter = apply_backspaces_and_linefeeds  # pyright: ignore[reportAttributeAccessIssue]


@ex.config
def config():
    # agent name, one of zoo.names()
    agent = "dqn"
    # env name (envs.names()); default: experiments.configs.DEFAULT_ENV[agent]
    env = configs.default_env(agent)
    # base PRNG seed: seed i of num_seeds trains with split(PRNGKey(seed))[i]
    seed = 0
    # independent seeds, trained together (vmapped)
    num_seeds = 1
    # env steps per seed (tuned block, else 100000)
    total_steps = _config.run_default(agent, env, "total_steps")
    # parallel envs per seed (tuned block, else 8)
    num_envs = _config.run_default(agent, env, "num_envs")
    # env steps between greedy evaluations (default ~10 per run); None: at the end
    eval_every = _config.eval_every(agent, env, total_steps)
    # greedy episodes per seed in each evaluation (tuned block, else 32)
    eval_episodes = _config.run_default(agent, env, "eval_episodes")
    # zoo.make(agent, **hp): agent defaults < tuned block < `with hp.<name>=...`
    hp = _config.resolved_hp(agent, env)
    # show a progress bar (stderr)
    progress = True
    # JAX persistent compilation cache (~/.cache/equizoo/jax; EQUIZOO_CACHE_DIR)
    compilation_cache = _jax_setup.cache_enabled_by_default()


@ex.config_hook
def _validate(config, command_name, logger):
    # Runs for every command (print_config too), before observers start and
    # before anything compiles.
    for warning in _config.validate(config):
        logger.warning(warning)
    return {}


@ex.option_hook
def _observers(options):
    # Drop the default observer a previous run in this process added.
    ex.observers[:] = [o for o in ex.observers if o not in _DEFAULT_OBSERVERS]
    # "sys" tees Python's streams; Sacred's default "fd" starts a `tee`
    # subprocess and redirects file descriptors, which buys nothing here.
    if not options.get("--capture"):
        options["--capture"] = "sys"
    if not options.get("--file_storage") and not options.get("--unobserved"):
        observer = FileStorageObserver(RUNS_DIR)
        _DEFAULT_OBSERVERS.append(observer)
        ex.observers.append(observer)


_DEFAULT_OBSERVERS: list[Any] = []


@ex.main
def main(
    agent: str,
    env: str,
    seed: int,
    num_seeds: int,
    total_steps: int,
    num_envs: int,
    eval_every: int | None,
    eval_episodes: int,
    hp: dict[str, Any],
    progress: bool,
    compilation_cache: bool,
    _run: Any,
) -> float:
    """Train, logging metrics after each compiled chunk; save artifacts.

    **Returns:** the final greedy return, averaged over episodes and seeds (Sacred
    stores it as the run's result).
    """
    t_main = time.perf_counter()
    if compilation_cache:
        _jax_setup.enable_compilation_cache()
    import jax.random as jr

    import envs
    import runners
    import zoo

    if _run.observers:
        # The learning-curve PNG needs matplotlib (~1 s to import): load it while
        # XLA compiles, which leaves the interpreter idle.
        threading.Thread(target=_record.preload_matplotlib, daemon=True).start()
    agent_module = zoo.make(agent, **hp)
    env_module = envs.make(env)
    recorder = _record.Recorder(_run, num_seeds, progress)
    if progress:
        print(
            f"Compiling {agent} on {env}: {num_seeds} seed(s) x {num_envs} envs, "
            f"{total_steps:,} steps each ...",
            file=sys.stderr,
            flush=True,
        )
    try:
        result = runners.run(
            agent_module,
            env_module,
            key=jr.PRNGKey(seed),
            total_steps=total_steps,
            num_envs=num_envs,
            num_seeds=num_seeds,
            eval_every=eval_every,
            eval_episodes=eval_episodes,
            callback=recorder,
        )
    finally:
        recorder.close()
    per_seed = result.final_returns.mean(axis=1)
    mean, std = float(per_seed.mean()), float(per_seed.std())
    env_steps = int(result.state.env_steps[0])
    _run.info.update(
        wall_s=round(time.perf_counter() - t_main, 3),
        process_s=round(time.perf_counter() - _T_START, 3),
        compile_s=round(result.compile_s, 3),
        train_s=round(result.train_s, 3),
        steps_per_s=round(env_steps * num_seeds / result.train_s, 1),
        env_steps=env_steps,
    )
    if _run.observers:
        _save_artifacts(_run, result, recorder, agent=agent, env=env, hp=hp)
    print(
        f"{agent} on {env}: final greedy return {mean:.1f} ± {std:.1f} over "
        f"{num_seeds} seed(s) x {result.final_returns.shape[1]} episodes; "
        f"{env_steps:,} steps in {time.perf_counter() - _T_START:.1f} s wall "
        f"(compile {result.compile_s:.1f} s, {_run.info['steps_per_s']:,.0f} "
        f"steps/s); {_where(_run)}",
        flush=True,
    )
    return mean


def _save_artifacts(run: Any, result: Any, recorder: Any, **header: Any) -> None:
    import equinox as eqx

    returns = result.final_returns
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        eqx.tree_serialise_leaves(out / "final_state.eqx", result.state)
        # Enough to rebuild the state's structure: see `load_state`.
        _record.write_json(
            out / "final_state.json",
            {
                **header,
                "num_envs": run.config["num_envs"],
                "num_seeds": run.config["num_seeds"],
                "seed": run.config["seed"],
                "total_steps": result.total_steps,
                "env_steps": int(result.state.env_steps[0]),
            },
        )
        _record.write_json(
            out / "eval_returns.json",
            {
                "env_steps": int(result.state.env_steps[0]),
                "return_mean": float(returns.mean(axis=1).mean()),
                "return_std": float(returns.mean(axis=1).std()),
                "returns": returns.tolist(),  # [seed][episode]
            },
        )
        _record.plot_curve(
            out / "learning_curve.png",
            recorder.curve_steps,
            recorder.curve_returns,
            f"{header['agent']} on {header['env']}",
        )
        for name in (
            "final_state.eqx",
            "final_state.json",
            "eval_returns.json",
            "learning_curve.png",
        ):
            run.add_artifact(str(out / name), name)


def _where(run: Any) -> str:
    places = []
    for observer in run.observers:
        if isinstance(observer, FileStorageObserver):
            places.append(str(observer.dir))
        elif isinstance(observer, MongoObserver):
            places.append(f"MongoDB {observer.runs.full_name} _id={run._id}")
        else:
            places.append(type(observer).__name__)
    return "recorded in " + " and ".join(places) if places else "not recorded"


def load_state(run_dir: str | Path) -> Any:
    """Load the final `TrainState` (with its seed axis) of a recorded run.

    **Arguments:**

    - `run_dir`: a folder holding the run's `final_state.eqx` and
      `final_state.json` artifacts, e.g. `runs/3`.

    **Returns:** the `runners.TrainState`; `state.agent_state` is the agent's.
    """
    import json

    import equinox as eqx
    import jax
    import jax.random as jr

    import envs
    import runners
    import zoo

    run_dir = Path(run_dir)
    header = json.loads((run_dir / "final_state.json").read_text())
    agent = zoo.make(header["agent"], **header["hp"])
    env = envs.make(header["env"])

    def init(keys):
        return jax.vmap(
            lambda k: runners.init(
                agent,
                env,
                key=k,
                num_envs=header["num_envs"],
                total_steps=header["total_steps"],
            )
        )(keys)

    keys = jr.split(jr.PRNGKey(header["seed"]), header["num_seeds"])
    like = eqx.filter_eval_shape(init, keys)
    return eqx.tree_deserialise_leaves(run_dir / "final_state.eqx", like)


if __name__ == "__main__":
    ex.run_commandline()
