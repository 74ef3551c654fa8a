"""The timing sweep shared by exp=crossover and exp=msa_speedup.

For each scope (op | layer), phase (prefill | decode), length n and layer letter (S L W M): predict
the time with the cost model; then, group by group (the letters of one (scope, phase, n) timed
one after the other, in the same process, under the same load; cheapest groups first), skip a cell
if one call would exceed bench.max_call_s or the rest of the run's budget, else time it and record
latency/<phase>_ms with the prediction beside the measurement, its achieved GFLOP/s and fraction
of the calibrated peak, and its load (noisy when half a core above the core count). Cells are resumable.
record_model_errors turns them into costmodel/rel_error (predicted / measured): the cost model's
accuracy on this machine is a recorded benchmark, with the load it was measured under.

Returns a pandas DataFrame of every cell (measured or skipped) for the crossover analysis.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import torch

from attnbench.designs import of, op_of
from attnbench.kernels import choose
from attnbench.model.backbone import Block

from . import costmodel
from .cost_terms import peak_flops
from .gate import check
from attnbench.bench.presets import from_model
from .timing import efficiency, time_fn
from .workloads import layer_call, make_block, op_call


@dataclass
class Budget:
    deadline: float  # time.perf_counter() value after which nothing new starts
    reserve_s: float = 0.0
    text: str = ""  # exp.budget as configured: what skip reasons and the run's last line quote
    skipped: int = 0  # cells skipped because the budget left did not cover them
    cells: int = 0  # cells this run decided (timed, skipped or taken from an earlier run)

    def left(self) -> float:
        return self.deadline - time.perf_counter() - self.reserve_s


def letter_designs(cfg, letters: str) -> dict[str, str]:
    """The single-letter design whose attention settings a letter's op and layer use."""
    out = {}
    for letter in letters:
        name = of(letter).name
        if name not in cfg.attention or cfg.attention[name].layout != letter:
            raise ValueError(f"attention.{name} with layout {letter!r} is needed to time {letter} layers")
        out[letter] = name
    return out


def impl_of(backend: str) -> str:
    return "reference" if backend == "reference" else "fused"


def gate(ctx, letters: str) -> dict[str, bool]:
    """Check every op before timing it; record gate/rel_error (failed: its cells are skipped)."""
    passed = {}
    for letter in letters:
        design = of(letter).name
        backend = choose(op_of(letter), ctx.cfg.backend, ctx.device)
        if not ctx.cfg.bench.check_ops:
            passed[letter] = True
            ctx.record(
                design, "gate/rel_error", None, "relative", "skipped", key=("backend",), backend=backend, note="bench.check_ops=false"
            )
            continue
        cell = ctx.cell(design=design, metric="gate/rel_error", backend=backend, op=op_of(letter))
        if cell.done:  # an earlier run in this directory checked it: its verdict stands
            (r,) = cell.recorded
            passed[letter] = r["status"] == "measured"
            continue
        ok, err = check(letter, device=ctx.device, backend=ctx.cfg.backend)
        passed[letter] = ok
        cell.record(
            design,
            "gate/rel_error",
            err,
            "relative",
            "measured" if ok else "failed",
            backend=backend,
            op=op_of(letter),
            note="naive fp64 formula, kernels/tolerance.py rule; T=200 and T=1 of S=200, D=24, GQA 4/2",
        )
        cell.commit()
        ctx.console.print(f"  gate {op_of(letter):<15} backend={backend:<9} max rel err {err:.1e} {'ok' if ok else 'FAILED'}")
    return passed


def _previous(ctx) -> dict[str, dict]:
    """Latency records of cells an earlier run in this directory finished, by cell key."""
    from attnbench.records.read import read_jsonl

    if not ctx.recorder.path.exists():
        return {}
    return {r["cell"]: r for r in read_jsonl(ctx.recorder.path) if r.get("cell") and str(r.get("metric", "")).startswith("latency/")}


