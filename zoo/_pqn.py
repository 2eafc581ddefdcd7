"""PQN: parallel Q-learning (Gallici et al., 2025)."""

from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Discrete, Space

from ._agent import Extras, Metrics, check_positive, register
from ._memory import RolloutState
from ._networks import QNetwork
from ._normalize import RunningStats
from ._on_policy import (
    AbstractRolloutAgent,
    episode_starts,
    flatten_rollout,
    minibatch_epochs,
    to_sequences,
    unroll,
)
from ._q_learning import (
    AbstractEpsilonGreedyAgent,
    AbstractEpsilonState,
    check_discrete,
)


def lambda_returns(
    reward: Float[Array, " T *envs"],
    next_q: Float[Array, " T *envs"],
    terminated: Bool[Array, " T *envs"],
    done: Bool[Array, " T *envs"],
    gamma: float | Float[Array, ""],
    lam: float | Float[Array, ""],
) -> Float[Array, " T *envs"]:
    """Peng's Q(λ) returns of a rollout, computed backwards in time:
    `G_t = r_t + gamma * (1 - terminated_t) * ((1 - λ_t) * next_q_t + λ_t * G_{t+1})`,
    where `next_q[t]` is `max_a Q` at the observation step `t` led to (the final
    one where the episode ended) and `λ_t` is `lam`, or 0 where the episode
    ended at step `t` (so a truncated episode bootstraps from its final
    observation) and at the rollout's last step.
    """
    terminated = terminated.astype(jnp.float32)
    done = done.astype(jnp.float32)

    def backward(g_next, x):
        r, q, term, d = x
        lam_t = lam * (1.0 - d)
        g = r + gamma * (1.0 - term) * ((1.0 - lam_t) * q + lam_t * g_next)
        return g, g

    # Carrying next_q[-1] in makes the last step bootstrap from it alone.
    _, returns = jax.lax.scan(
        backward, next_q[-1], (reward, next_q, terminated, done), reverse=True
    )
    return returns


@final
class PQNState(AbstractEpsilonState):
    """The learnt state of PQN: the Q network, its optimizer and counters."""

    q_network: QNetwork
    opt_state: PyTree
    step: Int[Array, ""]  # updates done
    env_steps: Int[Array, ""]  # transitions collected, all envs (drives epsilon)
    # Optimizer steps over the whole run: the horizon of learning-rate annealing.
    horizon: Int[Array, ""]
    obs_stats: RunningStats


