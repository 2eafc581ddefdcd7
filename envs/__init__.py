"""Pure, gymnax-style environments: `reset(key)` and `step(key, state, action)`."""

from ._classic import (
    CartPole as CartPole,
    CartPoleState as CartPoleState,
    Pendulum as Pendulum,
    PendulumState as PendulumState,
)
from ._env import AbstractEnv as AbstractEnv, AbstractWrapper as AbstractWrapper
from ._gymnax import GymnaxEnv as GymnaxEnv
from ._probes import (
    ActionReward as ActionReward,
    ConstantReward as ConstantReward,
    ContinuousActionReward as ContinuousActionReward,
    ObservationReward as ObservationReward,
    ProbeState as ProbeState,
    TruncatedConstantReward as TruncatedConstantReward,
    TwoStepDiscount as TwoStepDiscount,
)
from ._registry import PROBES as PROBES, make as make, names as names
from ._spaces import Box as Box, Discrete as Discrete, Space as Space
from ._wrappers import (
    ClipAction as ClipAction,
    EpisodeStatistics as EpisodeStatistics,
    EpisodeStatisticsState as EpisodeStatisticsState,
    FlattenObservation as FlattenObservation,
)
