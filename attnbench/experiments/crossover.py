"""exp=crossover: from which context length is each design cheaper than softmax?

1. the roofline of this machine (conf/hardware/cpu.yaml: calibrated at the start) or the
   profile given with hardware=NAME;
2. the correctness gate of every op (an op that fails is not timed);
3. the timing sweep (attnbench.bench.sweep): ops and whole layers, prefill and decode, over
   bench.prefill_lens / bench.decode_lens, with the cost model's prediction beside each time;
4. the cost model's error (predicted / measured) for n >= bench.validate_from;
5. crossovers against softmax in prefill time, decode time and memory: measured (log-log
   interpolated between the bracketing lengths; hybrids from their letters' layer times) and
   analytic (cost model) per hardware profile, at the scaled shape and at Text-01's shape.
"""

from __future__ import annotations

import time

import pandas as pd

from attnbench.bench import costmodel, crossing, memory, sweep
from attnbench.bench.calibrate import hardware_for_run, load_profile
from attnbench.bench.presets import TEXT01, M3, from_model
from attnbench.bench.workloads import filled_cache, make_block
from attnbench.designs import BASELINE_OP, layout_letters, of, op_of, spec_of
from attnbench.model import resolve_layout

ANALYTIC_RESERVE_S = 60.0  # budget kept for the analytic part and the summary
# the design every crossover is measured against: the registry's baseline op, one letter
BASE_LETTER = next(L for L in layout_letters() if op_of(L) == BASELINE_OP)
BASE = of(BASE_LETTER).name
TEXT01_WINDOW = 1024  # Text-01's shape's window when no configured design reads one


def configured_window(attention) -> int:
    """The window of Text-01's shape: that of the configured design whose layers read a window."""
    for L in layout_letters():
        if "window" in spec_of(L).shape_settings and of(L).name in attention:
            return attention[of(L).name].window
    return TEXT01_WINDOW


def production_shape(letter: str, window: int):
    """Text-01's attention dims for every letter (S, L as in Text-01; W with `window`; M with M3's
    block 128, top 16, index dim 128), projections + MoE from Text-01's active parameters."""
    from dataclasses import replace

    return replace(
        TEXT01,
        layout=letter * TEXT01.n_layers,
        window=window,
        block_size=M3.block_size,
        top_k=M3.top_k,
        index_heads=TEXT01.n_kv_heads,
        index_dim=M3.index_dim,
    )


def run(ctx) -> None:
    cfg = ctx.cfg
    start = time.perf_counter()
    budget = sweep.Budget(start + ctx.budget.seconds, reserve_s=ANALYTIC_RESERVE_S, text=ctx.budget.text)
    hw = hardware_for_run(ctx)
    designs = [d for d in ctx.design_names]
    layouts = {d: resolve_layout(cfg.attention[d].layout, cfg.model.n_layers) for d in designs}
    letters = "".join(L for L in layout_letters() if any(L in lay for lay in layouts.values()))
    check_windows(ctx, designs)
    passed = sweep.gate(ctx, letters)
    df = sweep.run(ctx, hw, letters, passed, budget)
    errors = sweep.record_model_errors(ctx, df)
    table = measured_crossovers(ctx, df, layouts)
    table += memory_crossovers(ctx, layouts)
    table += analytic_crossovers(ctx, hw, layouts)
    summarize(ctx, df, errors, pd.DataFrame(table))


def check_windows(ctx, designs) -> None:
    """Hybrids are costed from the single-letter designs' layers: their settings must agree."""
    cfg = ctx.cfg
    for d in designs:
        for letter in layout_letters():
            single = of(letter).name
            if letter in cfg.attention[d].layout and single in cfg.attention:
                for key in spec_of(letter).shape_settings:  # the settings its op shape reads
                    if cfg.attention[d][key] != cfg.attention[single][key]:
                        ctx.console.print(
                            f"  note: attention.{d}.{key}={cfg.attention[d][key]} differs from "
                            f"attention.{single}.{key}; its {letter} layers are timed with the latter"
                        )


def measured_crossovers(ctx, df: pd.DataFrame, layouts: dict[str, str]) -> list[dict]:
    rows = []
    base = sweep.design_times(df, layouts.get(BASE, BASE_LETTER))
    for d, lay in layouts.items():
        if d == BASE:
            continue
        mine = sweep.design_times(df, lay)
        for (scope, phase), g in mine.groupby(["scope", "phase"]):
            both = g.merge(
                base[(base.scope == scope) & (base.phase == phase)], on=["scope", "phase", "n"], suffixes=("", "_base")
            ).sort_values("n")
            if both.empty:
                continue
            res = crossing.measured(both.n.tolist(), both.ms.tolist(), both.ms_base.tolist())
            rows.append(_record(ctx, d, lay, phase, res, scope=scope, hardware=f"this {ctx.device.type}", lengths=both.n.tolist()))
    return rows


