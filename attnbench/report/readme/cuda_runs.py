"""The tables of the runs on a CUDA device: experiments/kernels/gpu_*/ (exp=kernels_gpu) and
experiments/train_gpu/ (exp=train_gpu), from their records."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.report.frame import RunData
from attnbench.verdicts.readings import metric
from attnbench.basics import fmt_len
from attnbench.report.readme.registry import Tables

TABLES = Tables()  # this module's README tables (report/readme/regenerate.py merges every module's)
table = TABLES.table


def on_cuda(d: pd.DataFrame) -> pd.DataFrame:
    return d[d["device"].astype(str) == "cuda"] if "device" in d.columns else d.iloc[0:0]


def _run(r: pd.Series) -> str:
    return Path(str(r["run_dir"])).name


@table("kernels/gpu_checks")
def kernels_gpu_checks(data: RunData) -> pd.DataFrame:
    """Each Triton kernel's error against the fp32 reference and its bound, per run, op, dtype and
    length (fwd_bwd: the output and the three input gradients; fwd: the output, and lightning's final
    state); a check that raised shows the error's first words."""
    d = on_cuda(metric(data.records, "kernels/check_err"))
    rows = []
    for (run, op, dtype, T), g in d.groupby(["run_dir", "op", "dtype", "context_len"], sort=False):
        row = {"run": Path(str(run)).name, "op": op, "dtype": dtype, "T": fmt_len(T)}
        bad = g[g["status"] != "measured"]
        if len(bad):
            row["result"] = f"{bad['status'].iloc[0]}: {str(bad['note'].iloc[0]).split(', Required')[0][:60]}"
        else:
            worst = (g["v"] / g["bound"]).max()
            row["result"] = f"passed, {len(g)} tensors, worst error {100 * worst:.0f}% of its bound"
        rows.append(row)
    return pd.DataFrame(rows)


@table("kernels/gpu")
def kernels_gpu(data: RunData) -> pd.DataFrame:
    """Median ms (triton.testing.do_bench) of each op's Triton kernel against causal SDPA in the same
    process, per run, phase and length; speedup = SDPA / kernel."""
    rows = []
    for name, phase in (("latency/prefill_ms", "fwd"), ("latency/fwd_bwd_ms", "fwd_bwd")):
        d = on_cuda(metric(data.records, name))
        d = d[d["status"] == "measured"]
        for (run, T), g in d.groupby(["run_dir", "context_len"], sort=False):
            row = {"run": Path(str(run)).name, "phase": phase, "dtype": g["dtype"].iloc[0], "T": fmt_len(T)}
            for (op, backend), gg in g.groupby(["op", "backend"], sort=False):
                row[f"{op} ({backend})"] = f"{gg['v'].iloc[-1]:.3g}"
            rows.append(row)
    sp = on_cuda(metric(data.records, "kernels/speedup"))
    sp = sp[sp["status"] == "measured"]
    out = pd.DataFrame(rows)
    for i, row in out.iterrows():
        for op in sorted(set(sp["op"])):
            s = sp[
                (sp["run_dir"].map(lambda p: Path(str(p)).name) == row["run"])
                & (sp["op"] == op)
                & (sp["phase"] == row["phase"])
                & (sp["context_len"].map(fmt_len) == row["T"])
            ]
            out.loc[i, f"{op}: SDPA / triton"] = f"{s['v'].iloc[-1]:.2f}x" if len(s) else "—"
    return out.fillna("—")


@table("train_gpu/rates")
def train_gpu_rates(data: RunData) -> pd.DataFrame:
    """Per run (the kernel backend), design and curriculum stage: tokens/s of the steps, the cost
    model's GFLOP/s and their fraction of the bf16 matmul peak calibrated at the start (8192^3)."""
    d = metric(data.records, "train/stage_rate")
    gpu = {h["run_dir"]: (h.get("hardware") or {}).get("gpu") for h in data.headers}  # the records' cpu is the host's
    rows = []
    for _, r in d.iterrows():
        frac = r.get("fraction_of_peak")
        rows.append(
            {
                "run": _run(r),
                "backend": r["backend"],
                "design": r["design"],
                "stage": f"{r['stage']:.0f}",
                "lengths": ", ".join(fmt_len(n) for n in r["lengths"]),
                "steps": f"{r['steps']:.0f}",
                "tokens/s": f"{r['v']:,.0f}",
                "GFLOP/s": f"{r['gflops']:,.0f}",
                "% of bf16 peak": "—" if frac is None or pd.isna(frac) else f"{100 * frac:.2f}",
                "peak (TFLOP/s)": f"{r['peak_gflops'] / 1e3:.0f}",
                "device": gpu.get(r["run_dir"]) or r["device"],
            }
        )
    return pd.DataFrame(rows)
