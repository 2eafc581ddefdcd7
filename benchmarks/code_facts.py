"""Facts about the code's shape, measured from the source (issue 29 quotes them
before and after the experiments redesign):

    python benchmarks/code_facts.py            # a table
    python benchmarks/code_facts.py --json     # the same, as JSON

- lines in each package and `experiments/`'s share;
- import circles between the modules of one package (every import counts, also
  those inside functions: a circle is what stops a module being read alone);
- the longest functions in `experiments/` and `runners/` (docstrings included)
  and how many are over 60 lines;
- imports of another package's private module (`from runners._evaluate import`),
  outside `tests/`;
- where a config key is written: every place a probe key appears as a name, an
  argument, a keyword or a string in `experiments/`, `runners/` and `benchmarks/`;
- what an addition touches (issue 44): the files outside an agent's module (or
  a suite's) and the tests that name it in code or in the API docs (`PQN`, the
  newest agent; `PlaygroundEnv`, the newest suite);
- tests of an env's name for a suite's rules (`"MinAtar" in env`);
- concrete methods of `zoo/` and `envs/` classes overridden in a subclass
  (Equinox's abstract/final pattern: there should be none).
"""

import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("envs", "zoo", "runners", "experiments")
LONG = 60  # lines; the redesign's limit for one function
PROBE_KEYS = ("keep_checkpoints", "eval_at_start")


def _files(where: str) -> list[Path]:
    return sorted((ROOT / where).rglob("*.py"))


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[str]:
    """Every module `path` imports, absolute, also inside functions."""
    tree, out = ast.parse(path.read_text()), []
    package = _module(path) if path.name == "__init__.py" else _module(path.parent)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            out += [base] + [f"{base}.{a.name}" for a in node.names]
    return out


def lines() -> dict[str, int]:
    return {
        p: sum(len(f.read_text().splitlines()) for f in _files(p)) for p in PACKAGES
    }


