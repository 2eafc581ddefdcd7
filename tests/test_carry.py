"""The recurrent carry protocol: an agent's per-env carry goes through the
rollout and comes back out, starts again where an episode starts (training's
auto-reset, evaluation's and filming's starts), and a memoryless agent's carry
is `()`, which adds nothing (its programs are the same: see
benchmarks/table.py's programs fingerprint)."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import envs
import runners
import zoo


class Counting(zoo.PPO):
    """PPO whose carry counts the steps of the episode under way; each step's
    count goes to the memory's extras."""

    def initial_carry(self):
        return jnp.array(0, jnp.int32)

    def act_step(self, state, carry, obs, *, key, greedy=False):
        action, extras = self.act(state, obs, key=key, greedy=greedy)
        return action, {**extras, "count": carry}, carry + 1


AGENT = Counting(num_steps=16, num_minibatches=1, num_epochs=1, hidden_sizes=(8,))
ENV = envs.make("CartPole-v1", max_steps_in_episode=12)  # ends often


def test_memoryless_agents_have_no_carry():
    assert zoo.make("dqn").initial_carry() == ()
    assert runners.initial_carry(zoo.make("ppo"), 4) == ()
    action, extras, carry = zoo.make("ppo").act_step(
        zoo.make("ppo").init(
            ENV.observation_space,
            ENV.action_space,
            key=jr.PRNGKey(0),
            num_envs=1,
            total_steps=16,
        ),
        (),
        ENV.reset(jr.PRNGKey(1))[0],
        key=jr.PRNGKey(2),
    )
    assert carry == () and "value" in extras


def test_training_carries_it_and_restarts_it_at_each_episode():
    state, _ = runners.train(AGENT, ENV, key=jr.PRNGKey(0), total_steps=4 * 16 * 3)
    # The carry is the length of each env's episode under way ...
    np.testing.assert_array_equal(state.carry, state.env_state.episode_length)
    # ... and within the last rollout, each step's count is the step's index in
    # its episode: 0 right after every episode's end.
    count = np.asarray(state.memory.trajectory.extras["count"])  # [steps, envs]
    done = np.asarray(
        state.memory.trajectory.terminated | state.memory.trajectory.truncated
    )
    assert done.any()
    for t in range(1, count.shape[0]):
        expect = np.where(done[t - 1], 0, count[t - 1] + 1)
        np.testing.assert_array_equal(count[t], expect)


def test_evaluation_starts_each_episode_with_the_initial_carry():
    state, _ = runners.train(AGENT, ENV, key=jr.PRNGKey(0), total_steps=4 * 16)
    n = 3
    obs, env_state = jax.vmap(ENV.reset)(jr.split(jr.PRNGKey(1), n))
    carry = runners.initial_carry(AGENT, n)
    np.testing.assert_array_equal(carry, np.zeros(n))
    for t in range(5):  # CartPole's episodes last at least 8 steps
        obs, env_state, _, _, _, carry = runners.play_step(
            AGENT,
            state.agent_state,
            ENV,
            jr.PRNGKey(2),
            jnp.array(t),
            obs,
            env_state,
            carry=carry,
        )
    np.testing.assert_array_equal(carry, np.full(n, 5))
    returns = runners.evaluate(AGENT, state, ENV, key=jr.PRNGKey(3), num_episodes=4)
    assert returns.shape == (4,) and bool(jnp.all(returns >= 1))