def run(
    ctx, hw, letters: str, passed: dict[str, bool], budget: Budget, *, scopes=None, lens: dict[str, list[int]] | None = None
) -> pd.DataFrame:
    cfg, dev, b = ctx.cfg, ctx.device, ctx.cfg.bench
    dtype = getattr(torch, b.dtype)
    scopes = list(scopes or b.scopes)
    lens = lens or {"prefill": list(b.prefill_lens), "decode": list(b.decode_lens)}
    designs = letter_designs(cfg, letters)
    archs = {L: from_model(cfg.model, cfg.attention[designs[L]]) for L in letters}
    moe = (cfg.model.n_experts, cfg.model.top_k_experts, cfg.model.d_expert)
    blocks: dict[str, Block] = {}
    done = _previous(ctx)
    rows = []
    # every cell with its prediction, grouped by (scope, phase, n): a group's designs are timed
    # together; groups run cheapest first, so a short budget drops the most expensive cells
    groups: dict[tuple, list[dict]] = {}
    for scope in scopes:
        for phase in ("prefill", "decode"):
            for n in lens[phase]:
                for L in letters:
                    op, design, arch = op_of(L), designs[L], archs[L]
                    backend = choose(op, cfg.backend, dev)
                    impl = impl_of(backend)
                    if scope == "op":
                        cost = costmodel.op_cost(op, phase, n, arch, batch=b.batch, dtype=b.dtype, impl=impl)
                    else:
                        cost = costmodel.layer_cost(L, phase, n, arch, batch=b.batch, dtype=b.dtype, impl=impl, moe=moe)
                    groups.setdefault((scope, phase, n), []).append(
                        dict(
                            scope=scope,
                            phase=phase,
                            n=n,
                            letter=L,
                            op=op,
                            design=design,
                            backend=backend,
                            impl=impl,
                            predicted_ms=1e3 * cost.seconds(hw, b.dtype),
                            flops=cost.flops,
                            peak=peak_flops(hw, b.dtype) if hw.flops else None,
                        )
                    )

    def group_cost(key):  # seconds the cells that will run cost (a cell over max_call_s is skipped anyway)
        return sum(c["predicted_ms"] for c in groups[key] if c["predicted_ms"] <= 1e3 * b.max_call_s)

    for key in sorted(groups, key=group_cost):
        for row in groups[key]:
            rows.append(_cell(ctx, row, done, blocks, budget, passed, archs, dtype))
    if budget.skipped:  # the run's last line says what the budget left out (as longctx's budget_summary)
        ctx.last_line = (
            f"attnbench: {budget.skipped} of {budget.cells} timing cells skipped for exp.budget={budget.text} "
            "(each record says why); a larger exp.budget, in a new run directory, times them"
        )
    return pd.DataFrame(rows)


