"""Runners: compose an agent and an env into compiled training."""

from ._evaluate import evaluate as evaluate
from ._run import Report as Report, RunResult as RunResult, plan as plan, run as run
from ._train import (
    TrainState as TrainState,
    init as init,
    num_iterations as num_iterations,
    train as train,
    train_chunk as train_chunk,
    validate as validate,
)
