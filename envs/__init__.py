"""Pure, gymnax-style environments: `reset(key)` and `step(key, state, action)`."""

from ._classic import (
    CartPole as CartPole,
    CartPoleState as CartPoleState,
    Pendulum as Pendulum,
    PendulumState as PendulumState,
)
from ._env import (
    AbstractEnv as AbstractEnv,
    AbstractTransparentWrapper as AbstractTransparentWrapper,
    AbstractWrapper as AbstractWrapper,
)
from ._gymnasium import (
    gymnasium_space as gymnasium_space,
    to_gymnasium as to_gymnasium,
)
from ._gymnax import GymnaxEnv as GymnaxEnv
from ._mujoco import (
    MUJOCO_TASKS as MUJOCO_TASKS,
    MujocoEnv as MujocoEnv,
    MujocoState as MujocoState,
)
from ._multi_agent import (
    ALL_AGENTS as ALL_AGENTS,
    AbstractMultiAgentEnv as AbstractMultiAgentEnv,
    JaxMarlEnv as JaxMarlEnv,
    MatrixGame as MatrixGame,
    MatrixGameState as MatrixGameState,
)
from ._playground import (
    PlaygroundEnv as PlaygroundEnv,
    PlaygroundState as PlaygroundState,
)
from ._probes import (
    ActionReward as ActionReward,
    ConstantReward as ConstantReward,
    ContinuousActionReward as ContinuousActionReward,
    ObservationReward as ObservationReward,
    ProbeState as ProbeState,
    TruncatedConstantReward as TruncatedConstantReward,
    TwoStepDiscount as TwoStepDiscount,
)
from ._registry import (
    MULTI_AGENT as MULTI_AGENT,
    POMDP as POMDP,
    PRESETS as PRESETS,
    PROBES as PROBES,
    SUITES as SUITES,
    Suite as Suite,
    is_multi_agent as is_multi_agent,
    make as make,
    make_multi as make_multi,
    names as names,
    register_suite as register_suite,
    suite_of as suite_of,
    uses_jaxmarl as uses_jaxmarl,
)
from ._spaces import Box as Box, Discrete as Discrete, Space as Space
from ._wrappers import (
    ClipAction as ClipAction,
    EpisodeStatistics as EpisodeStatistics,
    EpisodeStatisticsState as EpisodeStatisticsState,
    FlattenObservation as FlattenObservation,
    MaskObservation as MaskObservation,
    StickyActions as StickyActions,
    StickyActionsState as StickyActionsState,
)
from ._xminigrid import XMiniGridEnv as XMiniGridEnv
