"""Name resolution for `envs.make`."""

import difflib
from collections.abc import Callable
from typing import Any

from ._classic import CartPole, Pendulum
from ._env import AbstractEnv
from ._multi_agent import AbstractMultiAgentEnv, MatrixGame
from ._probes import (
    ActionReward,
    ConstantReward,
    ContinuousActionReward,
    ObservationReward,
    TruncatedConstantReward,
    TwoStepDiscount,
)
from ._wrappers import MaskObservation, StickyActions
from ._xminigrid import PREFIX as XMINIGRID_PREFIX, XMiniGridEnv, xminigrid_names

# Native implementations win over gymnax's for the same name: same dynamics,
# without gymnax's import cost.
NATIVE: dict[str, Callable[..., AbstractEnv]] = {
    "CartPole-v1": CartPole,
    "Pendulum-v1": Pendulum,
}

# Partially observable variants (popgym's names): the base env with only the
# observation dimensions `keep` (`MaskObservation`). The velocities are hidden,
# so a policy must remember past observations to act well.
POMDP: dict[str, tuple[Callable[..., AbstractEnv], tuple[int, ...]]] = {
    # [x, x_dot, theta, theta_dot]: the cart's and the pole's positions.
    "StatelessCartPole-v1": (CartPole, (0, 2)),
    # [cos theta, sin theta, theta_dot]: the angle.
    "StatelessPendulum-v1": (Pendulum, (0, 1)),
}
# Named settings of another env: `make(name)` is `make(base, **params)`, and
# `make(name, **more)` updates `params` with `more`. A tuned block, a benchmark
# row and a pretrained agent are keyed by env name, so a setting with its own
# row gets its own name.
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    # bsuite's memory task with 30 steps between the cue and the query
    # (MemoryChain-bsuite's default is 5).
    "MemoryChain30-bsuite": ("MemoryChain-bsuite", {"memory_length": 30}),
}
PROBES: dict[str, Callable[..., AbstractEnv]] = {
    "probe/ConstantReward": ConstantReward,
    "probe/ObservationReward": ObservationReward,
    "probe/TwoStepDiscount": TwoStepDiscount,
    "probe/ActionReward": ActionReward,
    "probe/TruncatedConstantReward": TruncatedConstantReward,
    "probe/ContinuousActionReward": ContinuousActionReward,
}

# Multi-agent envs: native ones, and JaxMARL's under their own names.
MULTI_AGENT: dict[str, Callable[..., AbstractMultiAgentEnv]] = {
    "marl/MatrixGame": MatrixGame,
}


def _build(factory: Callable[..., Any], name: str, env_params: dict[str, Any]) -> Any:
    try:
        return factory(**env_params)
    except TypeError:
        fields = sorted(getattr(factory, "__dataclass_fields__", {}))
        raise ValueError(
            f"unknown parameter(s) {sorted(env_params)} for env {name!r}; "
            f"valid ones: {fields}"
        ) from None


def names() -> list[str]:
    """All names `make` accepts: native, gymnax and probe environments, the
    multi-agent ones (JaxMARL's with the `marl` extra) and XLand-MiniGrid's
    (`xminigrid/...`, with the `xminigrid` extra)."""
    from ._gymnax import gymnax_names
    from ._multi_agent import jaxmarl_names

    return sorted(
        set(NATIVE)
        | set(POMDP)
        | set(PRESETS)
        | set(gymnax_names())
        | set(PROBES)
        | set(MULTI_AGENT)
        | set(jaxmarl_names())
        | set(xminigrid_names())
    )


def uses_jaxmarl(name: str) -> bool:
    """Whether `name` is one of JaxMARL's envs (imports JaxMARL only when `name`
    is none of ours or gymnax's, and JaxMARL is installed)."""
    import importlib.util

    from ._gymnax import gymnax_names

    if name in NATIVE or name in POMDP or name in PRESETS or name in PROBES:
        return False
    if name in MULTI_AGENT:
        return False
    if name in gymnax_names() or importlib.util.find_spec("jaxmarl") is None:
        return False
    from ._multi_agent import jaxmarl_names

    return name in jaxmarl_names()


