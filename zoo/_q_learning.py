"""What DQN, C51 and QR-DQN share: epsilon-greedy acting on a Q network,
double-Q action selection, and one gradient step on a replayed minibatch.

Each agent says what its network puts out per action (`num_atoms`: one value,
51 categorical logits, or N quantiles), how that output gives an action value
(`value`), and what its loss against a bootstrapped target is (`td_loss`); the
replay, target networks and schedules come from the off-policy skeleton.
"""

import abc
from collections.abc import Callable
from typing import ClassVar, Generic, TypeVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Discrete, Space

from ._agent import (
    AbstractRecurrentAgent,
    AbstractState,
    Extras,
    Metrics,
    adam_optimizer,
    refuse_act,
)
from ._memory import Replay, Sample, Transition, n_step_batch
from ._networks import QNetwork, initial_cell_carry
from ._normalize import RunningStats
from ._off_policy import AbstractOffPolicyAgent, AbstractOffPolicyState
from ._on_policy import episode_starts, unroll


class AbstractEpsilonState(AbstractState):
    """The state of an epsilon-greedy agent: its env steps drive epsilon."""

    env_steps: eqx.AbstractVar[Int[Array, ""]]  # transitions seen, all envs


@final
class QState(AbstractOffPolicyState, AbstractEpsilonState):
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


def choose(
    q: Float[Array, " actions"],
    epsilon: Callable[[], Float[Array, ""]],
    *,
    key: PRNGKeyArray,
    greedy: bool,
) -> Int[Array, ""]:
    """The greedy action of `q` when `greedy`, else an epsilon-greedy one with
    `epsilon()` (called only then: a greedy program holds no schedule)."""
    if greedy:
        return jnp.argmax(q).astype(jnp.int32)
    return epsilon_greedy(q, epsilon(), key=key)


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


S = TypeVar("S", bound=AbstractEpsilonState)


class AbstractEpsilonGreedyAgent(AbstractRecurrentAgent[S], Generic[S]):
    """Epsilon-greedy acting on a Q network, learnt with Adam: what DQN, C51,
    QR-DQN and PQN share. `q_values` (and, for a recurrent torso,
    `recurrent_act`) say how the agent's network gives action values; epsilon
    falls linearly from `exploration_initial_eps` to `exploration_final_eps`
    over `exploration_steps` env steps (`state.env_steps`, all envs together).
    """

    learning_rate: eqx.AbstractVar[float]
    anneal_lr: eqx.AbstractVar[bool]
    max_grad_norm: eqx.AbstractVar[float]
    exploration_initial_eps: eqx.AbstractVar[float]
    exploration_final_eps: eqx.AbstractVar[float]
    exploration_steps: eqx.AbstractVar[int]

    def __check_init__(self):
        if self.exploration_steps < 0:
            raise ValueError(
                f"{type(self).__name__}: exploration_steps must be >= 0, got "
                f"{self.exploration_steps}"
            )

    @abc.abstractmethod
    def q_values(
        self, state: S, obs: Shaped[Array, "..."], *, key: PRNGKeyArray | None
    ) -> Float[Array, " actions"]:
        """The action values of one (preprocessed) observation that acting
        takes: with `key` (which also draws the epsilon-greedy choice) those
        of an exploring action, with `None` the greedy action's (no sampled
        fractions, no noise)."""

    def optimizer(self, horizon: Int[Array, ""]) -> optax.GradientTransformation:
        """Adam with clipping, annealed over `horizon` steps under `anneal_lr`."""
        return adam_optimizer(
            self.learning_rate,
            self.max_grad_norm,
            anneal_horizon=horizon if self.anneal_lr else None,
        )

    def epsilon(self, env_steps: Int[Array, ""]) -> Float[Array, ""]:
        """The exploration rate after `env_steps` env steps."""
        return linear_epsilon(
            self.exploration_initial_eps,
            self.exploration_final_eps,
            self.exploration_steps,
            env_steps,
        )

    def choose(
        self, state: S, q: Float[Array, " actions"], *, key: PRNGKeyArray, greedy: bool
    ) -> Int[Array, ""]:
        """The greedy action of `q`, or an epsilon-greedy one at the state's
        env step count."""
        return choose(q, lambda: self.epsilon(state.env_steps), key=key, greedy=greedy)

    def initial_carry(self) -> PyTree:
        """The Q network's cell carry (zeros) for a recurrent torso, `()`
        otherwise."""
        return initial_cell_carry(self.torso, self.cell_size)

    def act(self, state, obs, *, key, greedy=False) -> tuple[Int[Array, ""], Extras]:
        refuse_act(self)
        obs = self.preprocess(state, obs)
        q = self.q_values(state, obs, key=None if greedy else key)
        return self.choose(state, q, key=key, greedy=greedy), {}


