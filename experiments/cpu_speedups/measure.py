"""Old vs new code paths, timed side by side in one process (issue 13): ratios, not absolutes.

    python experiments/cpu_speedups/measure.py CASE [CASE ...] [--calls N] [--out PATH]

The "old" code is read from git at BASE (the commit issue 13 started from) and loaded as a
module beside the current one, so both run in the same process, on the same inputs, with the
same threads. Calls alternate old, new, old, new ... so a change of machine load hits both;
the speedup is the median over pairs of old_s / new_s, with its spread (min, max). Every
record carries the 1-minute load average before and after, and `noisy` when it exceeded the
core count. Outputs are checked equal (fp32 tolerance) before anything is timed.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the cases import as experiments.cpu_speedups.*, one name each

from experiments.cpu_speedups.cases_ops import (  # noqa: E402
    SESSION_10,
    dsa_op,
    lightning_chunk,
    lightning_op,
    lightning_scan,
    moe_forward,
    msa_op,
    msa_select_tiles,
    sliding_window_op,
    softmax_decode,
)
from experiments.cpu_speedups.cases_prefill import (  # noqa: E402
    heap_growth,
    moe_fixed_buffers,
    prefill,
    prefill_chunks,
    prefill_compiled,
    prefill_heap,
    prefill_thp,
)
from experiments.cpu_speedups.cases_train import lightning_op_16k, msa_train_layer, msa_train_step  # noqa: E402
from experiments.cpu_speedups.harness import BASE  # noqa: E402


# a case: its timed calls -> its records
CASES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "msa_train_layer": msa_train_layer,
    "msa_train_layer_2048": lambda c: msa_train_layer(c, 16, 2048),
    "msa_train_step": msa_train_step,
    "lightning_op": lightning_op,
    "lightning_op_kernels": lambda c: lightning_op(c, 8, 64),
    "lightning_op_h2": lambda c: lightning_op(c, 2, 32),
    "moe_forward": moe_forward,
    "prefill_hybrid": prefill,
    "lightning_op_16k": lightning_op_16k,
    "prefill_heap": prefill_heap,
    "prefill_thp": prefill_thp,
    "softmax_decode": softmax_decode,
    "softmax_decode_256k": lambda c: softmax_decode(c, S=262144),
    "moe_fixed_buffers": moe_fixed_buffers,
    "prefill_compiled": prefill_compiled,
    "heap_growth": heap_growth,
    "heap_growth_compiled": lambda c: heap_growth(c, compiled=True),
    "lightning_scan": lightning_scan,
    "lightning_scan_16k": lambda c: lightning_scan(c, 8, 8, 16384, 0, 8),
    "msa_remote": msa_op,
    "msa_attn_fused_m": lambda c: msa_op(c, rev=SESSION_10),
    "msa_select_rows": lambda c: msa_op(c, "select"),
    **{f"dsa_{part}_{T // 1024}k": functools.partial(dsa_op, part=part, T=T) for part in ("select", "attn") for T in (1024, 4096, 16384)},
    "prefill_chunks": lambda c: prefill_chunks(1),  # one 4M prefill (~2 min)
    "sliding_window_two_triangles": sliding_window_op,  # issue 42 item 2: kernels_cpu's 64K shape
    "sliding_window_block64": lambda c: sliding_window_op(c, "block64"),
    "lightning_chunk64_d64": lightning_chunk,
    **{
        f"msa_select_tiles_{r}x{k}": functools.partial(msa_select_tiles, rows=r, keys=k)
        for r, k in ((512, 256), (256, 512), (1024, 256), (256, 1024), (1024, 512))
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="+", choices=sorted(CASES))
    parser.add_argument("--calls", type=int, default=5, help="timed calls of each path (>= 3)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results.jsonl")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from attnbench.heap import keep_freed_memory
    from attnbench.records.write import Recorder
    from attnbench.basics import stable_hash

    heap = "kept" if keep_freed_memory() else "default"  # as in every attnbench run (attnbench/heap.py)
    config = {"base": BASE, "threads": args.threads, "calls": args.calls, "heap": heap}
    rec = Recorder(args.out, "cpu_speedups", config, stable_hash(config))
    start = time.perf_counter()
    for case in args.cases:
        for r in CASES[case](max(3, args.calls)):
            r = rec.record(
                layout="-", status="measured", backend="reference", device="cpu", dtype="float32", threads=args.threads, case=case, **r
            )
            if "ratio_min" not in r:  # not an old/new ratio (heap_growth)
                print(f"{case}: {r['metric']} {r['value']} {r['unit']} ({r.get('code', '')})", flush=True)
                continue
            print(
                f"{case}: {r['metric']} {r['value']:.2f}x (pairs {r['ratio_min']:.2f}-{r['ratio_max']:.2f}; "
                f"old {r['old_s']:.3f} s, new {r['new_s']:.3f} s; load {r['load_before']}-{r['load_after']}"
                f"{', NOISY' if r['noisy'] else ''})",
                flush=True,
            )
    rec.close("completed", time.perf_counter() - start)


if __name__ == "__main__":
    main()
