"""How fast could a training step of these task models be on this core? (issue 24: the 3x target)

    python experiments/train_speed/ceiling.py [--designs softmax lightning_hybrid_h8] [--stages 1 6]
                                              [--steps 4] [--out experiments/train_speed/ceiling/results.jsonl]

A step of the 64-wide task models is a few hundred matrix products of thin shapes (K or N of 64,
128 or 192; 8 or 32 per head) plus the elementwise work around them. This probe profiles the
fast step (train.loss_for's compiled loss, backward, foreach clipping and AdamW; measure.py's
Stepper) with torch.profiler, keeps every matrix-product op it ran (aten::mm, addmm, bmm,
baddbmm, _grouped_mm, with their shapes; the innermost ones, since _grouped_mm on the CPU calls
one mm a group) and every attention kernel (SDPA's forward and
backward), and then times each distinct product shape standalone, warm, in a loop (the best
that shape can run on this core through the same library call). The **ceiling** is the step
with everything but those products removed and the products at their standalone speed:

    ceiling tokens/s = tokens of a step / (sum over products of standalone seconds + attention kernels' seconds)

It is an upper bound on what any rewrite of the step's elementwise, optimiser and data work can
reach without faster GEMMs or attention kernels; over the old step's tokens/s (the BASE commit,
measure.py) it bounds the speedup. The matmul peak is calibrated in the same process.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # measure.py imports as experiments.train_speed.measure, one name of its own

PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_grouped_mm"}


def is_attention(name: str) -> bool:
    return "scaled_dot_product" in name or "_flash_attention" in name


def product_flops(name: str, shapes: list) -> float:
    """FLOPs of one product op from its input shapes (2 m n k; batched: times the batch)."""
    if name == "aten::mm":
        (m, k), (_, n) = shapes[0], shapes[1]
        return 2.0 * m * n * k
    if name == "aten::addmm":
        (m, k), (_, n) = shapes[1], shapes[2]
        return 2.0 * m * n * k
    if name in ("aten::bmm", "aten::baddbmm"):
        a, b = (shapes[0], shapes[1]) if name == "aten::bmm" else (shapes[1], shapes[2])
        return 2.0 * a[0] * a[1] * a[2] * b[2]
    if name == "aten::_grouped_mm":
        a, b = shapes[0], shapes[1]
        if len(a) == 2 and len(b) == 3:  # (tokens, K) x (groups, K, N)
            return 2.0 * a[0] * a[1] * b[2]
        if len(a) == 2 and len(b) == 2:  # weight gradient: (K, tokens) x (tokens, N) per group
            return 2.0 * a[0] * a[1] * b[1]
    return 0.0


# the products standalone_seconds rebuilds alone: the call and how many tensor operands it takes
STANDALONE: dict[str, tuple[Callable[..., torch.Tensor], int]] = {
    "aten::mm": (torch.mm, 2),
    "aten::addmm": (torch.addmm, 3),
    "aten::bmm": (torch.bmm, 2),
    "aten::baddbmm": (torch.baddbmm, 3),
}


def standalone_seconds(name: str, shapes: list, reps: int = 20) -> float | None:
    """Median seconds of one call of the product at these shapes, warm (None: not rebuildable)."""
    if name not in STANDALONE:
        return None
    call, arity = STANDALONE[name]
    if len(shapes) < arity or not all(shapes[:arity]):  # an operand without a shape (a scalar) or missing
        return None
    try:
        args = [torch.randn(s) for s in shapes[:arity]]
        fn = lambda: call(*args)  # noqa: E731
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        times.sort()
        return times[len(times) // 2]
    except (RuntimeError, IndexError, TypeError):
        return None


OUT = [""]  # the results file main() writes (its footer is appended when the script ends)


def write_header(out: Path, threads: int, peak: float) -> None:
    """The results file's header line: the commit, hardware, threads and the calibrated peak."""
    from attnbench.records.lines import git_commit, hardware, now

    with open(out, "a") as f:
        f.write(
            json.dumps(
                {
                    "type": "header",
                    "exp": "train_speed_ceiling",
                    "started": now(),
                    "git": git_commit(),
                    "hardware": hardware(),
                    "threads": threads,
                    "torch": torch.__version__,
                    "matmul_flops": peak,
                    "load_before": os.getloadavg()[0],
                    "command": " ".join(["python", *sys.argv]),
                }
            )
            + "\n"
        )


