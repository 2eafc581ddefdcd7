"""Resolving and validating an experiment's config, before anything compiles."""

import difflib
from typing import Any

from . import configs
from ._errors import ConfigError as ConfigError

FALLBACK_RUN = configs.FALLBACK_RUN
NUM_EVALS = configs.NUM_EVALS
# Env steps (per seed) between checkpoints, and how many to keep.
CHECKPOINT_EVERY = 100_000
KEEP_CHECKPOINTS = 2


def run_default(agent: Any, env: Any, key: str) -> Any:
    """Run setting `key` (`configs.RUN_KEYS`) from the tuned block, else our
    fallback (`None` for `eval_every`: derived from `total_steps` instead)."""
    block = _block(agent, env)
    return block.get(key, FALLBACK_RUN.get(key))


def env_params_default(agent: Any, env: Any) -> dict[str, Any]:
    """The env parameters the tuned block sets (e.g. MinAtar's sticky actions),
    else none."""
    return dict(_block(agent, env).get("env_params") or {})


def eval_every(agent: Any, env: Any, total_steps: Any) -> int | None:
    """Env steps between evaluations: the tuned block's, else about `NUM_EVALS`
    evaluations per run."""
    tuned = _block(agent, env).get("eval_every")
    if tuned is not None:
        return tuned
    if type(total_steps) is not int or total_steps <= 0:
        return None  # invalid; `validate` says so
    return max(total_steps // NUM_EVALS, 1)


def resolved_hp(agent: Any, env: Any) -> dict[str, Any]:
    """All hyperparameters of `agent`: its defaults, updated by the tuned block.

    Returns `{}` for an unknown agent (reported by `validate`), so that the config
    scope never fails with a traceback.
    """
    import zoo

    try:
        hp = zoo.hyperparameters(agent)
    except (ValueError, AttributeError):
        return {}
    hp.update(_block(agent, env).get("hp") or {})
    # Sacred stores tuples as lists anyway; zoo.make turns them back.
    return {k: list(v) if isinstance(v, tuple) else v for k, v in hp.items()}


def make_env(name: str, params: dict[str, Any]) -> Any:
    """`envs.make(name, **params)`, or `envs.make_multi` for a multi-agent name."""
    import envs

    if envs.is_multi_agent(name):
        return envs.make_multi(name, **params)
    return envs.make(name, **params)


def make_agent(
    agent: str,
    hp: dict[str, Any],
    env: Any,
    sharing: str | None = None,
    agent_id: bool = False,
    per_agent: dict[str, Any] | None = None,
) -> Any:
    """The zoo agent `zoo.make(agent, **hp)`; on a multi-agent env, learners
    built from it: `sharing="shared"` (the default there; `agent_id` appends a
    one-hot of the agent's index to its observations), `"self-play"` (shared,
    no id), or `"independent"` (one agent per name; `per_agent.<name>` overrides
    that agent's hyperparameters, and `per_agent.<name>.agent` its algorithm,
    which then starts from that algorithm's defaults).

    **Raises:** `ConfigError` naming the key at fault.
    """
    import envs
    import zoo

    per_agent = per_agent or {}
    if not isinstance(env, envs.AbstractMultiAgentEnv):
        for key, value in (("sharing", sharing), ("agent_id", agent_id or None)):
            if value is not None:
                raise ConfigError(
                    f"{key}: {env.name} is a single-agent env; {key} applies to "
                    f"multi-agent envs ({', '.join(list(envs.MULTI_AGENT)[:3])}, ...)"
                )
        if per_agent:
            raise ConfigError(
                f"per_agent: {env.name} is a single-agent env; use hp.<name>=..."
            )
        return zoo.make(agent, **hp)
    sharing = "shared" if sharing is None else sharing
    if sharing not in SHARING:
        raise ConfigError(f"sharing: expected one of {SHARING}, got {sharing!r}")
    if not isinstance(per_agent, dict):
        raise ConfigError(
            f"per_agent: expected {{agent_name: {{hyperparameter: value}}}}, got "
            f"{per_agent!r}"
        )
    for name, over in per_agent.items():
        if name not in env.agents:
            close = difflib.get_close_matches(str(name), env.agents, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"per_agent.{name}: {env.name} has no agent {name!r}.{hint} Its "
                f"agents: {list(env.agents)}"
            )
        if not isinstance(over, dict):
            raise ConfigError(
                f"per_agent.{name}: expected a dict of hyperparameters (and "
                f"optionally agent=<algorithm>), got {over!r}"
            )
    if per_agent and sharing != "independent":
        raise ConfigError(
            f"per_agent: agents differ only with sharing=independent (got "
            f"sharing={sharing})"
        )
    if agent_id and sharing != "shared":
        raise ConfigError(
            f"agent_id: a one-hot agent id is for sharing=shared (got "
            f"sharing={sharing}: {_WHY_NO_ID[sharing]})"
        )
    if sharing != "independent":
        return zoo.Shared(zoo.make(agent, **hp), agent_id=agent_id)
    agents = {}
    for name in env.agents:
        over = dict(per_agent.get(name, {}))
        kind = over.pop("agent", agent)
        try:
            agents[name] = zoo.make(kind, **{**(hp if kind == agent else {}), **over})
        except (ValueError, TypeError) as e:
            raise ConfigError(f"per_agent.{name}: {e}") from None
    try:
        return zoo.Independent(agents)
    except ValueError as e:
        raise ConfigError(f"per_agent: {e}") from None


def _block(agent: Any, env: Any) -> dict[str, Any]:
    if not isinstance(agent, str) or not isinstance(env, str):
        return {}
    block = configs.tuned(agent, env)
    return block if isinstance(block, dict) else {}


def _bad_hp(config: dict[str, Any]) -> str:
    """The dotted key of the first hyperparameter that fails on its own, else
    `hp` (a combination is invalid, e.g. a batch that does not split)."""
    import zoo

    for key, value in config["hp"].items():
        try:
            zoo.make(config["agent"], **{key: value})
        except (ValueError, TypeError):
            return f"hp.{key}"
    return "hp"


# Every config key, for the unknown-key message (the config scope in run.py
# defines them).
KEYS = (
    "agent",
    "env",
    "env_params",
    "seed",
    "num_seeds",
    "total_steps",
    "num_envs",
    "eval_every",
    "eval_at_start",
    "eval_episodes",
    "hp",
    "progress",
    "compilation_cache",
    "checkpoint_every",
    "keep_checkpoints",
    "resume",
    "sweep",
    "sweep_samples",
    "devices",
    "bitwise",
    "distributed",
    "video",
    "sharing",
    "agent_id",
    "per_agent",
)

# How agents learn on a multi-agent env (`sharing=`).
SHARING = ("shared", "independent", "self-play")
_WHY_NO_ID = {
    "self-play": "every agent plays the same policy",
    "independent": "each agent has its own network",
}
_RUN_INTS = (
    "num_seeds",
    "total_steps",
    "num_envs",
    "eval_episodes",
    "keep_checkpoints",
)


def validate(config: dict[str, Any]) -> list[str]:
    """Check a resolved config without compiling anything.

    Builds the agent and env (cheap: hyperparameters and spaces, no networks) and
    asks the runner whether they can train together.

    **Returns:** warnings to show (e.g. no tuned block for this pair).

    **Raises:** `ConfigError` naming the offending key and the valid choices.
    """
    unknown = sorted(set(config) - set(KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], KEYS, n=1, cutoff=0.6)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"{unknown[0]}: unknown config key.{hint} Valid keys: {sorted(KEYS)}"
        )
    if config["resume"] is not None:
        from experiments import _resume

        _resume.check(config)
    import envs
    import runners
    import zoo

    agent_name, env_name = config["agent"], config["env"]
    if not isinstance(agent_name, str):
        raise ConfigError(f"agent: expected one of {zoo.names()}, got {agent_name!r}")
    if not isinstance(env_name, str):
        raise ConfigError(f"env: expected an env name (string), got {env_name!r}")
    if type(config["seed"]) is not int:
        raise ConfigError(f"seed: expected an integer, got {config['seed']!r}")
    for key in _RUN_INTS:
        value = config[key]
        if type(value) is not int or value <= 0:
            raise ConfigError(f"{key}: expected a positive integer, got {value!r}")
    eval_every = config["eval_every"]
    if eval_every is not None and (type(eval_every) is not int or eval_every <= 0):
        raise ConfigError(
            f"eval_every: expected a positive integer or None, got {eval_every!r}"
        )
    every = config["checkpoint_every"]
    if every is not None and (type(every) is not int or every <= 0):
        raise ConfigError(
            f"checkpoint_every: expected a positive integer or None, got {every!r}"
        )
    for key in ("progress", "compilation_cache", "bitwise", "eval_at_start", "video"):
        if not isinstance(config[key], bool):
            raise ConfigError(f"{key}: expected True or False, got {config[key]!r}")
    if not isinstance(config["hp"], dict):
        raise ConfigError(f"hp: expected a dict, got {config['hp']!r}")
    devices = config["devices"]
    if devices is not None and (type(devices) is not int or devices <= 0):
        raise ConfigError(
            f"devices: expected a positive number of devices or None (all), got "
            f"{devices!r}"
        )

    try:
        zoo.make(agent_name, **config["hp"])
    except (ValueError, TypeError) as e:
        key = "agent" if agent_name.lower() not in zoo.names() else _bad_hp(config)
        raise ConfigError(f"{key}: {e}") from None
    env_params = config["env_params"]
    if not isinstance(env_params, dict):
        raise ConfigError(
            f"env_params: expected a dict of env parameters (env_params.<name>=value),"
            f" got {env_params!r}"
        )
    try:
        env = make_env(env_name, env_params)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{'env_params' if env_params else 'env'}: {e}") from None
    if not isinstance(config["agent_id"], bool):
        raise ConfigError(
            f"agent_id: expected True or False, got {config['agent_id']!r}"
        )
    agent = make_agent(
        agent_name,
        config["hp"],
        env,
        config["sharing"],
        config["agent_id"],
        config["per_agent"],
    )
    multi = isinstance(env, envs.AbstractMultiAgentEnv)
    try:
        runners.validate(agent, env, config["num_envs"], config["total_steps"])
    except ValueError as e:
        raise ConfigError(f"agent={agent_name} env={env_name}: {e}") from None
    if multi and (config["sweep"] or config["sweep_samples"]):
        raise ConfigError(
            f"sweep: sweeps vary one zoo agent, not multi-agent learners; train "
            f"one run per value on {env_name}"
        )
    if config["sweep"] or config["sweep_samples"]:
        _check_sweep(config, agent, env)
    if config["video"] and (config["sweep"] or config["sweep_samples"]):
        raise ConfigError(
            "video: a sweep films nothing; train the member you want to see alone "
            "(its command is printed at the end of the sweep) with video=True"
        )
    if config["video"]:
        from envs.render import RENDERABLE, renderable

        if not isinstance(env, envs.AbstractEnv) or not renderable(env):
            raise ConfigError(
                f"video: {env_name} has no renderer; envs that render: "
                f"{', '.join(RENDERABLE)}"
            )

    block = configs.tuned(agent_name, env_name)
    if block is None:
        tuned_envs = sorted(configs.blocks(agent_name))
        return [
            f"no tuned config for {agent_name} on {env_name} "
            f"(experiments/configs/{agent_name}.yaml has {tuned_envs}); "
            f"using the agent's default hyperparameters"
        ]
    try:
        configs.check_block(agent_name, env_name, block)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return []


def _check_sweep(config: dict[str, Any], agent: Any, env: Any) -> None:
    """Every program of the sweep builds an agent that can train on `env`."""
    import runners
    import zoo
    from experiments import _sweep

    _, programs = _sweep.of_config(config, agent)
    for program in programs:
        try:
            member_agent = zoo.make(
                config["agent"], **{**config["hp"], **program.static}
            )
            if program.floats:
                runners.check_sweep(member_agent, program.floats)
            runners.validate(
                member_agent, env, config["num_envs"], config["total_steps"]
            )
        except (ValueError, TypeError) as e:
            where = ", ".join(f"{k}={v!r}" for k, v in program.static.items())
            raise ConfigError(f"sweep ({where or 'floats'}): {e}") from None
    if config["resume"] is not None and len(programs) > 1:
        raise ConfigError(
            "resume: this sweep trains several programs, one after another, and "
            "only a sweep of one program (float hyperparameters only) resumes; "
            "rerun the sweep, or sweep each program's values as its own run"
        )
