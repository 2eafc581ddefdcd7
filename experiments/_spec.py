"""The run specification: every config key of `python -m experiments.run`, once.

A `Key` holds a key's doc (what `print_config` shows beside it), its default
(from the tuned block of `agent` on `env`, or from the keys before it), a check
of its value alone, and what a resumed run does with it. The Sacred config
scope, `main`'s arguments, the validation, the resume check and `RunSpec` (what
training takes) all read the fields of `RunSpec`: a new key is one new field
(and a line in docs/experiments.md).
"""

import dataclasses
import difflib
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any

from experiments import _config, _resume, configs, jax_setup
from experiments._errors import ConfigError
from experiments.record.folder import RunFolder


@dataclasses.dataclass(frozen=True)
class Key:
    """One config key: a field of `RunSpec` (`key(...)` makes one).

    - `doc`: what `print_config` shows beside it.
    - `default(config)`: its value when not given, from the keys before it.
    - `check(value)`: raises `ValueError` (or a `ConfigError` naming the key)
      for a value bad on its own.
    - `resumed`: a resumed run takes it from its original's config.
    - `may_change`: a resumed run may set it anew.
    """

    doc: str
    default: Callable[[Mapping[str, Any]], Any]
    check: Callable[[Any], None] | None = None
    resumed: bool = True
    may_change: bool = False
    name: str = ""


def key(
    doc: str,
    *,
    default: Callable[[Mapping[str, Any]], Any],
    check: Callable[[Any], None] | None = None,
    resumed: bool = True,
    may_change: bool = False,
) -> Any:
    """A field of `RunSpec`: a config key (see `Key`)."""
    return dataclasses.field(
        metadata={"key": Key(doc, default, check, resumed, may_change)}
    )


def setting(
    doc: str,
    *,
    default: Callable[[Mapping[str, Any]], Any],
    check: Callable[[Any], None] | None = None,
) -> Any:
    """A key that says how a run is carried out, not what it computes: a
    resumed run takes it anew (`key(..., resumed=False, may_change=True)`)."""
    return key(doc, default=default, check=check, resumed=False, may_change=True)


# A check raises `ConfigError` naming its key, or `ValueError` with what is
# wrong, which the validation prefixes with the key's name.


def _int(value: Any) -> None:
    if type(value) is not int:
        raise ValueError(f"expected an integer, got {value!r}")


def _positive(value: Any) -> None:
    if type(value) is not int or value <= 0:
        raise ValueError(f"expected a positive integer, got {value!r}")


def _positive_or_none(value: Any) -> None:
    if value is not None and (type(value) is not int or value <= 0):
        raise ValueError(f"expected a positive integer or None, got {value!r}")


def _bool(value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"expected True or False, got {value!r}")


def _log(value: Any) -> None:
    from experiments.record import loggers

    loggers.check_installed(loggers.parse(value))


def flag(doc: str, *, kind: Callable[..., Any] = key) -> Any:
    """A True/False key (`kind=setting`: a setting), off by default."""
    return kind(doc, default=lambda c: False, check=_bool)


def _agent(value: Any) -> None:
    if not isinstance(value, str):
        import zoo

        raise ConfigError(f"agent: expected one of {zoo.names()}, got {value!r}")


def _env(value: Any) -> None:
    if not isinstance(value, str):
        raise ConfigError(f"env: expected an env name (string), got {value!r}")


def _hp(value: Any) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"hp: expected a dict, got {value!r}")


def _env_params(value: Any) -> None:
    if not isinstance(value, dict):
        raise ConfigError(
            f"env_params: expected a dict of env parameters (env_params.<name>=value),"
            f" got {value!r}"
        )


def _devices(value: Any) -> None:
    if value is not None and (type(value) is not int or value <= 0):
        raise ConfigError(
            f"devices: expected a positive number of devices or None (all), got "
            f"{value!r}"
        )


