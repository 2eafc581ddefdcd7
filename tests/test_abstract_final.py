"""Equinox's abstract/final pattern, checked over every class of `zoo/` and
`envs/`: a method (or property) is either abstract or implemented once, so no
class overrides a concrete method of a base in these packages."""

import importlib
import inspect
import pkgutil

import envs
import zoo

PACKAGES = ("zoo", "envs")


def _classes() -> set[type]:
    found = set()
    for package in (zoo, envs):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            found |= {
                c
                for _, c in inspect.getmembers(module, inspect.isclass)
                if c.__module__.split(".")[0] in PACKAGES
            }
    return found


def _abstract(member) -> bool:
    if isinstance(member, property):
        member = member.fget
    return getattr(member, "__isabstractmethod__", False)


def _method(member) -> bool:
    return inspect.isfunction(member) or isinstance(
        member, property | staticmethod | classmethod
    )


def overrides(classes: set[type]) -> list[str]:
    """`Class.name overrides Base` for every concrete member a class
    redefines (dataclass `__init__`s and Equinox's stacked `__check_init__`s
    aside: each class's runs)."""
    out = []
    for cls in classes:
        for name, member in vars(cls).items():
            if name in ("__init__", "__check_init__") or not _method(member):
                continue
            for base in cls.__mro__[1:]:
                if base.__module__.split(".")[0] not in PACKAGES:
                    continue
                if name in vars(base) and not _abstract(vars(base)[name]):
                    out.append(f"{cls.__qualname__}.{name} overrides {base.__name__}")
                    break
    return sorted(out)


def test_no_concrete_method_is_overridden():
    classes = _classes()
    assert {zoo.DQN, zoo.SAC, envs.ClipAction, envs.AbstractEnv} <= classes
    assert overrides(classes) == []


def test_the_check_sees_an_override():
    def hook(self):
        return ()

    here = {"__module__": "zoo.example"}
    base = type("Base", (), {**here, "carry": hook, "name": property(hook)})
    child = type("Child", (base,), {**here, "carry": hook})
    grandchild = type("Grandchild", (child,), {**here, "name": property(hook)})
    assert overrides({base, child, grandchild}) == [
        "Child.carry overrides Base",
        "Grandchild.name overrides Base",
    ]
