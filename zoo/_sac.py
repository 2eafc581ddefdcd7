"""Soft Actor-Critic for continuous actions."""

import abc
from typing import TypeAlias, cast, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, Shaped

from envs import Box

from . import _distributions as dist
from ._agent import Extras, Metrics, adam_optimizer, check_positive, register
from ._memory import Sample
from ._networks import (
    BatchNormQCritic,
    QCritic,
    SDEActor,
    SquashedGaussianActor,
    ensemble_q,
    q_ensemble,
)
from ._normalize import RunningStats
from ._off_policy import (
    AbstractContinuousAgent,
    AbstractOffPolicyState,
    check_box,
    scale_action,
    unscale_action,
    update_critics,
)

# What `critic_update` returns: the critics, their optimizer state and their
# state (`None` for stateless critics), the loss, the critics' outputs at the
# minibatch (`[batch, n_critics, ...]`) and what they were regressed onto.
CriticStep: TypeAlias = tuple[
    QCritic | BatchNormQCritic, PyTree, eqx.nn.State | None, Array, Array, Array
]


@final
class SACState(AbstractOffPolicyState):
    """The learnt state of SAC: actor, twin critics and their targets, the
    entropy temperature, their optimizers and counters."""

    actor: SquashedGaussianActor | SDEActor
    critics: QCritic | BatchNormQCritic  # stacked along a leading axis
    critic_state: eqx.nn.State | None  # the critics' running statistics (CrossQ)
    target: PyTree  # target critics, or `()` without a target network
    log_alpha: Float[Array, ""]  # log entropy temperature
    actor_opt: PyTree
    critic_opt: PyTree
    alpha_opt: PyTree
    step: Int[Array, ""]
    env_steps: Int[Array, ""]
    horizon: Int[Array, ""]  # gradient steps over the run
    obs_stats: RunningStats
    action_space: Box = eqx.field(static=True)