@register("pqn")
@final
class PQN(AbstractEpsilonGreedyAgent[PQNState], AbstractRolloutAgent[PQNState]):
    """PQN (Gallici et al., 2025): Q-learning from many parallel envs without a
    replay buffer or target network. Each rollout of `num_envs * num_steps`
    epsilon-greedy transitions gets Q(λ) returns bootstrapped from the current
    network; the network (LayerNorm in every hidden layer keeps this stable)
    regresses onto them for `num_epochs` passes of `num_minibatches` minibatches.

    **Arguments:**

    - `learning_rate`, `anneal_lr`: Adam step size, linearly annealed to zero
      over the run when `anneal_lr`; `max_grad_norm`: global-norm clipping.
    - `num_steps`: rollout length per env; `num_epochs`, `num_minibatches`.
    - `gamma`: discount; `q_lambda`: the λ of the returns (0: one-step
      Q-learning targets, 1: Monte Carlo until the rollout ends).
    - `exploration_initial_eps`, `exploration_final_eps`, `exploration_steps`:
      linear epsilon schedule over env steps (all envs together).
    - `reward_scale`: multiplies rewards before learning.
    - `hidden_sizes`, `activation`, `layer_norm`: the Q network's torso;
      `torso`, `cell_size`, `sequence_length`: as for PPO (a recurrent Q
      network learns its Q(λ) returns from whole sequences).
    - `normalize_obs`: normalise observations by running statistics;
      `scale_obs`: instead map bounded observation dimensions onto [-1, 1].
    """

    learning_rate: float = 1e-3
    anneal_lr: bool = eqx.field(static=True, default=True)
    max_grad_norm: float = 10.0
    num_steps: int = eqx.field(static=True, default=32)
    num_epochs: int = eqx.field(static=True, default=2)
    num_minibatches: int = eqx.field(static=True, default=4)
    gamma: float = 0.99
    q_lambda: float = 0.65
    exploration_initial_eps: float = 1.0
    exploration_final_eps: float = 0.05
    exploration_steps: int = 20_000
    reward_scale: float = 1.0
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(64, 64))
    activation: str = eqx.field(static=True, default="relu")
    torso: str = eqx.field(static=True, default="auto")
    cell_size: int = eqx.field(static=True, default=128)
    sequence_length: int | None = eqx.field(static=True, default=None)
    layer_norm: bool = eqx.field(static=True, default=True)
    normalize_obs: bool = eqx.field(static=True, default=False)
    scale_obs: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        check_positive(self, "num_steps", "num_epochs", "num_minibatches")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.q_lambda <= 1.0:
            raise ValueError("PQN: gamma and q_lambda must be in [0, 1]")

    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        check_discrete(self, action_space)
        self.check_minibatches(num_envs, self.num_minibatches)

    def init(self, obs_space, action_space, *, key, num_envs, total_steps) -> PQNState:
        if not isinstance(action_space, Discrete):
            raise ValueError("PQN needs a discrete action space")
        network = QNetwork(
            obs_space.shape,
            action_space.n,
            self.hidden_sizes,
            self.activation,
            layer_norm=self.layer_norm,
            torso=self.torso,
            cell_size=self.cell_size if self.recurrent else None,
            key=key,
        )
        updates = max(total_steps // (num_envs * self.num_steps), 1)
        horizon = jnp.array(updates * self.num_epochs * self.num_minibatches)
        opt_state = self.optimizer(horizon).init(
            eqx.filter(network, eqx.is_inexact_array)
        )
        zero = jnp.array(0, jnp.int32)
        return PQNState(
            q_network=network,
            opt_state=opt_state,
            step=zero,
            env_steps=zero,
            horizon=horizon,
            obs_stats=self.initial_obs_stats(obs_space),
        )

    def q_values(
        self, state: PQNState, obs: Shaped[Array, "..."], *, key: PRNGKeyArray | None
    ) -> Float[Array, " actions"]:
        return state.q_network(obs)

    def recurrent_act(
        self, state, carry, obs, *, key, greedy=False
    ) -> tuple[Int[Array, ""], Extras, PyTree]:
        q, next_carry = state.q_network.step(carry, self.preprocess(state, obs))
        action = self.choose(state, q, key=key, greedy=greedy)
        # The carry this step started from (sequence training starts from
        # it), and the one after it (the next observation's Q uses it).
        return action, {"carry": carry, "next_carry": next_carry}, next_carry

    def _loss(self, network: QNetwork, obs, action, returns, carry=None, starts=None):
        if carry is None:
            q = jax.vmap(network)(obs)
        else:  # [sequences, length]: run from each sequence's stored carry
            initial = self.initial_carry()
            q = jax.vmap(lambda c, o, s: unroll(network.step, c, o, s, initial)[0])(
                jax.tree.map(lambda c: c[:, 0], carry), obs, starts
            )
            q, action, returns = flatten_rollout((q, action, returns))
        q_taken = jnp.take_along_axis(q, action[:, None], axis=1)[:, 0]
        loss = 0.5 * jnp.mean((q_taken - returns) ** 2)
        return loss, {"q_mean": jnp.mean(q_taken)}

    def update(
        self, state: PQNState, memory: RolloutState, *, key: PRNGKeyArray
    ) -> tuple[PQNState, RolloutState, Metrics]:
        traj = memory.trajectory
        obs = self.preprocess(state, traj.obs)
        next_obs = self.preprocess(state, traj.next_obs)
        if self.recurrent:  # with the carry each step led to: one batched pass
            step = lambda c, o: state.q_network.step(c, o)[0]
            q_next = jax.vmap(jax.vmap(step))(traj.extras["next_carry"], next_obs)
        else:
            q_next = jax.vmap(jax.vmap(state.q_network))(next_obs)
        next_q = jnp.max(q_next, axis=-1)
        returns = lambda_returns(
            traj.reward * self.reward_scale,
            next_q,
            traj.terminated,
            traj.terminated | traj.truncated,
            self.gamma,
            self.q_lambda,
        )
        if self.recurrent:
            data = to_sequences(
                (obs, traj.action, returns, traj.extras["carry"], episode_starts(traj)),
                self.training_length,
            )
        else:
            data = flatten_rollout((obs, traj.action, returns))
        optimizer = self.optimizer(state.horizon)
        grad_fn = eqx.filter_value_and_grad(self._loss, has_aux=True)

        def minibatch_step(carry, minibatch):
            network, opt_state = carry
            (loss, aux), grads = grad_fn(network, *minibatch)
            params = eqx.filter(network, eqx.is_inexact_array)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (eqx.apply_updates(network, updates), opt_state), {
                "loss": loss,
                **aux,
            }

        (network, opt_state), metrics = minibatch_epochs(
            minibatch_step,
            (state.q_network, state.opt_state),
            data,
            num_epochs=self.num_epochs,
            num_minibatches=self.num_minibatches,
            key=key,
        )
        new = eqx.tree_at(
            lambda s: (s.q_network, s.opt_state, s.step, s.env_steps),
            state,
            (network, opt_state, state.step + 1, state.env_steps + traj.reward.size),
        )
        return new, memory, {**metrics, "epsilon": self.epsilon(state.env_steps)}
