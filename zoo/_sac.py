"""Soft Actor-Critic for continuous actions."""

import abc
from collections.abc import Callable
from typing import cast, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from envs import Box

from . import _distributions as dist
from ._agent import Extras, Metrics, adam_optimizer, check_positive, register
from ._memory import Sample
from ._networks import (
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


@final
class SACState(AbstractOffPolicyState):
    """The learnt state of SAC: actor, twin critics and their targets, the
    entropy temperature, their optimizers and counters."""

    actor: SquashedGaussianActor | SDEActor
    critics: QCritic  # twin critics, stacked along a leading axis
    target: QCritic  # target critics
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
    ensemble), `td_target` (what the critics regress onto: SAC's soft
    minimum of the target critics; a variant without a target network reads
    `state.critics` and returns `()` from `online`, so no target is kept),
    `critic_losses` (`None`: the squared error), `policy_value` (what the
    actor maximises, from the critics' outputs) and `priorities`.
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

    @abc.abstractmethod
    def make_critics(
        self, obs_shape: tuple[int, ...], action_dim: int, *, key: PRNGKeyArray
    ) -> QCritic:
        """The critic ensemble, stacked along a leading axis."""

    @abc.abstractmethod
    def td_target(
        self, state: SACState, sample: Sample, *, key: PRNGKeyArray
    ) -> Float[Array, " batch"] | Float[Array, "batch atoms"]:
        """What the critics regress onto, per transition (no gradient): a
        value, or samples of the target distribution (TQC's atoms)."""

    @property
    @abc.abstractmethod
    def critic_losses(self) -> Callable[[Array, Array], Array] | None:
        """The per-transition critic loss of the critics' outputs `q`
        (`[batch, n_critics, ...]`) against `td_target`'s `y`, or `None` for
        the squared error summed over the critics."""

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
        check_positive(self, "n_critics", "alpha_init", "sde_sample_freq")
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
        critics = self.make_critics(shape, dim, key=k_critic)
        log_alpha = jnp.log(jnp.asarray(self.alpha_init, jnp.float32))
        actor_opt = self.optimizer().init(eqx.filter(actor, eqx.is_inexact_array))
        critic_opt = self.optimizer().init(eqx.filter(critics, eqx.is_inexact_array))
        alpha_opt = self._alpha_optimizer().init(log_alpha)
        zero = jnp.array(0, jnp.int32)
        return SACState(
            actor=actor,
            critics=critics,
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
        y = self.td_target(state, sample, key=k_next)

        critics, critic_opt, c_loss, q = update_critics(
            state.critics,
            state.critic_opt,
            self.optimizer(),
            obs,
            action,
            y,
            sample.weights,
            losses=self.critic_losses,
        )

        def actor_loss(actor):
            new_action, log_prob = self._sample_actions(actor, obs, k_new)
            q_new = jax.vmap(lambda o, a: ensemble_q(critics, o, a))(obs, new_action)
            loss = jnp.mean(alpha * log_prob - self.policy_value(q_new))
            return loss, log_prob

        (a_loss, log_prob), grads = eqx.filter_value_and_grad(actor_loss, has_aux=True)(
            state.actor
        )
        params = eqx.filter(state.actor, eqx.is_inexact_array)
        updates, actor_opt = self.optimizer().update(grads, state.actor_opt, params)
        actor = eqx.apply_updates(state.actor, updates)

        log_alpha, alpha_opt = state.log_alpha, state.alpha_opt
        target_entropy = -self.target_entropy_scale * action.shape[-1]
        entropy = -jnp.mean(log_prob)
        if self.learn_alpha:
            # d/d(log alpha) of -log_alpha * (log_prob + target): positive when
            # the entropy is above target, so alpha shrinks, and conversely.
            grad = jax.lax.stop_gradient(entropy - target_entropy)
            updates, alpha_opt = self._alpha_optimizer().update(
                grad, state.alpha_opt, log_alpha
            )
            log_alpha = cast(Array, optax.apply_updates(log_alpha, updates))

        state = eqx.tree_at(
            lambda s: (
                s.actor,
                s.critics,
                s.log_alpha,
                s.actor_opt,
                s.critic_opt,
                s.alpha_opt,
            ),
            state,
            (actor, critics, log_alpha, actor_opt, critic_opt, alpha_opt),
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
    ) -> QCritic:
        return q_ensemble(
            self.n_critics,
            obs_shape,
            action_dim,
            self.hidden_sizes,
            self.activation,
            torso=self.torso,
            key=key,
        )

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

    @property
    def critic_losses(self) -> None:
        return None

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
        return state.critics

    def schedule_metrics(self, state: SACState) -> Metrics:
        return {}
