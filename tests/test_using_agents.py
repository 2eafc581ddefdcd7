"""Using trained agents: the pretrained zoo, `experiments.publish` and
`experiments.evaluate` (pretrained agents, recorded runs, videos, bad input)."""

import json
import re
from pathlib import Path

import jax.random as jr
import numpy as np
import pytest

import envs
import runners
import zoo

ROOT = Path(__file__).resolve().parents[1]


def _evaluate(folder: Path | None, **config):
    """`python -m experiments.evaluate with ...`, in this process (`-F folder`,
    or unobserved)."""
    from experiments.evaluate import ex

    options = {"--file_storage": str(folder)} if folder else {"--unobserved": True}
    return ex.run(
        config_updates={"compilation_cache": False, **config}, options=options
    )


def test_pretrained_lists_and_refuses_unknown_pairs():
    pairs = zoo.pretrained()
    assert ("ppo", "CartPole-v1") in pairs
    assert pairs == sorted(pairs)
    with pytest.raises(
        ValueError, match=r"no pretrained ppo on 'Nope-v0'.*ppo:CartPole"
    ):
        zoo.pretrained("ppo", "Nope-v0")
    with pytest.raises(ValueError, match="pass both agent and env"):
        zoo.pretrained("ppo")
    index = json.loads((zoo.PRETRAINED_DIR / zoo.PRETRAINED_INDEX).read_text())
    unshipped = [v for v in index.values() if not v["shipped"]]
    # A pair tried but not shipped says why: short of its target, or the
    # benchmark table's held-out check.
    for entry in unshipped:
        with pytest.raises(ValueError, match=re.escape(entry["reason"])):
            zoo.pretrained(entry["agent"], entry["env"])


# Replayed in full: every classic-control agent and one MinAtar agent. The other
# MinAtar agents' 128 recorded episodes take 3-14 s each to replay on 2 cores;
# they load and act in `test_other_pretrained_agents_load_and_act`.
REPLAYED = [
    p
    for p in zoo.pretrained()
    if "MinAtar" not in p[1] or p == ("ppo", "Breakout-MinAtar")
]


@pytest.mark.slow
@pytest.mark.parametrize("pair", REPLAYED, ids=lambda p: f"{p[0]}:{p[1]}")
def test_every_pretrained_agent_reaches_its_target(pair):
    """Each shipped agent loads and plays its recorded evaluation again: the same
    return, at least its target."""
    agent_name, env_name = pair
    prov = zoo.provenance(agent_name, env_name)
    agent, state = zoo.pretrained(agent_name, env_name)
    assert type(agent) is zoo.AGENTS[agent_name]
    returns = runners.evaluate(
        agent,
        state,
        envs.make(env_name, **prov.get("env_params", {})),
        key=jr.PRNGKey(prov["eval_key"]),
        num_episodes=prov["episodes"],
    )
    mean = float(np.mean(returns))
    assert mean == pytest.approx(prov["return_mean"], abs=1e-3)
    assert mean >= prov["target"]
    for key in ("command", "seed", "commit", "versions", "hp", "total_steps"):
        assert key in prov


@pytest.mark.parametrize(
    "pair",
    [p for p in zoo.pretrained() if p not in REPLAYED],
    ids=lambda p: f"{p[0]}:{p[1]}",
)
def test_other_pretrained_agents_load_and_act(pair):
    agent_name, env_name = pair
    agent, state = zoo.pretrained(agent_name, env_name)
    assert type(agent) is zoo.AGENTS[agent_name]
    env = envs.make(env_name)
    obs, _ = env.reset(jr.PRNGKey(0))
    action, _ = agent.act(state, obs, key=jr.PRNGKey(1), greedy=True)
    assert 0 <= int(action) < env.action_space.n
    assert (
        zoo.provenance(agent_name, env_name)["return_mean"]
        >= zoo.provenance(agent_name, env_name)["target"]
    )


def _held_out_result(folder, agent, env, *, at_target, seeds=24, **block):
    """A benchmark result of `agent` on `env`'s tuned block with its held-out
    check, as `benchmarks/table.py` writes it."""
    import json

    from experiments.configs import tuned

    folder.mkdir(exist_ok=True)
    config = {**tuned(agent, env), **block}
    held = {"seeds": seeds, "at_target": at_target, "target": 475.0}
    held.update(worst=100.0, passed=at_target >= 23 / 24 * seeds)
    result = {"agent": agent, "env": env, "config": config, "held_out": held}
    (folder / f"{agent}__{env}.json").write_text(json.dumps(result))


