"""Defaults from the tuned configs, and building a run's agent and env from its
config (`experiments._spec` lists the keys and validates them)."""

import difflib
from typing import Any

from . import configs
from ._errors import ConfigError as ConfigError

FALLBACK_RUN = configs.FALLBACK_RUN
# Env steps (per seed) between checkpoints, and how many to keep.
CHECKPOINT_EVERY = 100_000
KEEP_CHECKPOINTS = 2


def run_default(agent: Any, env: Any, key: str) -> Any:
    """Run setting `key` (`configs.RUN_KEYS`) from the tuned block, else our
    fallback (`None` for `eval_every`: derived from `total_steps` instead)."""
    return configs.run_setting(_block(agent, env), key)


def env_params_default(agent: Any, env: Any) -> dict[str, Any]:
    """The env parameters the tuned block sets (e.g. MinAtar's sticky actions),
    else none."""
    return dict(_block(agent, env).get("env_params") or {})


def eval_every(agent: Any, env: Any, total_steps: Any) -> int | None:
    """Env steps between evaluations: the tuned block's, else about `NUM_EVALS`
    evaluations per run (`None` for an invalid `total_steps`: `validate` says
    so)."""
    return configs.run_setting(_block(agent, env), "eval_every", total_steps)


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
        _check_single_agent(env, sharing, agent_id, per_agent)
        return zoo.make(agent, **hp)
    sharing = "shared" if sharing is None else sharing
    _check_sharing(env, sharing, agent_id, per_agent)
    if sharing != "independent":
        return zoo.Shared.of(zoo.make(agent, **hp), env, agent_id=agent_id)
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


def _check_single_agent(
    env: Any, sharing: str | None, agent_id: bool, per_agent: dict[str, Any]
) -> None:
    """The multi-agent keys are refused on a single-agent env."""
    import envs

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


def _check_sharing(
    env: Any, sharing: str, agent_id: bool, per_agent: dict[str, Any]
) -> None:
    """`sharing`, `agent_id` and `per_agent` fit together and fit `env`."""
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


def _block(agent: Any, env: Any) -> dict[str, Any]:
    if not isinstance(agent, str) or not isinstance(env, str):
        return {}
    block = configs.tuned(agent, env)
    return block if isinstance(block, dict) else {}


def bad_hp(config: Any) -> str:
    """The dotted key of the first hyperparameter that fails on its own, else
    `hp` (a combination is invalid, e.g. a batch that does not split)."""
    import zoo

    for key, value in config["hp"].items():
        try:
            zoo.make(config["agent"], **{key: value})
        except (ValueError, TypeError):
            return f"hp.{key}"
    return "hp"


# How agents learn on a multi-agent env (`sharing=`).
SHARING = ("shared", "independent", "self-play")
_WHY_NO_ID = {
    "self-play": "every agent plays the same policy",
    "independent": "each agent has its own network",
}


def check_sweep(config: Any, agent: Any, env: Any) -> None:
    """Every program of the sweep builds an agent that can train on `env`."""
    import runners
    import zoo
    from experiments.sweeps import members as _members

    _, programs = _members.of_config(config, agent)
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
