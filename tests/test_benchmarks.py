"""The benchmark script's command-line parsing (the runs themselves are timed, so
they live in benchmarks/, not here)."""

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "speed", Path(__file__).parent.parent / "benchmarks" / "speed.py"
)
assert _SPEC is not None and _SPEC.loader is not None
speed = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(speed)


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
