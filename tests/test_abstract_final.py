"""Equinox's abstract/final pattern, checked over every class of `zoo/` and
`envs/`: a method (or property) is either abstract or implemented once, so no
class overrides a concrete method of a base in these packages. The walk is
`benchmarks/code_facts.py`'s (`overridden`), which reports the same count."""

import importlib.util
from pathlib import Path

import envs
import zoo

ROOT = Path(__file__).resolve().parent.parent


def _facts():
    spec = importlib.util.spec_from_file_location(
        "code_facts", ROOT / "benchmarks" / "code_facts.py"
    )
    assert spec is not None and spec.loader is not None
    facts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(facts)
    return facts


def test_no_concrete_method_is_overridden():
    facts = _facts()
    classes = facts.classes()
    assert {zoo.DQN, zoo.SAC, envs.ClipAction, envs.AbstractEnv} <= classes
    assert facts.overrides(classes) == []


def test_the_check_sees_an_override():
    def hook(self):
        return ()

    here = {"__module__": "zoo.example"}
    base = type("Base", (), {**here, "carry": hook, "name": property(hook)})
    child = type("Child", (base,), {**here, "carry": hook})
    grandchild = type("Grandchild", (child,), {**here, "name": property(hook)})
    assert _facts().overrides({base, child, grandchild}) == [
        "Child.carry overrides Base",
        "Grandchild.name overrides Base",
    ]
