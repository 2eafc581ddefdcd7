"""Statistics over seeds: the interquartile mean and its stratified bootstrap CI.

The methodology of rliable (Agarwal et al. 2021, "Deep Reinforcement Learning
at the Edge of the Statistical Precipice"), in NumPy and SciPy only: rliable
itself needs `arch`, whose release fails to import with pandas 3.

Only NumPy and SciPy are imported (no JAX), so that `experiments.plot` and
`benchmarks/table.py` start fast.
"""

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike


def iqm(x: ArrayLike, axis: int = -1) -> np.ndarray:
    """The interquartile mean along `axis`: the mean of the middle half, the
    lowest and highest quarter cut off (`scipy.stats.trim_mean(x, 0.25)`; with
    8 values, the mean of the middle 4; with fewer than 4, the mean).

    Computed as `trim_mean` computes it (the same partition and mean, so the
    same bits) in NumPy alone: `experiments.run` records the IQM of every run's
    seeds, and importing `scipy.stats` would add about half a second to each."""
    a = np.asarray(x)
    if a.size == 0:
        return np.asarray(np.nan)
    n = a.shape[axis]
    low = int(0.25 * n)
    high = n - low
    kept = np.take(np.partition(a, (low, high - 1), axis), range(low, high), axis)
    if not np.issubdtype(kept.dtype, np.inexact):
        kept = kept.astype(np.float64)
    return np.asarray(np.mean(kept, axis=axis))


def _strata(samples_by_stratum: Sequence[ArrayLike]) -> list[np.ndarray]:
    if isinstance(samples_by_stratum, np.ndarray) and samples_by_stratum.ndim == 2:
        samples_by_stratum = list(samples_by_stratum)
    strata = []
    for s in samples_by_stratum:
        a = np.asarray(s, dtype=np.float64)
        if a.ndim != 1:
            raise ValueError(
                "iqm_ci takes a sequence of 1-D arrays, one per stratum "
                f"(got an element of shape {a.shape}); for one stratum pass [x]"
            )
        if a.size == 0:
            raise ValueError("iqm_ci: a stratum is empty")
        if not np.isfinite(a).all():
            raise ValueError("iqm_ci: a stratum holds a non-finite value")
        strata.append(a)
    if not strata:
        raise ValueError("iqm_ci: no strata")
    return strata


def iqm_ci(
    samples_by_stratum: Sequence[ArrayLike],
    level: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Stratified percentile-bootstrap confidence interval of the IQM.

    Each stratum (one run's seeds, one task's runs, ...) is resampled with
    replacement within itself, keeping its size; the IQM is taken over the
    pooled resample (all strata together), `resamples` times; the interval is
    the `(1 - level) / 2` and `(1 + level) / 2` quantiles of those IQMs
    (`scipy.stats.quantile`, linear). A stratum's resamples only ever draw from
    that stratum, so strata of different sizes keep their weight in the pool.
    This is rliable's stratified bootstrap (`rly.get_interval_estimates` with
    `method="percentile"`) with our strata as its tasks and our samples as its
    runs, except that strata may differ in size (rliable takes a matrix).

    Vectorised: one `[resamples, n_k]` index array per stratum, no loop over
    resamples; memory is about `16 * resamples * n` bytes for `n` values in all.
    Deterministic given `seed` (`np.random.default_rng(seed)`, the strata drawn
    in order).

    With one stratum this is `scipy.stats.bootstrap((x,), iqm,
    method="percentile", n_resamples=resamples, rng=np.random.default_rng(seed))`
    draw for draw: the same index array (`rng.integers(0, n, (resamples, n))`)
    and the same quantiles, so the same interval to the last bit (which is what
    `benchmarks/table.py` computed before it used this function).

    **Arguments:**

    - `samples_by_stratum`: a sequence of 1-D arrays (or a 2-D array
      `[stratum, sample]`); for one stratum pass `[x]`.
    - `level`: the confidence level.
    - `resamples`: the bootstrap resamples.
    - `seed`: the seed of the resampling.

    **Returns:** `(low, high)`; `(v, v)` when every value is `v` (nothing to
    resample).
    """
    strata = _strata(samples_by_stratum)
    if not 0 < level < 1:
        raise ValueError(f"iqm_ci: level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"iqm_ci: resamples must be positive, got {resamples}")
    pooled = np.concatenate(strata)
    if np.ptp(pooled) == 0:  # every value equal: nothing to resample
        return float(pooled[0]), float(pooled[0])
    from scipy.stats import quantile

    rng = np.random.default_rng(seed)
    draws = [s[rng.integers(0, s.size, (resamples, s.size))] for s in strata]
    stats = iqm(np.concatenate(draws, axis=1), axis=-1)  # [resamples]
    alpha = (1 - level) / 2
    low, high = quantile(stats, np.array([alpha, 1 - alpha]))
    return float(low), float(high)