class AbstractQAgent(
    AbstractOffPolicyAgent[QState], AbstractEpsilonGreedyAgent[QState]
):
    """A Q-learning agent on a discrete action space (DQN, C51, QR-DQN), with
    replay and a target network. The fields below are the family's (`DQN`
    documents them); an agent adds `double_q` and its loss's own.

    Hooks: `num_atoms` (outputs per action), `outputs` (the network at one
    observation, given a key for a network that samples, as IQN's quantile
    fractions), `value` (action values from outputs) and `td_loss`. An agent
    whose outputs sample sets `samples = True`: each transition, and each of
    the online, target and action-choosing passes, then gets a key of its own,
    and `td_loss` gets the online passes' keys (`keys=`).

    With `noisy` (NoisyNet, Fortunato et al., 2018), the network's heads are
    `NoisyLinear` layers with initial noise scale `noise_scale`: acting draws
    their noise from the act key, an update draws one noise sample for each of
    the online, target and action-choosing passes (shared by the minibatch, as
    in the paper), and a greedy action (`greedy=True`) takes the mean weights,
    deterministic. `outputs` hands a noisy network the key `noise(key)` gives.
    Exploration then comes from the noise: set the exploration epsilons to 0,
    as Rainbow does, or keep some.
    """

    samples: ClassVar[bool] = False
    double_q: eqx.AbstractVar[bool]
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
    prioritized: bool = eqx.field(static=True, default=False)
    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    exploration_initial_eps: float = 1.0
    exploration_final_eps: float = 0.05
    exploration_steps: int = 10_000
    dueling: bool = eqx.field(static=True, default=False)
    noisy: bool = eqx.field(static=True, default=False)
    noise_scale: float = eqx.field(static=True, default=0.5)
    max_grad_norm: float = 10.0
    reward_scale: float = 1.0
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(64, 64))
    activation: str = eqx.field(static=True, default="relu")
    torso: str = eqx.field(static=True, default="auto")
    cell_size: int = eqx.field(static=True, default=128)
    sequence_length: int = eqx.field(static=True, default=16)
    burn_in: int = eqx.field(static=True, default=8)
    normalize_obs: bool = eqx.field(static=True, default=False)
    scale_obs: bool = eqx.field(static=True, default=False)

    @property
    @abc.abstractmethod
    def num_atoms(self) -> int | None:
        """Outputs per action (`None`: one value, `[actions]` outputs)."""

    @property
    @abc.abstractmethod
    def quantile_embedding(self) -> int | None:
        """The network's fraction embedding (`QNetwork(quantile_embedding=)`):
        `None` but for IQN."""

    @abc.abstractmethod
    def outputs(
        self,
        network: QNetwork,
        obs: Shaped[Array, "..."],
        *,
        key: PRNGKeyArray | None,
        acting: bool = False,
    ) -> Float[Array, "actions ..."]:
        """The network's outputs at one (preprocessed) observation; `key` is
        the pass's (`None`: a greedy pass, noisy layers at their mean);
        `acting`: for choosing an action rather than for the loss (IQN draws
        its K policy fractions then, not its N)."""

    def noise(self, key: PRNGKeyArray | None, salt: int = 0) -> PRNGKeyArray | None:
        """The key a noisy network draws its noise from in a pass with `key`
        (`salt` folded in, for a pass whose key also draws something else);
        `None` when the network has no noise or the pass is greedy."""
        if not self.noisy or key is None:
            return None
        return jr.fold_in(key, salt) if salt else key

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
        `discount` is zero where the episode terminated. An agent that
        `samples` also gets `keys=`, the key each transition's online outputs
        were drawn with.

        **Returns:** the losses and the new priorities.
        """

    def __check_init__(self):
        name = type(self).__name__
        if self.noisy and not self.noise_scale > 0:
            raise ValueError(
                f"{name}: noise_scale (the noisy layers' initial sigma0) must be "
                f"> 0, got {self.noise_scale!r}"
            )
        if not self.recurrent:
            return
        if self.noisy:
            raise ValueError(
                f"{name}(torso={self.torso!r}): noisy heads with a recurrent "
                "torso are not supported yet; set noisy=False or a feed-forward "
                "torso"
            )
        if type(self.sequence_length) is not int or self.sequence_length <= 0:
            raise ValueError(
                f"{name}: sequence_length (the replayed steps a recurrent agent "
                f"learns from) must be a positive integer, got "
                f"{self.sequence_length!r}"
            )
        if type(self.burn_in) is not int or self.burn_in < 0:
            raise ValueError(
                f"{name}: burn_in (steps that only warm the carry up) must be an "
                f"integer >= 0, got {self.burn_in!r}"
            )
        if self.prioritized:
            raise ValueError(
                f"{name}(torso={self.torso!r}): prioritised replay of sequences is "
                "not supported yet; set prioritized=False"
            )

    def check(self, obs_space: Space, action_space: Space, num_envs: int) -> None:
        check_discrete(self, action_space)
        self.check_replay(num_envs)

    def init(self, obs_space, action_space, *, key, num_envs, total_steps) -> QState:
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
            cell_size=self.cell_size if self.recurrent else None,
            quantile_embedding=self.quantile_embedding,
            noisy=self.noisy,
            noise_scale=self.noise_scale,
            key=key,
        )
        horizon = self.gradient_horizon(num_envs, total_steps)
        opt_state = self.optimizer(horizon).init(
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

    def q_values(
        self, state: QState, obs: Shaped[Array, "..."], *, key: PRNGKeyArray | None
    ) -> Float[Array, " actions"]:
        if key is not None and (self.samples or self.noisy):
            # What the outputs draw gets a key of its own: `key` also draws
            # the epsilon-greedy choice.
            key = jr.fold_in(key, 1)
        return self.value(self.outputs(state.online, obs, key=key, acting=True))

    def recurrent_act(
        self, state, carry, obs, *, key, greedy=False
    ) -> tuple[Int[Array, ""], Extras, PyTree]:
        out, next_carry = state.online.step(carry, self.preprocess(state, obs))
        action = self.choose(state, self.value(out), key=key, greedy=greedy)
        # The replay keeps the carry each step was acted from: a sequence
        # drawn from it starts from the carry stored at its first step.
        return action, {"carry": carry}, next_carry

    @property
    def window(self) -> int:
        if self.recurrent:
            return self.burn_in + self.sequence_length
        return self.n_step

    def draw(self, state: QState, memory: PyTree, *, key: PRNGKeyArray) -> Sample:
        if not self.recurrent:
            return self.draw_transitions(state, memory, key=key)
        replay = self.memory
        assert isinstance(replay, Replay)  # prioritised sequences are refused
        return replay.sample_sequences(memory, self.batch_size, self.window, key=key)

    def _scaled(self, reward: Float[Array, "..."]) -> Float[Array, "..."]:
        """Rewards times `reward_scale`; left alone (no operation) at the
        default 1.0, unless the scale is swept (an array)."""
        scale = self.reward_scale
        if isinstance(scale, float | int) and scale == 1.0:
            return reward
        return reward * scale

    def _loss(
        self, online: QNetwork, state: QState, sample: Sample, obs, next_obs, key
    ):
        batch = sample.batch
        size = batch.action.shape[0]
        index = jnp.arange(size)
        if self.samples:
            # Independent draws for each transition and each pass.
            k_online, k_target, k_chooser = jr.split(key, 3)
            online_keys = jr.split(k_online, size)
            each = lambda net, x, k: jax.vmap(
                lambda o, k_o: self.outputs(net, o, key=k_o)
            )(x, jr.split(k, size))
            extra = {"keys": online_keys}
        else:
            if self.noisy:
                # One noise draw per pass, for the whole minibatch.
                k_online, k_target, k_chooser = jr.split(key, 3)
            else:
                k_online = k_target = k_chooser = key
            each = lambda net, x, k: jax.vmap(lambda o: self.outputs(net, o, key=k))(x)
            extra = {}
        out = each(online, obs, k_online)
        taken = out[index, batch.action]
        next_target = each(state.target, next_obs, k_target)
        chooser = each(online, next_obs, k_chooser) if self.double_q else next_target
        next_action = jnp.argmax(self.value(chooser), axis=1)
        next_taken = jax.lax.stop_gradient(next_target[index, next_action])
        discount = sample.discount * (1.0 - batch.terminated)
        # Truncated episodes bootstrap from their final observation; only
        # termination cuts the return.
        reward = self._scaled(batch.reward)
        losses, priorities = self.td_loss(taken, next_taken, reward, discount, **extra)
        q_taken = self.value(out)[index, batch.action]
        return jnp.mean(sample.weights * losses), (priorities, jnp.mean(q_taken))

    def _sequence_loss(
        self, online: QNetwork, state: QState, sample: Sample, obs, next_obs, key
    ):
        """R2D2's loss (Kapturowski et al., 2019) on `[batch, window]`
        sequences: each network runs from the carry stored at the sequence's
        first step, resetting where episodes start inside it; the first
        `burn_in` steps only warm the carry up (no gradient, no loss), and the
        rest learn n-step targets that stop at the sequence's end. Each step
        bootstraps from its next observation under the carry that step led
        to (one batched pass), so truncation bootstraps from the final
        observation as in the feed-forward loss."""
        batch = sample.batch
        initial = self.initial_carry()
        carry = jax.tree.map(lambda c: c[:, 0], batch.extras["carry"])
        starts = episode_starts(batch, axis=1)
        burn = self.burn_in

        def run(network, carry, obs, starts):
            return jax.vmap(lambda c, o, s: unroll(network.step, c, o, s, initial))(
                carry, obs, starts
            )

        def last(carries):
            return jax.tree.map(lambda c: c[:, -1], carries)

        warm = lambda x: x[:, :burn]
        learn = lambda x: x[:, burn:]
        if burn:
            _, warmed = run(online, carry, warm(obs), warm(starts))
            carry_online = jax.lax.stop_gradient(last(warmed))
            _, warmed = run(state.target, carry, warm(obs), warm(starts))
            carry_target = last(warmed)
        else:
            carry_online = carry_target = carry
        out, carries = run(online, carry_online, learn(obs), learn(starts))
        _, target_carries = run(state.target, carry_target, learn(obs), learn(starts))
        next_obs = learn(next_obs)
        step_all = lambda net: jax.vmap(jax.vmap(lambda c, o: net.step(c, o)[0]))
        next_target = step_all(state.target)(target_carries, next_obs)
        if self.double_q:
            chooser = step_all(online)(jax.lax.stop_gradient(carries), next_obs)
        else:
            chooser = next_target
        next_action = jnp.argmax(self.value(chooser), axis=2)  # [batch, T]
        next_taken = jax.lax.stop_gradient(
            jnp.take_along_axis(
                next_target, _expand(next_action, next_target.ndim), axis=2
            )[:, :, 0]
        )
        action = learn(batch.action)
        taken = jnp.take_along_axis(out, _expand(action, out.ndim), axis=2)[:, :, 0]
        # n-step targets inside each sequence: `n_step_batch` over the
        # sequence's steps as rows and the batch as envs, each window cut at
        # the sequence's end; `next_obs` carries the bootstrap outputs.
        steps, size = taken.shape[1], taken.shape[0]
        seq = Transition(
            obs=jnp.zeros((steps, size)),
            action=jnp.zeros((steps, size)),
            reward=self._scaled(learn(batch.reward)).T,
            terminated=learn(batch.terminated).T,
            truncated=learn(batch.truncated).T,
            next_obs=jnp.swapaxes(next_taken, 0, 1),
            extras={},
        )
        row = jnp.repeat(jnp.arange(steps), size)
        env = jnp.tile(jnp.arange(size), steps)
        targets, discount = n_step_batch(
            seq, row, env, self.n_step, self.gamma, available=steps - row
        )
        discount = discount * (1.0 - targets.terminated)
        flat = lambda x: jnp.swapaxes(x, 0, 1).reshape(steps * size, *x.shape[2:])
        losses, _ = self.td_loss(
            flat(taken), targets.next_obs, targets.reward, discount
        )
        weights = jnp.tile(sample.weights, steps)
        q_taken = flat(
            jnp.take_along_axis(self.value(out), action[..., None], axis=2)[..., 0]
        )
        priorities = jnp.ones(size)  # uniform replay: no priorities to keep
        return jnp.mean(weights * losses), (priorities, jnp.mean(q_taken))

    def learn(
        self, state: QState, sample: Sample, *, key: PRNGKeyArray
    ) -> tuple[QState, Float[Array, " batch"], Metrics]:
        obs = self.preprocess(state, sample.batch.obs)
        next_obs = self.preprocess(state, sample.batch.next_obs)
        loss_fn = self._sequence_loss if self.recurrent else self._loss
        grad_fn = eqx.filter_value_and_grad(loss_fn, has_aux=True)
        (loss, (priorities, q_mean)), grads = grad_fn(
            state.online, state, sample, obs, next_obs, key
        )
        params = eqx.filter(state.online, eqx.is_inexact_array)
        updates, opt_state = self.optimizer(state.horizon).update(
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
        return {"epsilon": self.epsilon(state.env_steps)}


def _expand(index: Int[Array, "batch T"], ndim: int) -> Int[Array, "batch T ..."]:
    """`index` with trailing axes for `take_along_axis` on outputs of `ndim`
    axes (`[batch, T, actions]`, or `[batch, T, actions, atoms]`)."""
    return index.reshape(*index.shape, *(1,) * (ndim - 2))
