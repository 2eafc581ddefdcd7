"""DDPG: a deterministic actor and one critic."""

from typing import final

import equinox as eqx

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

    - `learning_rate`, `max_grad_norm`: Adam step size of actor and critic;
      global-norm clipping.
    - `gamma`, `n_step`: discount and n-step returns.
    - `buffer_size`, `batch_size`, `learning_starts`, `train_frequency`,
      `gradient_steps`: replay, as for DQN.
    - `tau`, `target_update_interval`: Polyak averaging of the targets.
    - `exploration_noise`: standard deviation of the Gaussian action noise (in
      `[-1, 1]` units); `noise_sample_freq`: 0 for white noise, else env steps
      between draws of state-dependent noise (gSDE-style, see
      `AbstractDeterministicAgent`).
    - `prioritized`: prioritised replay (proportional); `priority_alpha` is
      the priority exponent, `priority_beta` the importance-weight exponent at
      the start (annealed linearly to 1).
    - `hidden_sizes`, `activation`: actor and critic torsos.
    - `normalize_obs`: normalise observations by running statistics;
      `scale_obs`: instead map bounded observation dimensions onto [-1, 1].
    """

    learning_rate: float = 1e-3
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    n_step: int = eqx.field(static=True, default=1)
    buffer_size: int = eqx.field(static=True, default=100_000)
    batch_size: int = eqx.field(static=True, default=256)
    learning_starts: int = 1_000
    train_frequency: int = eqx.field(static=True, default=1)
    gradient_steps: int = eqx.field(static=True, default=1)
    target_update_interval: int = 1
    tau: float = 0.005
    prioritized: bool = eqx.field(static=True, default=False)
    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    exploration_noise: float = 0.1
    noise_sample_freq: int = eqx.field(static=True, default=0)
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(256, 256))
    activation: str = eqx.field(static=True, default="relu")
    torso: str = eqx.field(static=True, default="auto")
    normalize_obs: bool = eqx.field(static=True, default=False)
    scale_obs: bool = eqx.field(static=True, default=False)

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
