"""Runners: compose an agent and an env into compiled training."""

from ._checkpoint import (
    META_FILE as META_FILE,
    STATE_FILE as STATE_FILE,
    CheckpointError as CheckpointError,
    check_state_bytes as check_state_bytes,
    latest_checkpoint as latest_checkpoint,
    list_checkpoints as list_checkpoints,
    load_checkpoint as load_checkpoint,
    prune_checkpoints as prune_checkpoints,
    read_meta as read_meta,
    save_checkpoint as save_checkpoint,
    structure as structure,
    verify_checkpoint as verify_checkpoint,
)
from ._evaluate import evaluate as evaluate, play_step as play_step
from ._hparams import (
    check_sweep as check_sweep,
    grid as grid,
    sweepable as sweepable,
    with_hparams as with_hparams,
)
from ._placement import MemoryLimitError as MemoryLimitError
from ._rollout import initial_carry as initial_carry
from ._run import (
    NonFiniteError as NonFiniteError,
    PeerLostError as PeerLostError,
    Programs as Programs,
    Report as Report,
    RunResult as RunResult,
    execute as execute,
    lower as lower,
    plan as plan,
    prepare as prepare,
    run as run,
)
from ._state import (
    init_seeds as init_seeds,
    seed_state as seed_state,
    state_template as state_template,
)
from ._train import (
    TrainState as TrainState,
    init as init,
    num_iterations as num_iterations,
    train as train,
    train_chunk as train_chunk,
    validate as validate,
)