def make_multi(name: str, **env_params: Any) -> AbstractMultiAgentEnv:
    """Build a multi-agent environment by name: `"marl/MatrixGame"`, or a
    JaxMARL name such as `"MPE_simple_spread_v3"` (`pip install -e '.[marl]'`).

    **Raises:** `ValueError` naming the closest valid names, or the parameters.
    """
    from ._multi_agent import JaxMarlEnv, jaxmarl_names

    factory = MULTI_AGENT.get(name)
    if factory is not None:
        return _build(factory, name, env_params)
    marl = jaxmarl_names()
    if name in marl:
        return JaxMarlEnv(name, **env_params)
    valid = sorted(set(MULTI_AGENT) | set(marl))
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    extra = (
        "" if marl else " JaxMARL's envs need the marl extra: pip install -e '.[marl]'."
    )
    raise ValueError(
        f"unknown multi-agent env {name!r}.{hint} Multi-agent envs: "
        f"{', '.join(valid)}.{extra}"
    )


def is_multi_agent(name: str) -> bool:
    """Whether `name` is a multi-agent env (`make_multi` builds it)."""
    from ._multi_agent import jaxmarl_names

    return name in MULTI_AGENT or (
        not name.startswith(("gymnax/", "probe/")) and name in jaxmarl_names()
    )


def make(name: str, **env_params: Any) -> AbstractEnv:
    """Build an environment by name.

    **Arguments:**

    - `name`: e.g. `"CartPole-v1"`, `"Breakout-MinAtar"`, `"probe/TwoStepDiscount"`,
      `"StatelessCartPole-v1"` (partially observable: velocities hidden);
      `"MemoryChain30-bsuite"` (`"MemoryChain-bsuite"` with `memory_length=30`);
      `"gymnax/<name>"` forces gymnax's own implementation;
      `"xminigrid/MiniGrid-MemoryS8"`: XLand-MiniGrid's MiniGrid tasks
      (`pip install -e '.[xminigrid]'`).
    - `**env_params`: environment parameters, e.g. `max_steps_in_episode=200`;
      and `sticky_prob`, for any env: wrap it in `StickyActions(env, sticky_prob)`
      (MinAtar's sticky actions; 0 leaves the env unwrapped).

    **Raises:** `ValueError` naming the closest valid names, or the valid parameters.
    """
    if "sticky_prob" in env_params:
        env_params = dict(env_params)
        prob = env_params.pop("sticky_prob")
        if isinstance(prob, bool) or not isinstance(prob, (int, float)):
            raise ValueError(
                f"sticky_prob must be a number in [0, 1), got {prob!r} "
                "(e.g. sticky_prob=0.1, the MinAtar paper's protocol)"
            )
        env = make(name, **env_params)
        return StickyActions(env, float(prob)) if prob else env
    if name in MULTI_AGENT:
        raise ValueError(
            f"{name!r} is a multi-agent env: build it with envs.make_multi({name!r})"
        )
    if name in PRESETS:
        base_name, preset = PRESETS[name]
        return make(base_name, **{**preset, **env_params})
    if name in POMDP:
        base, keep = POMDP[name]
        return MaskObservation(_build(base, name, env_params), keep, name)
    factory = NATIVE.get(name) or PROBES.get(name)
    if factory is not None:
        return _build(factory, name, env_params)
    if name.startswith(XMINIGRID_PREFIX):
        return XMiniGridEnv(name.removeprefix(XMINIGRID_PREFIX), **env_params)
    from ._gymnax import NEEDS_DOWNLOAD, GymnaxEnv, gymnax_names

    gymnax_id = name.removeprefix("gymnax/")
    if gymnax_id in gymnax_names():
        return GymnaxEnv(gymnax_id, **env_params)
    if gymnax_id in NEEDS_DOWNLOAD:
        raise ValueError(
            f"env {name!r} downloads a data set when it is created; it is not offered."
        )
    if is_multi_agent(name):
        raise ValueError(
            f"{name!r} is a multi-agent env: build it with envs.make_multi({name!r})"
        )
    valid = names()
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise ValueError(
        f"unknown env {name!r}.{hint} "
        f"`envs.names()` lists all {len(valid)} valid names."
    )
