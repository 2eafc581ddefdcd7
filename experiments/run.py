# Sacred's config scope defines its entries as local variables, unused to Python.
# ruff: noqa: F841
"""Train an agent of the zoo with Sacred: tuned config, observers, metrics, artifacts.

    python -m experiments.run with agent=dqn                    # CartPole-v1, tuned
    python -m experiments.run with agent=ppo env=Pendulum-v1 num_seeds=8
    python -m experiments.run with agent=dqn hp.learning_rate=1e-3
    python -m experiments.run with agent=ppo env=MPE_simple_spread_v3 sharing=shared
    python -m experiments.run print_config with agent=ppo env=Acrobot-v1
    python -m experiments.run -m localhost:27017:equizoo with agent=dqn   # + MongoDB
    python -m experiments.run with resume=runs/1      # continue from its checkpoint

Records go to `runs/` (a `FileStorageObserver`) unless `-F DIR` picks another
folder; `-m` adds MongoDB (for Omniboard) and keeps the file record; `-u` records
nothing. Checkpoints go to `runs/<id>/checkpoints/<env_steps>/`; SIGINT or SIGTERM
stops at the next chunk boundary with a checkpoint. See docs/experiments.md.
"""

import time

_T_START = time.perf_counter()

from experiments import _jax_setup  # noqa: E402

if __name__ == "__main__":
    # Before anything imports JAX: XLA reads its flags when the backend starts.
    # Only as a program: importing this module must not change the importer's JAX.
    _jax_setup.set_xla_flags()

from typing import Any  # noqa: E402

from experiments import (  # noqa: E402
    _config,
    _distributed,
    _experiment,
    _interrupt,
    _resume,
    _training,
    configs,
)
from experiments._errors import (  # noqa: E402
    ConfigError as ConfigError,
    DistributedError as DistributedError,
    TrainingError as TrainingError,
)
from experiments._interrupt import Interrupted as Interrupted  # noqa: E402
from experiments._load import load_state as load_state  # noqa: E402
from experiments._resume import resume_command as resume_command  # noqa: E402

ex = _experiment.experiment("equizoo")


@ex.config
def config():
    # continue the run recorded in this folder (e.g. "runs/1") from its newest
    # checkpoint, with its config; only total_steps may grow
    resume = None
    # agent name, one of zoo.names()
    agent = _resume.resumed(resume, "agent", "dqn")
    # env name (envs.names()); default: experiments.configs.DEFAULT_ENV[agent]
    env = _resume.resumed(resume, "env", configs.default_env(agent))
    # env parameters, envs.make(env, **env_params): `env_params.<name>=value`,
    # e.g. env_params.max_steps_in_episode=1000 (tuned block, else none; the
    # MinAtar blocks set sticky_prob=0.1, env_params.sticky_prob=0 turns it off)
    env_params = _resume.resumed(
        resume, "env_params", _config.env_params_default(agent, env)
    )
    # base PRNG seed: seed i of num_seeds trains with split(PRNGKey(seed))[i]
    seed = _resume.resumed(resume, "seed", 0)
    # independent seeds, trained together (vmapped)
    num_seeds = _resume.resumed(resume, "num_seeds", 1)
    # env steps per seed (tuned block, else 100000)
    total_steps = _resume.resumed(
        resume, "total_steps", _config.run_default(agent, env, "total_steps")
    )
    # parallel envs per seed (tuned block, else 8)
    num_envs = _resume.resumed(
        resume, "num_envs", _config.run_default(agent, env, "num_envs")
    )
    # env steps between greedy evaluations (default ~10 per run); None: at the end
    eval_every = _resume.resumed(
        resume, "eval_every", _config.eval_every(agent, env, total_steps)
    )
    # also evaluate the untrained agent, logged at env step 0
    eval_at_start = _resume.resumed(resume, "eval_at_start", False)
    # greedy episodes per seed in each evaluation (tuned block, else 32)
    eval_episodes = _resume.resumed(
        resume, "eval_episodes", _config.run_default(agent, env, "eval_episodes")
    )
    # zoo.make(agent, **hp): agent defaults < tuned block < `with hp.<name>=...`
    hp = _resume.resumed(resume, "hp", _config.resolved_hp(agent, env))
    # hyperparameter sweep: `sweep.<name>=[v1,v2]` (a grid: every combination) or
    # `sweep.<name>=loguniform(low,high)` / `uniform(low,high)` (random search,
    # sweep_samples draws); float hyperparameters vary inside one program
    sweep = _resume.resumed(resume, "sweep", {})
    # members drawn for the distributions of `sweep` (random search)
    sweep_samples = _resume.resumed(resume, "sweep_samples", 0)
    # devices the runs (members x seeds) are sharded over: None (all) or a number
    devices = None
    # one run across processes (jax.distributed), each started with the same
    # command and its own process_id; empty: from srun/mpirun's environment
    distributed = {"coordinator": None, "num_processes": None, "process_id": None}
    # the same numbers on any number of devices (CPU: trains ~1.1-1.5x slower)
    bitwise = _resume.resumed(resume, "bitwise", False)
    # env steps per seed between checkpoints (at chunk ends); None: only at the end
    checkpoint_every = _resume.resumed(
        resume, "checkpoint_every", _config.CHECKPOINT_EVERY
    )
    # checkpoints kept in <run_dir>/checkpoints/, newest first
    keep_checkpoints = _resume.resumed(
        resume, "keep_checkpoints", _config.KEEP_CHECKPOINTS
    )
    # on a multi-agent env (envs.make_multi): "shared" (the default there: one
    # agent acts and learns for all, vmapped over agents), "self-play" (shared,
    # without agent id) or "independent" (one agent per agent name)
    sharing = _resume.resumed(resume, "sharing", None)
    # sharing="shared": append a one-hot of the agent's index to its observations
    agent_id = _resume.resumed(resume, "agent_id", False)
    # sharing="independent": `per_agent.<agent_name>.<hp>=value` overrides that
    # agent's hyperparameters; `per_agent.<agent_name>.agent=dqn` its algorithm
    per_agent = _resume.resumed(resume, "per_agent", {})
    # a GIF (and MP4 with ffmpeg) of one greedy episode of the final policy
    # (seed 0), an artifact of the record; for envs that render
    video = False
    # show a progress bar (stderr)
    progress = True
    # JAX persistent compilation cache (~/.cache/equizoo/jax; EQUIZOO_CACHE_DIR)
    compilation_cache = _jax_setup.cache_enabled_by_default()


