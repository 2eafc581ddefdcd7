"""`experiments.analysis.stats` (IQM, stratified bootstrap CI) and `experiments.plot` on
synthetic run folders written as Sacred's FileStorageObserver writes them."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from experiments import plot
from experiments.analysis import compare as _compare, stats

# --- statistics ---------------------------------------------------------------


def test_iqm_is_the_mean_of_the_middle_half():
    x = np.array([-200.0, 10, 1, 3, 2, 4, 5, 900])
    assert stats.iqm(x) == pytest.approx((2 + 3 + 4 + 5) / 4)
    both = stats.iqm(np.stack([x, x + 1]), axis=1)
    np.testing.assert_allclose(both, [3.5, 4.5])


def test_iqm_is_scipys_trim_mean_to_the_bit():
    # NumPy alone (experiments.run records every run's IQM; scipy.stats would
    # add half a second to its start), computed as trim_mean computes it.
    from scipy.stats import trim_mean

    rng = np.random.default_rng(0)
    for n in range(1, 13):
        for dtype in ("float32", "float64", "int64"):
            x = (rng.normal(size=(3, n)) * 100).astype(dtype)
            for axis in (-1, 0):
                ours, theirs = stats.iqm(x, axis), trim_mean(x, 0.25, axis=axis)
                assert ours.dtype == np.asarray(theirs).dtype
                np.testing.assert_array_equal(ours, theirs)
    assert stats.iqm([3.0]) == 3.0 and math.isnan(stats.iqm([]))


def test_ci_contains_the_iqm_and_narrows_with_more_seeds():
    rng = np.random.default_rng(1)
    few, many = rng.normal(100, 10, 8), rng.normal(100, 10, 64)
    low, high = stats.iqm_ci([few])
    assert low <= stats.iqm(few) <= high
    low_many, high_many = stats.iqm_ci([many])
    assert high_many - low_many < high - low
    assert stats.iqm_ci([[500.0] * 8, [500.0] * 3]) == (500.0, 500.0)


def test_each_stratum_is_resampled_only_within_itself():
    # Two constant strata: every resample pools four 0s and four 10s.
    assert stats.iqm_ci([[0.0] * 4, [10.0] * 4]) == (5.0, 5.0)
    # Sizes are kept: two 0s and six 10s, whose middle half is all 10s.
    assert stats.iqm_ci([[0.0] * 2, [10.0] * 6]) == (10.0, 10.0)
    # Two values from each stratum: the middle two are one low, one high, so
    # the IQM lies in [50, 51]; a pooled bootstrap would reach 0 or 101.
    low, high = stats.iqm_ci([[0.0, 1.0], [100.0, 101.0]])
    assert 50 <= low < high <= 51
    pooled = stats.iqm_ci([[0.0, 1.0, 100.0, 101.0]])
    assert pooled[0] < 10 and pooled[1] > 90


def test_one_stratum_is_scipys_percentile_bootstrap():
    from scipy.stats import bootstrap

    x = np.random.default_rng(2).normal(0, 1, 10)
    for seed in (0, 3):
        ours = stats.iqm_ci([x], level=0.9, resamples=2_000, seed=seed)
        theirs = bootstrap(
            (x,),
            stats.iqm,
            confidence_level=0.9,
            n_resamples=2_000,
            method="percentile",
            vectorized=True,
            rng=np.random.default_rng(seed),
        ).confidence_interval
        np.testing.assert_allclose(ours, (theirs.low, theirs.high), rtol=1e-9)
    assert stats.iqm_ci([x], seed=5) == stats.iqm_ci([x], seed=5)
    assert stats.iqm_ci([x], seed=5) != stats.iqm_ci([x], seed=6)


def test_bad_strata_are_refused():
    with pytest.raises(ValueError, match=r"one per stratum.*\[x\]"):
        stats.iqm_ci([1.0, 2.0, 3.0])  # a flat array, not a list of strata
    with pytest.raises(ValueError, match="empty"):
        stats.iqm_ci([[1.0, 2.0], []])
    with pytest.raises(ValueError, match="non-finite"):
        stats.iqm_ci([[1.0, math.nan]])


# --- run folders as Sacred writes them ----------------------------------------


def _series(steps, values):
    return {
        "steps": list(steps),
        "timestamps": ["2026-12-02T05:29:25.000000"] * len(steps),
        "values": [float(v) for v in values],
    }


def write_run(
    folder,
    *,
    agent="ppo",
    env="CartPole-v1",
    returns,  # [evaluation][seed]
    steps=None,
    hp=None,
    env_params=None,
    status="COMPLETED",
    sweep=None,
    members=None,
):
    """A run folder like `python -m experiments.run ... -F DIR` leaves: config,
    run and metrics records (the format checked against a real run)."""
    returns = np.asarray(returns, dtype=np.float64)
    steps = steps or [2048 * (i + 1) for i in range(len(returns))]
    num_seeds = returns.shape[1] if sweep is None else len(returns[0]) // len(members)
    folder.mkdir(parents=True)
    config = {
        "agent": agent,
        "env": env,
        "env_params": env_params or {},
        "hp": {"learning_rate": 0.0025, "gamma": 0.99, **(hp or {})},
        "num_seeds": num_seeds,
        "seed": 0,
        "sweep": sweep or {},
        "sweep_samples": 0,
        "total_steps": steps[-1],
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    run = {"artifacts": [], "command": "main", "status": status, "result": None}
    (folder / "run.json").write_text(json.dumps(run, indent=2))
    metrics = {}
    if sweep is None:
        metrics["eval.return_mean"] = _series(steps, returns.mean(axis=1))
        metrics["eval.return_std"] = _series(steps, returns.std(axis=1))
        if num_seeds > 1:
            for i in range(num_seeds):
                metrics[f"eval.return.seed_{i}"] = _series(steps, returns[:, i])
    else:  # a sweep records each member's mean over its seeds
        for m in range(len(members)):
            seeds = returns[:, m * num_seeds : (m + 1) * num_seeds]
            metrics[f"member_{m}.eval.return_mean"] = _series(steps, seeds.mean(1))
        table = [
            {"member": m, **row, "return_mean": 0.0, "return_worst": 0.0}
            for m, row in enumerate(members)
        ]
        (folder / "info.json").write_text(json.dumps({"members": table}))
    metrics["train.episode_return"] = _series(steps, returns.mean(axis=1))
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return str(folder)


def _curve(final, seeds, evaluations=5, seed=0):
    """Returns rising to `final` (per seed, spread 10)."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0.2, 1, evaluations)[:, None]
    return ramp * (final + rng.normal(0, 10, (1, seeds)))


