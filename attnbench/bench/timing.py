"""Timing with warm-up, device synchronisation and repeats; medians with spread.

CPU: ``torch.utils.benchmark.Timer.blocked_autorange`` (it handles warm-up and picks the
number of runs per measurement). CUDA: ``triton.testing.do_bench`` (flushes L2, syncs).
Compare designs as ratios of timings taken in the same process. Every timing carries the
1-minute load average before and after it, and is `noisy` when either exceeded the core count by NOISY_MARGIN
(other processes then share the cores: the time is an upper bound). efficiency() turns a FLOP
count and a time into achieved GFLOP/s and the fraction of a calibrated peak.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch


@dataclass
class Timing:
    median_ms: float
    p25_ms: float
    p75_ms: float
    n: int  # measurements the median is over
    method: str  # torch.utils.benchmark | triton.do_bench
    device: str
    load: float = -1.0  # 1-minute load average of the machine when the timing ended (os.getloadavg)
    load_before: float = -1.0  # ... when it started
    noisy: bool = False  # the load exceeded the core count by half a core before or after (cores shared)

    def as_dict(self) -> dict:
        return asdict(self)

    def fields(self) -> dict:
        """What a latency record carries besides its value."""
        return {
            "p25_ms": self.p25_ms,
            "p75_ms": self.p75_ms,
            "n": self.n,
            "method": self.method,
            "load": self.load,
            "load_before": self.load_before,
            "noisy": self.noisy,
        }


# A run's own threads hold the load near the core count (2.0-2.1 on 2 cores with 2 threads, in
# experiments/needle_4m/run): only half a core more than that is somebody else's work.
NOISY_MARGIN = 0.5


def noisy(*loads: float) -> bool:
    """True when any 1-minute load average exceeds this machine's core count by NOISY_MARGIN."""
    return max(loads) > (os.cpu_count() or 1) + NOISY_MARGIN


def efficiency(flops: float, seconds: float, peak_flops: float | None) -> dict:
    """Achieved GFLOP/s of `flops` done in `seconds`, and the fraction of `peak_flops` (FLOP/s)."""
    if not seconds or seconds <= 0:
        return {}
    out = {"flops": float(flops), "gflop_per_s": flops / seconds / 1e9}
    if peak_flops:
        out["peak_fraction"] = flops / seconds / peak_flops
    return out


def two_term(flops: float, nbytes: float, seconds: float, peak_flops: float | None, bandwidth: float | None) -> dict:
    """An op against its two-term roofline (the limit of memory-bound work is its bytes, not its FLOPs): the
    larger of its minimal FLOPs at the compute peak and its minimal bytes at the memory bandwidth, both
    calibrated in the same process. ``limit_fraction`` = that limit over the measured time; ``bound``
    names the larger term. {} without a time or either ceiling."""
    if not seconds or seconds <= 0 or not peak_flops or not bandwidth:
        return {}
    compute_s, memory_s = flops / peak_flops, nbytes / bandwidth
    limit_s = max(compute_s, memory_s)
    return {
        "min_flops": float(flops),
        "min_bytes": float(nbytes),
        "intensity": float(flops / nbytes) if nbytes else float("inf"),  # FLOPs a byte
        "limit_s": limit_s,
        "bound": "compute" if compute_s >= memory_s else "memory",
        "limit_fraction": limit_s / seconds,
    }


def time_fn(fn: Callable[[], object], device: torch.device, *, min_run_time: float = 0.5, warmup: int = 1, repeats: int = 3) -> Timing:
    """Time ``fn()`` (which must do all its work before returning, or on ``device``).

    At least ``repeats`` (>= 3 by default) measurements are taken, even when one call outlasts
    ``min_run_time``: a long baseline is the median of 3 single calls, never one call.
    """
    before = os.getloadavg()[0]
    if device.type == "cuda":
        import triton.testing

        ms = triton.testing.do_bench(fn, warmup=25, rep=max(100, int(min_run_time * 1000)), return_mode="all")
        q = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else [ms[0]] * 3
        after = os.getloadavg()[0]
        return Timing(
            statistics.median(ms),
            q[0],
            q[2],
            len(ms),
            "triton.do_bench",
            torch.cuda.get_device_name(device),
            after,
            before,
            noisy(before, after),
        )
    import torch.utils.benchmark as benchmark

    start = time.perf_counter()
    for _ in range(warmup):
        fn()
    one_call = (time.perf_counter() - start) / max(warmup, 1)
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    # a call longer than min_run_time: no block-size search, just `repeats` single calls
    times = [] if one_call >= min_run_time else [t * 1e3 for t in timer.blocked_autorange(min_run_time=min_run_time).times]
    while len(times) < repeats:
        times.append(timer.timeit(1).median * 1e3)
    q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
    after = os.getloadavg()[0]
    return Timing(statistics.median(times), q[0], q[2], len(times), "torch.utils.benchmark", "cpu", after, before, noisy(before, after))


def time_alternating(
    fns: dict[str, Callable[[], object]], *, min_run_time: float = 0.5, repeats: int = 5, block_s: float = 0.01
) -> tuple[dict[str, Timing], dict[str, list[float]]]:
    """Time several CPU functions call by call in turn, so that drift in the machine (another
    process, a frequency change) hits every one of them alike: rounds of (fns[0], fns[1], ...),
    each a block of calls of at least ``block_s`` (sized from one warm-up call), until every
    function has ``repeats`` blocks and ``min_run_time`` seconds. Returns (name -> Timing of its
    per-call times, name -> per-round times in ms, aligned across names: round r of each was
    taken back to back, so a ratio of two names is best taken round by round, ``round_ratios``).

    Written by hand: torch.utils.benchmark times one statement at a time, never several in turn.
    """
    before = os.getloadavg()[0]
    calls = {}
    for name, fn in fns.items():  # warm-up, and the block size
        start = time.perf_counter()
        fn()
        calls[name] = max(1, int(block_s / max(time.perf_counter() - start, 1e-9)))
    rounds: dict[str, list[float]] = {name: [] for name in fns}
    spent = dict.fromkeys(fns, 0.0)
    while min(len(r) for r in rounds.values()) < repeats or min(spent.values()) < min_run_time:
        for name, fn in fns.items():
            k = calls[name]
            start = time.perf_counter()
            for _ in range(k):
                fn()
            took = time.perf_counter() - start
            spent[name] += took
            rounds[name].append(took / k * 1e3)
    after = os.getloadavg()[0]
    out = {}
    for name, times in rounds.items():
        q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
        out[name] = Timing(statistics.median(times), q[0], q[2], len(times), "alternating", "cpu", after, before, noisy(before, after))
    return out, rounds


def round_ratios(rounds: dict[str, list[float]], num: str, den: str) -> tuple[float, float, float]:
    """(median, p25, p75) of num's time over den's, round by round (time_alternating's rounds)."""
    r = [a / b for a, b in zip(rounds[num], rounds[den])]
    q = statistics.quantiles(r, n=4, method="inclusive") if len(r) > 1 else [r[0]] * 3
    return statistics.median(r), q[0], q[2]
