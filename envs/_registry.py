"""Name resolution for `envs.make`: one table of suites, `SUITES`.

A suite is a family of envs: the names it offers, how it builds one, and the
extra it needs. `make`, `make_multi`, `names`, `is_multi_agent` and
`uses_jaxmarl` all read the table, so adding a suite is one entry here beside
its module (docs/architecture.md).
"""

import dataclasses
import difflib
import importlib.util
from collections.abc import Callable, Iterable
from typing import Any

from ._classic import CartPole, Pendulum
from ._env import AbstractEnv
from ._multi_agent import AbstractMultiAgentEnv, JaxMarlEnv, MatrixGame, jaxmarl_names
from ._probes import (
    ActionReward,
    ConstantReward,
    ContinuousActionReward,
    ObservationReward,
    TruncatedConstantReward,
    TwoStepDiscount,
)
from ._wrappers import MaskObservation, StickyActions

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


def _from(table: dict[str, Callable[..., Any]]) -> Callable[..., Any]:
    """A suite's `build` for a table of factories by name."""
    return lambda name, **env_params: _build(table[name], name, env_params)


def _pomdp(name: str, **env_params: Any) -> AbstractEnv:
    base, keep = POMDP[name]
    return MaskObservation(_build(base, name, env_params), keep, name)


def _preset(name: str, **env_params: Any) -> AbstractEnv:
    base_name, preset = PRESETS[name]
    return make(base_name, **{**preset, **env_params})


def _gymnax_registered() -> list[str]:
    import gymnax

    return list(gymnax.registered_envs)


def _gymnax_names() -> list[str]:
    from ._gymnax import gymnax_names

    return gymnax_names()


def _gymnax(name: str, **env_params: Any) -> AbstractEnv:
    from ._gymnax import NEEDS_DOWNLOAD, GymnaxEnv

    gymnax_id = name.removeprefix("gymnax/")
    if gymnax_id in NEEDS_DOWNLOAD:
        raise ValueError(
            f"env {name!r} downloads a data set when it is created; it is not offered."
        )
    return GymnaxEnv(gymnax_id, **env_params)


def _installed(module: str) -> Callable[[], bool]:
    return lambda: importlib.util.find_spec(module) is not None


@dataclasses.dataclass(frozen=True)
class Suite:
    """A family of envs that `make` (or `make_multi`) builds.

    - `names`: the names it offers (empty when its package is not installed).
    - `build`: `build(name, **env_params)`, the env.
    - `prefix`: a name that starts with it is the suite's, listed or not
      (`"xminigrid/"`): its `build` names the valid ones, or the extra to
      install when it is missing. `""`: a name is the suite's when `names`
      lists it.
    - `extra`: the pip extra its envs need (`pip install -e '.[extra]'`), and
      `installed` whether it is there.
    - `multi_agent`: its envs are `AbstractMultiAgentEnv`s (`make_multi`).
    - `owns`: whether a name is the suite's; by default the prefix or `names`.
    - `render`: `render(env, state) -> frame` for one unwrapped env of the
      suite and its state (`envs.render.render` calls it), or `None`.
    """

    names: Callable[[], Iterable[str]]
    build: Callable[..., Any]
    prefix: str = ""
    extra: str = ""
    installed: Callable[[], bool] = lambda: True
    multi_agent: bool = False
    owns: Callable[[str], bool] | None = None
    render: Callable[[Any, Any], Any] | None = None

    def has(self, name: str) -> bool:
        if self.owns is not None:
            return self.owns(name)
        if self.prefix:
            return name.startswith(self.prefix)
        return self.installed() and name in self.names()

    def install_hint(self) -> str:
        return f"pip install -e '.[{self.extra}]'" if self.extra else ""


# Every suite, in the order a name is looked up (the first that has it builds
# it; the multi-agent ones after every single-agent one, see `suite_of`): ours
# before gymnax's, gymnax's before JaxMARL's. A suite in a module of
# its own adds itself with `register_suite`, which `envs/__init__.py`'s import
# of that module runs.
SUITES: dict[str, Suite] = {
    "native": Suite(lambda: NATIVE, _from(NATIVE)),
    "pomdp": Suite(lambda: POMDP, _pomdp),
    "presets": Suite(lambda: PRESETS, _preset),
    "probe": Suite(lambda: PROBES, _from(PROBES)),
    # `gymnax/<name>` forces gymnax's own implementation of a native name.
    "gymnax": Suite(
        _gymnax_names,
        _gymnax,
        owns=lambda name: name.removeprefix("gymnax/") in _gymnax_registered(),
    ),
    "marl": Suite(lambda: MULTI_AGENT, _from(MULTI_AGENT), multi_agent=True),
    "jaxmarl": Suite(
        jaxmarl_names,
        JaxMarlEnv,
        extra="marl",
        installed=_installed("jaxmarl"),
        multi_agent=True,
    ),
}


