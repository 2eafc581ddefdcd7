"""What DQN, C51 and QR-DQN share: epsilon-greedy acting on a Q network,
double-Q action selection, and one gradient step on a replayed minibatch.

Each agent says what its network puts out per action (`num_atoms`: one value,
51 categorical logits, or N quantiles), how that output gives an action value
(`value`), and what its loss against a bootstrapped target is (`td_loss`); the
replay, target networks and schedules come from the off-policy skeleton.
"""

import abc
from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Discrete, Space

from ._agent import Extras, Metrics, adam_optimizer
from ._memory import Sample
from ._networks import QNetwork
from ._normalize import RunningStats
from ._off_policy import AbstractOffPolicyAgent, AbstractOffPolicyState


@final
class QState(AbstractOffPolicyState):
    """The learnt state of DQN, C51 and QR-DQN."""

    online: QNetwork
    target: QNetwork
    opt_state: PyTree
    step: Int[Array, ""]  # gradient steps taken
    env_steps: Int[Array, ""]  # transitions seen, across envs (drives epsilon)
    # Gradient steps over the whole run: the horizon of learning-rate annealing.
    horizon: Int[Array, ""]
    obs_stats: RunningStats


def epsilon_greedy(
    q: Float[Array, " actions"],
    epsilon: Float[Array, ""] | float,
    *,
    key: PRNGKeyArray,
) -> Int[Array, ""]:
    """The greedy action of `q`, or with probability `epsilon` a uniform one."""
    k_explore, k_action = jr.split(key)
    random = jr.randint(k_action, (), 0, q.shape[0])
    explore = jr.uniform(k_explore) < epsilon
    return jnp.where(explore, random, jnp.argmax(q)).astype(jnp.int32)


def linear_epsilon(
    initial: float | Float[Array, ""],
    final: float | Float[Array, ""],
    steps: int,
    env_steps: Int[Array, ""],
) -> Float[Array, ""]:
    """Epsilon falling linearly from `initial` to `final` over `steps` env steps."""
    schedule = optax.linear_schedule(initial, final, max(int(steps), 1))
    return jnp.asarray(schedule(env_steps))


def check_discrete(agent: eqx.Module, action_space: Space) -> None:
    """A `ValueError` naming `agent` unless `action_space` is discrete."""
    if not isinstance(action_space, Discrete):
        raise ValueError(
            f"{type(agent).__name__} needs a discrete action space, but this env's "
            f"is {type(action_space).__name__}{action_space.shape}; use SAC, "
            "TD3, DDPG or PPO for continuous actions."
        )