def ceiling_of(prof):
    """From a profile: seconds of the step were every matrix product as fast as alone (plus the
    attention kernels as measured), the products' FLOPs and in-step seconds, and one row per product shape."""
    products: collections.Counter = collections.Counter()
    measured_us: collections.Counter = collections.Counter()
    attention_us = 0.0
    total_self_us = 0.0
    for ev in prof.events():
        total_self_us += ev.self_cpu_time_total
        if ev.name in PRODUCTS and not any(c.name in PRODUCTS for c in _descendants(ev)):  # leaves: _grouped_mm runs one mm a group
            key = (ev.name, json.dumps(ev.input_shapes))
            products[key] += 1
            measured_us[key] += ev.cpu_time_total
        elif is_attention(ev.name) and not any(is_attention(p.name) for p in _parents(ev)):
            attention_us += ev.cpu_time_total
    ceiling_s, flops, in_step_s, rows = attention_us / 1e6, 0.0, 0.0, []
    for (name, shp), count in products.items():
        shapes = json.loads(shp)
        sa = standalone_seconds(name, shapes)
        in_step = measured_us[(name, shp)] / 1e6
        ceiling_s += (sa if sa is not None else in_step / count) * count
        in_step_s += in_step
        fl = product_flops(name, shapes) * count
        flops += fl
        rows.append({"op": name, "shapes": shapes, "calls": count, "in_step_s": round(in_step, 5), "standalone_s": sa, "flops": fl})
    return ceiling_s, flops, in_step_s, attention_us, total_self_us, rows


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--designs", nargs="+", default=["softmax", "lightning_hybrid_h8"])
    ap.add_argument("--stages", nargs="+", type=int, default=[1, 6])
    ap.add_argument("--steps", type=int, default=4, help="profiled steps a stage length")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(HERE / "ceiling" / "results.jsonl"))
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    OUT[0] = args.out
    torch.set_num_threads(args.threads)

    from torch.profiler import ProfilerActivity, profile

    from attnbench import heap
    from attnbench.training import rate as train_rate
    from attnbench.training import trainer as new_train
    from attnbench.records.lines import now
    from helpers import compose_cfg
    from experiments.train_speed.measure import Stepper

    heap.keep_freed_memory()
    peak = train_rate.calibrate_peak()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_header(out, args.threads, peak)
    for design in args.designs:
        cfg = compose_cfg(["+exp=train", f"design={design}"])
        stages = new_train.stages_of(cfg.train)
        for no in args.stages:
            step = Stepper(new_train, cfg, design, no - 1, fast=True)
            lengths = stages[no - 1].lengths()
            for i, n in enumerate(lengths * 2):  # warm: compile every shape, fill the allocator
                step.step(n, i)
            plan = [n for n in lengths for _ in range(args.steps)]
            tokens = sum(step.tokens(n) for n in plan)
            t0 = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                for i, n in enumerate(plan):
                    step.step(n, 100 + i)
            wall = time.perf_counter() - t0
            ceiling_s, flops, in_step_s, attention_us, total_self_us, rows = ceiling_of(prof)
            rows.sort(key=lambda r: -r["in_step_s"])
            by_self = sorted(prof.key_averages(), key=lambda a: -a.self_cpu_time_total)
            self_top = [{"op": a.key, "calls": a.count, "self_s": round(a.self_cpu_time_total / 1e6, 5)} for a in by_self[:20]]
            model_flops = train_rate.stage_flops(cfg, cfg.attention[design], stages[no - 1]) * tokens
            rec = {
                "type": "record",
                "exp": "train_speed_ceiling",
                "design": design,
                "stage": no,
                "lengths": lengths,
                "status": "measured",
                "metric": "ceiling_tokens_s/train_step",
                "unit": "tokens/s",
                "value": tokens / ceiling_s,
                "profiled_tokens_s": tokens / wall,
                "steps": len(plan),
                "tokens": tokens,
                "profiled_wall_s": wall,
                "products_in_step_s": in_step_s,
                "attention_kernels_s": attention_us / 1e6,
                "ceiling_s": ceiling_s,
                "product_flops": flops,
                "product_gflops_in_step": flops / in_step_s / 1e9 if in_step_s else None,
                "cost_model_flops": model_flops,
                "ceiling_fraction_of_peak": model_flops / ceiling_s / peak,
                "peak_gflops": peak / 1e9,
                "distinct_product_shapes": len(rows),
                "products": rows,
                "self_time_top": self_top,  # where the profiled step's time went, by op (self time)
                "self_time_total_s": total_self_us / 1e6,
                "threads": args.threads,
                "load_after": os.getloadavg()[0],
                "noisy": os.getloadavg()[0] > (os.cpu_count() or 1) - 0.5,
                "time": now(),
            }
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(
                f"{design} stage {no}: profiled {tokens / wall:,.0f} tokens/s; ceiling {tokens / ceiling_s:,.0f} tokens/s "
                f"({rec['ceiling_fraction_of_peak']:.0%} of peak); products {in_step_s / wall:.0%} of the step, attention kernels {attention_us / 1e6 / wall:.0%}",
                flush=True,
            )


def _descendants(ev):
    for c in ev.cpu_children:
        yield c
        yield from _descendants(c)


def _parents(ev):
    p = ev.cpu_parent
    while p is not None:
        yield p
        p = p.cpu_parent


if __name__ == "__main__":
    from attnbench.scripts import run_script

    run_script(main, "train_speed_ceiling", OUT)
