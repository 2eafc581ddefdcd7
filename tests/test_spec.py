"""The run specification: a config key is written once, as a field of
`RunSpec`, and the Sacred config scope, its docs, `main`, the validation and the
resume check follow."""

import dataclasses
import json

import pytest

from experiments._errors import ConfigError
from experiments._spec import KEYS, RunSpec, key, keys_of

TINY = {
    "agent": "dqn",
    "total_steps": 1000,
    "eval_episodes": 2,
    "checkpoint_every": 500,
    "hp.hidden_sizes": [16],
    "hp.buffer_size": 500,
    "hp.learning_starts": 100,
    "progress": False,
    "compilation_cache": False,
}


def _note(value):
    if not isinstance(value, str):
        raise ConfigError(f"note: expected a string, got {value!r}")


@dataclasses.dataclass(frozen=True)
class WithNote(RunSpec):
    # The one place the new key is written.
    note: str = key(
        "a free-text note kept with the run",
        default=lambda c: f"{c['agent']} on {c['env']}",
        check=_note,
    )


@pytest.fixture(scope="module")
def noted():
    from experiments.run import experiment

    return experiment(WithNote)


def test_every_key_is_a_field_with_a_doc_and_a_default():
    names = [k.name for k in KEYS]
    assert names == [f.name for f in dataclasses.fields(RunSpec)]
    assert len(names) == len(set(names)) == 26
    assert all(k.doc and callable(k.default) for k in KEYS)
    assert [k.name for k in keys_of(WithNote)] == [*names, "note"]


def test_a_new_key_shows_in_print_config_with_its_doc_and_default(noted, capfd):
    run = noted.run("print_config", config_updates={"agent": "ppo"})
    assert run.config["note"] == "ppo on CartPole-v1"
    out = capfd.readouterr().out
    assert "note = 'ppo on CartPole-v1'" in out
    assert "# a free-text note kept with the run" in out
    with pytest.raises(ConfigError, match="note: expected a string, got 3"):
        noted.run("print_config", config_updates={"note": 3})
    with pytest.raises(ConfigError, match=r"nota: unknown config key\. Did you mean"):
        noted.run("print_config", config_updates={"nota": "x"})


def test_a_new_key_is_recorded_reaches_main_and_resumes(noted, tmp_path):
    from experiments import _training

    seen = []
    train = _training.train

    def spy(spec, sink, t_start):
        seen.append(spec)
        return train(spec, sink, t_start)

    options = {"--file_storage": str(tmp_path)}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_training, "train", spy)
        run = noted.run(config_updates={**TINY, "note": "first"}, options=options)
        assert run.status == "COMPLETED"
        assert isinstance(seen[-1], WithNote) and seen[-1].note == "first"
        folder = tmp_path / str(run._id)
        assert json.loads((folder / "config.json").read_text())["note"] == "first"
        # A resumed run takes the key from its original...
        again = noted.run(
            config_updates={"resume": str(folder), "total_steps": 2000}, options=options
        )
        assert again.status == "COMPLETED" and again.config["note"] == "first"
        assert seen[-1].note == "first"
    # ... and refuses another value, naming it.
    with pytest.raises(ConfigError, match="note: 'other' conflicts with the run in"):
        noted.run(
            "print_config",
            config_updates={
                "resume": str(folder),
                "total_steps": 3000,
                "note": "other",
            },
        )
