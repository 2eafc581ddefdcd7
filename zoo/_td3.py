"""TD3: twin critics, target policy smoothing, delayed actor updates.

DDPG (`zoo/_ddpg.py`) is the same algorithm with one critic, no smoothing and no
delay, so both are written once here, as `AbstractDeterministicAgent`.
"""

from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from envs import Box

from ._agent import Extras, Metrics, check_positive, register
from ._memory import Sample
from ._networks import DeterministicActor, QCritic, ensemble_q, q_ensemble
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
class TD3State(AbstractOffPolicyState):
    """The learnt state of TD3 and DDPG (`DDPGState` is this class): actor,
    critics, their targets, optimizers and counters."""

    actor: DeterministicActor
    critics: QCritic  # stacked along a leading axis
    target: tuple[DeterministicActor, QCritic]  # target actor and critics
    actor_opt: PyTree
    critic_opt: PyTree
    step: Int[Array, ""]
    env_steps: Int[Array, ""]
    horizon: Int[Array, ""]  # gradient steps over the run
    obs_stats: RunningStats
    noise_key: PRNGKeyArray  # state-dependent exploration's matrices come from it
    action_space: Box = eqx.field(static=True)


class AbstractDeterministicAgent(AbstractContinuousAgent[TD3State]):
    """A deterministic actor in `[-1, 1]` (scaled to the env's `Box`), explored
    with Gaussian noise, and `n_critics` critics whose minimum makes the target.
    The actor and the target networks move every `policy_delay` critic steps.

    With `noise_sample_freq > 0` the exploration noise is state-dependent, as in
    generalised state-dependent exploration (gSDE, Raffin et al., 2022): the
    noise is `exploration_noise * (z / |z|) @ W`, with `z` the actor's last
    hidden features and `W` a standard normal matrix drawn anew every
    `noise_sample_freq` env steps (all envs together). Each step's noise is
    still `N(0, exploration_noise^2)`, but it changes smoothly with the state and
    holds its sign between draws, which white noise does not: what tasks that
    need sustained pushes (MountainCarContinuous) explore with.
    """

    exploration_noise: float = 0.1
    noise_sample_freq: int = eqx.field(static=True, default=0)
    # TD3's fields, DDPG's fixed properties. Equinox takes an `AbstractVar` out
    # of the dataclass fields, so it may follow fields with defaults; pyright
    # reads it as a field without one.
    n_critics: eqx.AbstractVar[int]  # pyright: ignore[reportGeneralTypeIssues]
    policy_delay: eqx.AbstractVar[int]  # pyright: ignore[reportGeneralTypeIssues]
    target_noise: eqx.AbstractVar[float]  # pyright: ignore[reportGeneralTypeIssues]
    target_noise_clip: eqx.AbstractVar[float]  # pyright: ignore[reportGeneralTypeIssues]

    def __check_init__(self):
        check_positive(self, "n_critics", "policy_delay")
        name = type(self).__name__
        if self.noise_sample_freq < 0:
            raise ValueError(
                f"{name}: noise_sample_freq must be >= 0 (0: white noise), got "
                f"{self.noise_sample_freq}"
            )
        for field in ("exploration_noise", "target_noise", "target_noise_clip"):
            if getattr(self, field) < 0:
                raise ValueError(
                    f"{name}: {field} must be >= 0, got {getattr(self, field)}"
                )

    def init(self, obs_space, action_space, *, key, num_envs, total_steps) -> TD3State:
        space = check_box(self, action_space, squashed=True)
        k_actor, k_critic, k_noise = jr.split(key, 3)
        dim, shape = space.shape[0], obs_space.shape
        actor = DeterministicActor(
            shape,
            dim,
            self.hidden_sizes,
            self.activation,
            torso=self.torso,
            key=k_actor,
        )
        critics = q_ensemble(
            self.n_critics,
            shape,
            dim,
            self.hidden_sizes,
            self.activation,
            torso=self.torso,
            key=k_critic,
        )
        actor_opt = self.optimizer().init(eqx.filter(actor, eqx.is_inexact_array))
        critic_opt = self.optimizer().init(eqx.filter(critics, eqx.is_inexact_array))
        zero = jnp.array(0, jnp.int32)
        return TD3State(
            actor=actor,
            critics=critics,
            target=(actor, critics),
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            step=zero,
            env_steps=zero,
            horizon=self.gradient_horizon(num_envs, total_steps),
            obs_stats=self.initial_obs_stats(obs_space),
            noise_key=k_noise,
            action_space=space,
        )

    def act(
        self, state, obs, *, key, greedy=False
    ) -> tuple[Float[Array, " action_dim"], Extras]:
        actor = state.actor
        features = actor.torso(self.preprocess(state, obs))
        unit = jnp.tanh(actor.head(features))
        if greedy:
            return scale_action(state.action_space, unit), {}
        if self.noise_sample_freq > 0:
            period = state.env_steps // self.noise_sample_freq
            w = jr.normal(
                jr.fold_in(state.noise_key, period), (features.size, unit.size)
            )
            z = features / (jnp.linalg.norm(features) + 1e-6)
            noise = z @ w
        else:
            noise = jr.normal(key, unit.shape)
        unit = jnp.clip(unit + self.exploration_noise * noise, -1.0, 1.0)
        return scale_action(state.action_space, unit), {}

    def td_target(
        self, state: TD3State, sample: Sample, *, key: PRNGKeyArray
    ) -> Float[Array, " batch"]:
        """Reward plus the discounted minimum of the target critics at the target
        actor's (smoothed) next action, zero where the episode terminated."""
        batch = sample.batch
        next_obs = self.preprocess(state, batch.next_obs)
        target_actor, target_critics = state.target
        next_action = jax.vmap(target_actor)(next_obs)
        noise = self.target_noise * jr.normal(key, next_action.shape)
        noise = jnp.clip(noise, -self.target_noise_clip, self.target_noise_clip)
        next_action = jnp.clip(next_action + noise, -1.0, 1.0)
        q_next = jax.vmap(lambda o, a: ensemble_q(target_critics, o, a))(
            next_obs, next_action
        )
        q_next = jnp.min(q_next, axis=1)
        y = batch.reward + sample.discount * (1.0 - batch.terminated) * q_next
        return jax.lax.stop_gradient(y)

    def learn(
        self, state: TD3State, sample: Sample, *, key: PRNGKeyArray
    ) -> tuple[TD3State, Float[Array, " batch"], Metrics]:
        batch = sample.batch
        obs = self.preprocess(state, batch.obs)
        action = unscale_action(state.action_space, batch.action)
        y = self.td_target(state, sample, key=key)

        critics, critic_opt, c_loss, q = update_critics(
            state.critics,
            state.critic_opt,
            self.optimizer(),
            obs,
            action,
            y,
            sample.weights,
        )

        def actor_loss(actor):
            # The first critic alone, as in TD3 and DDPG.
            first = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, critics)
            q_pi = jax.vmap(lambda o: first(o, actor(o)))(obs)
            return -jnp.mean(q_pi)

        def update_actor(carry):
            actor, opt_state = carry
            loss, grads = eqx.filter_value_and_grad(actor_loss)(actor)
            params = eqx.filter(actor, eqx.is_inexact_array)
            updates, opt_state = self.optimizer().update(grads, opt_state, params)
            return (eqx.apply_updates(actor, updates), opt_state), loss

        def keep(carry):
            return carry, jnp.zeros(())

        if self.policy_delay == 1:
            (actor, actor_opt), a_loss = update_actor((state.actor, state.actor_opt))
        else:
            delayed = (state.step + 1) % self.policy_delay == 0
            (actor, actor_opt), a_loss = jax.lax.cond(
                delayed, update_actor, keep, (state.actor, state.actor_opt)
            )
        state = eqx.tree_at(
            lambda s: (s.actor, s.critics, s.actor_opt, s.critic_opt),
            state,
            (actor, critics, actor_opt, critic_opt),
        )
        td = jnp.mean(jnp.abs(q - y[:, None]), axis=1)
        metrics = {"critic_loss": c_loss, "actor_loss": a_loss, "q_mean": jnp.mean(q)}
        return state, td, metrics

    def online(self, state: TD3State) -> tuple[DeterministicActor, QCritic]:
        return state.actor, state.critics

    def schedule_metrics(self, state: TD3State) -> Metrics:
        return {}


@register("td3", default_env="Pendulum-v1")
@final
class TD3(AbstractDeterministicAgent):
    """TD3 (Fujimoto et al., 2018): DDPG with twin critics (the target takes their
    minimum), target policy smoothing and delayed actor and target updates.

    **Arguments:**

    - `learning_rate`, `gamma`, `n_step`, replay, `tau`, the torsos and the
      rest every continuous agent shares: see `AbstractContinuousAgent`.
    - `tau` moves the targets every `policy_delay` steps.
    - `exploration_noise`, `noise_sample_freq`: Gaussian action noise, white
      or state-dependent (see `AbstractDeterministicAgent`).
    - `policy_delay`: critic steps per actor and target update.
    - `target_noise`, `target_noise_clip`: target policy smoothing.
    - `n_critics`: critics whose minimum makes the target.
    """

    policy_delay: int = eqx.field(static=True, default=2)
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    n_critics: int = eqx.field(static=True, default=2)

    @property
    def target_update_interval(self) -> int:
        return self.policy_delay