class AbstractSoftActorCritic(AbstractContinuousAgent[SACState]):
    """Soft actor-critic's update, written once: a squashed Gaussian (or gSDE)
    actor trained against the critics' minimum with an entropy bonus, a
    learned temperature, and critics regressed onto a target.

    The hooks are what the SAC family changes: `make_critics` (the critic
    ensemble, and its state if it keeps one), `critic_update` (one step of
    the critics: SAC and TQC regress onto a target from target critics;
    CrossQ, without a target network, returns `()` from `online`, so none is
    kept), `critic_values` (the critics at the actor's actions),
    `policy_value` (what the actor maximises, from those values) and
    `priorities`. The actor and the temperature learn every `policy_delay`
    critic steps.
    """

    alpha_learning_rate: float = 3e-4
    n_critics: int = eqx.field(static=True, default=2)
    alpha_init: float = 1.0
    learn_alpha: bool = eqx.field(static=True, default=True)
    target_entropy_scale: float = 1.0
    log_std_bounds: tuple[float, float] = eqx.field(static=True, default=(-5.0, 2.0))
    use_sde: bool = eqx.field(static=True, default=False)
    sde_sample_freq: int = eqx.field(static=True, default=64)
    sde_log_std_init: float = -3.0
    policy_delay: int = eqx.field(static=True, default=1)

    @abc.abstractmethod
    def make_critics(
        self, obs_shape: tuple[int, ...], action_dim: int, *, key: PRNGKeyArray
    ) -> tuple[QCritic | BatchNormQCritic, eqx.nn.State | None]:
        """The critic ensemble, stacked along a leading axis, and its state
        (`None` for stateless critics)."""

    @abc.abstractmethod
    def critic_update(
        self,
        state: SACState,
        sample: Sample,
        obs: Shaped[Array, "batch ..."],
        action: Float[Array, "batch action_dim"],
        *,
        key: PRNGKeyArray,
    ) -> CriticStep:
        """One optimizer step of the critics on the minibatch `sample`
        (`obs` preprocessed, `action` in `[-1, 1]`)."""

    @abc.abstractmethod
    def critic_values(
        self,
        critics: QCritic | BatchNormQCritic,
        critic_state: eqx.nn.State | None,
        obs: Shaped[Array, "batch ..."],
        action: Float[Array, "batch action_dim"],
    ) -> Float[Array, "batch n_critics ..."]:
        """The critics' outputs at the actor's actions, for the actor's loss."""

    @abc.abstractmethod
    def policy_value(
        self, q: Float[Array, "batch n_critics ..."]
    ) -> Float[Array, " batch"]:
        """What the actor maximises, from the critics' outputs at its actions."""

    @abc.abstractmethod
    def priorities(
        self, q: Float[Array, "batch n_critics ..."], y: Float[Array, "batch ..."]
    ) -> Float[Array, " batch"]:
        """Per-transition TD errors: new priorities for prioritised replay."""

    def __check_init__(self):
        check_positive(
            self, "n_critics", "alpha_init", "sde_sample_freq", "policy_delay"
        )
        low, high = self.log_std_bounds
        if not low < high:
            raise ValueError(
                f"{type(self).__name__}: log_std_bounds must be (low, high) with "
                f"low < high, got {self.log_std_bounds}"
            )

    def init(self, obs_space, action_space, *, key, num_envs, total_steps) -> SACState:
        space = check_box(self, action_space, squashed=True)
        k_actor, k_critic = jr.split(key)
        dim = space.shape[0]
        shape = obs_space.shape
        if self.use_sde:
            actor = SDEActor(
                shape,
                dim,
                self.hidden_sizes,
                self.activation,
                self.sde_log_std_init,
                torso=self.torso,
                key=k_actor,
            )
        else:
            actor = SquashedGaussianActor(
                shape,
                dim,
                self.hidden_sizes,
                self.activation,
                self.log_std_bounds,
                torso=self.torso,
                key=k_actor,
            )
        critics, critic_state = self.make_critics(shape, dim, key=k_critic)
        log_alpha = jnp.log(jnp.asarray(self.alpha_init, jnp.float32))
        actor_opt = self.optimizer().init(eqx.filter(actor, eqx.is_inexact_array))
        critic_opt = self.optimizer().init(eqx.filter(critics, eqx.is_inexact_array))
        alpha_opt = self._alpha_optimizer().init(log_alpha)
        zero = jnp.array(0, jnp.int32)
        state = SACState(
            actor=actor,
            critics=critics,
            critic_state=critic_state,
            target=critics,
            log_alpha=log_alpha,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            alpha_opt=alpha_opt,
            step=zero,
            env_steps=zero,
            horizon=self.gradient_horizon(num_envs, total_steps),
            obs_stats=self.initial_obs_stats(obs_space),
            action_space=space,
        )
        # What the target tracks: the critics, or nothing without a target.
        return eqx.tree_at(lambda s: s.target, state, self.online(state))

    def _alpha_optimizer(self):
        return adam_optimizer(self.alpha_learning_rate, self.max_grad_norm)

    def act(
        self, state, obs, *, key, greedy=False
    ) -> tuple[Float[Array, " action_dim"], Extras]:
        actor = state.actor
        if isinstance(actor, SDEActor):
            mean, features = actor(self.preprocess(state, obs))
            if greedy:
                return scale_action(state.action_space, jnp.tanh(mean)), {}
            # One exploration matrix per sampling period, for every env.
            period = state.env_steps // self.sde_sample_freq
            w = actor.matrix(jr.fold_in(actor.noise_key, period))
            unit = jnp.tanh(mean + actor.noise(features, w))
            return scale_action(state.action_space, unit), {}
        mean, log_std = actor(self.preprocess(state, obs))
        if greedy:
            unit = jnp.tanh(mean)
        else:
            unit, _ = dist.squashed_gaussian_sample(mean, log_std, key=key)
        return scale_action(state.action_space, unit), {}

    def _sample_actions(self, actor, obs, key):
        """Squashed actions for a batch of observations and their log-densities
        (reparameterised: differentiable in the actor)."""
        if isinstance(actor, SDEActor):
            # As gSDE trains: one exploration matrix for the whole batch.
            mean, features = jax.vmap(actor)(obs)
            w = actor.matrix(key)
            u = mean + jax.vmap(lambda f: actor.noise(f, w))(features)
            log_std = jax.vmap(actor.noise_log_std)(features)
            log_prob = jax.vmap(dist.squashed_gaussian_log_prob)(mean, log_std, u)
            return jnp.tanh(u), log_prob
        keys = jr.split(key, obs.shape[0])
        mean, log_std = jax.vmap(actor)(obs)
        return jax.vmap(lambda m, s, k: dist.squashed_gaussian_sample(m, s, key=k))(
            mean, log_std, keys
        )

    def learn(
        self, state: SACState, sample: Sample, *, key: PRNGKeyArray
    ) -> tuple[SACState, Float[Array, " batch"], Metrics]:
        batch = sample.batch
        obs = self.preprocess(state, batch.obs)
        action = unscale_action(state.action_space, batch.action)
        alpha = jnp.exp(state.log_alpha)
        k_next, k_new = jr.split(key)
        critics, critic_opt, critic_state, c_loss, q, y = self.critic_update(
            state, sample, obs, action, key=k_next
        )

        def actor_loss(actor):
            new_action, log_prob = self._sample_actions(actor, obs, k_new)
            q_new = self.critic_values(critics, critic_state, obs, new_action)
            loss = jnp.mean(alpha * log_prob - self.policy_value(q_new))
            return loss, log_prob

        def update_actor(carry):
            actor, actor_opt, log_alpha, alpha_opt = carry
            (a_loss, log_prob), grads = eqx.filter_value_and_grad(
                actor_loss, has_aux=True
            )(actor)
            params = eqx.filter(actor, eqx.is_inexact_array)
            updates, actor_opt = self.optimizer().update(grads, actor_opt, params)
            actor = eqx.apply_updates(actor, updates)
            target_entropy = -self.target_entropy_scale * action.shape[-1]
            entropy = -jnp.mean(log_prob)
            if self.learn_alpha:
                # d/d(log alpha) of -log_alpha * (log_prob + target): positive
                # when the entropy is above target, so alpha shrinks, and
                # conversely.
                grad = jax.lax.stop_gradient(entropy - target_entropy)
                updates, alpha_opt = self._alpha_optimizer().update(
                    grad, alpha_opt, log_alpha
                )
                log_alpha = cast(Array, optax.apply_updates(log_alpha, updates))
            return (actor, actor_opt, log_alpha, alpha_opt), (a_loss, entropy)

        def keep(carry):
            return carry, (jnp.zeros(()), jnp.zeros(()))

        carry = (state.actor, state.actor_opt, state.log_alpha, state.alpha_opt)
        if self.policy_delay == 1:
            carry, (a_loss, entropy) = update_actor(carry)
        else:  # as TD3 counts: the actor's first step is the delay-th
            delayed = (state.step + 1) % self.policy_delay == 0
            carry, (a_loss, entropy) = jax.lax.cond(delayed, update_actor, keep, carry)
        actor, actor_opt, log_alpha, alpha_opt = carry

        state = eqx.tree_at(
            lambda s: (
                s.actor,
                s.critics,
                s.critic_state,
                s.log_alpha,
                s.actor_opt,
                s.critic_opt,
                s.alpha_opt,
            ),
            state,
            (actor, critics, critic_state, log_alpha, actor_opt, critic_opt, alpha_opt),
            is_leaf=lambda x: x is None,
        )
        td = self.priorities(q, y)
        metrics = {
            "critic_loss": c_loss,
            "actor_loss": a_loss,
            "alpha": jnp.exp(log_alpha),
            "entropy": entropy,
            "q_mean": jnp.mean(q),
        }
        return state, td, metrics


