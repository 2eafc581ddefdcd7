"""Deep Q-learning with double-Q, dueling heads and Polyak or periodic targets."""

from typing import final

import equinox as eqx
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float

from ._agent import register
from ._q_learning import AbstractQAgent, QState

# DQN's state is the Q-learning state every value-based agent shares.
DQNState = QState


@register("dqn")
@final
class DQN(AbstractQAgent):
    """DQN (Mnih et al., 2015) with the usual improvements as options.

    **Arguments:**

    - `learning_rate`, `max_grad_norm`: Adam step size; global-norm gradient clipping.
    - `anneal_lr`: decay the learning rate linearly to zero over the run's
      gradient steps (it steadies the final policy).
    - `gamma`: discount; `n_step`: bootstrap after summing up to `n_step` rewards.
    - `buffer_size`, `batch_size`: uniform replay capacity and minibatch size.
    - `learning_starts`: transitions in the buffer before the first update.
    - `train_frequency`: env steps per env between updates; `gradient_steps`:
      minibatch updates each time.
    - `target_update_interval`, `tau`: every `target_update_interval` gradient steps,
      move the target network a fraction `tau` of the way to the online network
      (`tau=1` copies it; `interval=1, tau=0.005` is Polyak averaging).
    - `exploration_initial_eps`, `exploration_final_eps`, `exploration_steps`:
      linear epsilon schedule over env steps (all envs together).
    - `double_q`: select the next action with the online network.
    - `dueling`: dueling value/advantage head.
    - `huber_delta`: Huber loss threshold.
    - `reward_scale`: multiplies rewards before learning (Q values, and
      `huber_delta`'s scale, shrink with it).
    - `prioritized`: prioritised replay (proportional); `priority_alpha` is
      the priority exponent, `priority_beta` the importance-weight exponent at
      the start (annealed linearly to 1).
    - `hidden_sizes`, `activation`: the MLP torso; `torso`: `"auto"`, `"mlp"`,
      `"cnn"`, or a recurrent `"gru"`/`"lstm"` cell of `cell_size` units after
      the torso `"auto"` picks.
    - `sequence_length`, `burn_in` (recurrent torsos only, R2D2-style): the
      replay draws sequences of `burn_in + sequence_length` steps of one env,
      each starting from the carry stored with its first step; the first
      `burn_in` steps only warm the carry up, the rest learn (n-step targets
      stop at the sequence's end). `batch_size` counts sequences. Prioritised
      replay of sequences is not supported yet.
    - `normalize_obs`: normalise observations by running statistics;
      `scale_obs`: instead map bounded observation dimensions onto [-1, 1].
    """

    double_q: bool = eqx.field(static=True, default=True)
    huber_delta: float = 1.0

    @property
    def quantile_embedding(self) -> None:
        return None

    def outputs(
        self, network, obs, *, key, acting=False
    ) -> Float[Array, "actions ..."]:
        return network(obs, key=self.noise(key))

    @property
    def num_atoms(self) -> None:
        return None

    def value(self, out: Float[Array, "*b actions"]) -> Float[Array, "*b actions"]:
        return out

    def td_loss(
        self, taken, next_taken, reward, discount
    ) -> tuple[Float[Array, " batch"], Float[Array, " batch"]]:
        y = reward + discount * next_taken
        losses = optax.huber_loss(taken, y, delta=self.huber_delta)
        return losses, jnp.abs(taken - y)