def test_publish_ships_only_pairs_that_passed_the_held_out_check(tmp_path, monkeypatch):
    from experiments import publish

    results = tmp_path / "results"
    monkeypatch.setattr(publish, "RESULTS", results)
    assert "no benchmark result" in publish.held_out_failure("ppo", "CartPole-v1")
    _held_out_result(results, "ppo", "CartPole-v1", at_target=22)
    assert publish.held_out_failure("ppo", "CartPole-v1") == (
        "22 of 24 held-out seeds reached 475 (worst 100.0); it needs 23 of 24"
    )
    _held_out_result(results, "ppo", "CartPole-v1", at_target=24, total_steps=1)
    assert "of another block" in publish.held_out_failure("ppo", "CartPole-v1")
    _held_out_result(results, "ppo", "CartPole-v1", at_target=23)
    assert publish.held_out_failure("ppo", "CartPole-v1") is None


def test_publish_is_byte_reproducible(tmp_path, monkeypatch):
    """The same command writes the same files, byte for byte."""
    from experiments import publish

    monkeypatch.setattr(publish, "RESULTS", tmp_path / "results")
    _held_out_result(tmp_path / "results", "ppo", "CartPole-v1", at_target=24)
    for out in ("a", "b"):
        code = publish.main(
            ["--allow-dirty", "--out", str(tmp_path / out), "ppo:CartPole-v1"]
        )
        assert code == 0
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["index.json", "ppo__CartPole-v1.eqx", "ppo__CartPole-v1.json"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (
            tmp_path / "b" / name
        ).read_bytes()
    agent, state = zoo.pretrained(
        "ppo", "CartPole-v1", folder=tmp_path / "a"
    )  # loads from any folder
    assert isinstance(agent, zoo.PPO)
    assert publish.main(["--allow-dirty", "ppo:Nope-v0"]) == 2


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A tiny PPO run of `experiments.run`, recorded, with `video=True`."""
    from experiments.run import ex

    runs = tmp_path_factory.mktemp("trained") / "runs"
    config = {"agent": "ppo", "total_steps": 2048, "eval_episodes": 2}
    config.update(progress=False, num_seeds=2, video=True, compilation_cache=False)
    run = ex.run(config_updates=config, options={"--file_storage": str(runs)})
    assert run.status == "COMPLETED"
    return runs, runs / str(run._id)


def test_training_video_artifact(trained_run):
    _, run_dir = trained_run
    from PIL import Image

    run = json.loads((run_dir / "run.json").read_text())
    assert "ppo__CartPole-v1.gif" in run["artifacts"]
    info = json.loads((run_dir / "info.json").read_text())
    with Image.open(run_dir / "ppo__CartPole-v1.gif") as gif:
        assert gif.size[0] > 100
        # CartPole pays 1 per step: the filmed episode lasted its return in steps
        # (identical consecutive frames may be merged, never more frames).
        assert 1 <= gif.n_frames <= info["video_return"] + 1


def test_evaluate_a_recorded_run(trained_run, capsys):
    runs, run_dir = trained_run
    capsys.readouterr()
    run = _evaluate(runs, run=str(run_dir), seed=1, episodes=6, video=True)
    assert run.status == "COMPLETED"
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith(f"ppo on CartPole-v1 ({run_dir} seed 1): greedy return")
    assert "over 6 episodes" in lines[0]
    assert lines[1].startswith("per episode: ")
    assert len(lines[1].split()) == 2 + 6
    record = runs / str(run._id)  # evaluations are recorded beside training runs
    info = json.loads((record / "info.json").read_text())
    assert len(info["returns"]) == 6
    assert info["return_mean"] == pytest.approx(np.mean(info["returns"]))
    assert run.result == pytest.approx(info["return_mean"])
    assert (record / "ppo__CartPole-v1.gif").is_file()
    # An evaluation record has no learning curve: the plot command says so.
    from experiments import plot

    with pytest.raises(
        plot.PlotError, match=r"a record of python -m experiments\.evaluate"
    ):
        plot.compare([str(record)], out=str(runs.parent / "plot"))
    # The same numbers as loading the run in Python and evaluating it.
    import experiments

    agent, state, env = experiments.load_run(run_dir, seed=1)
    returns = runners.evaluate(agent, state, env, key=jr.PRNGKey(0), num_episodes=6)
    assert np.asarray(returns).tolist() == info["returns"]


def test_evaluate_a_recorded_run_on_gymnasium(trained_run, capsys):
    """`gymnasium=CartPole-v1`: the run's agent plays Gymnasium's own env, the
    returns of `zoo.gymnasium_returns` with the same seed, recorded as an
    evaluation; an env whose observations are not the agent's is refused."""
    runs, run_dir = trained_run
    capsys.readouterr()
    run = _evaluate(runs, run=str(run_dir), episodes=3, key=5, gymnasium="CartPole-v1")
    first = capsys.readouterr().out.splitlines()[0]
    assert ", played on Gymnasium's CartPole-v1): greedy return" in first
    info = json.loads((runs / str(run._id) / "info.json").read_text())
    assert info["gymnasium"] == "CartPole-v1"
    import experiments

    agent, state, _ = experiments.load_run(run_dir, seed=0)
    policy = zoo.gymnasium_policy(agent, state)
    want = zoo.gymnasium_returns(policy, "CartPole-v1", episodes=3, seed=5)
    assert info["returns"] == want.tolist()
    from experiments.evaluate import EvaluateError

    with pytest.raises(EvaluateError, match=r"gymnasium: PPO acts on .* \(4,\)"):
        _evaluate(None, run=str(run_dir), episodes=1, gymnasium="Acrobot-v1")


def test_evaluate_pretrained(capsys):
    run = _evaluate(None, agent="ppo", env="CartPole-v1", episodes=8)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("ppo on CartPole-v1 (pretrained): greedy return 500.0")
    assert run.result == 500.0


def test_evaluate_bad_input(trained_run, tmp_path):
    """One clear line each, before anything loads or compiles."""
    from experiments.evaluate import EvaluateError, check

    _, run_dir = trained_run
    base = {
        "run": None,
        "seed": 0,
        "agent": None,
        "env": None,
        "episodes": 4,
        "key": 0,
        "max_steps": 100,
        "video": False,
        "video_episodes": 1,
        "fps": 30,
        "gymnasium": None,
        "compilation_cache": False,
    }
    empty = tmp_path / "empty_run"
    empty.mkdir()
    (empty / "run.json").write_text("{}")
    cases = [
        ({}, "nothing to evaluate"),
        ({"agent": "ppo", "env": "Nope-v0"}, r"agent, env: no pretrained ppo on"),
        ({"run": str(empty)}, r"run: .*no final state .* and no checkpoint"),
        ({"run": str(tmp_path / "missing")}, "run: .*no such run folder"),
        ({"run": str(run_dir), "agent": "dqn"}, "agent: .* trained agent 'ppo', not"),
        ({"run": str(run_dir), "seed": 2}, r"seed: 2 is not a seed of .* 0 to 1"),
        ({"run": str(run_dir), "episodes": 0}, "episodes: expected a positive int"),
        (
            {"run": str(run_dir), "video": True, "video_episodes": 9},
            "video_episodes: 9 is more than the 4 episodes",
        ),
        ({"run": str(run_dir), "gymnasium": "Nope-v9"}, "gymnasium: .*Nope"),
        ({"run": str(run_dir), "gymnasium": 3}, "gymnasium: expected a Gymnasium"),
        (
            {"run": str(run_dir), "gymnasium": "CartPole-v1", "video": True},
            "video: films our env, not Gymnasium's",
        ),
    ]
    for update, message in cases:
        with pytest.raises(EvaluateError, match=message):
            check({**base, **update})
    # A checkpoint whose data is another agent's fails with one line on loading.
    other = tmp_path / "other"
    final = json.loads((run_dir / "final_state.json").read_text())
    other.mkdir()
    (other / "final_state.eqx").write_bytes((run_dir / "final_state.eqx").read_bytes())
    final["agent"], final["hp"] = "dqn", {}
    (other / "final_state.json").write_text(json.dumps(final))
    with pytest.raises(EvaluateError, match=f"run: cannot load {other}: "):
        _evaluate(None, run=str(other))
    assert sorted(p.name for p in other.iterdir()) == [
        "final_state.eqx",
        "final_state.json",
    ]  # nothing written, nothing lost


def test_video_needs_a_renderer(tmp_path):
    """`video=True` for an env without a renderer names the envs that render,
    for training and evaluation alike, before anything trains."""
    from experiments.run import ConfigError, ex

    with pytest.raises(
        ConfigError,
        match=r"video: probe/ConstantReward has no renderer; envs that render: ",
    ):
        ex.run(
            "print_config",
            config_updates={
                "agent": "ppo",
                "env": "probe/ConstantReward",
                "video": True,
            },
        )
