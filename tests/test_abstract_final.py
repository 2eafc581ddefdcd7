"""Equinox's abstract/final pattern, checked over every class of `zoo/` and
`envs/`: a method (or property) is either abstract or implemented once, so no
class overrides a concrete method of a base in these packages. The walk is
`benchmarks/code_facts.py`'s (`overridden`), which reports the same count."""

import envs
import zoo


def test_no_concrete_method_is_overridden(code_facts):
    classes = code_facts.classes()
    assert {zoo.DQN, zoo.SAC, envs.ClipAction, envs.AbstractEnv} <= classes
    assert code_facts.overrides(classes) == []


def test_the_check_sees_an_override(code_facts):
    def hook(self):
        return ()

    here = {"__module__": "zoo.example"}
    base = type("Base", (), {**here, "carry": hook, "name": property(hook)})
    child = type("Child", (base,), {**here, "carry": hook})
    grandchild = type("Grandchild", (child,), {**here, "name": property(hook)})
    assert code_facts.overrides({base, child, grandchild}) == [
        "Child.carry overrides Base",
        "Grandchild.name overrides Base",
    ]
