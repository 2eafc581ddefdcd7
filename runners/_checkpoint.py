"""Checkpoints of the whole training carry: one folder per checkpoint.

```
<root>/<env_steps>/state.eqx   the carry (`eqx.tree_serialise_leaves`: NumPy arrays)
<root>/<env_steps>/meta.json   format, versions, the caller's metadata, the
                               carry's structure (each leaf's path, shape, dtype),
                               the SHA-256 of state.eqx, and its own (`checksum`:
                               of every other entry)
```

A checkpoint is written under a temporary name and renamed into place, so a
reader never sees a half-written one; a write that fails (a full disk, a
read-only folder) removes what it wrote and leaves the others as they were. A
flipped byte or a truncated file fails its checksum on load (format version 1,
before checksums, is still read, without them).

Loading never executes code from the files: `meta.json` is JSON and the leaves
are read with `np.load` (pickle disallowed) into a template the caller builds;
the structure in `meta.json` is compared with the template's before any data is
read. `read_meta` and `verify_checkpoint` use only the standard library and
NumPy, so a command line rejects a bad checkpoint before building or compiling
anything (importing `runners` imports JAX, though).
"""

import hashlib
import importlib.metadata
import io
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "equizoo-checkpoint"
VERSION = 2  # 2: checksums
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


def _canonical(meta: dict[str, Any]) -> bytes:
    """The bytes `meta.json`'s own checksum covers: every entry but `checksum`."""
    rest = {k: v for k, v in meta.items() if k != "checksum"}
    return json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _HashingWriter(io.RawIOBase):
    """A write-only file that hashes what passes through it on its way to `f`."""

    def __init__(self, f: Any):
        self.f, self.hash = f, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.hash.update(b)
        return self.f.write(b)

    def checksum(self) -> str:
        return "sha256:" + self.hash.hexdigest()


def save_checkpoint(path: str | Path, state: Any, meta: dict[str, Any]) -> Path:
    """Write `state` (any pytree of arrays, e.g. a `TrainState` with its seed axis)
    and `meta` (JSON-serialisable) to the folder `path`, atomically.

    `meta.json` holds `meta` plus `format`, `version`, `equizoo_version`,
    `structure`, `checksums` (`state.eqx`'s SHA-256) and `checksum` (its own).
    An existing checkpoint at `path` is replaced.

    **Returns:** `path`.

    **Raises:** `OSError` when the folder cannot be written (a full disk, a
    read-only folder), after removing what this call wrote: the checkpoints
    already there are untouched.
    """
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
    try:
        _write(tmp, state, header)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if path.exists():
        old = path.with_name(f".{path.name}.old{_TMP}{os.getpid()}")
        path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old)
    else:
        tmp.rename(path)
    _fsync_dir(path.parent)
    return path


def _write(tmp: Path, state: Any, header: dict[str, Any]) -> None:
    """Both files of a checkpoint into the new folder `tmp`, synced to disk."""
    import equinox as eqx

    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    with (tmp / STATE_FILE).open("wb") as f:
        hashing = _HashingWriter(f)
        try:
            eqx.tree_serialise_leaves(hashing, state)
        except Exception as e:
            # Equinox wraps what a write raised with the leaf's path: a full
            # disk is still an `OSError` to the caller.
            cause: BaseException | None = e
            while cause is not None and not isinstance(cause, OSError):
                cause = cause.__cause__
            if cause is None:
                raise
            raise cause from None
        f.flush()
        os.fsync(f.fileno())
    header = {**header, "checksums": {STATE_FILE: hashing.checksum()}}
    header["checksum"] = _sha256(_canonical(header))
    with (tmp / META_FILE).open("w") as f:
        f.write(json.dumps(header, indent=1) + "\n")
        f.flush()
        os.fsync(f.fileno())


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
    if version >= 2:
        checksum = meta.get("checksum")
        if checksum != _sha256(_canonical(meta)):
            raise CheckpointError(
                f"{str(meta_path)!r} does not match its checksum: it is damaged"
            )
        checksums = meta.get("checksums")
        if not isinstance(checksums, dict) or STATE_FILE not in checksums:
            raise CheckpointError(f"{str(meta_path)!r} has no checksum of {STATE_FILE}")
    if not isinstance(meta.get("structure"), list):
        raise CheckpointError(f"{str(meta_path)!r} has no structure summary")
    return meta


def check_state_bytes(
    state_path: str | Path, meta: dict[str, Any], data: bytes
) -> None:
    """`data`, the bytes of the state file `state_path` (a checkpoint's
    `state.eqx`, or a copy such as a run's final state), against the checksum
    in its `meta` (none in format 1: nothing to check).

    **Raises:** `CheckpointError` when they differ."""
    want = (meta.get("checksums") or {}).get(STATE_FILE)
    if want is not None and _sha256(data) != want:
        raise CheckpointError(
            f"{str(state_path)!r} does not match its checksum in {META_FILE}: "
            "the file is damaged"
        )


def verify_checkpoint(
    path: str | Path, meta: dict[str, Any] | None = None, *, data: bool = True
) -> None:
    """Check that `state.eqx` holds exactly the leaves `meta.json` lists (shapes,
    dtypes, sizes, from the array headers: a truncated or padded file, or one
    from another structure, fails here) and, with `data`, that its bytes match
    the checksum in `meta.json` (a flipped byte fails here). No JAX.

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
    if data:
        check_state_bytes(state_path, meta, state_path.read_bytes())


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
    verify_checkpoint(path, meta, data=False)
    data = (path / STATE_FILE).read_bytes()
    check_state_bytes(path / STATE_FILE, meta, data)
    try:
        state = eqx.tree_deserialise_leaves(io.BytesIO(data), like)
    except Exception as e:
        raise CheckpointError(
            f"{str(path / STATE_FILE)!r} could not be read ({e})"
        ) from None
    return state, meta
