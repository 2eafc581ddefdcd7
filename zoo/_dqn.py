"""Deep Q-learning with double-Q, dueling heads and Polyak or periodic targets."""

from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Discrete, Space

from ._agent import Extras, Metrics, adam_optimizer, obs_stats
from ._memory import Sample
from ._networks import QNetwork
from ._normalize import RunningStats
from ._off_policy import AbstractOffPolicyAgent, AbstractOffPolicyState


@final
class DQNState(AbstractOffPolicyState):
    online: QNetwork
    target: QNetwork
    opt_state: PyTree
    step: Int[Array, ""]  # gradient steps taken
    env_steps: Int[Array, ""]  # transitions seen, across envs (drives epsilon)
    # Gradient steps over the whole run: the horizon of learning-rate annealing.
    horizon: Int[Array, ""]
    obs_stats: RunningStats


@final
class DQN(AbstractOffPolicyAgent[DQNState]):
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
    - `normalize_obs`: normalise observations by running statistics.
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
    normalize_obs: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if self.exploration_steps < 0:
            raise ValueError(
                f"DQN: exploration_steps must be >= 0, got {self.exploration_steps}"
            )

    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        if not isinstance(action_space, Discrete):
            raise ValueError(
                "DQN needs a discrete action space, but this env's is "
                f"{type(action_space).__name__}{action_space.shape}; use PPO instead."
            )
        self.check_replay(num_envs)

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
        if not isinstance(action_space, Discrete):
            raise ValueError("DQN needs a discrete action space")
        online = QNetwork(
            obs_space.shape,
            action_space.n,
            self.hidden_sizes,
            self.activation,
            self.dueling,
            key=key,
        )
        horizon = self.gradient_horizon(num_envs, total_steps)
        params = eqx.filter(online, eqx.is_inexact_array)
        opt_state = self._optimizer(horizon).init(params)
        zero = jnp.array(0, jnp.int32)
        stats = obs_stats(obs_space)
        return DQNState(
            online=online,
            target=online,
            opt_state=opt_state,
            step=zero,
            env_steps=zero,
            horizon=horizon,
            obs_stats=stats,
        )

    def act(
        self,
        state: DQNState,
        obs: Shaped[Array, "..."],
        *,
        key: PRNGKeyArray,
        greedy: bool = False,
    ) -> tuple[Int[Array, ""], Extras]:
        q = state.online(self.preprocess(state, obs))
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
        sample: Sample,
        obs: Shaped[Array, "batch ..."],
        next_obs: Shaped[Array, "batch ..."],
    ) -> tuple[Float[Array, ""], tuple[Float[Array, " batch"], Float[Array, ""]]]:
        batch = sample.batch
        q = jax.vmap(online)(obs)
        q_taken = jnp.take_along_axis(q, batch.action[:, None], axis=1)[:, 0]
        q_next_target = jax.vmap(target)(next_obs)
        if self.double_q:
            next_action = jnp.argmax(jax.vmap(online)(next_obs), axis=1)
        else:
            next_action = jnp.argmax(q_next_target, axis=1)
        q_next = jnp.take_along_axis(q_next_target, next_action[:, None], axis=1)[:, 0]
        # Truncated episodes bootstrap from their final observation; only
        # termination cuts the return.
        y = batch.reward + sample.discount * (1.0 - batch.terminated) * q_next
        y = jax.lax.stop_gradient(y)
        losses = optax.huber_loss(q_taken, y, delta=self.huber_delta)
        loss = jnp.mean(sample.weights * losses)
        return loss, (jnp.abs(q_taken - y), jnp.mean(q_taken))

    def learn(
        self, state: DQNState, sample: Sample, *, key: PRNGKeyArray
    ) -> tuple[DQNState, Float[Array, " batch"], Metrics]:
        obs = self.preprocess(state, sample.batch.obs)
        next_obs = self.preprocess(state, sample.batch.next_obs)
        grad_fn = eqx.filter_value_and_grad(self._loss, has_aux=True)
        (loss, (td, q_mean)), grads = grad_fn(
            state.online, state.target, sample, obs, next_obs
        )
        params = eqx.filter(state.online, eqx.is_inexact_array)
        updates, opt_state = self._optimizer(state.horizon).update(
            grads, state.opt_state, params
        )
        online = eqx.apply_updates(state.online, updates)
        state = eqx.tree_at(
            lambda s: (s.online, s.opt_state), state, (online, opt_state)
        )
        return state, td, {"loss": loss, "q_mean": q_mean}

    def online(self, state: DQNState) -> QNetwork:
        return state.online

    def schedule_metrics(self, state: DQNState) -> Metrics:
        return {"epsilon": jnp.asarray(self._epsilon(state.env_steps))}