def register_suite(name: str, suite: Suite) -> None:
    """Add `suite` to `SUITES` as `name`. A suite with a prefix owns every name
    that starts with it, so its place in the lookup order does not matter; one
    without is looked up after those already there.

    **Raises:** `ValueError` when `name` or the prefix is taken."""
    if name in SUITES:
        raise ValueError(f"suite {name!r} is already registered")
    if suite.prefix and any(s.prefix == suite.prefix for s in SUITES.values()):
        raise ValueError(f"prefix {suite.prefix!r} is already a suite's")
    SUITES[name] = suite


def suite_of(name: str) -> str | None:
    """The name of the suite in `SUITES` that builds env `name`, or `None`.
    A suite whose prefix `name` starts with has it first; then the
    single-agent suites in their order, then the multi-agent ones (so that
    building a single-agent env does not import JaxMARL, 4.5 s, to rule its
    names out)."""
    for suite_name, suite in SUITES.items():
        if suite.prefix and name.startswith(suite.prefix):
            return suite_name
    # `sorted` is stable: each kind keeps its lookup order.
    for suite_name, suite in sorted(SUITES.items(), key=lambda s: s[1].multi_agent):
        if suite.has(name):
            return suite_name
    return None


def names(*, multi_agent: bool | None = None) -> list[str]:
    """All names `make` and `make_multi` accept: native, gymnax and probe
    environments, the multi-agent ones (JaxMARL's with the `marl` extra) and
    XLand-MiniGrid's (`xminigrid/...`, with the `xminigrid` extra).
    `multi_agent=True` (`False`): only the multi-agent (single-agent) ones."""
    out: set[str] = set()
    for suite in SUITES.values():
        if multi_agent is None or suite.multi_agent == multi_agent:
            out |= set(suite.names()) if suite.installed() else set()
    return sorted(out)


def uses_jaxmarl(name: str) -> bool:
    """Whether `name` is one of JaxMARL's envs (imports JaxMARL only when `name`
    is none of ours or gymnax's, and JaxMARL is installed)."""
    return suite_of(name) == "jaxmarl"


def is_multi_agent(name: str) -> bool:
    """Whether `name` is a multi-agent env (`make_multi` builds it)."""
    suite = suite_of(name)
    return suite is not None and SUITES[suite].multi_agent


def _unknown(name: str, *, multi_agent: bool) -> ValueError:
    """The error for a name no suite has: the closest names, and the extras
    not installed."""
    valid = names(multi_agent=multi_agent or None)
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    missing = [
        f"{n}'s envs need the {s.extra} extra: {s.install_hint()}."
        for n, s in SUITES.items()
        if s.extra and s.multi_agent == multi_agent and not s.installed()
    ]
    if multi_agent:
        return ValueError(
            f"unknown multi-agent env {name!r}.{hint} Multi-agent envs: "
            f"{', '.join(valid)}.{''.join(' ' + m for m in missing)}"
        )
    return ValueError(
        f"unknown env {name!r}.{hint} `envs.names()` lists all {len(valid)} "
        f"valid names.{''.join(' ' + m for m in missing)}"
    )


def _suite(name: str, *, multi_agent: bool) -> Suite:
    """The suite that builds `name`, checked: the right kind, and installed."""
    found = suite_of(name)
    if found is None:
        raise _unknown(name, multi_agent=multi_agent)
    suite = SUITES[found]
    if suite.multi_agent and not multi_agent:
        raise ValueError(
            f"{name!r} is a multi-agent env: build it with envs.make_multi({name!r})"
        )
    if multi_agent and not suite.multi_agent:
        raise _unknown(name, multi_agent=True)
    if not suite.installed():
        raise ValueError(
            f"{name} needs the {suite.extra} extra: {suite.install_hint()}"
        )
    return suite


def make_multi(name: str, **env_params: Any) -> AbstractMultiAgentEnv:
    """Build a multi-agent environment by name: `"marl/MatrixGame"`, or a
    JaxMARL name such as `"MPE_simple_spread_v3"` (`pip install -e '.[marl]'`).

    **Raises:** `ValueError` naming the closest valid names, or the parameters.
    """
    return _suite(name, multi_agent=True).build(name, **env_params)


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
    return _suite(name, multi_agent=False).build(name, **env_params)
