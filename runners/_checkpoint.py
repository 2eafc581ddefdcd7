"""Checkpoints of the whole training carry: one folder per checkpoint.

```
<root>/<env_steps>/state.eqx   the carry (`eqx.tree_serialise_leaves`: NumPy arrays)
<root>/<env_steps>/meta.json   format, versions, the caller's metadata, and the
                               carry's structure (each leaf's path, shape, dtype)
```

A checkpoint is written under a temporary name and renamed into place, so a
reader never sees a half-written one. Loading never executes code from the files:
`meta.json` is JSON and the leaves are read with `np.load` (pickle disallowed) into
a template the caller builds; the structure in `meta.json` is compared with the
template's before any data is read. `read_meta` and `verify_checkpoint` use only
the standard library and NumPy and read no data, so a command line rejects a bad
checkpoint before building or compiling anything (importing `runners` imports
JAX, though).
"""

import importlib.metadata
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "equizoo-checkpoint"
VERSION = 1
STATE_FILE = "state.eqx"
META_FILE = "meta.json"
_TMP = ".tmp-"


class CheckpointError(ValueError):
    """A checkpoint that is missing, damaged, or not the one asked for."""


def equizoo_version() -> str:
    try:
        return importlib.metadata.version("equizoo")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def structure(tree: Any) -> list[dict[str, Any]]:
    """Path, shape and dtype of every leaf `eqx.tree_serialise_leaves` writes, in
    the order it writes them. Works on arrays and on `jax.ShapeDtypeStruct`s."""
    import jax
    import jax.numpy as jnp

    out = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if isinstance(leaf, jax.Array | jax.ShapeDtypeStruct | np.ndarray):
            shape, dtype = leaf.shape, leaf.dtype
        elif isinstance(leaf, bool | int | float | complex | np.generic):
            array = jnp.asarray(leaf)
            shape, dtype = array.shape, array.dtype
        else:
            continue  # not serialised
        out.append(
            {
                "path": jax.tree_util.keystr(path),
                "shape": [int(n) for n in shape],
                "dtype": str(np.dtype(dtype)),
            }
        )
    return out


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(path: str | Path, state: Any, meta: dict[str, Any]) -> Path:
    """Write `state` (any pytree of arrays, e.g. a `TrainState` with its seed axis)
    and `meta` (JSON-serialisable) to the folder `path`, atomically.

    `meta.json` holds `meta` plus `format`, `version`, `equizoo_version` and
    `structure`. An existing checkpoint at `path` is replaced.

    **Returns:** `path`.
    """
    import equinox as eqx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "equizoo_version": equizoo_version(),
        **meta,
        "structure": structure(state),
    }
    tmp = path.with_name(f".{path.name}{_TMP}{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    with (tmp / STATE_FILE).open("wb") as f:
        eqx.tree_serialise_leaves(f, state)
        f.flush()
        os.fsync(f.fileno())
    with (tmp / META_FILE).open("w") as f:
        f.write(json.dumps(header, indent=1) + "\n")
        f.flush()
        os.fsync(f.fileno())
    if path.exists():
        old = path.with_name(f".{path.name}.old{_TMP}{os.getpid()}")
        path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old)
    else:
        tmp.rename(path)
    _fsync_dir(path.parent)
    return path


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints under `root` (folders named by their env steps, with
    both files), oldest first. Temporary folders of unfinished writes are skipped."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.name.isdigit() and (p / META_FILE).is_file() and (p / STATE_FILE).is_file()
    ]
    return sorted(found, key=lambda p: int(p.name))


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint under `root`, or `None`."""
    found = list_checkpoints(root)
    return found[-1] if found else None


def prune_checkpoints(root: str | Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints under `root`, and what
    interrupted writes left behind."""
    root = Path(root)
    for path in list_checkpoints(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(path, ignore_errors=True)
    if root.is_dir():
        for path in root.iterdir():
            if path.name.startswith(".") and _TMP in path.name:
                shutil.rmtree(path, ignore_errors=True)


def read_meta(path: str | Path) -> dict[str, Any]:
    """`meta.json` of the checkpoint folder `path`, checked to be one we can read.

    **Raises:** `CheckpointError` saying what is wrong.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint folder {str(path)!r}")
    meta_path = path / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{str(path)!r} has no {META_FILE}") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{str(meta_path)!r} is not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{str(meta_path)!r} is not an equizoo checkpoint")
    version = meta.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise CheckpointError(
            f"{str(path)!r} was written by a newer equizoo (checkpoint format "
            f"{version!r}, equizoo {meta.get('equizoo_version')}); upgrade to read it"
        )
    if not isinstance(meta.get("structure"), list):
        raise CheckpointError(f"{str(meta_path)!r} has no structure summary")
    return meta


def verify_checkpoint(path: str | Path, meta: dict[str, Any] | None = None) -> None:
    """Check, reading only array headers, that `state.eqx` holds exactly the
    leaves `meta.json` lists (shapes, dtypes, sizes): a truncated or padded file,
    or one from another structure, fails here. No JAX, no data read.

    **Raises:** `CheckpointError`.
    """
    path = Path(path)
    meta = read_meta(path) if meta is None else meta
    state_path = path / STATE_FILE
    if not state_path.is_file():
        raise CheckpointError(f"{str(path)!r} has no {STATE_FILE}")
    leaves = meta["structure"]
    with state_path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        for i, leaf in enumerate(leaves):
            where = f"{str(state_path)!r}, leaf {i} {leaf.get('path', '')}"
            try:
                major, minor = np.lib.format.read_magic(f)
                if (major, minor) == (1, 0):
                    header = np.lib.format.read_array_header_1_0(f)
                else:
                    header = np.lib.format.read_array_header_2_0(f)
                shape, _, dtype = header
            except (ValueError, OSError, EOFError) as e:
                raise CheckpointError(
                    f"{where}: damaged or truncated ({e}); {STATE_FILE} is {size} bytes"
                ) from None
            if list(shape) != leaf["shape"] or str(dtype) != leaf["dtype"]:
                raise CheckpointError(
                    f"{where}: holds {dtype}{list(shape)} but {META_FILE} says "
                    f"{leaf['dtype']}{leaf['shape']}"
                )
            if dtype.hasobject:
                raise CheckpointError(f"{where}: object arrays are not allowed")
            f.seek(math.prod(shape) * dtype.itemsize, os.SEEK_CUR)
            if f.tell() > size:
                raise CheckpointError(
                    f"{where}: truncated ({STATE_FILE} is {size} bytes, its data "
                    f"runs to byte {f.tell()})"
                )
        if f.tell() != size:
            raise CheckpointError(
                f"{str(state_path)!r}: {size - f.tell()} unexpected bytes after "
                f"the {len(leaves)} leaves {META_FILE} lists"
            )


def load_checkpoint(
    path: str | Path, like: Any, *, expect: dict[str, Any] | None = None
) -> tuple[Any, dict[str, Any]]:
    """Read the checkpoint folder `path` into the structure of `like`.

    **Arguments:**

    - `like`: a pytree with the carry's structure, e.g.
      `runners.state_template(agent, env, num_envs=..., total_steps=...,
      num_seeds=...)`; its leaves' shapes and dtypes must match the checkpoint's.
    - `expect`: entries `meta.json` must have (e.g. `{"agent": "dqn", "env":
      "CartPole-v1"}`), checked first.

    **Returns:** `(state, meta)`.

    **Raises:** `CheckpointError` naming the first mismatch (metadata, leaf path,
    shape or dtype), or a damaged file.
    """
    import equinox as eqx

    path = Path(path)
    meta = read_meta(path)
    for key, value in (expect or {}).items():
        if meta.get(key) != value:
            raise CheckpointError(
                f"{str(path)!r} is a checkpoint of {key}={meta.get(key)!r}, "
                f"not {value!r}"
            )
    want = structure(like)
    have = meta["structure"]
    for i, (w, h) in enumerate(zip(want, have, strict=False)):
        if w != h:
            raise CheckpointError(
                f"{str(path)!r} does not fit the requested run: leaf {i} is "
                f"{h.get('path')} {h.get('dtype')}{h.get('shape')} in the "
                f"checkpoint, {w['path']} {w['dtype']}{w['shape']} expected"
            )
    if len(want) != len(have):
        raise CheckpointError(
            f"{str(path)!r} does not fit the requested run: {len(have)} leaves in "
            f"the checkpoint, {len(want)} expected"
        )
    verify_checkpoint(path, meta)
    with (path / STATE_FILE).open("rb") as f:
        try:
            state = eqx.tree_deserialise_leaves(f, like)
        except Exception as e:
            raise CheckpointError(
                f"{str(path / STATE_FILE)!r} could not be read ({e})"
            ) from None
    return state, meta