def _allowed_imports() -> set[tuple[str, str]]:
    """`(importer, imported)` pairs the acyclic contract in `pyproject.toml`
    ignores, each with its reason there."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    out = set()
    for contract in config["importlinter"]["contracts"]:
        if contract["type"] == "acyclic_siblings":
            for line in contract.get("ignore_imports", []):
                a, b = (x.strip() for x in line.split("->"))
                out.add((a, b))
    return out


def circles() -> list[list[str]]:
    """Strongly connected groups (2 or more) of sibling modules: in package P,
    child `a` depends on child `b` when any module under `a` imports one under
    `b` (except the imports `pyproject.toml`'s acyclic contract ignores)."""
    modules = {_module(f): f for p in PACKAGES for f in _files(p)}
    allowed = _allowed_imports()
    found = []
    for package in sorted({m.rpartition(".")[0] or m for m in modules} | set(PACKAGES)):
        depth = package.count(".") + 1
        children = {
            ".".join(m.split(".")[: depth + 1])
            for m in modules
            if m.startswith(package + ".")
        }
        edges = {c: set() for c in children}
        for name, file in modules.items():
            child = ".".join(name.split(".")[: depth + 1])
            if child not in edges:
                continue
            for target in _imports(file):
                if any(
                    name == a and (target + ".").startswith(b + ".") for a, b in allowed
                ):
                    continue
                other = ".".join(target.split(".")[: depth + 1])
                if other in children and other != child:
                    edges[child].add(other)
        found += [sorted(c) for c in _components(edges) if len(c) > 1]
    return found


def _components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            out.append(group)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def functions(where: tuple[str, ...] = ("experiments", "runners")) -> list[tuple]:
    """`(lines, "file:line name")` of every function, longest first."""
    out = []
    for p in where:
        for f in _files(p):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    n = (node.end_lineno or node.lineno) - node.lineno + 1
                    where_ = f"{f.relative_to(ROOT)}:{node.lineno} {node.name}"
                    out.append((n, where_))
    return sorted(out, reverse=True)


def private_imports() -> list[str]:
    """`importer -> imported` for imports of another package's private module."""
    out = []
    for p in (*PACKAGES, "benchmarks"):
        for f in _files(p):
            mine = _module(f).split(".")[0]
            for target in sorted(set(_imports(f))):
                parts = target.split(".")
                private = len(parts) > 1 and parts[1].startswith("_")
                if parts[0] in PACKAGES and parts[0] != mine and private:
                    out.append(f"{f.relative_to(ROOT)} -> {'.'.join(parts[:2])}")
    return sorted(set(out))


def key_places(key: str) -> list[str]:
    out = []
    for p in ("experiments", "runners", "benchmarks"):
        for f in _files(p):
            if f == Path(__file__).resolve():
                continue  # this file names the probe keys
            for node in ast.walk(ast.parse(f.read_text())):
                hit = (
                    (isinstance(node, ast.Name) and node.id == key)
                    or (isinstance(node, ast.arg) and node.arg == key)
                    or (isinstance(node, ast.keyword) and node.arg == key)
                    or (isinstance(node, ast.Constant) and node.value == key)
                    or (isinstance(node, ast.Attribute) and node.attr == key)
                )
                if hit:
                    out.append(f"{f.relative_to(ROOT)}:{node.lineno}")  # pyright: ignore[reportAttributeAccessIssue]
    return sorted(set(out))


def touches(name: str, module: str) -> list[str]:
    """Files outside `module` (and `tests/`) that name `name` (or import
    `module`) in code, or list it in the API docs (`::: pkg.name`)."""
    own = ROOT / module
    out = set()
    for p in (*PACKAGES, "benchmarks"):
        for f in _files(p):
            if f == own or f == Path(__file__).resolve():
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                hit = (
                    (isinstance(node, ast.Name) and node.id == name)
                    or (isinstance(node, ast.Attribute) and node.attr == name)
                    or (isinstance(node, ast.alias) and node.name == name)
                    or (isinstance(node, ast.ImportFrom) and node.module == own.stem)
                )
                if hit:
                    out.add(str(f.relative_to(ROOT)))
    for f in sorted((ROOT / "docs" / "api").glob("*.md")):
        if f".{name}\n" in f.read_text():
            out.add(str(f.relative_to(ROOT)))
    return sorted(out)


def suite_tests(word: str = "MinAtar") -> list[str]:
    """`file:line` of every `"<word>" in <expression>` outside `tests/`."""
    out = []
    for p in (*PACKAGES, "benchmarks"):
        for f in _files(p):
            for node in ast.walk(ast.parse(f.read_text())):
                if (
                    isinstance(node, ast.Compare)
                    and isinstance(node.left, ast.Constant)
                    and node.left.value == word
                    and any(isinstance(o, ast.In | ast.NotIn) for o in node.ops)
                ):
                    out.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    return out


def classes() -> set[type]:
    """Every class defined in a module of `zoo/` or `envs/` (imported)."""
    import importlib
    import inspect
    import pkgutil
    import sys

    sys.path.insert(0, str(ROOT))
    found = set()
    for name in ("zoo", "envs"):
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            module = importlib.import_module(info.name)
            found |= {
                c
                for _, c in inspect.getmembers(module, inspect.isclass)
                if c.__module__.split(".")[0] in ("zoo", "envs")
            }
    return found


def overridden() -> list[str]:
    """`Class.member overrides Base` for each concrete method or property of
    a class of `zoo/` or `envs/` that a subclass there defines again (the
    dataclass `__init__` and Equinox's stacked `__check_init__` aside)."""
    return overrides(classes())


def overrides(classes: set[type]) -> list[str]:
    """`overridden` over the given classes (bases counted where their module is
    in `zoo` or `envs`)."""

    def abstract(member) -> bool:
        member = member.fget if isinstance(member, property) else member
        return getattr(member, "__isabstractmethod__", False)

    kinds = (property, staticmethod, classmethod)
    out = []
    for cls in classes:
        for name, member in vars(cls).items():
            method = callable(member) or isinstance(member, kinds)
            if name in ("__init__", "__check_init__") or not method:
                continue
            for base in cls.__mro__[1:]:
                if base.__module__.split(".")[0] not in ("zoo", "envs"):
                    continue
                if name in vars(base) and not abstract(vars(base)[name]):
                    out.append(f"{cls.__qualname__}.{name} overrides {base.__name__}")
                    break
    return sorted(out)


def facts() -> dict:
    count = lines()
    longest = functions()
    return {
        "lines": count,
        "experiments_share": round(count["experiments"] / sum(count.values()), 3),
        "circles": circles(),
        "longest_functions": [f"{n} {w}" for n, w in longest[:8]],
        "functions_over_60": sum(1 for n, _ in longest if n > LONG),
        "private_imports": private_imports(),
        "key_places": {k: key_places(k) for k in PROBE_KEYS},
        "new_agent_touches": touches("PQN", "zoo/_pqn.py"),
        "new_suite_touches": touches("PlaygroundEnv", "envs/_playground.py"),
        "suite_name_tests": suite_tests(),
        "overridden": overridden(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    f = facts()
    if args.json:
        print(json.dumps(f, indent=2))
        return
    print("lines:", f["lines"], f"(experiments {f['experiments_share']:.0%})")
    print(f"import circles: {len(f['circles'])}")
    for c in f["circles"]:
        print("  ", " <-> ".join(c))
    print(
        f"functions over {LONG} lines in experiments/ and runners/:",
        f["functions_over_60"],
    )
    for row in f["longest_functions"]:
        print("  ", row)
    print(f"cross-package private imports (outside tests): {len(f['private_imports'])}")
    for row in f["private_imports"]:
        print("  ", row)
    for label in ("new_agent_touches", "new_suite_touches"):
        print(f"{label.replace('_', ' ')}: {len(f[label])}", *f[label])
    print('"MinAtar" in env tests:', len(f["suite_name_tests"]), *f["suite_name_tests"])
    print("concrete methods overridden in zoo/, envs/:", len(f["overridden"]))
    for row in f["overridden"]:
        print("  ", row)
    for key, places in f["key_places"].items():
        files = sorted({p.split(":")[0] for p in places})
        print(f"config key {key!r}: {len(places)} places in {len(files)} files")
        for name in files:
            print("  ", name, sum(1 for p in places if p.startswith(name + ":")))


if __name__ == "__main__":
    main()