def _tuned(key: str) -> Callable[[Mapping[str, Any]], Any]:
    """The tuned block's run setting `key`, else the fallback."""
    return lambda c: _config.run_default(c["agent"], c["env"], key)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A resolved, checked run config: what `python -m experiments.run` trains.

    Each field is a config key (`key(...)`): its type, its doc, its default, its
    check and what a resumed run does with it. Everything else reads them from
    here (`keys_of`): the Sacred config scope and its docs, `main`'s arguments,
    the validation and the resume check. A new key is one new field (and a line
    in docs/experiments.md). Fields are filled in this order, so a default may
    read the keys above it.
    """

    resume: str | None = key(
        'continue the run recorded in this folder (e.g. "runs/1") from its '
        "newest checkpoint, with its config; only total_steps may grow",
        default=lambda c: None,
        resumed=False,
        may_change=True,
    )
    agent: str = key(
        "agent name, one of zoo.names()",
        default=lambda c: "dqn",
        check=_agent,
    )
    env: str = key(
        "env name (envs.names()); default: zoo.default_env(agent)",
        default=lambda c: configs.default_env(c["agent"]),
        check=_env,
    )
    env_params: dict[str, Any] = key(
        "env parameters, envs.make(env, **env_params): `env_params.<name>=value`, "
        "e.g. env_params.max_steps_in_episode=1000 (tuned block, else none; the "
        "MinAtar blocks set sticky_prob=0.1, env_params.sticky_prob=0 turns it off)",
        default=lambda c: _config.env_params_default(c["agent"], c["env"]),
        check=_env_params,
    )
    seed: int = key(
        "base PRNG seed: seed i of num_seeds trains with split(PRNGKey(seed))[i]",
        default=lambda c: 0,
        check=_int,
    )
    num_seeds: int = key(
        "independent seeds, trained together (vmapped)",
        default=lambda c: 1,
        check=_positive,
    )
    total_steps: int = key(
        "env steps per seed (tuned block, else 100000)",
        default=_tuned("total_steps"),
        check=_positive,
        may_change=True,
    )
    num_envs: int = key(
        "parallel envs per seed (tuned block, else 8)",
        default=_tuned("num_envs"),
        check=_positive,
    )
    eval_every: int | None = key(
        "env steps between greedy evaluations (default ~10 per run); None: at the end",
        default=lambda c: _config.eval_every(c["agent"], c["env"], c["total_steps"]),
        check=_positive_or_none,
    )
    eval_at_start: bool = flag(
        "also evaluate the untrained agent, logged at env step 0",
    )
    eval_episodes: int = key(
        "greedy episodes per seed in each evaluation (tuned block, else 32)",
        default=_tuned("eval_episodes"),
        check=_positive,
    )
    hp: dict[str, Any] = key(
        "zoo.make(agent, **hp): agent defaults < tuned block < `with hp.<name>=...`",
        default=lambda c: _config.resolved_hp(c["agent"], c["env"]),
        check=_hp,
    )
    sweep: dict[str, Any] = key(
        "hyperparameter sweep: `sweep.<name>=[v1,v2]` (a grid: every "
        "combination) or `sweep.<name>=loguniform(low,high)` / "
        "`uniform(low,high)` (random search, sweep_samples draws); float "
        "hyperparameters vary inside one program",
        default=lambda c: {},
    )
    sweep_samples: int = key(
        "members drawn for the distributions of `sweep` (random search)",
        default=lambda c: 0,
    )
    devices: int | None = setting(
        "devices the runs (members x seeds) are sharded over: None (all) or a number",
        default=lambda c: None,
        check=_devices,
    )
    distributed: dict[str, Any] = setting(
        "one run across processes (jax.distributed), each started with the same "
        "command and its own process_id; empty: from srun/mpirun's environment",
        default=lambda c: {
            "coordinator": None,
            "num_processes": None,
            "process_id": None,
        },
    )
    bitwise: bool = flag(
        "the same numbers on any number of devices (CPU: trains ~1.1-1.5x slower)",
    )
    checkpoint_every: int | None = key(
        "env steps per seed between checkpoints (at chunk ends); None: only at the end",
        default=lambda c: _config.CHECKPOINT_EVERY,
        check=_positive_or_none,
        may_change=True,
    )
    keep_checkpoints: int = key(
        "checkpoints kept in <run_dir>/checkpoints/, newest first",
        default=lambda c: _config.KEEP_CHECKPOINTS,
        check=_positive,
        may_change=True,
    )
    sharing: str | None = key(
        'on a multi-agent env (envs.make_multi): "shared" (the default there: '
        'one agent acts and learns for all, vmapped over agents), "self-play" '
        '(shared, without agent id) or "independent" (one agent per agent name)',
        default=lambda c: None,
    )
    agent_id: bool = flag(
        'sharing="shared": append a one-hot of the agent\'s index to its observations',
    )
    per_agent: dict[str, Any] = key(
        'sharing="independent": `per_agent.<agent_name>.<hp>=value` overrides '
        "that agent's hyperparameters; `per_agent.<agent_name>.agent=dqn` its "
        "algorithm",
        default=lambda c: {},
    )
    video: bool = flag(
        "a GIF (and MP4 with ffmpeg) of one greedy episode of the final policy "
        "(seed 0), an artifact of the record; for envs that render",
        kind=setting,
    )
    log: Any = setting(
        "also record to TensorBoard and/or W&B: 'tensorboard', 'wandb' or "
        "'tensorboard,wandb' (into the run's folder; Sacred's record is kept)",
        default=lambda c: None,
        check=_log,
    )
    progress: bool = setting(
        "show a progress bar (stderr)",
        default=lambda c: True,
        check=_bool,
    )
    compilation_cache: bool = setting(
        "JAX persistent compilation cache (~/.cache/equizoo/jax; EQUIZOO_CACHE_DIR)",
        default=lambda c: jax_setup.cache_enabled_by_default(),
        check=_bool,
    )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "RunSpec":
        """The spec of a resolved, validated config (every key, nothing else)."""
        return cls(**{k.name: config[k.name] for k in keys_of(cls)})

    @classmethod
    def resolve(cls, **given: Any) -> "RunSpec":
        """The spec that `python -m experiments.run with key=value ...` trains:
        the keys given, every other one its default (a given dict, e.g. `hp`,
        updates its default, as `with hp.<name>=...` does), checked as the CLI
        checks them.

        ```python
        spec = experiments.RunSpec.resolve(agent="ppo", env="Acrobot-v1")
        agent, env = spec.build()
        ```

        **Raises:** `ConfigError` naming the key at fault.
        """
        config = _Given(given)
        fill(config, cls)
        validate(config, cls)
        return cls.from_config(config)

    def config(self) -> dict[str, Any]:
        """Every key and its value, as a run records its config."""
        return {k.name: getattr(self, k.name) for k in keys_of(type(self))}

    def run_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `runners.run` (and `runners.lower`) this
        spec sets: its key, budget, evaluations, checkpoints and devices."""
        import jax.random as jr

        return {
            "key": jr.PRNGKey(self.seed),
            "total_steps": self.total_steps,
            "num_envs": self.num_envs,
            "num_seeds": self.num_seeds,
            "eval_every": self.eval_every,
            "eval_episodes": self.eval_episodes,
            "eval_at_start": self.eval_at_start,
            "checkpoint_every": self.checkpoint_every,
            "devices": self.devices,
            "bitwise": self.bitwise,
        }

    @property
    def is_sweep(self) -> bool:
        return bool(self.sweep or self.sweep_samples)

    def build(self) -> tuple[Any, Any]:
        """`(agent, env)`: the zoo agent (or multi-agent learners) and the env.

        **Raises:** `ConfigError` naming the key at fault."""
        env = _config.make_env(self.env, self.env_params)
        agent = _config.make_agent(
            self.agent, self.hp, env, self.sharing, self.agent_id, self.per_agent
        )
        return agent, env