def test_compare_groups_pools_seeds_and_writes_png_and_svg(tmp_path):
    runs = [
        write_run(tmp_path / "1", returns=_curve(400, 3, seed=1)),
        write_run(tmp_path / "2", returns=_curve(420, 2, seed=2)),
        write_run(tmp_path / "3", agent="dqn", returns=_curve(150, 4, seed=3)),
        write_run(tmp_path / "4", env="Acrobot-v1", returns=_curve(-90, 3, seed=4)),
    ]
    out = tmp_path / "figs" / "cmp"
    result = plot.compare(runs, out=out)
    assert [p.name for p in result["files"]] == ["cmp.png", "cmp.svg"]
    assert (out.parent / "cmp.png").read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in (out.parent / "cmp.svg").read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["cmp.png", "cmp.svg"]
    groups = {(g["label"], g["env"]): g for g in result["groups"]}
    assert list(groups) == [
        ("ppo", "CartPole-v1"),
        ("dqn", "CartPole-v1"),
        ("ppo", "Acrobot-v1"),
    ]
    ppo = groups["ppo", "CartPole-v1"]
    assert ppo["runs"] == runs[:2] and ppo["seeds"] == 5
    assert ppo["steps"] == [2048, 4096, 6144, 8192, 10240]
    finals = [json.loads((tmp_path / r / "metrics.json").read_text()) for r in "12"]
    pooled = [
        m[f"eval.return.seed_{i}"]["values"][-1]
        for m, n in zip(finals, (3, 2), strict=True)
        for i in range(n)
    ]
    assert ppo["final_iqm"] == pytest.approx(float(stats.iqm(np.array(pooled))))
    low, high = ppo["final_ci"]
    assert low <= ppo["final_iqm"] <= high
    bands = zip(ppo["low"], ppo["iqm"], ppo["high"], strict=True)
    assert all(lo <= c <= hi for lo, c, hi in bands)
    assert len(result["summary"]) == 3
    assert result["summary"][0].split()[:8] == [
        "ppo", "CartPole-v1", "runs", "2", "seeds", "5", "final", "IQM",
    ]  # fmt: skip


