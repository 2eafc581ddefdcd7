"""The documentation site's promises: every tutorial's Python code runs as
written, and the API reference names every public name of the packages."""

import inspect
import re
from pathlib import Path

import pytest

import envs
import experiments
import runners
import zoo

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
# A fenced block of Python at the start of a line; other languages (bash) and
# indented blocks inside lists are shown, not run.
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def python_code(page: Path) -> str:
    """A page's Python blocks, joined in order as one program; blank lines keep
    each block's line numbers in tracebacks."""
    text = page.read_text()
    code = [""] * text.count("\n")
    for match in PYTHON_BLOCK.finditer(text):
        first = text.count("\n", 0, match.start(1))
        for i, line in enumerate(match.group(1).splitlines()):
            code[first + i] = line
    return "\n".join(code)


def test_tutorials_are_found():
    assert len(TUTORIALS) == 8
    for page in TUTORIALS:
        assert python_code(page).strip(), f"{page.name} has no Python to run"


# Two tutorials train agents to stated returns: learning tests, so marked slow.
@pytest.mark.slow
@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs(page, tmp_path, monkeypatch, request):
    # A tutorial runs from a checkout's root; it gets a scratch folder that
    # holds what it reads of the repository, so what it writes is thrown away.
    monkeypatch.chdir(tmp_path)
    # The experiment would turn JAX's persistent cache on for the whole session.
    monkeypatch.setenv("EQUIZOO_COMPILATION_CACHE", "0")
    if page.stem == "sacred":  # its MongoDB server: mongomock, as Sacred tests it
        request.getfixturevalue("mongo_client")
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    code = compile(python_code(page), str(page), "exec")
    exec(code, {"__name__": f"tutorial_{page.stem}"})


def documented() -> set[str]:
    found = set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        found |= set(re.findall(r"^::: ([\w.]+)$", page.read_text(), re.MULTILINE))
    return found


@pytest.mark.parametrize("package", [zoo, envs, runners, experiments])
def test_api_reference_names_every_public_name(package):
    public = {
        f"{package.__name__}.{name}"
        for name, value in vars(package).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public, package
    missing = sorted(public - documented())
    assert not missing, f"add these to docs/api/{package.__name__}.md: {missing}"


@pytest.mark.parametrize("package", [zoo, envs, runners, experiments])
def test_public_classes_and_functions_have_docstrings(package):
    bare = []
    for name, value in vars(package).items():
        if name.startswith("_") or not (inspect.isclass(value) or callable(value)):
            continue
        own = value.__dict__.get("__doc__") if inspect.isclass(value) else None
        doc = own if inspect.isclass(value) else value.__doc__
        # A dataclass without a docstring gets its signature as one.
        if not doc or doc.startswith(f"{value.__name__}("):
            bare.append(name)
    assert not bare, f"{package.__name__}: no docstring on {bare}"


def test_api_reference_signatures_show_fields_and_shapes_as_written(monkeypatch):
    """The griffe extensions of `mkdocs.yml`: an Equinox module gets its fields
    as its constructor's signature, and jaxtyping shapes keep their quotes."""
    griffe = pytest.importorskip("griffe", reason="the docs extra is not installed")
    monkeypatch.syspath_prepend(str(ROOT / "docs"))
    from _griffe_equinox import AsWritten, EquinoxInit

    extensions = griffe.load_extensions(AsWritten, EquinoxInit)
    loader = griffe.GriffeLoader(extensions=extensions, search_paths=[str(ROOT)])
    probe = loader.load("envs")["ProbeState"].final_target
    params = probe.members["__init__"].parameters
    assert [p.name for p in params] == ["self", "obs", "time"]
    assert str(params["obs"].annotation) == 'Float[Array, "1"]'
    dqn = loader.load("zoo")["DQN"].final_target
    params = dqn.members["__init__"].parameters
    assert str(params["learning_rate"].annotation) == "float"
    assert params["learning_rate"].default == "0.001"
    assert params["hidden_sizes"].default == "(64, 64)"
    # A hand-written constructor is kept as it is.
    actor = loader.load("zoo")["DiscreteActor"].final_target
    assert "num_actions" in actor.members["__init__"].parameters
    scale = loader.load("zoo")["scale_action"].final_target
    assert str(scale.returns) == 'Float[Array, " n"]'