class _Given(dict):
    """A config being filled in which the keys given keep their values (dicts
    update the default), as in Sacred's config scope."""

    def __init__(self, given: Mapping[str, Any]):
        super().__init__()
        self.given = dict(given)

    def __setitem__(self, name: str, value: Any) -> None:
        if name in self.given:
            mine = self.given[name]
            both = isinstance(value, dict) and isinstance(mine, dict)
            value = {**value, **mine} if both else mine
        super().__setitem__(name, value)


def keys_of(spec: type[RunSpec] = RunSpec) -> tuple[Key, ...]:
    """The config keys of `spec` (`RunSpec` or a subclass), in order."""
    return tuple(
        dataclasses.replace(f.metadata["key"], name=f.name)
        for f in dataclasses.fields(spec)
    )


KEYS = keys_of(RunSpec)
_SPEC = RunSpec  # the spec `_scope` fills (`config_scope` gives it another)


def _scope() -> None:
    # Sacred evaluates this body with the config as its local variables: the
    # keys given on the command line keep their values.
    fill(locals(), _SPEC)


def config_scope(spec: type[RunSpec] = RunSpec) -> Any:
    """The Sacred config scope of `spec`'s keys: `fill`, with each key's doc for
    `print_config`."""
    from experiments.sacred.observers import ConfigScope

    body = types.FunctionType(_scope.__code__, {**globals(), "_SPEC": spec})
    scope = ConfigScope(body)
    scope._var_docs = {k.name: k.doc for k in keys_of(spec)}  # pyright: ignore[reportAttributeAccessIssue]
    return scope


