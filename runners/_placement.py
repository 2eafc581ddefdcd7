"""Where a run's runs go: the devices, the padding to fill them, the mesh, the
keys and hyperparameters laid out per run, and fetching results (across
processes in a multi-process run)."""

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.experimental import multihost_utils
from jaxtyping import PRNGKeyArray

from ._hparams import Sweep, run_hparams
from ._reports import PeerLostError


def fetch(tree: Any, *, multi_process: bool) -> Any:
    """`tree` as NumPy arrays on the host. In a multi-process run each process
    holds only its devices' runs: every process must call this at the same point,
    and gets every run's values."""
    if not multi_process:
        return jax.device_get(tree)
    try:
        return multihost_utils.process_allgather(tree, tiled=True)
    except jax.errors.JaxRuntimeError as e:
        raise PeerLostError.of(str(e).splitlines()[0]) from None


def select_devices(devices: int | Sequence[Any] | None) -> list[Any]:
    available = jax.devices()
    if devices is None:
        return list(available)
    if jax.process_count() > 1 and devices not in (len(available), available):
        raise ValueError(
            f"devices={devices!r}: a run of {jax.process_count()} processes trains "
            f"on all their {len(available)} devices; leave devices unset (None)"
        )
    if isinstance(devices, int) and not isinstance(devices, bool):
        if not 1 <= devices <= len(available):
            raise ValueError(
                f"devices={devices}: this process sees {len(available)} "
                f"{available[0].platform} device(s); pass 1 to {len(available)}, "
                "or None for all"
            )
        return list(available[:devices])
    chosen = [] if isinstance(devices, bool | int) else list(devices)
    if not chosen or any(d not in available for d in chosen):
        raise ValueError(
            f"devices must be a number or a non-empty list of jax.devices(), got "
            f"{devices!r}"
        )
    return chosen


def _available_bytes(devices: list[Any]) -> int | None:
    """Memory this process's share of the runs can use: what its accelerators
    report, else the host's."""
    stats = [d.memory_stats() for d in devices]
    if all(s and "bytes_limit" in s for s in stats):
        return sum(s["bytes_limit"] - s.get("bytes_in_use", 0) for s in stats)  # pyright: ignore[reportOptionalSubscript, reportOptionalMemberAccess]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class MemoryLimitError(ValueError):
    """A run whose training state would not fit in the memory left."""


def check_memory(state_shape: Any, *, num_runs: int, devices: list[Any]) -> None:
    """A `MemoryLimitError` when the training state (held twice: a chunk's input
    and output; a replay buffer or an on-policy rollout is part of it) would not
    fit in the memory left, before anything compiles."""
    total = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state_shape))
    # This process holds its own devices' share of the runs.
    local = [d for d in devices if d.process_index == jax.process_index()]
    nbytes = total * len(local) // len(devices)
    available = _available_bytes(local)
    if available is None or 2 * nbytes <= available:
        return
    gib = 2**30
    share = "" if len(local) == len(devices) else "this process's share of "
    raise MemoryLimitError(
        f"{num_runs} run(s) need about {2 * total / gib:.1f} GiB for their "
        f"training state ({total / num_runs / 2**20:.0f} MiB per run, held twice); "
        f"{share}that is more than the {available / gib:.1f} GiB available on "
        f"{devices[0].platform}: train fewer seeds or sweep members at once, "
        "shrink the replay buffer (buffer_size), or add devices"
    )


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a run's runs (members x seeds) sit: `devices`, with the runs padded
    to `padded` (a multiple of the device count; the padding repeats the last
    run, trains and is dropped), sharded over a one-axis mesh when there are
    several devices. `seed_keys`, `eval_keys` and `hparams` are laid out per run
    (run `r` is member `r // num_seeds`, seed `r % num_seeds`)."""

    devices: list[Any]
    multi_process: bool
    num_runs: int
    padded: int
    sharding: Any
    seed_keys: jax.Array  # [padded] keys (or raw [padded, 2])
    eval_keys: jax.Array
    hparams: dict[str, jax.Array]

    def fetch(self, tree: Any) -> Any:
        """`tree` on the host, every process's runs (see `fetch`)."""
        return fetch(tree, multi_process=self.multi_process)

    def unpad(self, tree: Any) -> Any:
        """`tree` without the padding runs."""
        if self.padded == self.num_runs:
            return tree
        return jax.tree.map(lambda x: x[: self.num_runs], tree)

    def pad(self, state: Any) -> Any:
        """A given state (`num_runs` runs) padded and placed as the runs are."""
        if self.padded != self.num_runs:
            extra = self.padded - self.num_runs
            state = jax.tree.map(
                lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], extra, 0)]), state
            )
        if self.sharding is not None:
            state = jax.device_put(state, self.sharding)
        return state


def place(
    key: PRNGKeyArray,
    *,
    num_seeds: int,
    num_members: int,
    sweep: Sweep | None,
    devices: int | Sequence[Any] | None,
    bitwise: bool,
) -> Placement:
    """Lay out `num_members * num_seeds` runs over `devices` (see `runners.run`)."""
    num_runs = num_members * num_seeds
    # By default all devices, but never more than there are runs to place (in a
    # multi-process run, all: every process trains its devices' share).
    multi_process = jax.process_count() > 1
    limit = num_runs if devices is None and not multi_process else None
    run_devices = select_devices(devices)[:limit]
    per_device = -(-num_runs // len(run_devices))
    if bitwise:
        # XLA compiles a batch of one run apart (its size-1 axis is dropped, and
        # other kernels round differently): give every device at least two.
        per_device = max(per_device, 2)
    padded = per_device * len(run_devices)
    sharding = None
    if len(run_devices) > 1:
        mesh = jax.make_mesh(
            (len(run_devices),),
            ("runs",),
            axis_types=(jax.sharding.AxisType.Auto,),
            devices=run_devices,
        )
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))
    seed_keys = jr.split(key, num_seeds)
    if padded != num_seeds:
        # Run r is member r // num_seeds with seed r % num_seeds; padding repeats
        # the last run.
        seed_keys = seed_keys[np.minimum(np.arange(padded), num_runs - 1) % num_seeds]
    hparams = {
        n: jnp.asarray(v) for n, v in run_hparams(sweep, num_seeds, padded).items()
    }
    if sharding is not None:
        seed_keys, hparams = jax.device_put((seed_keys, hparams), sharding)
    eval_keys = jax.vmap(lambda k: jr.fold_in(k, 0x5EED))(seed_keys)
    return Placement(
        run_devices,
        multi_process,
        num_runs,
        padded,
        sharding,
        seed_keys,
        eval_keys,
        hparams,
    )
