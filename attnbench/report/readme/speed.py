"""README tables of the speed experiments (cpu_speedups, timing_order, train_speed, two_cores):
old against new code timed alternately, and training rates against the calibrated peak;
registered with ``@table`` like the task-model tables in report/readme/task_models.py."""

from __future__ import annotations

import pandas as pd

from attnbench.report.frame import RunData
from attnbench.verdicts.readings import metric
from attnbench.basics import fmt_len
from attnbench.report.readme.registry import Tables

TABLES = Tables()  # this module's README tables (report/readme/regenerate.py merges every module's)
table = TABLES.table

# ---------------------------------------------------------------- cpu_speedups


@table("cpu_speedups/speedups")
def cpu_speedups(data: RunData) -> pd.DataFrame:
    """experiments/cpu_speedups/measure.py: old / new time per pair of alternating calls."""
    df = data.records
    rows = []
    for _, r in df[df["metric"].astype(str).str.startswith("speedup/")].iterrows():
        shape = f"H {r['heads']:.0f}, D {r['head_dim']:.0f}" if "heads" in r and pd.notna(r.get("heads")) else "—"
        rows.append(
            {
                "case": r["case"],
                "what": r["what"],
                "old": r["old"],
                "new": r["new"],
                "tokens": fmt_len(r["context_len"]),
                "shape": shape,
                "threads": f"{r['threads']:.0f}",
                "old s (median)": f"{r['old_s']:.3f}",
                "new s (median)": f"{r['new_s']:.3f}",
                "speedup (median of pairs)": f"{r['v']:.2f}x",
                "pairs (min–max)": f"{r['ratio_min']:.2f}–{r['ratio_max']:.2f}",
                "calls": f"{r['calls']:.0f}",
                "load (1 min)": f"{r['load_before']:.2f}–{r['load_after']:.2f}",
            }
        )
    return pd.DataFrame(rows)


