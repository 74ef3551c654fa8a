"""Crossover context lengths: the smallest n from which a design is cheaper than a baseline.

Measured: from costs at measured lengths (both designs measured at the same lengths, in the same
process). The crossover is the sign change of log(cost / baseline cost) after which the design
stays cheaper up to the largest length; it is log-log interpolated between the two measured
lengths that bracket it (exact for power laws, such as a linear and a quadratic cost). If the
design is already cheaper at the smallest length the answer is "< min"; if it is not cheaper at
the largest, "> max": the value is then None, never extrapolated.

Analytic: the same rule on a cost function (the cost model), searched on a log grid and refined
by bisection to the integer.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def _result(value, relation, lo, hi, crossings, method) -> dict:
    return {"value": value, "relation": relation, "bracket": [lo, hi], "crossings": int(crossings), "method": method}


def measured(lengths: Sequence[int], cost: Sequence[float], baseline: Sequence[float]) -> dict:
    """Crossover of `cost` below `baseline`, both measured at `lengths` (increasing)."""
    n = np.asarray(lengths, dtype=float)
    r = np.log(np.asarray(cost, dtype=float)) - np.log(np.asarray(baseline, dtype=float))
    if len(n) == 0 or not np.all(np.isfinite(r)):
        raise ValueError("need finite positive costs at one or more lengths")
    cheaper = r < 0
    crossings = int(np.count_nonzero(cheaper[1:] != cheaper[:-1]))  # > 1: noise or a real double crossing
    if not cheaper[-1]:
        return _result(None, ">", int(n[-1]), None, crossings, "measured")
    if cheaper.all():
        return _result(None, "<", None, int(n[0]), crossings, "measured")
    i = int(np.flatnonzero(~cheaper)[-1])  # last length where it is not cheaper
    lo, hi = n[i], n[i + 1]
    frac = r[i] / (r[i] - r[i + 1])  # where log ratio reaches 0 between the two, linear in log n
    value = float(np.clip(np.exp(np.log(lo) + frac * (np.log(hi) - np.log(lo))), lo, hi))  # clip: rounding only
    return _result(value, "=", int(lo), int(hi), crossings, "measured")


def analytic(
    cost: Callable[[int], float], baseline: Callable[[int], float], *, n_min: int = 1, n_max: int = 1 << 26, per_octave: int = 8
) -> dict:
    """Crossover of two cost functions of n on [n_min, n_max] (integers)."""
    grid = np.unique(np.round(np.geomspace(n_min, n_max, int(per_octave * np.log2(n_max / n_min)) + 2)).astype(int))
    r = np.array([np.log(cost(int(x))) - np.log(baseline(int(x))) for x in grid])
    cheaper = r < 0
    crossings = int(np.count_nonzero(cheaper[1:] != cheaper[:-1]))
    if not cheaper[-1]:
        return _result(None, ">", int(grid[-1]), None, crossings, "analytic")
    if cheaper.all():
        return _result(None, "<", None, int(grid[0]), crossings, "analytic")
    i = int(np.flatnonzero(~cheaper)[-1])
    lo, hi = int(grid[i]), int(grid[i + 1])  # not cheaper at lo, cheaper at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if cost(mid) < baseline(mid):
            hi = mid
        else:
            lo = mid
    return _result(float(hi), "=", int(grid[i]), int(grid[i + 1]), crossings, "analytic")


def describe(res: dict) -> str:
    """'4,096', '> 65,536', '< 256' for tables and logs."""
    if res["relation"] == ">":
        return f"> {res['bracket'][0]:,}"
    if res["relation"] == "<":
        return f"< {res['bracket'][1]:,}"
    return f"{res['value']:,.0f}"
