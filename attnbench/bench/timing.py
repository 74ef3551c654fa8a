"""Timing with warm-up, device synchronisation and repeats; medians with spread.

CPU: ``torch.utils.benchmark.Timer.blocked_autorange`` (it handles warm-up and picks the
number of runs per measurement). CUDA: ``triton.testing.do_bench`` (flushes L2, syncs).
Compare designs as ratios of timings taken in the same process.
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

    def as_dict(self) -> dict:
        return asdict(self)


def time_fn(fn: Callable[[], object], device: torch.device, *, min_run_time: float = 0.5, warmup: int = 1,
            repeats: int = 1) -> Timing:
    """Time ``fn()`` (which must do all its work before returning, or on ``device``).

    At least ``repeats`` measurements are taken, even when one call outlasts ``min_run_time``.
    """
    if device.type == "cuda":
        import triton.testing

        ms = triton.testing.do_bench(fn, warmup=25, rep=max(100, int(min_run_time * 1000)), return_mode="all")
        q = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else [ms[0]] * 3
        return Timing(statistics.median(ms), q[0], q[2], len(ms), "triton.do_bench", torch.cuda.get_device_name(device),
                      os.getloadavg()[0])
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
    return Timing(statistics.median(times), q[0], q[2], len(times), "torch.utils.benchmark", "cpu", os.getloadavg()[0])
