"""Sacred experiments around the zoo: `python -m experiments.run with agent=dqn`
trains, `python -m experiments.evaluate with run=runs/3` plays greedy episodes
(and films them), `python -m experiments.plot runs/1 runs/2` compares runs,
`python -m experiments.sweep` launches sweeps of runs and `python -m
experiments.publish` retrains the pretrained zoo (docs/using.md).

From Python, `experiments.tuned(agent, env)` gives the tuned hyperparameters and
run settings the CLI trains with, `experiments.RunSpec.resolve(agent=..., env=...)`
the whole run config (every key of `python -m experiments.run`),
`experiments.train(spec)` trains it as the CLI does (recording nothing unless
given a `Sink`), and
`experiments.load_run("runs/3", seed=0)` loads a recorded run's agent, one seed's
state and its env. Importing this package imports neither JAX nor Sacred.
"""

import typing as _typing

from experiments._load import load_run as load_run, load_state as load_state
from experiments._tuned import Tuned as Tuned, pairs as pairs, tuned as tuned

if _typing.TYPE_CHECKING:
    from experiments._resume import resume_checkpoint as resume_checkpoint
    from experiments._spec import RunSpec as RunSpec
    from experiments._training import Outcome as Outcome, train as train
    from experiments.record.sink import NullSink as NullSink, Sink as Sink

# Loaded on first use: the run spec reads run folders through Sacred's code.
_LAZY = {
    "RunSpec": "experiments._spec",
    "train": "experiments._training",
    "Outcome": "experiments._training",
    "Sink": "experiments.record.sink",
    "NullSink": "experiments.record.sink",
    "resume_checkpoint": "experiments._resume",
}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'experiments' has no attribute {name!r}")
