"""DDPG: a deterministic actor and one critic."""

from typing import final

from ._agent import register
from ._td3 import AbstractDeterministicAgent, TD3State

DDPGState = TD3State


@register("ddpg", default_env="Pendulum-v1")
@final
class DDPG(AbstractDeterministicAgent):
    """DDPG (Lillicrap et al., 2016): a deterministic actor trained through one
    critic, Gaussian exploration noise, Polyak-averaged targets. It is TD3 with
    one critic, no target smoothing and no delay (`zoo/_td3.py` holds the
    update); its state is a `TD3State`.

    **Arguments:**

    - `learning_rate`, `gamma`, `n_step`, replay, `tau`, the torsos and the
      rest every continuous agent shares: see `AbstractContinuousAgent`.
    - `target_update_interval`: gradient steps between Polyak updates of the
      targets.
    - `exploration_noise`, `noise_sample_freq`: Gaussian action noise, white
      or state-dependent (see `AbstractDeterministicAgent`).
    """

    target_update_interval: int = 1

    @property
    def n_critics(self) -> int:
        return 1

    @property
    def policy_delay(self) -> int:
        return 1

    @property
    def target_noise(self) -> float:
        return 0.0

    @property
    def target_noise_clip(self) -> float:
        return 0.0
