"""The versions that decide what a result or a published agent is: Python's,
the numerical libraries' and the code's commit. Recorded by
`benchmarks/table.py` and `experiments.publish`."""

import functools
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LIBRARIES = ("jax", "jaxlib", "equinox", "optax", "gymnax", "numpy")


def version_of(name: str) -> str:
    """The installed version of the distribution `name` ("absent" if none)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


@functools.cache
def versions() -> dict[str, str]:
    """`{"python": ..., "<library>": ...}` ("absent" for one not installed)."""
    out = {"python": platform.python_version()}
    out.update((name, version_of(name)) for name in LIBRARIES)
    return out


def git_commit(
    paths: list[str], *, short: bool = False
) -> tuple[str, list[str]] | None:
    """`(HEAD's commit, the uncommitted changes under paths)` of the checkout
    holding the code, the changes as `git status --porcelain` lines; `None`
    where it is not a git checkout (or git is missing)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", *(["--short"] if short else []), "HEAD")
        changes = git("status", "--porcelain", "--", *paths)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head, changes.splitlines()