@ex.config_hook
def _validate(config, command_name, logger):
    # Runs for every command (print_config too), before observers start and
    # before anything compiles.
    join = _distributed.plan(config["distributed"])
    if join is not None and command_name == "main":
        # From Python (`ex.run(config_updates=...)`); a command line joined in
        # the option hook already.
        _distributed.join(join)
        if not _distributed.is_main():
            defaults = ex.equizoo_default_observers  # pyright: ignore[reportAttributeAccessIssue]
            ex.observers[:] = [o for o in ex.observers if o not in defaults]
    for warning in _config.validate(config):
        logger.warning(warning)
    return {}


@ex.main
def main(
    agent: str,
    env: str,
    env_params: dict[str, Any],
    seed: int,
    num_seeds: int,
    total_steps: int,
    num_envs: int,
    eval_every: int | None,
    eval_at_start: bool,
    eval_episodes: int,
    hp: dict[str, Any],
    checkpoint_every: int | None,
    keep_checkpoints: int,
    resume: str | None,
    progress: bool,
    compilation_cache: bool,
    sweep: dict[str, Any],
    sweep_samples: int,
    devices: int | None,
    bitwise: bool,
    video: bool,
    distributed: dict[str, Any],
    sharing: str | None,
    agent_id: bool,
    per_agent: dict[str, Any],
    _run: Any,
) -> float:
    """Train, logging metrics and writing checkpoints after compiled chunks; save
    artifacts (see `experiments._training.train`).

    **Returns:** the final greedy return, averaged over episodes and seeds (Sacred
    stores it as the run's result); for a sweep, the best member's.

    **Raises:** `Interrupted` (a `KeyboardInterrupt`: Sacred marks the run
    INTERRUPTED) after a checkpoint when SIGINT or SIGTERM stopped training;
    `TrainingError` (FAILED) on a non-finite loss or parameter, or when another
    process of a multi-process run is lost.
    """
    # Every key is an argument: Sacred rejects `env_params.<name>=...` and
    # `sweep.<name>=...` entries of a config that main does not take.
    args = {k: v for k, v in locals().items() if k != "_run"}
    return _training.train(_run, t_start=_T_START, **args)


if __name__ == "__main__":
    try:
        ex.run_commandline()
    except Interrupted as e:
        _interrupt.exit_now(128 + e.signum)
    except SystemExit as e:
        if _distributed.joined() is not None and e.code:
            # A failed process of a multi-process run: JAX's exit would wait
            # for the others at a shutdown barrier, then abort.
            _interrupt.exit_now(e.code if isinstance(e.code, int) else 1)
        raise
    if _interrupt.signalled():
        # A signal came during the last chunk: the run completed, but a second
        # signal must still exit at once, so skip interpreter shutdown.
        _interrupt.exit_now(0)
