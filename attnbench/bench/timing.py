"""Timing with warm-up, device synchronisation and repeats; medians with spread.

CPU: ``torch.utils.benchmark.Timer.blocked_autorange`` (it handles warm-up and picks the
number of runs per measurement). CUDA: ``triton.testing.do_bench`` (flushes L2, syncs).
Compare designs as ratios of timings taken in the same process.
"""

from __future__ import annotations

import statistics
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

    def as_dict(self) -> dict:
        return asdict(self)


def time_fn(fn: Callable[[], object], device: torch.device, *, min_run_time: float = 0.5, warmup: int = 1) -> Timing:
    """Time ``fn()`` (which must do all its work before returning, or on ``device``)."""
    if device.type == "cuda":
        import triton.testing

        ms = triton.testing.do_bench(fn, warmup=25, rep=max(100, int(min_run_time * 1000)), return_mode="all")
        q = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else [ms[0]] * 3
        return Timing(statistics.median(ms), q[0], q[2], len(ms), "triton.do_bench", torch.cuda.get_device_name(device))
    import torch.utils.benchmark as benchmark

    for _ in range(warmup):
        fn()
    m = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()).blocked_autorange(
        min_run_time=min_run_time
    )
    times = [t * 1e3 for t in m.times]
    q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
    return Timing(statistics.median(times), q[0], q[2], len(times), "torch.utils.benchmark", "cpu")
