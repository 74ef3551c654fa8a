"""Budget planning for evaluation cells: will this (design, context length) fit?

Each design's prefill is timed on this machine at a few short lengths and fitted as
t(n) = a n + b n^2 (linear designs get b ~ 0; designs with full-attention or MSA layers get
the quadratic term), and the cache bytes as c + d n. A cell whose estimate exceeds the time
left or the memory allowed is recorded as ``skipped`` with the estimate, never run blind.

Not to be confused with attnbench/bench/planner.py: that one predicts seconds and bytes from
the cost model, without timing anything; this one times the real prefill on this machine and
plans the evaluation cells from those timings (experiments/longctx/plan.py uses it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import psutil
import torch

from attnbench.designs import spec_of
from attnbench.evaluation.streaming import PeakRSS
from attnbench.model import Model

CALIBRATION_LENGTHS = (2048, 8192, 16384)
# Designs with an attending softmax or msa layer: their n^2 term is small against the linear one
# below 16K, so a fit from short lengths alone can miss it (msa at 256K once took 8.7x its
# estimate); a point at 32K pins it.
QUADRATIC_LENGTHS = (4096, 16384, 32768)


@dataclass
class Estimate:
    seconds: float
    bytes: float
    how: str

    def as_fields(self) -> dict:
        return {"estimated_s": round(self.seconds, 1), "estimated_bytes": int(self.bytes), "estimate": self.how}


@dataclass
class Calibration:
    a: float  # seconds per token
    b: float  # seconds per token^2
    c: float  # fixed cache bytes
    d: float  # cache bytes per token
    work_bytes: float  # working memory of one prefill chunk beyond the cache
    lengths: tuple[int, ...]  # the calibration's prefills
    times: tuple[float, ...] = ()  # their seconds
    quadratic: bool = False
    measured: tuple[tuple[int, float], ...] = ()  # (n, seconds) of this run's evaluated prefills

    def estimate(self, n: int, passes: int = 1) -> Estimate:
        seconds = passes * (self.a * n + self.b * n * n)
        timed = f"prefill timed here at n = {', '.join(map(str, self.lengths))}"
        if self.measured:
            timed += f" and in this run's cells at n = {', '.join(str(m) for m, _ in self.measured)}"
        return Estimate(
            seconds,
            self.c + self.d * n + self.work_bytes,
            f"t = {self.a:.3g} n + {self.b:.3g} n^2 s, cache = {self.c:.3g} + {self.d:.3g} n B ({timed})",
        )

    def with_measurement(self, n: int, seconds: float) -> Calibration:
        """Refit the time with one more measured prefill (an evaluated haystack of n tokens).

        Fitted from short prefills only, the time of a quadratic design 8x past its longest
        calibration length came out 1.35x too low (experiments/needle_4m_rerun); each cell the
        run measures pins the fit nearer the lengths still to come. A length measured again
        keeps its latest time.
        """
        measured = tuple((m, t) for m, t in self.measured if m != n) + ((n, seconds),)
        points = {**dict(zip(self.lengths, self.times)), **dict(measured)}
        ns = np.asarray(sorted(points), dtype=np.float64)
        a, b = _fit_time(ns, np.asarray([points[int(m)] for m in ns]), self.quadratic)
        return replace(self, a=a, b=b, measured=measured)


def _fit_time(ns: np.ndarray, ts: np.ndarray, quadratic: bool) -> tuple[float, float]:
    """Least squares t = a n + b n^2 with a, b >= 0 (drop a term that comes out negative).

    Designs whose prefill is linear by construction get b = 0: on a busy machine, timing
    noise would otherwise invent a quadratic term and make long contexts look impossible.
    """
    if not quadratic:
        return float(np.sum(ts * ns) / np.sum(ns * ns)), 0.0
    A = np.stack([ns, ns**2], axis=1)
    a, b = np.linalg.lstsq(A, ts, rcond=None)[0]
    if b < 0:
        return float(np.sum(ts * ns) / np.sum(ns * ns)), 0.0
    if a < 0:
        return 0.0, float(np.sum(ts * ns**2) / np.sum(ns**4))
    return float(a), float(b)


@torch.no_grad()
def is_quadratic(model: Model) -> bool:
    """Prefill cost is quadratic only through softmax or msa layers that attend (not the last
    layer, which only writes its cache during a prefill: Model.prefill)."""
    return any(spec_of(c).quadratic for c in model.layout[:-1])


# Prefill chunk of the designs whose layers do not attend across chunks (eval.chunk for the
# others): their big per-chunk intermediates (projections, MoE rows) stay under 32 MiB, which glibc
# would map afresh on every call (page faults). A softmax or msa layer pays a masked attention for
# every chunk after the first, so those designs take the longer eval.chunk.
LINEAR_CHUNK = 16384


def prefill_chunk(model: Model, chunk: int) -> int:
    """The prefill chunk of this model: eval.chunk, or at most LINEAR_CHUNK for a linear design."""
    return chunk if is_quadratic(model) else min(chunk, LINEAR_CHUNK)


def calibration_lengths(model: Model, longest: int) -> tuple[int, ...]:
    """CALIBRATION_LENGTHS, or QUADRATIC_LENGTHS for a quadratic design; a grid whose longest
    context is shorter is timed at longest / 8, / 2 and itself (nothing longer than it evaluates)."""
    lengths = QUADRATIC_LENGTHS if is_quadratic(model) else CALIBRATION_LENGTHS
    if longest >= lengths[-1]:
        return lengths
    return tuple(sorted({max(256, longest // 8), max(256, longest // 2), longest}))


def measure_prefill(model: Model, device: torch.device, chunk: int, vocab_size: int, lengths: tuple[int, ...]) -> Calibration:
    """Time and peak memory of this model's chunked prefill at a few short lengths (calibration_lengths),
    the basis of the eval planner's estimates (not bench.calibrate.calibrate, which fits the machine's roofline)."""
    gen = torch.Generator().manual_seed(0)
    times, sizes, work = [], [], 0.0
    for n in lengths:
        idx = torch.randint(vocab_size, (1, n), generator=gen).to(device)
        cache = model.new_cache()
        cache.reserve(n)
        with PeakRSS() as peak:
            before = psutil.Process().memory_info().rss
            start = time.perf_counter()
            for s in range(0, n, chunk):
                model.prefill(idx[:, s : s + chunk], cache)
            times.append(time.perf_counter() - start)
        sizes.append(cache.nbytes())
        work = max(work, (peak.peak - before - cache.nbytes()) * max(1.0, chunk / n))
        del cache
    ns = np.asarray(lengths, dtype=np.float64)
    a, b = _fit_time(ns, np.asarray(times), quadratic=is_quadratic(model))
    d = (sizes[-1] - sizes[0]) / (lengths[-1] - lengths[0])
    c = max(0.0, sizes[0] - d * lengths[0])
    return Calibration(a, b, c, d, max(0.0, work), tuple(lengths), tuple(times), is_quadratic(model))


def memory_allowed(fraction: float) -> float:
    return fraction * psutil.virtual_memory().available