class AbstractQAgent(AbstractOffPolicyAgent[QState]):
    """A Q-learning agent on a discrete action space (DQN, C51, QR-DQN)."""

    learning_rate: eqx.AbstractVar[float]
    anneal_lr: eqx.AbstractVar[bool]
    max_grad_norm: eqx.AbstractVar[float]
    exploration_initial_eps: eqx.AbstractVar[float]
    exploration_final_eps: eqx.AbstractVar[float]
    exploration_steps: eqx.AbstractVar[int]
    double_q: eqx.AbstractVar[bool]
    dueling: eqx.AbstractVar[bool]
    hidden_sizes: eqx.AbstractVar[tuple[int, ...]]
    activation: eqx.AbstractVar[str]

    @property
    @abc.abstractmethod
    def num_atoms(self) -> int | None:
        """Outputs per action (`None`: one value, `[actions]` outputs)."""

    @abc.abstractmethod
    def value(self, out: Float[Array, "..."]) -> Float[Array, "..."]:
        """Action values from the network's outputs (any leading axes)."""

    @abc.abstractmethod
    def td_loss(
        self,
        taken: Float[Array, "batch ..."],
        next_taken: Float[Array, "batch ..."],
        reward: Float[Array, " batch"],
        discount: Float[Array, " batch"],
    ) -> tuple[Float[Array, " batch"], Float[Array, " batch"]]:
        """Per-transition losses of the online outputs of the actions taken
        (`taken`) against the target `reward + discount * next_taken`, where
        `next_taken` are the target network's outputs at the next action and
        `discount` is zero where the episode terminated.

        **Returns:** the losses and the new priorities.
        """

    def __check_init__(self):
        if self.exploration_steps < 0:
            raise ValueError(
                f"{type(self).__name__}: exploration_steps must be >= 0, got "
                f"{self.exploration_steps}"
            )

    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        check_discrete(self, action_space)
        self.check_replay(num_envs)

    def _optimizer(self, horizon: Int[Array, ""]) -> optax.GradientTransformation:
        return adam_optimizer(
            self.learning_rate,
            self.max_grad_norm,
            anneal_horizon=horizon if self.anneal_lr else None,
        )

    def _epsilon(self, env_steps: Int[Array, ""]) -> Float[Array, ""]:
        return linear_epsilon(
            self.exploration_initial_eps,
            self.exploration_final_eps,
            self.exploration_steps,
            env_steps,
        )

    def init(
        self,
        obs_space: Space,
        action_space: Space,
        *,
        key: PRNGKeyArray,
        num_envs: int,
        total_steps: int,
    ) -> QState:
        if not isinstance(action_space, Discrete):
            raise ValueError(f"{type(self).__name__} needs a discrete action space")
        online = QNetwork(
            obs_space.shape,
            action_space.n,
            self.hidden_sizes,
            self.activation,
            self.dueling,
            num_atoms=self.num_atoms,
            torso=self.torso,
            key=key,
        )
        horizon = self.gradient_horizon(num_envs, total_steps)
        opt_state = self._optimizer(horizon).init(
            eqx.filter(online, eqx.is_inexact_array)
        )
        zero = jnp.array(0, jnp.int32)
        return QState(
            online=online,
            target=online,
            opt_state=opt_state,
            step=zero,
            env_steps=zero,
            horizon=horizon,
            obs_stats=self.initial_obs_stats(obs_space),
        )

    def act(
        self,
        state: QState,
        obs: Shaped[Array, "..."],
        *,
        key: PRNGKeyArray,
        greedy: bool = False,
    ) -> tuple[Int[Array, ""], Extras]:
        q = self.value(state.online(self.preprocess(state, obs)))
        if greedy:
            return jnp.argmax(q).astype(jnp.int32), {}
        return epsilon_greedy(q, self._epsilon(state.env_steps), key=key), {}

    def _loss(self, online: QNetwork, state: QState, sample: Sample, obs, next_obs):
        batch = sample.batch
        index = jnp.arange(batch.action.shape[0])
        out = jax.vmap(online)(obs)
        taken = out[index, batch.action]
        next_target = jax.vmap(state.target)(next_obs)
        chooser = jax.vmap(online)(next_obs) if self.double_q else next_target
        next_action = jnp.argmax(self.value(chooser), axis=1)
        next_taken = jax.lax.stop_gradient(next_target[index, next_action])
        discount = sample.discount * (1.0 - batch.terminated)
        # Truncated episodes bootstrap from their final observation; only
        # termination cuts the return.
        losses, priorities = self.td_loss(taken, next_taken, batch.reward, discount)
        q_taken = self.value(out)[index, batch.action]
        return jnp.mean(sample.weights * losses), (priorities, jnp.mean(q_taken))

    def learn(
        self, state: QState, sample: Sample, *, key: PRNGKeyArray
    ) -> tuple[QState, Float[Array, " batch"], Metrics]:
        obs = self.preprocess(state, sample.batch.obs)
        next_obs = self.preprocess(state, sample.batch.next_obs)
        grad_fn = eqx.filter_value_and_grad(self._loss, has_aux=True)
        (loss, (priorities, q_mean)), grads = grad_fn(
            state.online, state, sample, obs, next_obs
        )
        params = eqx.filter(state.online, eqx.is_inexact_array)
        updates, opt_state = self._optimizer(state.horizon).update(
            grads, state.opt_state, params
        )
        online = eqx.apply_updates(state.online, updates)
        state = eqx.tree_at(
            lambda s: (s.online, s.opt_state), state, (online, opt_state)
        )
        priorities = jax.lax.stop_gradient(priorities)
        return state, priorities, {"loss": loss, "q_mean": q_mean}

    def online(self, state: QState) -> QNetwork:
        return state.online

    def schedule_metrics(self, state: QState) -> Metrics:
        return {"epsilon": self._epsilon(state.env_steps)}