@table("cpu_speedups/heap")
def cpu_heap(data: RunData) -> pd.DataFrame:
    """experiments/cpu_speedups/measure.py heap_growth: glibc's heap after one long prefill, one process a row."""
    df = data.records
    rows = []
    for _, r in df[df["metric"].astype(str) == "heap/free_bytes"].iterrows():
        rows.append(
            {
                "case": r["case"],
                "prefill": "compiled" if r.get("compiled") is True else "eager",
                "MoE buffers": r["old"] if r["code"] == "old" else r["new"],
                "tokens": fmt_len(r["context_len"]),
                "heap (MiB)": f"{r['heap_bytes'] / 2**20:.0f}",
                "free in the heap (MiB)": f"{r['v'] / 2**20:.0f}",
                "free blocks": f"{r['heap_free_blocks']:.0f}",
                "in use (MiB)": f"{r['heap_used_bytes'] / 2**20:.0f}",
                "prefill s": f"{r['seconds']:.2f}",
                "last / first quarter of the chunks": f"{r['last_quarter_s'] / r['first_quarter_s']:.2f}",
                "load (1 min)": f"{r['load']:.2f}",
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- timing_order


@table("timing_order/phases")
def timing_order(data: RunData) -> pd.DataFrame:
    """experiments/timing_order/probe.py: seconds a call of each op in each phase (the fp32 matmul
    as GFLOP/s), in the order the phases ran."""
    d = metric(data.records, "timing_order/seconds")
    if d.empty:
        return pd.DataFrame()
    rows = []
    for phase, g in d.groupby("phase", sort=False):
        row = {"phase": phase}
        for call, gg in g.groupby("op", sort=False):  # an attention op, or the probe's matmul
            v = gg["v"]
            if call == "matmul":
                row["matmul GFLOP/s (median of 15)"] = f"{gg['gflop_per_s'].iloc[0]:.1f}"
            elif len(v) == 1:
                row[f"{call} s"] = f"{v.iloc[0]:.2f}"
            else:
                row[f"{call} s"] = f"{v.median():.3f} ({v.min():.3f}–{v.max():.3f}, n {len(v)})"
        row["minor faults"] = f"{g['minor_faults'].sum():.0f}"
        row["load (1 min)"] = f"{g['loadavg'].min():.2f}–{g['loadavg'].max():.2f}"
        rows.append(row)
    return pd.DataFrame(rows).fillna("—")


@table("cpu_speedups/prefill_chunks")
def cpu_prefill_chunks(data: RunData) -> pd.DataFrame:
    """experiments/cpu_speedups/measure.py prefill_chunks: one compiled prefill, its chunks' seconds by quarter."""
    d = metric(data.records, "prefill/seconds")
    rows = []
    for _, r in d.iterrows():
        q = r["quarter_s"]
        rows.append(
            {
                "CPU": r["cpu"] or "?",
                "tokens": fmt_len(r["context_len"]),
                "chunk": f"{r['chunk']:,.0f}",
                "prefill s": f"{r['v']:.1f}",
                "quarters of the chunks (s)": ", ".join(f"{x:.1f}" for x in q),
                "last / first quarter": f"{q[-1] / q[0]:.2f}",
                "load (1 min)": f"{r['load']:.2f}",
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- train_speed


@table("train_speed/speedups")
def train_speedups(data: RunData) -> pd.DataFrame:
    """experiments/train_speed/measure.py: old / new seconds of a training call (steps at each
    of a stage's lengths), alternating in one process; the new path's rate against the peak."""
    return _speedup_table(metric(data.records, "speedup/train_step"), "old", "new")


@table("train_speed/compile")
def train_compile(data: RunData) -> pd.DataFrame:
    """measure.py --old eager: the same step with the loss run eagerly against compiled (what
    train.compile adds to a design), alternating in one process."""
    return _speedup_table(metric(data.records, "compile_speedup/train_step"), "eager", "compiled")


def _speedup_table(d: pd.DataFrame, old: str, new: str) -> pd.DataFrame:
    rows = []
    for _, r in d.iterrows():
        rows.append(
            {
                "design": r["design"],
                "stage": f"{r['stage']:.0f}",
                "lengths": ", ".join(fmt_len(n) for n in r["lengths"]),
                "steps a call": f"{r['steps_per_call']:.0f}",
                "threads": f"{r['threads']:.0f}",
                f"{old} tokens/s": f"{r['old_tokens_s']:,.0f}",
                f"{new} tokens/s": f"{r['new_tokens_s']:,.0f}",
                "speedup (median of pairs)": f"{r['v']:.2f}x",
                "pairs (min–max)": f"{r['ratio_min']:.2f}–{r['ratio_max']:.2f}",
                "MFLOP a token (cost model)": f"{r['flops_per_token'] / 1e6:.2f}",
                f"{old} / {new} % of peak": f"{100 * r['old_fraction_of_peak']:.0f} / {100 * r['new_fraction_of_peak']:.0f}",
                "peak (GFLOP/s)": f"{r['peak_gflops']:.0f}",
                "calls": f"{r['calls']:.0f}",
                "load (1 min)": f"{r['load_before']:.2f}–{r['load_after']:.2f}",
                "CPU": r.get("cpu") or "",
            }
        )
    return pd.DataFrame(rows)


@table("train_speed/stage_rates")
def train_stage_rates(data: RunData) -> pd.DataFrame:
    """experiments/train_speed/rates.py: each shipped model's training rate per curriculum stage
    (copied from its record.json, or computed from its curve for models trained before)."""
    d = metric(data.records, "train/stage_rate")
    rows = []
    for _, r in d.iterrows():
        frac = r.get("fraction_of_peak")
        shares = r.get("shares") if isinstance(r.get("shares"), dict) else {}
        rows.append(
            {
                "model": r["model"],
                "seed": f"{r['seed']:.0f}",
                "stage": f"{r['stage']:.0f}",
                "lengths": ", ".join(fmt_len(n) for n in r["lengths"]),
                "steps": f"{r['steps']:.0f}",
                "tokens/s": f"{r['v']:,.0f}",
                "GFLOP/s": f"{r['gflops']:.1f}",
                "% of peak": "—" if frac is None or pd.isna(frac) else f"{100 * frac:.0f}",
                "data / fwd / bwd / opt %": " / ".join(f"{100 * shares[k]:.0f}" for k in ("data", "forward", "backward", "optimizer"))
                if shares
                else "—",
                "threads": "—" if pd.isna(r.get("record_threads")) else f"{r['record_threads']:.0f}",
                "rates from": r["rates_from"],
            }
        )
    return pd.DataFrame(rows)


@table("train_speed/ceiling")
def train_ceiling(data: RunData) -> pd.DataFrame:
    """experiments/train_speed/ceiling.py: the fast step profiled, and the step with only its matrix
    products (each shape at its standalone speed) and attention kernels left: an upper bound."""
    d = metric(data.records, "ceiling_tokens_s/train_step")
    old = metric(data.records, "speedup/train_step")
    rows = []
    for _, r in d.iterrows():
        wall = r["profiled_wall_s"]
        same = old[(old["design"] == r["design"]) & (old["stage"] == r["stage"])]
        quiet = same.sort_values("load_before").head(1)  # the old step's rate on the quietest run
        spent = {a["op"]: a["self_s"] for a in r["self_time_top"]}
        inductor = sum(v for k, v in spent.items() if "CompiledFxGraph" in k)
        rows.append(
            {
                "design": r["design"],
                "stage": f"{r['stage']:.0f}",
                "lengths": ", ".join(fmt_len(n) for n in r["lengths"]),
                "threads": f"{r['threads']:.0f}",
                "profiled tokens/s": f"{r['profiled_tokens_s']:,.0f}",
                "products / attention kernels % of the step": f"{100 * r['products_in_step_s'] / wall:.0f} / {100 * r['attention_kernels_s'] / wall:.0f}",
                "products GFLOP/s in the step": f"{r['product_gflops_in_step']:.0f}",
                "mm / bmm / compiled kernels (s, self)": f"{spent.get('aten::mm', 0):.1f} / {spent.get('aten::bmm', 0):.1f} / {inductor:.1f}",
                "profiled s": f"{wall:.1f}",
                "ceiling tokens/s": f"{r['v']:,.0f}",
                "old step tokens/s (quietest run)": "—" if quiet.empty else f"{quiet['old_tokens_s'].iloc[0]:,.0f}",
                "bound on the speedup": "—" if quiet.empty else f"{r['v'] / quiet['old_tokens_s'].iloc[0]:.1f}x",
                "load after": f"{r['load_after']:.2f}",
                "CPU": r.get("cpu") or "",
            }
        )
    return pd.DataFrame(rows)


@table("two_cores/ways")
def two_cores_ways(data: RunData) -> pd.DataFrame:
    """experiments/two_cores/run.py: the machine's two cores spent three ways on one curriculum
    stage; a way's rate is the sum of its trainings' steady tokens/s."""
    d = metric(data.records, "train_tokens_s/two_cores")
    if d.empty:  # a run that has just started: no column to group by yet
        return pd.DataFrame()
    rows = []
    for (design, stage), g in d.groupby(["design", "stage"], sort=False):
        base = g[g["way"] == "one_2t"]["v"]
        for _, r in g.iterrows():
            per = [t["tokens_s"] for t in r["trainings"]]
            rows.append(
                {
                    "design": design,
                    "stage": f"{stage:.0f}",
                    "lengths": ", ".join(fmt_len(n) for n in r["lengths"]),
                    "way": WAYS.get(r["way"], r["way"]),
                    "status": r["status"],
                    "trainings' tokens/s": ", ".join(f"{x:,.0f}" for x in per if x) or "—",
                    "tokens/s in all": "—" if pd.isna(r["v"]) else f"{r['v']:,.0f}",
                    "vs one training at 2 threads": "—"
                    if pd.isna(r["v"]) or base.empty or pd.isna(base.iloc[0])
                    else f"{r['v'] / base.iloc[0]:.2f}x",
                    "% of the 2-thread peak": "—" if pd.isna(r.get("fraction_of_2t_peak")) else f"{100 * r['fraction_of_2t_peak']:.0f}",
                    "load before": f"{r['load_before']:.2f}",
                    "CPU": r.get("cpu") or "",
                }
            )
    return pd.DataFrame(rows)


WAYS = {
    "one_2t": "one training, 2 threads",
    "two_1t": "two trainings, 1 thread each (taskset)",
    "ddp_2p": "torchrun DDP, 2 processes of 1 thread (gloo)",
}


# ---------------------------------------------------------------- host_data


@table("host_data/waits")
def host_data_waits(data: RunData) -> pd.DataFrame:
    """experiments/host_data/measure.py: the host's time a 64K-token step's batch costs the
    training loop, made in line or ahead (a thread; DataLoader worker processes), against 5% of
    the step's projected time on an H100 at 40% of its bf16 peak."""
    d = metric(data.records, "host_data/wait")
    rows = []
    for _, r in d.iterrows():
        inline, wait = r["inline_s"], r["prefetched_wait_s"]
        rows.append(
            {
                "curriculum": {"train": "needle (exp=train)", "multihop": "chain (exp=multihop)"}.get(r["curriculum"], r["curriculum"]),
                "stage": f"{r['stage']:.0f}",
                "rows x length": f"{r['rows_x_len'][0]:,} x {fmt_len(r['rows_x_len'][1])}",
                "width": f"{r['width']:.0f}",
                "made by": r["prefetcher"],
                "in line ms (median, min–max)": f"{1e3 * inline['median']:.2f} ({1e3 * inline['min']:.2f}–{1e3 * inline['max']:.2f})",
                "wait µs (median, max)": f"{1e6 * wait['median']:,.0f} ({1e6 * wait['max']:,.0f})",
                "GPU step ms (projected)": f"{1e3 * r['device_step_s']:.2f}",
                "target µs (5%)": f"{1e6 * r['target_s']:,.0f}",
                "made ahead meets it": "yes" if r["prefetched_meets"] else "no",
                "load (1 min)": f"{r['load_1min']:.2f}",
            }
        )
    return pd.DataFrame(rows)
