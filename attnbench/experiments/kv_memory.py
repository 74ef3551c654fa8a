"""exp=kv_memory: how much cache does each design and production model keep per token?

1. Production presets (attnbench.bench.presets, sources in the file): cache bytes per token
   (the slope), fixed bytes (lightning states in fp32, full sliding-window rings) and totals at
   bench.memory_lens, per dtype in bench.memory_dtypes. Status `projected` (a formula, not a
   measurement of those models), method analytic.
2. Scaled-model check: every design of the run, built from cfg.model in fp32 and bf16, prefills
   n tokens (below and beyond the window); the bytes its cache objects hold are compared with the
   same formula, layer by layer. Status `measured` when equal, `failed` otherwise.
"""

from __future__ import annotations

import pandas as pd
import torch

from attnbench.bench import memory
from attnbench.bench.presets import PRESETS, from_model
from attnbench.model import Model

CHECK_DTYPES = ("float32", "bfloat16")
PUBLISHED = {  # (preset, dtype) -> bytes per token the sources state (tests/test_memory.py holds these too)
    ("minimax_text01", "bfloat16"): 40_960,  # seed 000: "about 40 KiB per token in BF16"; docs/DESIGN.md C1
    ("minimax_m1", "bfloat16"): 40_960,
    ("minimax_m2", "bfloat16"): 253_952,  # 62 x 8 x 128 x 2 x 2 B
}


def run(ctx) -> None:
    presets_table(ctx)
    scaled_check(ctx)


def presets_table(ctx) -> None:
    b = ctx.cfg.bench
    rows = []
    for name in b.presets or list(PRESETS):
        arch = PRESETS[name]
        for dt in b.memory_dtypes:
            per_token, fixed = memory.bytes_per_token(arch, dt), memory.fixed_bytes(arch, dt)
            common = dict(
                layout=arch.layout, dtype=dt, preset=name, method="analytic", source="; ".join(f"{k}: {v}" for k, v in arch.sources.items())
            )
            published = PUBLISHED.get((name, dt))
            cell = ctx.cell(part="preset", preset=name, dtype=dt)  # a row of the table: its records committed together
            cell.record(
                name,
                "memory/cache_bytes_per_token",
                per_token,
                "bytes",
                "projected",
                published=published,
                matches_published=None if published is None else per_token == published,
                **common,
            )
            cell.record(name, "memory/fixed_state_bytes", fixed, "bytes", "projected", state_dtype=memory.STATE_DTYPE, **common)
            row = {"preset": name, "dtype": dt, "bytes/token": per_token, "fixed MiB": fixed / 2**20}
            for n in b.memory_lens:
                total = memory.cache_bytes(arch, n, dt)
                cell.record(name, "memory/total_bytes", total, "bytes", "projected", context_len=n, **common)
                row[f"GiB @ {n:,}"] = total / 2**30
            cell.commit()  # a formula: recomputed on a rerun, written only once
            rows.append(row)
    table = pd.DataFrame(rows)
    ctx.console.print("\nCache of one sequence (lightning state fp32)\n" + table.round(2).to_string(index=False))
    (ctx.run_dir / "summary.md").write_text(
        "# exp=kv_memory\n\n## Production presets (one sequence; lightning "
        "state in fp32)\n\n```\n" + table.round(2).to_string(index=False) + "\n```\n"
    )


def scaled_check(ctx) -> None:
    cfg = ctx.cfg
    failures = []
    lines = []
    for name in ctx.design_names:
        design = cfg.attention[name]
        arch = from_model(cfg.model, design)
        lengths = sorted({cfg.exp.seq_len, design.window + cfg.exp.seq_len})
        for dt in CHECK_DTYPES:
            cells = {n: ctx.cell(part="check", design=name, dtype=dt, context_len=n) for n in lengths}
            if all(c.done for c in cells.values()):  # an earlier run checked these: read its records back
                for n, c in cells.items():
                    (r,) = c.recorded
                    lines.append(_line(name, dt, n, r["value"], r["analytic"]))
                    if r["status"] != "measured":
                        failures.append(f"{name} {dt} n={n}: cache holds {r['value']} B, formula says {r['analytic']} B")
                continue
            torch.manual_seed(cfg.seed)
            model = Model(cfg.model, design).to(device=ctx.device, dtype=getattr(torch, dt)).eval()
            B = cfg.exp.batch
            for n in lengths:
                idx = torch.randint(cfg.model.vocab_size, (B, n), generator=torch.Generator().manual_seed(cfg.seed))
                cache = model.new_cache()
                with torch.no_grad():
                    for i in range(0, n, cfg.exp.prefill_chunk):  # chunked prefill, as at inference
                        model(idx[:, i : i + cfg.exp.prefill_chunk].to(ctx.device), cache)
                got = [x // B for x in cache.nbytes_by_layer()]  # one sequence
                want = [memory.layer_bytes(arch, c, n, dt) for c in arch.layout]
                ok = got == want
                if not ok:
                    failures.append(f"{name} {dt} n={n}: cache holds {sum(got)} B, formula says {sum(want)} B")
                cells[n].record(
                    name,
                    "memory/total_bytes",
                    sum(got),
                    "bytes",
                    "measured" if ok else "failed",
                    context_len=n,
                    dtype=dt,
                    analytic=sum(want),
                    per_layer=got,
                    per_layer_analytic=want,
                    equal=ok,
                    batch=B,
                )
                cells[n].commit()
                lines.append(_line(name, dt, n, sum(got), sum(want)))
    ctx.console.print("\nScaled models: cache objects after a chunked prefill vs the formula\n" + "\n".join(lines))
    with open(ctx.run_dir / "summary.md", "a") as f:
        f.write("\n## Scaled models: bytes the cache objects hold after a prefill vs the formula\n\n```\n" + "\n".join(lines) + "\n```\n")
    if failures:
        raise SystemExit("kv_memory: analytic != measured: " + "; ".join(failures))


def _line(name: str, dt: str, n: int, got: int, want: int) -> str:
    return f"  {name:<18} {dt:<9} n={n:>5}: cache {got:>10,} B  formula {want:>10,} B  {'equal' if got == want else 'DIFFERENT'}"
