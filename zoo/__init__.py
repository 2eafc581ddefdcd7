"""Agents as Equinox modules: hyperparameters and architecture, state kept apart."""

from ._agent import AbstractAgent as AbstractAgent
from ._dqn import DQN as DQN, DQNState as DQNState
from ._memory import (
    AbstractMemory as AbstractMemory,
    Replay as Replay,
    ReplayState as ReplayState,
    Rollout as Rollout,
    RolloutState as RolloutState,
    Transition as Transition,
)
from ._networks import (
    MLP as MLP,
    Critic as Critic,
    DiscreteActor as DiscreteActor,
    GaussianActor as GaussianActor,
    QNetwork as QNetwork,
)
from ._ppo import PPO as PPO, PPOState as PPOState, gae as gae
from ._registry import (
    AGENTS as AGENTS,
    hyperparameters as hyperparameters,
    make as make,
    names as names,
)
from ._serialise import load as load, save as save