def _cell(ctx, row: dict, done: dict, blocks: dict, budget: Budget, passed: dict, archs: dict, dtype) -> dict:
    """Time one cell (or skip it, or take it from an earlier run); record it; return its row."""
    cfg, dev, b = ctx.cfg, ctx.device, ctx.cfg.bench
    scope, phase, n, L, op, design, backend, impl = (row[k] for k in ("scope", "phase", "n", "letter", "op", "design", "backend", "impl"))
    predicted = row["predicted_ms"] / 1e3
    metric = f"latency/{phase}_ms"
    cell = ctx.cell(metric=metric, scope=scope, n=n, letter=L, backend=backend, dtype=b.dtype)
    budget.cells += 1
    if cell.done and cell.key in done:
        prev = done[cell.key]
        budget.skipped += str(prev.get("reason", "")).startswith("budget:")  # a rerun's last line says it again
        return {
            **row,
            "status": prev["status"],
            "median_ms": prev["value"],
            "p25_ms": prev.get("p25_ms"),
            "p75_ms": prev.get("p75_ms"),
            "load": prev.get("load"),
            "noisy": prev.get("noisy", False),
        }
    reason = None
    if not passed.get(L, False):
        reason = "op failed its correctness gate"
    elif predicted > b.max_call_s:
        reason = f"predicted {predicted:.1f} s per call > bench.max_call_s={b.max_call_s}"
    elif predicted * (b.repeats + 1) * b.max_rel_error > budget.left():  # warm-up + repeats, model error allowed
        budget.skipped += 1
        reason = (
            f"budget: predicted {predicted * (b.repeats + 1):.0f} s (x{b.max_rel_error} model error) for the cell > "
            f"{max(0.0, budget.left()):.0f} s left of exp.budget={budget.text}"
        )
    fields = dict(context_len=n, scope=scope, op=op, backend=backend, dtype=b.dtype, predicted_ms=1e3 * predicted, impl=impl, layout=L)
    if reason:
        cell.record(design, metric, None, "ms", "skipped", reason=reason, **fields)
        cell.commit()
        return {**row, "status": "skipped", "median_ms": None}
    if scope == "op":
        fn = op_call(L, phase, n, archs[L], batch=b.batch, dtype=dtype, device=dev, backend=cfg.backend, seed=cfg.seed)
    else:
        if L not in blocks:
            blocks[L] = make_block(cfg.model, cfg.attention[design], L, dtype=dtype, device=dev)
        fn = layer_call(blocks[L], phase, n, batch=b.batch, dtype=dtype, device=dev, seed=cfg.seed)
    t = time_fn(fn, dev, min_run_time=b.min_run_time, repeats=b.repeats)
    del fn
    cell.record(
        design, metric, t.median_ms, "ms", "measured", **t.fields(), **efficiency(row["flops"], t.median_ms / 1e3, row["peak"]), **fields
    )
    cell.commit()
    ctx.console.print(
        f"  {scope:<5} {phase:<7} n={n:>7} {op:<15} {t.median_ms:>10.2f} ms "
        f"(pred {1e3 * predicted:>9.2f}, x{1e3 * predicted / t.median_ms:.2f}) load {t.load:.1f}" + (" NOISY" if t.noisy else "")
    )
    return {**row, "status": "measured", "median_ms": t.median_ms, "p25_ms": t.p25_ms, "p75_ms": t.p75_ms, "load": t.load, "noisy": t.noisy}


def record_model_errors(ctx, df: pd.DataFrame) -> pd.DataFrame:
    """costmodel/rel_error = predicted / measured for every measured cell with n >= validate_from."""
    b = ctx.cfg.bench
    m = df[(df.status == "measured") & (df.n >= b.validate_from)].copy()
    m["ratio"] = m.predicted_ms / m.median_ms
    for r in m.itertuples():
        within = 1 / b.max_rel_error <= r.ratio <= b.max_rel_error
        ctx.record(
            r.design,
            "costmodel/rel_error",
            float(r.ratio),
            "predicted/measured",
            "measured",
            key=("op", "phase", "scope", "context_len", "backend"),
            op=r.op,
            phase=r.phase,
            scope=r.scope,
            context_len=int(r.n),
            backend=r.backend,
            within=bool(within),
            bound=b.max_rel_error,
            layout=r.letter,
            load=getattr(r, "load", None),
            noisy=bool(getattr(r, "noisy", False)),
        )
    return m


def design_times(df: pd.DataFrame, layout: str) -> pd.DataFrame:
    """Per-layer time of a design = mean over its layout of its letters' measured times, at the
    lengths where every letter it needs was measured. Columns: scope, phase, n, ms."""
    need = sorted(set(layout))
    m = df[(df.status == "measured") & df.letter.isin(need)]
    wide = m.pivot_table(index=["scope", "phase", "n"], columns="letter", values="median_ms")
    wide = wide.dropna(subset=[c for c in need if c in wide.columns]) if set(need) <= set(wide.columns) else wide.iloc[0:0]
    weights = {c: layout.count(c) / len(layout) for c in need}
    ms = sum(wide[c] * w for c, w in weights.items()) if len(wide) else pd.Series(dtype=float)
    return ms.rename("ms").reset_index() if len(wide) else pd.DataFrame(columns=["scope", "phase", "n", "ms"])
