"""Training states with a seed axis: building them, their template, one seed of them."""

import operator
from collections.abc import Mapping
from typing import SupportsIndex, TypeVar

import equinox as eqx
import jax
import jax.random as jr
from jaxtyping import Array, Float, Key, PyTree, UInt32

from ._hparams import with_hparams
from ._train import Agent, Env, TrainState, init

T = TypeVar("T")


def _without_weak_types(tree: T) -> T:
    # A state read back from a checkpoint has no weak types (`jnp.array(0.0)` has
    # one), and a resumed run must compile the very program the original ran.
    return jax.tree.map(lambda x: jax.lax.convert_element_type(x, x.dtype), tree)


def init_seeds(
    agent: Agent,
    env: Env,
    keys: Key[Array, " seeds"] | UInt32[Array, "seeds 2"],
    hparams: Mapping[str, Float[Array, " seeds"]] | None = None,
    *,
    num_envs: int,
    total_steps: int,
    sequential: bool = True,
) -> TrainState:
    """`runners.init` for every key of `keys`: the state `runners.run` starts from.

    Pure; `runners.run` compiles it (wrap it in `eqx.filter_jit` to call it
    yourself). Leaves have no weak types, exactly like a state loaded from a
    checkpoint, so both compile to the same program.

    **Arguments:**

    - `keys`: one key per seed, `[num_seeds, ...]`; `runners.run` passes
      `jr.split(key, num_seeds)`.
    - `hparams`: a sweep's float hyperparameters, one value per key (see
      `runners.run`'s `sweep`).
    - `num_envs`, `total_steps`: as for `runners.init`.
    - `sequential`: build the seeds' states one after another (`lax.map`)
      rather than vmapped; the states are the same (see below). `runners.run`
      vmaps only when its runs are sharded over several devices.

    **Returns:** a `TrainState` with a leading seed axis.
    """

    def one(key, h):
        return init(
            with_hparams(agent, h),
            env,
            key=key,
            num_envs=num_envs,
            total_steps=total_steps,
        )

    # One seed after another, not vmapped: networks are initialised with
    # orthogonal matrices from LAPACK's QR, which, batched over seeds, splits
    # the batch over XLA's CPU thread pool from inside a worker of that pool and
    # waits. Two such QRs at once (actor and critic, or two agents) took every
    # worker of a 2-core machine and hung forever (jax 0.10). Unbatched, each QR
    # runs in place; the states are the same, bit for bit. Runs sharded over
    # devices are vmapped: a loop over a sharded axis would not keep to it.
    if sequential:
        state = jax.lax.map(lambda kh: one(*kh), (keys, hparams or {}))
    else:
        state = jax.vmap(one)(keys, hparams or {})
    return _without_weak_types(state)


def state_template(
    agent: Agent,
    env: Env,
    *,
    num_envs: int,
    total_steps: int,
    num_seeds: int | None = None,
) -> TrainState:
    """The shapes and dtypes of a `TrainState`, without computing one.

    What loading a saved state needs:
    `runners.load_checkpoint(path, runners.state_template(...))`, or
    `eqx.tree_deserialise_leaves(path, template)`. Built with
    `eqx.filter_eval_shape`, so nothing runs and nothing compiles.

    **Arguments:**

    - `num_envs`, `total_steps`: those of the run that saved the state.
    - `num_seeds`: the length of its leading seed axis (a `runners.run` state, as
      `init_seeds` builds it); `None` for one seed without the axis (a
      `runners.train` state).

    **Returns:** a `TrainState` whose leaves are `jax.ShapeDtypeStruct`s, with no
    weak types.

    **Raises:** `ValueError` for a non-positive `num_seeds`, or whatever
    `runners.validate` rejects.
    """
    if num_seeds is not None and (type(num_seeds) is not int or num_seeds <= 0):
        raise ValueError(
            f"num_seeds must be a positive integer or None, got {num_seeds!r}"
        )

    def build(agent, env):
        if num_seeds is None:
            state = init(
                agent,
                env,
                key=jr.PRNGKey(0),
                num_envs=num_envs,
                total_steps=total_steps,
            )
            return _without_weak_types(state)
        keys = jr.split(jr.PRNGKey(0), num_seeds)
        return init_seeds(agent, env, keys, num_envs=num_envs, total_steps=total_steps)

    return eqx.filter_eval_shape(build, agent, env)


def _seed_axis_length(state: PyTree) -> int:
    """The length of the leading seed axis of `state`: a `TrainState` (whose
    `iteration` is `[num_seeds]`), or any pytree of arrays that all share it.

    **Raises:** `ValueError` when `state` has no seed axis.
    """
    if isinstance(state, TrainState):
        shape = tuple(state.iteration.shape)
        if len(shape) != 1:
            what = "one seed's state" if not shape else f"{len(shape)} leading axes"
            raise ValueError(
                "expected a TrainState with a leading seed axis (iteration of shape "
                f"[num_seeds], as in RunResult.state), got {what} (iteration of "
                f"shape {list(shape)})"
            )
        return shape[0]
    leaves = [x for x in jax.tree.leaves(state) if eqx.is_array(x)]
    lengths = {x.shape[0] if x.ndim else "scalar" for x in leaves}
    if len(lengths) != 1 or "scalar" in lengths:
        raise ValueError(
            "expected a state with a leading seed axis (every array of the same "
            f"length along its first axis), got first axes {sorted(map(str, lengths))}"
        )
    return int(next(iter(lengths)))


def seed_state(state: T, i: SupportsIndex) -> T:
    """Seed `i`'s state, out of a state with a leading seed axis.

    For example `runners.seed_state(result.state, 2)` is the `TrainState` of seed
    2 of a `runners.run` result (or of a checkpoint it wrote), shaped like a
    `runners.train` state; `.agent_state` is that seed's agent.

    **Arguments:**

    - `state`: a `TrainState` with a leading seed axis, or any pytree of arrays
      with one (e.g. `result.state.agent_state`).
    - `i`: the seed's index; negative indices count from the end.

    **Returns:** `state` without its seed axis, taken at `i`.

    **Raises:** `ValueError` when `state` has no seed axis; `IndexError` when `i`
    is out of range; `TypeError` when `i` is not an integer.
    """
    if isinstance(i, bool):
        raise TypeError(f"seed index must be an integer, got {i!r}")
    try:
        index = operator.index(i)
    except TypeError:
        raise TypeError(f"seed index must be an integer, got {i!r}") from None
    n = _seed_axis_length(state)
    if not -n <= index < n:
        raise IndexError(f"seed index {index} is out of range for {n} seed(s)")
    return jax.tree.map(lambda x: x[index] if eqx.is_array(x) else x, state)
