"""The one training core from Python: `experiments.train(spec, sink)`, with a
recorder that is not Sacred, and the run folder's header read from every
format written so far."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "old_runs" / "runs"
TINY = {
    "agent": "dqn",
    "total_steps": 1000,
    "eval_every": 500,
    "eval_episodes": 2,
    "num_seeds": 2,
    "hp": {"hidden_sizes": [16], "buffer_size": 500, "learning_starts": 100},
    "progress": False,
    "compilation_cache": False,
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny DQN run through the core, into a sink that keeps everything."""
    import experiments

    kept = tmp_path_factory.mktemp("kept")

    class Keep(experiments.Sink):
        """A recorder of our own: series in a dict, artifacts copied."""

        def __init__(self, config):
            self.info, self.config, self.series = {}, config, {}

        @property
        def recording(self):
            return True

        def log(self, name, value, step):
            assert type(value) is float  # never a jax.Array
            self.series.setdefault(name, []).append((step, value))

        def artifact(self, path, name=None):
            shutil.copy(path, kept / (name or Path(path).name))

        def close_interrupted(self):
            raise AssertionError("not interrupted")

    spec = experiments.RunSpec.resolve(**TINY)
    sink = Keep(spec.config())
    return spec, sink, experiments.train(spec, sink), kept


def test_the_core_records_into_any_sink(trained):
    spec, sink, outcome, kept = trained
    result = outcome.results[0]
    per_seed = result.final_returns.mean(axis=1)
    assert outcome.value == pytest.approx(float(per_seed.mean()))
    assert sink.info["final_returns"] == pytest.approx(per_seed.tolist())
    assert sink.info["env_steps"] == result.reports[-1].env_steps >= 1000
    steps = [s for s, _ in sink.series["eval.return_mean"]]
    assert steps == [r.env_steps for r in result.reports if r.eval_returns is not None]
    assert len(steps) == 2 and "eval.return.seed_1" in sink.series
    assert "train.loss" in sink.series and "perf.steps_per_s" in sink.series
    assert {p.name for p in kept.iterdir()} >= {
        "final_state.eqx",
        "final_state.json",
        "eval_returns.json",
        "learning_curve.png",
    }
    # The final state artifact holds the header of the run's spec.
    from experiments.record.folder import Header

    header = Header.read(kept / "final_state.json")
    assert (header.agent, header.env, header.runs) == ("dqn", "CartPole-v1", 2)
    assert header.config == spec.config()


def test_the_core_without_a_sink_records_nothing(tmp_path, monkeypatch):
    import experiments

    monkeypatch.chdir(tmp_path)
    spec = experiments.RunSpec.resolve(**{**TINY, "num_seeds": 1, "eval_every": None})
    outcome = experiments.train(spec)
    assert list(tmp_path.iterdir()) == []  # no runs/, no checkpoints
    assert outcome.info["env_steps"] == outcome.results[0].reports[-1].env_steps
    assert np.isfinite(outcome.value)
    agent, env = spec.build()
    assert type(outcome.agent) is type(agent) and outcome.env.name == env.name


def test_headers_of_every_format_read():
    from experiments.record.folder import Header

    meta = json.loads(
        next((FIXTURES / "2" / "checkpoints").glob("*/meta.json")).read_text()
    )
    header = Header.from_json(meta)
    # Written back, the header is the file's, key for key and in order.
    written = {k: v for k, v in meta.items() if k in header.to_json()}
    assert list(header.to_json().items()) == list(written.items())
    # Older headers: no env parameters, sweeps, plan, config or run id yet.
    old = {k: meta[k] for k in ("agent", "env", "hp", "seed", "num_seeds")}
    old.update(num_envs=4, total_steps=4096)
    header = Header.from_json(old)
    assert header.env_params == {} and header.config == {} and header.runs == 2
    assert header.plan is None and header.run_id is None
    with pytest.raises(ValueError, match="the header records no 'hp'"):
        Header.from_json({k: v for k, v in old.items() if k != "hp"})


def test_run_folder_finds_states_and_records(tmp_path):
    from experiments.record.folder import RunFolder

    folder = RunFolder(FIXTURES / "1")
    assert folder.is_record() and folder.config()["agent"] == "dqn"
    assert folder.checkpointed_steps() == 2016
    assert folder.latest_checkpoint() == folder.checkpoints / "2016"
    assert folder.saved_state()[1] == folder.path / "final_state.json"
    # A sweep's folder keeps no final state: its newest checkpoint loads.
    sweep = RunFolder(FIXTURES / "3")
    assert sweep.saved_state()[1].parent == sweep.latest_checkpoint()
    assert folder.program_checkpoints(1, 3) == folder.checkpoints / "program_1"
    assert folder.program_checkpoints(0, 1) == folder.checkpoints
    with pytest.raises(FileNotFoundError, match="no final state"):
        RunFolder(tmp_path).saved_state()
    assert not RunFolder(tmp_path).is_record()
