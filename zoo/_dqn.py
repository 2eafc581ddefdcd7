"""Deep Q-learning with double-Q, dueling heads and Polyak or periodic targets."""

from typing import cast, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Discrete, Space

from ._agent import AbstractAgent, Extras, Metrics, adam_optimizer, check_positive
from ._memory import Replay, ReplayState, Transition
from ._networks import QNetwork


@final
class DQNState(eqx.Module):
    online: QNetwork
    target: QNetwork
    opt_state: PyTree
    step: Int[Array, ""]  # gradient steps taken
    env_steps: Int[Array, ""]  # transitions seen, across envs (drives epsilon)
    # Gradient steps over the whole run: the horizon of learning-rate annealing.
    horizon: Int[Array, ""]


@final
class DQN(AbstractAgent[DQNState]):
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
    - `hidden_sizes`, `activation`: the MLP torso.
    """

    learning_rate: float = 1e-3
    anneal_lr: bool = eqx.field(static=True, default=False)
    gamma: float = 0.99
    n_step: int = eqx.field(static=True, default=1)
    buffer_size: int = eqx.field(static=True, default=10_000)
    batch_size: int = eqx.field(static=True, default=64)
    learning_starts: int = 1_000
    train_frequency: int = eqx.field(static=True, default=1)
    gradient_steps: int = eqx.field(static=True, default=1)
    target_update_interval: int = 500
    tau: float = 1.0
    exploration_initial_eps: float = 1.0
    exploration_final_eps: float = 0.05
    exploration_steps: int = 10_000
    double_q: bool = eqx.field(static=True, default=True)
    dueling: bool = eqx.field(static=True, default=False)
    huber_delta: float = 1.0
    max_grad_norm: float = 10.0
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(64, 64))
    activation: str = eqx.field(static=True, default="relu")

    def __check_init__(self):
        check_positive(
            self,
            "buffer_size",
            "batch_size",
            "train_frequency",
            "gradient_steps",
            "target_update_interval",
            "n_step",
        )
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"DQN: tau must be in (0, 1], got {self.tau}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"DQN: gamma must be in [0, 1], got {self.gamma}")
        if self.learning_starts < 0 or self.exploration_steps < 0:
            raise ValueError("DQN: learning_starts and exploration_steps must be >= 0")

    @property
    def memory(self) -> Replay:
        return Replay(self.buffer_size)

    @property
    def num_steps(self) -> int:
        return self.train_frequency

    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        if not isinstance(action_space, Discrete):
            raise ValueError(
                "DQN needs a discrete action space, but this env's is "
                f"{type(action_space).__name__}{action_space.shape}; use PPO instead."
            )
        if num_envs * self.train_frequency > self.buffer_size:
            raise ValueError(
                f"DQN: num_envs * train_frequency = {num_envs * self.train_frequency} "
                f"transitions per iteration exceed buffer_size={self.buffer_size}"
            )

    def _optimizer(self, horizon: Int[Array, ""]) -> optax.GradientTransformation:
        return adam_optimizer(
            self.learning_rate,
            self.max_grad_norm,
            anneal_horizon=horizon if self.anneal_lr else None,
        )

    def _epsilon(self, env_steps):
        schedule = optax.linear_schedule(
            self.exploration_initial_eps,
            self.exploration_final_eps,
            max(int(self.exploration_steps), 1),
        )
        return schedule(env_steps)

    def init(
        self,
        obs_space: Space,
        action_space: Space,
        *,
        key: PRNGKeyArray,
        num_envs: int,
        total_steps: int,
    ) -> DQNState:
        self.check(obs_space, action_space, num_envs)
        assert isinstance(action_space, Discrete)
        online = QNetwork(
            obs_space.shape,
            action_space.n,
            self.hidden_sizes,
            self.activation,
            self.dueling,
            key=key,
        )
        per_iteration = num_envs * self.train_frequency
        learning = total_steps // per_iteration - self.learning_starts // per_iteration
        horizon = jnp.array(max(learning, 1) * self.gradient_steps, jnp.int32)
        params = eqx.filter(online, eqx.is_inexact_array)
        opt_state = self._optimizer(horizon).init(params)
        zero = jnp.array(0, jnp.int32)
        return DQNState(online, online, opt_state, zero, zero, horizon)

    def act(
        self,
        state: DQNState,
        obs: Shaped[Array, "..."],
        *,
        key: PRNGKeyArray,
        greedy: bool = False,
    ) -> tuple[Int[Array, ""], Extras]:
        q = state.online(obs)
        action = jnp.argmax(q).astype(jnp.int32)
        if not greedy:
            k_explore, k_action = jr.split(key)
            explore = jr.uniform(k_explore) < self._epsilon(state.env_steps)
            random = jr.randint(k_action, (), 0, q.shape[0])
            action = jnp.where(explore, random, action)
        return action, {}

    def _loss(
        self,
        online: QNetwork,
        target: QNetwork,
        batch: Transition,
        discount: Float[Array, " batch"],
    ) -> tuple[Float[Array, ""], Float[Array, ""]]:
        q = jax.vmap(online)(batch.obs)
        q_taken = jnp.take_along_axis(q, batch.action[:, None], axis=1)[:, 0]
        q_next_target = jax.vmap(target)(batch.next_obs)
        if self.double_q:
            next_action = jnp.argmax(jax.vmap(online)(batch.next_obs), axis=1)
        else:
            next_action = jnp.argmax(q_next_target, axis=1)
        q_next = jnp.take_along_axis(q_next_target, next_action[:, None], axis=1)[:, 0]
        # Truncated episodes bootstrap from their final observation; only
        # termination cuts the return.
        y = batch.reward + discount * (1.0 - batch.terminated) * q_next
        y = jax.lax.stop_gradient(y)
        loss = jnp.mean(optax.huber_loss(q_taken, y, delta=self.huber_delta))
        return loss, jnp.mean(q_taken)

    def _target_update(
        self, online: QNetwork, target: QNetwork, step: Int[Array, ""]
    ) -> QNetwork:
        """Every `target_update_interval` gradient steps, move the target a fraction
        `tau` of the way to the online network."""
        moved = optax.incremental_update(online, target, self.tau)  # pyright: ignore
        new = optax.periodic_update(moved, target, step, self.target_update_interval)  # pyright: ignore
        return cast(QNetwork, new)

    def update(
        self, state: DQNState, memory: ReplayState, *, key: PRNGKeyArray
    ) -> tuple[DQNState, Metrics]:
        optimizer = self._optimizer(state.horizon)

        def gradient_step(s: DQNState, k):
            batch, discount = self.memory.sample(
                memory, self.batch_size, key=k, n_step=self.n_step, gamma=self.gamma
            )
            (loss, q_mean), grads = eqx.filter_value_and_grad(self._loss, has_aux=True)(
                s.online, s.target, batch, discount
            )
            params = eqx.filter(s.online, eqx.is_inexact_array)
            updates, opt_state = optimizer.update(grads, s.opt_state, params)
            online = eqx.apply_updates(s.online, updates)
            step = s.step + 1
            target = self._target_update(online, s.target, step)
            new = DQNState(online, target, opt_state, step, s.env_steps, s.horizon)
            return new, (
                loss,
                q_mean,
            )

        def learn(s: DQNState):
            s, (loss, q_mean) = jax.lax.scan(
                gradient_step, s, jr.split(key, self.gradient_steps)
            )
            return s, {"loss": jnp.mean(loss), "q_mean": jnp.mean(q_mean)}

        def skip(s: DQNState):
            zero = jnp.array(0.0)
            return s, {"loss": zero, "q_mean": zero}

        state = eqx.tree_at(lambda s: s.env_steps, state, memory.count)
        ready = (memory.count >= max(self.learning_starts, self.batch_size)) & (
            memory.size >= self.n_step
        )
        state, metrics = jax.lax.cond(ready, learn, skip, state)
        epsilon = jnp.asarray(self._epsilon(state.env_steps))
        return state, {**metrics, "epsilon": epsilon}