def takes_every_key(
    spec: type[RunSpec] = RunSpec,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give `main(_run, **config)` the signature Sacred must see: every key of
    `spec` an argument (Sacred refuses `env_params.<name>=...` unless an argument
    starts it)."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    names = [k.name for k in keys_of(spec)]
    signature = inspect.Signature(
        [inspect.Parameter(n, kind) for n in (*names, "_run")]
    )

    def give(main: Callable[..., Any]) -> Callable[..., Any]:
        main.__signature__ = signature  # pyright: ignore[reportFunctionMemberAccess]
        return main

    return give


def fill(config: Any, spec: type[RunSpec] = RunSpec) -> None:
    """Set every key of `spec` in `config` (Sacred's config scope, in which given
    keys keep their values) to its default, in order; a resumed run's from its
    original."""
    for key in keys_of(spec):
        value = key.default(config)
        if key.resumed:
            value = _resume.resumed(config["resume"], key.name, value)
        config[key.name] = value


def validate(config: Mapping[str, Any], spec: type[RunSpec] = RunSpec) -> list[str]:
    """Check a resolved config without compiling anything: each key's value,
    then the agent and env it builds (cheap: hyperparameters and spaces, no
    networks) and whether they can train together.

    **Returns:** warnings to show (e.g. no tuned block for this pair).

    **Raises:** `ConfigError` naming the offending key and the valid choices.
    """
    keys = keys_of(spec)
    names = [k.name for k in keys]
    unknown = sorted(set(config) - set(names))
    if unknown:
        close = difflib.get_close_matches(unknown[0], names, n=1, cutoff=0.6)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"{unknown[0]}: unknown config key.{hint} Valid keys: {sorted(names)}"
        )
    if config["resume"] is not None:
        check_resume(config, keys)
    for key in keys:
        if key.check is not None:
            try:
                key.check(config[key.name])
            except ValueError as e:
                raise ConfigError(f"{key.name}: {e}") from None
    agent, env = _build(config)
    _check_training(config, agent, env)
    return _tuned_block_warnings(config["agent"], config["env"])


def _build(config: Mapping[str, Any]) -> tuple[Any, Any]:
    """The agent and env, each error named by its key."""
    import zoo

    name = config["agent"]
    try:
        zoo.make(name, **config["hp"])
    except (ValueError, TypeError) as e:
        key = "agent" if name.lower() not in zoo.names() else _config.bad_hp(config)
        raise ConfigError(f"{key}: {e}") from None
    env_params = config["env_params"]
    try:
        env = _config.make_env(config["env"], env_params)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{'env_params' if env_params else 'env'}: {e}") from None
    agent = _config.make_agent(
        name,
        config["hp"],
        env,
        config["sharing"],
        config["agent_id"],
        config["per_agent"],
    )
    return agent, env


