"""Intervals for accuracies (no torch: the report imports this)."""

from __future__ import annotations

import math


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for k successes in n trials.

    Written out (five lines) rather than importing scipy/statsmodels for one formula.
    """
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED = 10_000, 0


def cluster_bootstrap(
    hits: list[float], sizes: list[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of pooled accuracy sum(hits) / sum(sizes) with the cluster
    (a haystack: its probes share one context) as the unit: clusters are resampled with
    replacement, ``resamples`` times, from a numpy Generator seeded with ``seed``.

    numpy rather than scipy.stats.bootstrap: scipy is not a dependency, and resampling whole
    clusters of unequal size is a ratio statistic its API does not take directly.
    """
    import numpy as np

    h, s = np.asarray(hits, dtype=float), np.asarray(sizes, dtype=float)
    if len(h) == 0 or s.sum() == 0:
        return 0.0, 1.0
    idx = np.random.default_rng(seed).integers(0, len(h), (resamples, len(h)))
    stat = h[idx].sum(axis=1) / np.maximum(s[idx].sum(axis=1), 1e-12)
    tail = (1 - level) / 2
    lo, hi = np.quantile(stat, [tail, 1 - tail])
    return float(lo), float(hi)
