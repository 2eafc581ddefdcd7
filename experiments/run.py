"""Train an agent of the zoo with Sacred: tuned config, observers, metrics, artifacts.

    python -m experiments.run with agent=dqn                    # CartPole-v1, tuned
    python -m experiments.run with agent=ppo env=Pendulum-v1 num_seeds=8
    python -m experiments.run with agent=dqn hp.learning_rate=1e-3
    python -m experiments.run with agent=ppo env=MPE_simple_spread_v3 sharing=shared
    python -m experiments.run print_config with agent=ppo env=Acrobot-v1
    python -m experiments.run -m localhost:27017:equizoo with agent=dqn   # + MongoDB
    python -m experiments.run with resume=runs/1      # continue from its checkpoint
    python -m experiments.run with agent=ppo log=tensorboard,wandb   # + both

Records go to `runs/` (a `FileStorageObserver`) unless `-F DIR` picks another
folder; `-m` adds MongoDB (for Omniboard) and keeps the file record; `-u` records
nothing. Checkpoints go to `runs/<id>/checkpoints/<env_steps>/`; SIGINT or SIGTERM
stops at the next chunk boundary with a checkpoint. See docs/experiments.md.
"""

import time

_T_START = time.perf_counter()

from experiments import jax_setup  # noqa: E402

if __name__ == "__main__":
    # Before anything imports JAX: XLA reads its flags when the backend starts.
    # Only as a program: importing this module must not change the importer's JAX.
    jax_setup.set_xla_flags()

from typing import Any  # noqa: E402

from experiments import _distributed, _interrupt, _spec, _training  # noqa: E402
from experiments._errors import (  # noqa: E402
    ConfigError as ConfigError,
    DistributedError as DistributedError,
    TrainingError as TrainingError,
)
from experiments._interrupt import Interrupted as Interrupted  # noqa: E402
from experiments._load import load_state as load_state  # noqa: E402
from experiments.record.sink import TeeSink  # noqa: E402
from experiments.sacred import experiment as _experiment  # noqa: E402
from experiments.sacred.sink import (  # noqa: E402
    SacredSink,
    resume_command as resume_command,
)


def experiment(spec: type[_spec.RunSpec] = _spec.RunSpec) -> Any:
    """The Sacred experiment that trains `spec`'s configs: its keys, defaults and
    docs (experiments/_spec.py) make the config scope, checked before anything
    compiles; `main` trains. `ex` is this for `RunSpec`."""
    ex = _experiment.experiment("equizoo")
    ex.configurations.append(_spec.config_scope(spec))

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
                defaults = ex.equizoo_default_observers
                ex.observers[:] = [o for o in ex.observers if o not in defaults]
        for warning in _spec.validate(config, spec):
            logger.warning(warning)
        return {}

    @ex.main
    @_spec.takes_every_key(spec)
    def main(_run: Any, **config: Any) -> float:
        """Train, logging metrics and writing checkpoints after compiled chunks;
        save artifacts (see `experiments._training.train`).

        **Returns:** the final greedy return, averaged over episodes and seeds
        (Sacred stores it as the run's result); for a sweep, the best member's.

        **Raises:** `Interrupted` (a `KeyboardInterrupt`: Sacred marks the run
        INTERRUPTED) after a checkpoint when SIGINT or SIGTERM stopped training;
        `TrainingError` (FAILED) on a non-finite loss or parameter, or when
        another process of a multi-process run is lost.
        """
        run_spec = spec.from_config(config)
        record = SacredSink(_run)
        copies = []
        if _distributed.is_main():  # the other processes of a run record nothing
            from experiments.record import loggers

            copies = loggers.open_loggers(
                loggers.parse(run_spec.log),
                record.run_dir,
                record.config,
                f"{run_spec.agent}__{run_spec.env.replace('/', '_')}__{_run._id}",
            )
        if not copies:
            return _training.train(run_spec, record, _T_START).value
        sink = TeeSink(record, copies)
        status = "FAILED"
        try:
            value = _training.train(run_spec, sink, _T_START).value
            status = "COMPLETED"
            return value
        except Interrupted:
            status = "INTERRUPTED"
            raise
        finally:
            sink.close(status)

    return ex


ex = experiment()


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