def _check_training(config: Mapping[str, Any], agent: Any, env: Any) -> None:
    """Whether the agent trains on the env as configured: sizes, sweep, video."""
    import envs
    import runners

    where = f"agent={config['agent']} env={config['env']}"
    try:
        runners.validate(agent, env, config["num_envs"], config["total_steps"])
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    sweeps = config["sweep"] or config["sweep_samples"]
    if sweeps and isinstance(env, envs.AbstractMultiAgentEnv):
        raise ConfigError(
            f"sweep: sweeps vary one zoo agent, not multi-agent learners; train "
            f"one run per value on {config['env']}"
        )
    if sweeps:
        _config.check_sweep(config, agent, env)
    if config["video"] and sweeps:
        raise ConfigError(
            "video: a sweep films nothing; train the member you want to see alone "
            "(its command is printed at the end of the sweep) with video=True"
        )
    if config["video"]:
        from envs.render import RENDERABLE, renderable

        if not isinstance(env, envs.AbstractEnv) or not renderable(env):
            raise ConfigError(
                f"video: {config['env']} has no renderer; envs that render: "
                f"{', '.join(RENDERABLE)}"
            )


def _tuned_block_warnings(agent: str, env: str) -> list[str]:
    block = configs.tuned(agent, env)
    if block is None:
        return [
            f"no tuned config for {agent} on {env} "
            f"(experiments/configs/{agent}.yaml has {sorted(configs.blocks(agent))}); "
            f"using the agent's default hyperparameters"
        ]
    try:
        configs.check_block(agent, env, block)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return []


def check_resume(config: Mapping[str, Any], keys: tuple[Key, ...] = KEYS) -> None:
    """A resumed run keeps its original's config: refuse any other override."""
    latest = _resume.resume_checkpoint(config["resume"], quiet=True)
    meta = _resume.checkpoint_meta(latest)
    original = meta["config"]
    where = f"the run in {str(config['resume'])!r}"
    for name in ("agent", "env"):
        if config[name] != original.get(name):
            raise ConfigError(
                f"resume: {str(latest)!r} is a checkpoint of {name} "
                f"{original.get(name)!r}, not {config[name]!r}"
            )
    changed = []
    for key in keys:
        name = key.name
        if key.may_change or name not in original:
            continue
        if name == "hp" and isinstance(config["hp"], dict):
            hp = original["hp"]
            changed += [
                (f"hp.{k}", v, hp.get(k))
                for k, v in config["hp"].items()
                if k not in hp or hp[k] != v
            ]
        elif config[name] != original[name]:
            changed.append((name, config[name], original[name]))
    if changed:
        name, value, was = changed[0]
        may = ", ".join(k.name for k in keys if k.may_change and k.name != "resume")
        raise ConfigError(
            f"{name}: {value!r} conflicts with {where}, which has {name}={was!r}; a "
            f"resumed run keeps its config (it may change only {may})"
        )
    total, done = config["total_steps"], meta["env_steps"]
    planned = meta["plan"]["total_steps"]
    if type(total) is int and total < original["total_steps"]:
        raise ConfigError(
            f"total_steps: {total!r} is below the {original['total_steps']} of "
            f"{where}; a resumed run trains to at least its original's total"
        )
    # A run that trained its total but did not complete (killed after its last
    # checkpoint, or its artifacts could not be written) is finished instead:
    # its final evaluation, checkpoint and artifacts, nothing trained.
    status = RunFolder(config["resume"]).record() or {}
    if (
        type(total) is int
        and done >= max(total, planned)
        and status.get("status") == "COMPLETED"
    ):
        raise ConfigError(
            f"resume: {where} completed its total_steps={total} ({done} env "
            f"steps in {str(latest)!r}); give a larger total_steps to continue it"
        )
