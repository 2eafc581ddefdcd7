"""Observation and action spaces."""

from typing import final

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray


@final
class Discrete(eqx.Module):
    """The integers `0, ..., n - 1`."""

    n: int = eqx.field(static=True)

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self):
        return jnp.int32

    def sample(self, *, key: PRNGKeyArray) -> Int[Array, ""]:
        return jr.randint(key, (), 0, self.n)

    def contains(self, x) -> bool:
        x = np.asarray(x)
        return bool(x.shape == () and 0 <= int(x) < self.n)


@final
class Box(eqx.Module):
    """A box in `R^shape` with elementwise bounds (which may be infinite).

    Bounds are held as tuples so that a `Box` is hashable and static under
    `eqx.filter_jit`; `low` and `high` give them back as NumPy arrays.
    """

    shape: tuple[int, ...] = eqx.field(static=True)
    _low: tuple[float, ...] = eqx.field(static=True)
    _high: tuple[float, ...] = eqx.field(static=True)

    def __init__(self, low, high, shape: tuple[int, ...] | None = None):
        low = np.asarray(low, dtype=np.float32)
        high = np.asarray(high, dtype=np.float32)
        if shape is None:
            shape = np.broadcast_shapes(low.shape, high.shape)
        self.shape = tuple(int(s) for s in shape)
        self._low = tuple(float(v) for v in np.broadcast_to(low, self.shape).ravel())
        self._high = tuple(float(v) for v in np.broadcast_to(high, self.shape).ravel())

    @property
    def low(self) -> np.ndarray:
        return np.asarray(self._low, dtype=np.float32).reshape(self.shape)

    @property
    def high(self) -> np.ndarray:
        return np.asarray(self._high, dtype=np.float32).reshape(self.shape)

    @property
    def dtype(self):
        return jnp.float32

    def __repr__(self) -> str:
        def bound(values: tuple[float, ...]) -> str:
            if len(set(values)) == 1:  # one value for every dimension
                return repr(values[0])
            return np.array2string(
                np.asarray(values).reshape(self.shape), threshold=8, precision=4
            )

        return (
            f"Box(low={bound(self._low)}, high={bound(self._high)}, shape={self.shape})"
        )

    @property
    def bounded(self) -> bool:
        return bool(np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high)))

    def sample(self, *, key: PRNGKeyArray) -> Float[Array, "..."]:
        low = np.where(np.isfinite(self.low), self.low, -1.0)
        high = np.where(np.isfinite(self.high), self.high, 1.0)
        return jr.uniform(key, self.shape, minval=low, maxval=high)

    def contains(self, x) -> bool:
        x = np.asarray(x)
        return bool(
            x.shape == self.shape and np.all(x >= self.low) and np.all(x <= self.high)
        )


Space = Discrete | Box
