"""How fast a training ran, in the terms inference is measured in.

Per curriculum stage: tokens per second of the steps themselves, the cost model's FLOPs of a
training token (forward + backward = 3x the forward, attention included: bench.planner's
train_flops), the achieved GFLOP/s, and its fraction of the fp32 matmul peak that the training
calibrated at its start on the threads it used (``peak``). Each stage also gets the share of a
step's time spent on the batch (data), forward, backward and the optimiser, from the loop's own
clocks. Rates come from the curve's (tokens, wall_s) points, so the records of models trained
before this module existed get them too (without a peak: their fraction of peak is null).
"""

from __future__ import annotations

import torch

PHASES = ("data", "forward", "backward", "optimizer")


def calibrate_peak(device: torch.device | None = None, n: int = 2048) -> float:
    """FLOP/s of an n^3 matmul into a preallocated output (median): fp32 on this process's CPU
    threads; on CUDA bf16 at n = 8192, the dtype a CUDA training computes in (bf16 autocast)."""
    from attnbench.bench.timing import time_fn

    device = device or torch.device("cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    n = 8192 if device.type == "cuda" else n
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    seconds = time_fn(lambda: torch.mm(a, b, out=out), device, min_run_time=0.3).median_ms / 1e3
    return 2 * n**3 / seconds


def device_name(device: torch.device) -> str:
    """What a calibration ran on: the CPU's model, or the GPU's."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def stage_flops(cfg, design, stage) -> float:
    """Cost-model FLOPs of one training token of a stage, averaged over the lengths it draws
    (each length a step of tokens_per_step tokens, so the lengths weigh equally per token)."""
    from attnbench.bench.planner import train_flops
    from attnbench.tasks.stage import rows_of

    per_token = []
    for n in stage.lengths():
        s = stage.at(n)
        rows = rows_of(cfg.train, s.seq_len)
        answers = rows * (s.seq_len - s.context_len) // (2 if s.hops else 1)
        per_token.append(train_flops(cfg.model, design, batch=rows, seq_len=s.seq_len, answers=answers) / (rows * s.seq_len))
    return sum(per_token) / len(per_token)


def cpu_name() -> str:
    from attnbench.records.lines import hardware

    return str(hardware()["cpu"])


def peak_at(peaks: list[dict], step: int) -> dict | None:
    """The calibration of the (re)start that ran ``step``: the last one at or before it."""
    before = [p for p in peaks if p["step"] <= step]
    return before[-1] if before else None


def stage_rates(cfg, design, stages, curve: list[dict], peaks: list[dict] | None = None, phase_s: list[dict] | None = None) -> list[dict]:
    """One row per stage that has at least two curve points: tokens/s, FLOPs per token, GFLOP/s,
    fraction of the peak calibrated at the (re)start that began the stage's points (None
    without one) and, with ``phase_s`` (per stage: seconds per phase), each phase's share."""
    rows = []
    for i, stage in enumerate(stages):
        points = [p for p in curve if p["stage"] == i]
        if len(points) < 2:
            continue
        # The window runs from the last point before the stage to its last point, so that it holds
        # the stage's first steps, where its batch shapes compile: a window from the stage's own
        # first point (up to log_every steps in) left a compile out of the seconds and still took
        # it off them (a stage of 130 steps read 73K tokens/s, 3.8x the peak). It holds up to
        # log_every - 1 steps of the stage before as well.
        before = [p for p in curve if p["stage"] < i and p["step"] < points[0]["step"]]
        a, b = (before[-1] if before else points[0]), points[-1]
        spent = (phase_s or [])[i] if phase_s and i < len(phase_s) else {}
        # the steps' own time: less the steps that compiled a new batch shape (train_step.CompiledLoss)
        seconds, tokens = b["wall_s"] - a["wall_s"] - spent.get("compile", 0.0), b["tokens"] - a["tokens"]
        if seconds <= 0 or tokens <= 0:
            continue
        flops = stage_flops(cfg, design, stage)
        rate = tokens / seconds
        cal = peak_at(peaks or [], a["step"])
        peak = cal["flops"] if cal else None
        row = {
            "stage": i + 1,
            "lengths": stage.lengths(),
            "steps": b["step"] - a["step"],
            "tokens": tokens,
            "seconds": round(seconds, 2),
            "tokens_s": round(rate, 1),
            "flops_per_token": round(flops),
            "gflops": round(rate * flops / 1e9, 2),
            "fraction_of_peak": round(rate * flops / peak, 4) if peak else None,
            "peak_gflops": round(peak / 1e9, 1) if peak else None,
            "threads": cal["threads"] if cal else None,
            "cpu": cal["cpu"] if cal else None,
        }
        steady = {k: v for k, v in spent.items() if k != "compile"}
        if sum(steady.values()) > 0:
            total = sum(steady.values())
            row["shares"] = {k: round(v / total, 3) for k, v in steady.items()}
        if "compile" in spent:
            row["compile_s"] = round(spent["compile"], 1)
        rows.append(row)
    return rows
