"""Name resolution for `envs.make`."""

import difflib
from collections.abc import Callable
from typing import Any

from ._classic import CartPole, Pendulum
from ._env import AbstractEnv
from ._probes import (
    ActionReward,
    ConstantReward,
    ContinuousActionReward,
    ObservationReward,
    TruncatedConstantReward,
    TwoStepDiscount,
)

# Native implementations win over gymnax's for the same name: same dynamics,
# without gymnax's import cost.
NATIVE: dict[str, Callable[..., AbstractEnv]] = {
    "CartPole-v1": CartPole,
    "Pendulum-v1": Pendulum,
}
PROBES: dict[str, Callable[..., AbstractEnv]] = {
    "probe/ConstantReward": ConstantReward,
    "probe/ObservationReward": ObservationReward,
    "probe/TwoStepDiscount": TwoStepDiscount,
    "probe/ActionReward": ActionReward,
    "probe/TruncatedConstantReward": TruncatedConstantReward,
    "probe/ContinuousActionReward": ContinuousActionReward,
}


def names() -> list[str]:
    """All names `make` accepts: native, gymnax and probe environments."""
    from ._gymnax import gymnax_names

    return sorted(set(NATIVE) | set(gymnax_names()) | set(PROBES))


def make(name: str, **env_params: Any) -> AbstractEnv:
    """Build an environment by name.

    **Arguments:**

    - `name`: e.g. `"CartPole-v1"`, `"Breakout-MinAtar"`, `"probe/TwoStepDiscount"`;
      `"gymnax/<name>"` forces gymnax's own implementation.
    - `**env_params`: environment parameters, e.g. `max_steps_in_episode=200`.

    **Raises:** `ValueError` naming the closest valid names, or the valid parameters.
    """
    factory = NATIVE.get(name) or PROBES.get(name)
    if factory is not None:
        try:
            return factory(**env_params)
        except TypeError:
            fields = sorted(getattr(factory, "__dataclass_fields__", {}))
            raise ValueError(
                f"unknown parameter(s) {sorted(env_params)} for env {name!r}; "
                f"valid ones: {fields}"
            ) from None
    from ._gymnax import NEEDS_DOWNLOAD, GymnaxEnv, gymnax_names

    gymnax_id = name.removeprefix("gymnax/")
    if gymnax_id in gymnax_names():
        return GymnaxEnv(gymnax_id, **env_params)
    if gymnax_id in NEEDS_DOWNLOAD:
        raise ValueError(
            f"env {name!r} downloads a data set when it is created; it is not offered."
        )
    valid = names()
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise ValueError(
        f"unknown env {name!r}.{hint} "
        f"`envs.names()` lists all {len(valid)} valid names."
    )