@register("sac", default_env="Pendulum-v1")
@final
class SAC(AbstractSoftActorCritic):
    """Soft Actor-Critic (Haarnoja et al., 2018) with twin critics and a learned
    entropy temperature.

    The actor is a tanh-squashed Gaussian whose actions are scaled to the env's
    `Box` bounds; critics see actions in `[-1, 1]`.

    **Arguments:**

    - `learning_rate` (3e-4 here), `gamma`, `n_step`, replay, `tau`, the
      torsos and the rest every continuous agent shares: see
      `AbstractContinuousAgent`.
    - `alpha_learning_rate`: Adam step size of the temperature.
    - `target_update_interval`: gradient steps between Polyak updates of the
      target critics.
    - `n_critics`: critics whose minimum makes the target (2: clipped double Q).
    - `alpha_init`: initial temperature; `learn_alpha`: tune it toward the target
      entropy `-target_entropy_scale * action_dim`.
    - `log_std_bounds`: bounds of the actor's log standard deviation.
    - `use_sde`: explore with generalised state-dependent noise (gSDE, `SDEActor`)
      instead of the actor's own white noise: the noise is `z(s) @ W` for the
      actor's features `z(s)` and a matrix `W` drawn every `sde_sample_freq`
      env steps (all envs together), with learnt scales starting at
      `exp(sde_log_std_init)`; each gradient step draws one `W` for its batch.
      Smooth, consistent exploration: what MountainCarContinuous-v0 needs.
    """

    learning_rate: float = 3e-4
    target_update_interval: int = 1

    def make_critics(
        self, obs_shape: tuple[int, ...], action_dim: int, *, key: PRNGKeyArray
    ) -> tuple[QCritic, None]:
        critics = q_ensemble(
            self.n_critics,
            obs_shape,
            action_dim,
            self.hidden_sizes,
            self.activation,
            torso=self.torso,
            key=key,
        )
        return critics, None

    def td_target(
        self, state: SACState, sample: Sample, *, key: PRNGKeyArray
    ) -> Float[Array, " batch"]:
        """The soft target: reward plus the discounted minimum of the target
        critics at a next action drawn from the policy, less `alpha` times its
        log-probability (zero where the episode terminated)."""
        batch = sample.batch
        next_obs = self.preprocess(state, batch.next_obs)
        next_action, next_log_prob = self._sample_actions(state.actor, next_obs, key)
        q_next = jax.vmap(lambda o, a: ensemble_q(state.target, o, a))(
            next_obs, next_action
        )
        soft = jnp.min(q_next, axis=1) - jnp.exp(state.log_alpha) * next_log_prob
        y = batch.reward + sample.discount * (1.0 - batch.terminated) * soft
        return jax.lax.stop_gradient(y)

    def critic_update(self, state, sample, obs, action, *, key) -> CriticStep:
        """The squared error to `td_target`."""
        y = self.td_target(state, sample, key=key)
        critics, opt, loss, q = update_critics(
            cast(QCritic, state.critics),
            state.critic_opt,
            self.optimizer(),
            obs,
            action,
            y,
            sample.weights,
        )
        return critics, opt, None, loss, q, y

    def critic_values(self, critics, critic_state, obs, action) -> Array:
        critics = cast(QCritic, critics)
        return jax.vmap(lambda o, a: ensemble_q(critics, o, a))(obs, action)

    def policy_value(
        self, q: Float[Array, "batch n_critics"]
    ) -> Float[Array, " batch"]:
        """The critics' minimum (clipped double Q)."""
        return jnp.min(q, axis=1)

    def priorities(
        self, q: Float[Array, "batch n_critics"], y: Float[Array, " batch"]
    ) -> Float[Array, " batch"]:
        """The mean absolute TD error over the critics."""
        return jnp.mean(jnp.abs(q - y[:, None]), axis=1)

    def online(self, state: SACState) -> QCritic:
        return cast(QCritic, state.critics)

    def schedule_metrics(self, state: SACState) -> Metrics:
        return {}
