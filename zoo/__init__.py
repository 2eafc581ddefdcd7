"""Agents as Equinox modules: hyperparameters and architecture, state kept apart."""

from ._a2c import A2C as A2C, A2CState as A2CState
from ._agent import (
    AbstractAgent as AbstractAgent,
    AbstractMemorylessAgent as AbstractMemorylessAgent,
    AbstractRecurrentAgent as AbstractRecurrentAgent,
    AbstractState as AbstractState,
    register as register,
    scaled_stats as scaled_stats,
)
from ._c51 import (
    C51 as C51,
    AbstractCategoricalAgent as AbstractCategoricalAgent,
    Rainbow as Rainbow,
    categorical_projection as categorical_projection,
)
from ._crossq import CrossQ as CrossQ
from ._ddpg import DDPG as DDPG, DDPGState as DDPGState
from ._dqn import DQN as DQN, DQNState as DQNState
from ._gymnasium import (
    GymnasiumPolicy as GymnasiumPolicy,
    gymnasium_policy as gymnasium_policy,
    gymnasium_returns as gymnasium_returns,
)
from ._iqn import IQN as IQN
from ._memory import (
    AbstractMemory as AbstractMemory,
    AbstractReplay as AbstractReplay,
    Replay as Replay,
    ReplayState as ReplayState,
    Rollout as Rollout,
    RolloutState as RolloutState,
    Sample as Sample,
    Transition as Transition,
)
from ._multi_agent import (
    AbstractLearners as AbstractLearners,
    Independent as Independent,
    Shared as Shared,
)
from ._networks import (
    RECURRENT as RECURRENT,
    TORSOS as TORSOS,
    AbstractActor as AbstractActor,
    BatchNorm as BatchNorm,
    BatchNormQCritic as BatchNormQCritic,
    Critic as Critic,
    DeterministicActor as DeterministicActor,
    DiscreteActor as DiscreteActor,
    GaussianActor as GaussianActor,
    NoisyLinear as NoisyLinear,
    QCritic as QCritic,
    QNetwork as QNetwork,
    RecurrentTorso as RecurrentTorso,
    SDEActor as SDEActor,
    SquashedGaussianActor as SquashedGaussianActor,
    Torso as Torso,
    batch_norm_ensemble_q as batch_norm_ensemble_q,
    batch_norm_q_ensemble as batch_norm_q_ensemble,
    conv3x3 as conv3x3,
    cosine_embedding as cosine_embedding,
    initial_cell_carry as initial_cell_carry,
    torso_kind as torso_kind,
)
from ._normalize import RunningStats as RunningStats
from ._off_policy import (
    AbstractContinuousAgent as AbstractContinuousAgent,
    AbstractOffPolicyAgent as AbstractOffPolicyAgent,
    AbstractOffPolicyState as AbstractOffPolicyState,
    scale_action as scale_action,
    unscale_action as unscale_action,
)
from ._on_policy import (
    AbstractActorCritic as AbstractActorCritic,
    AbstractRolloutAgent as AbstractRolloutAgent,
    ActorCriticState as ActorCriticState,
    episode_starts as episode_starts,
    gae as gae,
    to_sequences as to_sequences,
    unroll as unroll,
)
from ._ppo import PPO as PPO, PPOState as PPOState
from ._pqn import PQN as PQN, PQNState as PQNState, lambda_returns as lambda_returns
from ._pretrained import (
    PRETRAINED_DIR as PRETRAINED_DIR,
    PRETRAINED_INDEX as PRETRAINED_INDEX,
    pretrained as pretrained,
    pretrained_stem as pretrained_stem,
    provenance as provenance,
)
from ._prioritized import (
    PrioritizedReplay as PrioritizedReplay,
    PrioritizedReplayState as PrioritizedReplayState,
    SumTree as SumTree,
)
from ._q_learning import (
    AbstractEpsilonGreedyAgent as AbstractEpsilonGreedyAgent,
    AbstractEpsilonState as AbstractEpsilonState,
    AbstractQAgent as AbstractQAgent,
    QState as QState,
)
from ._qrdqn import QRDQN as QRDQN, quantile_huber_loss as quantile_huber_loss
from ._registry import (
    AGENTS as AGENTS,
    default_env as default_env,
    hyperparameters as hyperparameters,
    make as make,
    names as names,
)
from ._sac import (
    SAC as SAC,
    AbstractSoftActorCritic as AbstractSoftActorCritic,
    SACState as SACState,
)
from ._serialise import load as load, save as save
from ._td3 import (
    TD3 as TD3,
    AbstractDeterministicAgent as AbstractDeterministicAgent,
    TD3State as TD3State,
)
from ._tqc import TQC as TQC, truncated_atoms as truncated_atoms
