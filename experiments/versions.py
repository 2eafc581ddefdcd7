"""The versions that decide what a result or a published agent is: Python's and
the numerical libraries'. Recorded by `benchmarks/table.py` and
`experiments.publish`."""

import functools
import platform

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