def test_by_a_dotted_key_orders_numbers_and_a_sweep_splits_or_pools(tmp_path):
    members = [{"learning_rate": 0.001}, {"learning_rate": 0.01}]
    a = write_run(tmp_path / "a", hp={"learning_rate": 0.01}, returns=_curve(300, 3))
    b = write_run(tmp_path / "b", hp={"learning_rate": 0.001}, returns=_curve(200, 3))
    sweep = write_run(
        tmp_path / "s",
        returns=np.hstack([_curve(100, 2), _curve(250, 2, seed=5)]),
        sweep={"learning_rate": [0.001, 0.01]},
        members=members,
    )
    by_agent = plot.compare([a, sweep], out=tmp_path / "x")
    assert [g["label"] for g in by_agent["groups"]] == [
        "ppo",
        "ppo learning_rate=0.001",
        "ppo learning_rate=0.01",
    ]
    member = by_agent["groups"][1]
    assert member["seed_means_only"] and math.isnan(member["final_ci"][0])
    assert "seed means only" in by_agent["summary"][1]
    by_lr = plot.compare([a, b, sweep], by="hp.learning_rate", out=tmp_path)
    assert (tmp_path / "compare.png").exists()  # a folder: compare.* inside
    labels = [g["label"] for g in by_lr["groups"]]
    assert labels == ["learning_rate=0.001", "learning_rate=0.01"]
    assert by_lr["groups"][0]["runs"] == [b, f"{sweep} member 0"]
    # A sweep still running has no member table: its members go by index.
    (tmp_path / "s" / "info.json").unlink()
    with pytest.raises(plot.PlotError, match="member table"):
        plot.compare([sweep], by="hp.learning_rate", out=tmp_path / "y")
    running = plot.compare([sweep], out=tmp_path / "y")
    assert [g["label"] for g in running["groups"]] == ["ppo member=0", "ppo member=1"]


def test_runs_share_their_common_steps_and_single_seeds_pool(tmp_path):
    long = write_run(tmp_path / "1", returns=_curve(400, 3, evaluations=6))
    short = write_run(tmp_path / "2", returns=_curve(380, 2, evaluations=4))
    one = write_run(tmp_path / "3", returns=_curve(390, 1, evaluations=4))
    result = plot.compare([long, short, one], out=tmp_path / "x")
    (group,) = result["groups"]
    assert group["steps"] == [2048, 4096, 6144, 8192] and group["final_step"] == 8192
    assert "the last step all its runs share" in result["notes"][0]
    # A one-seed run's value joins a stratum of its own; it is in the pool.
    assert group["seeds"] == 6 and math.isfinite(group["final_ci"][0])
    (only,) = _compare._group(_compare._load(one, "eval.return", "agent"), "agent")
    alone = _compare._summarise(only, 100, 0)
    assert math.isnan(alone["final_ci"][0])
    assert _compare._ci_text(alone) == "[no CI: one seed]"


def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys):
    good = write_run(tmp_path / "1", returns=_curve(400, 3))
    (tmp_path / "empty").mkdir()
    running = tmp_path / "2"
    write_run(running, returns=_curve(400, 3), status="RUNNING")
    metrics = json.loads((running / "metrics.json").read_text())
    (running / "metrics.json").write_text(
        json.dumps({"train.episode_return": metrics["train.episode_return"]})
    )
    params = write_run(
        tmp_path / "3", returns=_curve(400, 3), env_params={"max_steps": 200}
    )
    apart = write_run(
        tmp_path / "4", returns=_curve(400, 3), steps=[1000, 3000, 5000, 7000, 9000]
    )
    cases = [
        ([str(tmp_path / "empty")], "not a run folder"),
        ([str(tmp_path)], f"it holds runs: pass them, e.g. {tmp_path}/1"),
        ([str(tmp_path / "nope")], "no such folder"),
        ([good, str(running)], "no evaluations of eval.return yet (status RUNNING"),
        ([good, params], "different env_params"),
        ([good, apart], "share no evaluation step"),
        ([good, "--by", "hp.momentum"], "no key 'hp.momentum'"),
        ([good, good + "/"], "given twice"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exc:
            plot.main([*argv, "--out", str(tmp_path / "never")])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "never.png").exists()


def test_the_command_prints_a_line_per_group_and_the_files(tmp_path, capsys):
    run = write_run(tmp_path / "1", returns=_curve(400, 3))
    assert plot.main([run, "--out", str(tmp_path / "o.png"), "--title", "T"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ppo  CartPole-v1  runs 1  seeds 3  final IQM ")
    assert out[-1] == f"wrote {tmp_path}/o.png {tmp_path}/o.svg"


def test_the_module_imports_neither_jax_nor_sacred():
    code = (
        "import sys, experiments.plot; "
        "print([m for m in sys.modules if m.split('.')[0] in ('jax', 'sacred')])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
