"""The benchmark scripts' command-line parsing, statistics and rendering (the
runs themselves are timed, so they live in benchmarks/, not here)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest


def _script(name: str):
    """A script of benchmarks/ (not a package) loaded as a module."""
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).parent.parent / "benchmarks" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


speed = _script("speed")
table = _script("table")


def test_hp_values_are_read_as_yaml_with_exponents_as_numbers():
    hp = speed.parse_hp(
        [
            "learning_rate=5e-4",
            "gamma=0.98",
            "activation=tanh",
            "hidden_sizes=[32,32]",
            "prioritized=true",
            "n_step=3",
        ]
    )
    assert hp == {
        "learning_rate": 5e-4,
        "gamma": 0.98,
        "activation": "tanh",
        "hidden_sizes": [32, 32],
        "prioritized": True,
        "n_step": 3,
    }
    assert isinstance(hp["n_step"], int)


def test_hp_without_equals_sign_is_refused():
    with pytest.raises(SystemExit, match="name=value"):
        speed.parse_hp(["learning_rate"])


def test_a_case_is_checked_before_any_runs():
    settings = {"total_steps": 6144000, "num_envs": 2048}
    speed.check_case("ppo:CartPole-v1", {})  # tuned: its block has the settings
    speed.check_case("ppo:playground/CheetahRun", settings)  # untuned, given
    with pytest.raises(SystemExit, match=r"no tuned block.*give --num-envs"):
        speed.check_case("ppo:playground/CheetahRun", {"total_steps": 6144000})
    with pytest.raises(SystemExit, match="agent:env"):
        speed.check_case("ppo", settings)
    with pytest.raises(SystemExit, match="unknown agent 'ppp'"):
        speed.check_case("ppp:CartPole-v1", settings)
    with pytest.raises(SystemExit, match="unknown env 'CartPole-v9'"):
        speed.check_case("ppo:CartPole-v9", settings)


def test_iqm_is_the_mean_of_the_middle_half():
    # 8 seeds: drop the 2 lowest and 2 highest, average the middle 4.
    x = np.array([-200.0, 10, 1, 3, 2, 4, 5, 900])
    assert table.iqm(x) == pytest.approx((2 + 3 + 4 + 5) / 4)
    low, high = table.iqm_ci(x)
    assert low <= table.iqm(x) <= high
    assert low >= -200 and high <= 900
    assert table.iqm_ci([500.0] * 8) == (500.0, 500.0)
    # More seeds that agree: a narrower interval.
    rng = np.random.default_rng(0)
    wide = np.subtract(*table.iqm_ci(rng.normal(0, 10, 8))[::-1])
    narrow = np.subtract(*table.iqm_ci(rng.normal(0, 1, 8))[::-1])
    assert narrow < wide


def _result(agent, env, returns):
    return {
        "agent": agent,
        "env": env,
        "num_seeds": len(returns),
        "total_steps": 1000,
        "num_envs": 4,
        "eval_returns": returns,
        "curve": [
            {"env_steps": 500, "eval_returns": [r / 2 for r in returns]},
            {"env_steps": 1000, "eval_returns": returns},
        ],
        "compile_s": 1.0,
        "train_s": 2.0,
        "total_s": 4.5,
        "steps_per_s": 2000,
    }


def test_render_writes_the_table_between_markers_and_one_figure_per_env(
    tmp_path, monkeypatch
):
    import json

    doc = tmp_path / "bench.md"
    begin, end = table.markers("nosticky")
    doc.write_text(
        f"# B\n\nbefore\n\n{table.BEGIN}\nOLDROWS\n{table.END}\n\n"
        f"{begin}\nOLD\n{end}\n\nafter\n"
    )
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(table, "DOC", doc)
    monkeypatch.setattr(table, "RESULTS", results)
    monkeypatch.setattr(table, "FIGURES", tmp_path / "figures")
    from experiments.configs import tuned

    for agent, returns in [("ppo", [500.0, 480.0, 490.0]), ("dqn", [400.0, 500.0])]:
        result = _result(agent, "CartPole-v1", returns)
        if agent == "ppo":  # current; dqn's has no fingerprint, so is stale
            block = tuned(agent, "CartPole-v1")
            result["fingerprint"] = table.fingerprint(block, len(returns))
            result["code"] = table.code_hash()
            held = [500.0] * 22 + [470.0, 300.0]
            result["held_out"] = {
                "returns": held,
                **table.held_out_summary(held, 475.0),
                "fingerprint": table.fingerprint(block, len(returns), 24),
                "code": table.code_hash(),
            }
        path = table.result_path(agent, "CartPole-v1")
        path.write_text(json.dumps(result))
    pairs = [("ppo", "CartPole-v1"), ("dqn", "CartPole-v1"), ("a2c", "Acrobot-v1")]
    table.render(pairs)
    text = doc.read_text()
    assert text.startswith("# B\n\nbefore\n") and text.endswith("\nafter\n")
    assert "OLDROWS" not in text
    assert "| ppo | CartPole-v1 | 1,000 | 3 | 490.0 [" in text
    # Worst seed, held-out seeds at the target (22 of 24: marked), the worst
    # held-out seed, the reference.
    assert "| 480.0 | 22/24 ≥ 475 ✗ | 300.0 | 500 (rl-baselines3-zoo" in text
    assert "| dqn | CartPole-v1 (stale) | 1,000 | 2 | 450.0 [" in text
    assert "| 400.0 | - | - | 500 (rl-baselines3-zoo" in text
    assert "not shipped as a pretrained agent" in text
    assert f"{begin}\nOLD" not in text  # the variant's table, rendered empty
    assert "Not yet measured: a2c:Acrobot-v1." in text
    refs = {"ppo:Breakout-MinAtar": {"return": "22.9-43.4", "source": "blines"}}
    assert table._published(refs, "pqn", "Breakout-MinAtar") == (
        "PPO: 22.9-43.4 (blines)"
    )
    assert table._published(refs, "ppo", "Breakout-MinAtar") == "22.9-43.4 (blines)"
    assert table._published(refs, "ppo", "Asterix-MinAtar") == "-"
    assert (tmp_path / "figures" / "CartPole-v1.png").stat().st_size > 1000
    assert not (tmp_path / "figures" / "Acrobot-v1.png").exists()


def test_fingerprint_follows_config_and_seeds():
    block = {"total_steps": 1000, "num_envs": 4, "hp": {"learning_rate": 1e-3}}
    mark = table.fingerprint(block, 8)
    assert table.fingerprint(dict(block), 8) == mark
    assert table.fingerprint({**block, "num_envs": 8}, 8) != mark
    assert table.fingerprint(block, 4) != mark


def test_a_result_stays_current_while_the_code_computes_the_same_programs(
    monkeypatch,
):
    from experiments.configs import tuned

    block = tuned("ppo", "CartPole-v1")
    result = {
        "agent": "ppo",
        "env": "CartPole-v1",
        "num_seeds": 8,
        "fingerprint": table.fingerprint(block, 8),
        "code": "then",
        "programs": ["init", "chunk", "eval"],
    }
    lowered = []

    def programs(*row):
        lowered.append(row)
        return now

    monkeypatch.setattr(table, "programs", programs)
    monkeypatch.setattr(table, "code_hash", lambda: "then")
    now = ["other"]
    assert table.is_current(result) and not lowered  # same code: nothing lowered
    monkeypatch.setattr(table, "code_hash", lambda: "now")
    now = ["init", "chunk", "eval"]
    assert table.is_current(result)
    assert lowered == [("ppo", "CartPole-v1", 8, "", False)]
    now = ["init", "another chunk", "eval"]
    assert not table.is_current(result)
    assert not table.is_current({**result, "fingerprint": "x", "code": "now"})


def test_measure_records_its_programs_before_training(tmp_path, monkeypatch):
    """A row and its held-out seeds (a protocol variant, where the arguments'
    order matters): what each result records of the code is computed before
    its training starts, so a mistake there costs no training."""
    import argparse

    calls = []

    def programs(agent, env, seeds, variant, held_out):
        calls.append(("programs", agent, env, seeds, variant, held_out))
        return [f"{seeds}-{variant}-{held_out}"]

    def run_pair(agent, env, seeds, variant="", held_out=False):
        calls.append(("train", seeds, variant, held_out))
        if held_out:
            return {"key": 1, "returns": [60.0] * seeds, "total_s": 1.0}
        return {"eval_returns": [55.0] * seeds, "total_s": 2.0}

    monkeypatch.setattr(table, "RESULTS", tmp_path)
    monkeypatch.setattr(table, "programs", programs)
    monkeypatch.setattr(table, "run_pair", run_pair)
    monkeypatch.setattr(table, "code_hash", lambda: "code")
    args = argparse.Namespace(force=False, no_held_out=False)
    table.measure("ppo", "Asterix-MinAtar", "nosticky", 4, args)
    assert calls == [
        ("programs", "ppo", "Asterix-MinAtar", 4, "nosticky", False),
        ("train", 4, "nosticky", False),
        ("programs", "ppo", "Asterix-MinAtar", 4, "nosticky", True),
        ("train", 4, "nosticky", True),
    ]
    result = json.loads(
        table.result_path("ppo", "Asterix-MinAtar", "nosticky").read_text()
    )
    assert result["programs"] == ["4-nosticky-False"] and result["code"] == "code"
    held = result["held_out"]
    assert held["programs"] == ["4-nosticky-True"] and held["at_target"] == 4


def test_unknown_pair_is_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit, match="no tuned block for ppo:Nope-v0"):
        table.main(["--only", "ppo:Nope-v0"])


def test_held_out_summary_counts_seeds_at_the_target():
    x = [500.0] * 23 + [100.0]
    assert table.held_out_summary(x, 475.0) == {
        "worst": 100.0,
        "seeds": 24,
        "target": 475.0,
        "at_target": 23,
        "passed": True,
    }
    assert table.held_out_summary([500.0] * 22 + [1.0, 2.0], 475.0)["passed"] is False
    # With 4 seeds every one must reach it.
    assert table.held_out_summary([30.0, 30.0, 30.0, 20.0], 21.0)["passed"] is False
    assert "target" not in table.held_out_summary([1.0, 2.0], None)
    # A target on the mean: the seeds' mean decides, not how many reach it.
    x = [-200.0] * 23 + [-400.0]
    on_mean = table.held_out_summary(x, -250.0, on_mean=True)
    assert on_mean["mean"] == pytest.approx(-208.333, abs=1e-3)
    assert on_mean["passed"] is True and on_mean["on"] == "mean"
    low = table.held_out_summary([-240.0] * 12 + [-270.0] * 12, -250.0, on_mean=True)
    assert low["passed"] is False and low["at_target"] == 12
    assert "| mean -208.3 of 24 ≥ -250 |" in table._held_out_cells(
        {"held_out": on_mean}
    )
    assert "≥ -250 ✗" in table._held_out_cells({"held_out": low})


def test_targets_cover_every_tuned_single_agent_pair_and_variant():
    import envs
    from experiments import targets

    for agent, env, variant in table.rows():
        if envs.is_multi_agent(env) or variant == "memoryless":
            continue  # memoryless baselines are reported, not held to a target
        target = targets.target(agent, env, variant)
        assert target is not None, (agent, env, variant)
        assert isinstance(target.value, float) and target.source
    assert targets.target("ddpg", "Pendulum-v1").value == -300  # pyright: ignore
    assert targets.target("sac", "Pendulum-v1").value == -250  # pyright: ignore
    # The seed counts: MinAtar's pairs (and their variants' rows) train fewer.
    assert targets.seeds("ppo", "Breakout-MinAtar") == targets.Seeds(4, 4, 2)
    assert targets.seeds("ppo", "CartPole-v1") == targets.Seeds(8, 24, 4)


def test_variants_apply_to_blocks_that_set_their_parameters():
    sticky = {"total_steps": 10, "num_envs": 1, "env_params": {"sticky_prob": 0.1}}
    assert table.variants(sticky) == ["", "nosticky"]
    assert table.variants({"total_steps": 10}) == [""]
    recurrent = {"total_steps": 10, "hp": {"torso": "gru", "cell_size": 8}}
    assert table.variants(recurrent) == ["", "memoryless"]
    assert table.variant_block(recurrent, "memoryless")["hp"] == {
        "torso": "auto",
        "cell_size": 8,
    }
    assert table.variants({"total_steps": 10, "hp": {"torso": "cnn"}}) == [""]
    plain = table.variant_block(sticky, "nosticky")
    assert plain["env_params"] == {"sticky_prob": 0}
    assert sticky["env_params"] == {"sticky_prob": 0.1}  # not changed in place
    assert table.result_path("ppo", "Breakout-MinAtar", "nosticky").name == (
        "ppo__Breakout-MinAtar__nosticky.json"
    )
    assert table.fingerprint(plain, 4) != table.fingerprint(sticky, 4)
    assert table.fingerprint(sticky, 4, 24) != table.fingerprint(sticky, 4)
