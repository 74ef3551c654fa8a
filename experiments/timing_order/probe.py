"""Does a long causal-SDPA call slow down the ops timed after it (issue 13, kernels_cpu)?

    python experiments/timing_order/probe.py [--out PATH]

kernels_cpu times causal SDPA first (64K: ~43 s a call, 3 calls) and the references after it. A
probe in the previous session saw lightning at 64K take 350-380 ms before an SDPA call and
478-544 ms after. This probe times, at kernels_cpu's 64K shape, on 1 thread:
the fp32 matmul peak (as bench/calibrate.py measures it), lightning and msa, in phases:
  before    - fresh process
  after     - right after one SDPA 64K call
  trimmed   - after malloc_trim(0) (is it the heap's state?)
  burn      - after ~40 s of 2048^2 matmuls instead of SDPA (is it sustained load?)
  idle      - after 60 s of sleep
Every timing is one call (seconds); each record has the phase, the 1-minute load average, the
process's minor page faults during the call and the cpu MHz the kernel reports.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from attnbench.bench import ops as O  # noqa: E402
from attnbench.heap import keep_freed_memory  # noqa: E402
from attnbench.records.write import Recorder  # noqa: E402
from attnbench.basics import stable_hash  # noqa: E402


def mhz() -> float:
    vals = [float(l.split(":")[1]) for l in open("/proc/cpuinfo") if l.startswith("cpu MHz")]
    return statistics.mean(vals) if vals else float("nan")


def one(fn) -> tuple[float, int]:
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    fn()
    t = time.perf_counter() - t0
    return t, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0


# the references timed in each phase and their calls a phase (msa's reference takes longer a call)
TIMED = {"lightning": 5, "msa": 2}
SDPA_OP = "softmax"  # the op whose inputs the SDPA call reads
# what every record of this probe shares
FIXED_FIELDS = dict(layout="-", metric="timing_order/seconds", unit="s", status="measured", threads=1, device="cpu", dtype="float32")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "experiments/timing_order/results.jsonl"))
    ap.add_argument("--T", type=int, default=65536)
    args = ap.parse_args()
    torch.set_num_threads(1)
    heap = keep_freed_memory()
    sh = O.Shape(1, 8, 2, args.T, 64, 1024, 64, 8, 64)
    xs = {op: O.make_inputs(op, sh, torch.float32, torch.device("cpu")) for op in (SDPA_OP, *TIMED)}
    n = 2048
    a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    config = {"T": args.T, "threads": 1, "heap": "kept" if heap else "default"}
    recorder = Recorder(Path(args.out), "timing_order", config, stable_hash(config))

    def rec(phase: str, what: str, seconds: float, faults: int, **kw) -> None:
        load = os.getloadavg()[0]
        recorder.record(
            design={"sdpa": SDPA_OP, "matmul": "-", "matmul_burn": "-"}.get(what, what),
            value=seconds,
            **FIXED_FIELDS,
            phase=phase,
            op=what,
            context_len=args.T,
            minor_faults=faults,
            loadavg=load,
            cpu_mhz=mhz(),
            **kw,
        )
        extra = f" {kw['gflop_per_s']:.1f} GFLOP/s" if "gflop_per_s" in kw else ""
        print(f"{phase:<8} {what:<10} {seconds:8.3f} s  faults {faults:<7} load {load:.2f}{extra}", flush=True)

    def peak(phase: str) -> None:
        for _ in range(3):
            torch.mm(a, b, out=c)
        ts = []
        for _ in range(15):
            t, _f = one(lambda: torch.mm(a, b, out=c))
            ts.append(t)
        t = statistics.median(ts)
        rec(phase, "matmul", t, 0, gflop_per_s=2 * n**3 / t / 1e9, calls=15)

    def ops(phase: str) -> None:
        peak(phase)
        with torch.no_grad():
            for op, calls in TIMED.items():
                for _ in range(calls):
                    t, f = one(functools.partial(O.run, op, "reference", xs[op], sh))
                    rec(phase, op, t, f)

    def sdpa(phase: str) -> None:
        with torch.no_grad():
            t, f = one(functools.partial(O.sdpa_causal, xs[SDPA_OP]))
        rec(phase, "sdpa", t, f)

    start = time.perf_counter()
    with torch.no_grad():  # warm-up
        for op in TIMED:
            O.run(op, "reference", xs[op], sh)
    ops("before")
    sdpa("sdpa")
    ops("after")
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc_trim(0)
    ops("trimmed")
    t0 = time.perf_counter()
    k = 0
    while time.perf_counter() - t0 < 40:
        torch.mm(a, b, out=c)
        k += 1
    rec("burn", "matmul_burn", time.perf_counter() - t0, 0, calls=k)
    ops("burn")
    sdpa("sdpa2")
    ops("after2")
    time.sleep(60)
    ops("idle")
    recorder.close("completed", time.perf_counter() - start)


if __name__ == "__main__":
    main()