def memory_crossovers(ctx, layouts: dict[str, str]) -> list[dict]:
    """Measured: bytes the caches hold after n tokens (filled through their own append paths),
    summed over each layout; analytic: bench.memory, exact."""
    import torch

    cfg, b = ctx.cfg, ctx.cfg.bench
    dtype = getattr(torch, b.dtype)
    held = {}
    for L in {c for lay in layouts.values() for c in lay}:
        block = make_block(cfg.model, cfg.attention[of(L).name], L, dtype=dtype, device=ctx.device)
        for n in b.decode_lens:
            held[L, n] = filled_cache(block, n, batch=1, dtype=dtype, device=ctx.device).nbytes()
    rows = []
    total = {d: [sum(held[c, n] for c in lay) for n in b.decode_lens] for d, lay in layouts.items()}
    for d, lay in layouts.items():
        for n, v in zip(b.decode_lens, total[d]):
            ctx.record(
                d,
                "memory/total_bytes",
                v,
                "bytes",
                "measured",
                key=("context_len", "dtype"),
                context_len=n,
                dtype=b.dtype,
                note="cache objects of one sequence, every layer",
            )
        if d == BASE:
            continue
        res = crossing.measured(list(b.decode_lens), total[d], total[BASE])
        rows.append(_record(ctx, d, lay, "memory", res, scope="model", hardware="any"))
        arch = from_model(cfg.model, cfg.attention[d])
        base = from_model(cfg.model, cfg.attention[BASE])
        for dt in sorted({b.dtype, "bfloat16"}):
            n = memory.memory_crossover(arch, base, dt, n_max=memory.N_MAX)
            res = {
                "value": None if n is None else float(n),
                "relation": ">" if n is None else "=",
                "bracket": [memory.N_MAX, None] if n is None else [n - 1, n],
                "crossings": 1,
                "method": "analytic",
            }
            rows.append(_record(ctx, d, lay, "memory", res, scope="model", hardware="any", dtype=dt, status="analytic"))
    return rows


def analytic_crossovers(ctx, hw_cpu, layouts: dict[str, str]) -> list[dict]:
    """Cost-model crossovers per profile: this machine with the backend that ran (reference),
    the GPU profiles with fused kernels in bf16; at the scaled shape and at Text-01's shape."""
    cfg, b = ctx.cfg, ctx.cfg.bench
    from attnbench.kernels import choose

    profiles = [(cfg.hardware.name, hw_cpu, None, b.dtype)] + [(p, load_profile(p), "fused", "bfloat16") for p in b.profiles]
    moe = (cfg.model.n_experts, cfg.model.top_k_experts, cfg.model.d_expert)
    window = configured_window(cfg.attention)
    shapes = {
        "scaled": ({L: from_model(cfg.model, cfg.attention[of(L).name]) for L in layout_letters() if of(L).name in cfg.attention}, moe),
        "text01": ({L: production_shape(L, window) for L in layout_letters()}, None),
    }
    rows = []
    for name, hw, impl, dtype in profiles:
        for shape, (archs, shape_moe) in shapes.items():
            for scope in b.scopes:

                def per_layer(lay, phase, impl_):
                    def f(n):
                        t = 0.0
                        for L in set(lay):
                            i = impl_ or sweep.impl_of(choose(op_of(L), cfg.backend, ctx.device))
                            c = (
                                costmodel.op_cost(op_of(L), phase, n, archs[L], batch=b.batch, dtype=dtype, impl=i)
                                if scope == "op"
                                else costmodel.layer_cost(L, phase, n, archs[L], batch=b.batch, dtype=dtype, impl=i, moe=shape_moe)
                            )
                            t += lay.count(L) / len(lay) * c.seconds(hw, dtype)
                        return t

                    return f

                for d, lay in layouts.items():
                    if d == BASE or not set(lay) <= set(archs):
                        continue
                    for phase in ("prefill", "decode"):
                        res = crossing.analytic(
                            per_layer(lay, phase, impl), per_layer(BASE_LETTER, phase, impl), n_min=16, n_max=1 << 26, per_octave=4
                        )
                        rows.append(
                            _record(
                                ctx,
                                d,
                                lay,
                                phase,
                                res,
                                scope=scope,
                                hardware=name,
                                shape=shape,
                                impl=impl or "as run",
                                dtype=dtype,
                                status="projected",
                            )
                        )
    return rows


def _record(ctx, design, layout, phase, res, *, scope, hardware, status="measured", **extra) -> dict:
    metric = f"crossover/{phase}_len"
    ctx.record(
        design,
        metric,
        res["value"],
        "tokens",
        status,
        key=("vs", "method", "hardware", "scope", "shape", "dtype", "impl", "lengths"),
        vs=BASE,
        method=res["method"],
        bracket=res["bracket"],
        relation=res["relation"],
        crossings=res["crossings"],
        hardware=hardware,
        scope=scope,
        layout=layout,
        **extra,
    )
    return {
        "design": design,
        "phase": phase,
        "scope": scope,
        "method": res["method"],
        "hardware": hardware,
        "shape": extra.get("shape", "scaled"),
        "dtype": extra.get("dtype", ctx.cfg.bench.dtype),
        "crossover": crossing.describe(res),
        "bracket": res["bracket"],
        "crossings": res["crossings"],
    }


def summarize(ctx, df: pd.DataFrame, errors: pd.DataFrame, table: pd.DataFrame) -> None:
    """Print the tables and write them to summary.md in the run directory."""
    pd.set_option("display.width", 200)
    parts = []
    m = df[df.status == "measured"]
    if len(m):
        t = m.pivot_table(index=["scope", "phase", "n"], columns="op", values="median_ms")
        parts.append(("Measured median times (ms)", t.round(3).to_string()))
    if len(errors):
        e = errors.pivot_table(index=["scope", "phase", "n"], columns="op", values="ratio")
        parts.append((f"Cost model predicted / measured (n >= {ctx.cfg.bench.validate_from})", e.round(2).to_string()))
    if len(table):
        parts.append(("Crossover lengths vs softmax", table.to_string(index=False)))
    text = "\n\n".join(f"## {title}\n\n```\n{body}\n```" for title, body in parts)
    (ctx.run_dir / "summary.md").write_text(f"# exp={ctx.cfg.exp.name}\n\n{text}\n")
    for title, body in parts:
        ctx.console.print(f"\n{title}\n{body}")
