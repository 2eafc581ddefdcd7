"""The versions that decide what a result or a published agent is: Python's and
the numerical libraries'. Recorded by `benchmarks/table.py` and
`experiments.publish`."""

import functools
import platform

LIBRARIES = ("jax", "jaxlib", "equinox", "optax", "gymnax", "numpy")


@functools.cache
def versions() -> dict[str, str]:
    """`{"python": ..., "<library>": ...}` ("absent" for one not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out
