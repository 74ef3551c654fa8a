"""The tables of experiments/scale/README.md (exp=scale, the width ladder), from its records:
the models of each rung, the accuracy of each design at each width (seeds pooled, per-seed
values beside), and the gap's fitted slope (verdicts/scale_fit.py, the numbers C3's at-scale
part reads)."""

from __future__ import annotations

import pandas as pd

from attnbench.verdicts.claims import c3_scale as CS
from attnbench.verdicts import scale_fit as F

from attnbench.report.frame import RunData
from attnbench.verdicts.readings import metric
from attnbench.report.readme.registry import Tables

TABLES = Tables()  # this module's README tables (report/readme/regenerate.py merges every module's)
table = TABLES.table

CELLS: tuple[tuple[str, str, int, tuple[int, ...]], ...] = (  # (column, task, length factor, hops)
    ("single 1x", "niah_single", 1, ()),
    ("single 4x", "niah_single", 4, ()),
    ("single 16x", "niah_single", 16, ()),
    ("multikey 1x", "niah_multikey", 1, ()),
    ("multikey 4x", "niah_multikey", 4, ()),
    ("multikey 16x", "niah_multikey", 16, ()),
    ("chain 1 hop", "chain", 1, (1,)),
    ("chain 2 hops", "chain", 1, (2,)),
    ("chain 3 hops", "chain", 1, (3,)),
    ("chain 4 hops", "chain", 1, (4,)),
)


def _tokens(n: float) -> str:
    return f"{n / 1e6:.1f}M"


@table("scale/models")
def models(data: RunData) -> pd.DataFrame:
    """One row per trained model of the ladder: its size, how far it trained and under which budget."""
    d = metric(data.records, F.MODEL)
    rows: list[dict[str, object]] = []
    if d.empty:
        return pd.DataFrame(rows)
    d = d.drop_duplicates(subset=["design", "width", "seed", "phase", "key"], keep="last")
    for _, r in d.sort_values(["width", "design", "seed", "phase"], kind="stable").iterrows():
        budget = r["needle_token_budget"] if r["phase"] == "needle" else r["chain_token_budget"]
        rows.append(
            {
                "design": r["design"],
                "width": int(r["width"]),
                "seed": int(r["seed"]),
                "phase": r["phase"],
                "active params": f"{int(r['v']):,}",
                "status": r["train_status"],
                "trained to": f"{int(r['train_len']):,}" if pd.notna(r.get("train_len")) and r["train_len"] else "no stage passed",
                "steps": f"{int(r['steps']):,}",
                "tokens (all stages)": _tokens(r["tokens"]),
                "token budget": _tokens(budget) + ("" if r["phase"] == "needle" else " from the first chain stage"),
                "wall (min)": f"{r['wall_s'] / 60:.0f}",
            }
        )
    return pd.DataFrame(rows)


@table("scale/acc")
def accuracy(data: RunData) -> pd.DataFrame:
    """Per design and width: each cell's accuracy with seeds pooled [95% Wilson interval over
    probes] and the probe count; the per-seed values follow in parentheses."""
    rows = []
    by_width: dict[tuple[str, int], dict[str, str]] = {}
    for col, task, factor, hops in CELLS:
        d = F.select(data.records, task, factor, hops)
        seeded = F.by_seed(d)
        for p in F.points(data.records, task, factor, hops):
            per = seeded[(p.design, p.width)]
            each = ", ".join(f"s{s} {per[s].k / per[s].n:.2f}" for s in sorted(per) if per[s].n)
            cell = f"{p.p:.2f} [{p.lo:.2f}, {p.hi:.2f}] n={int(p.n)}" + (f" ({each})" if len(per) > 1 else "")
            by_width.setdefault((p.design, p.width), {})[col] = cell
    for (design, width), cells in sorted(by_width.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rows.append({"design": design, "width": width, **{c[0]: cells.get(c[0], "—") for c in CELLS}})
    return pd.DataFrame(rows)


@table("scale/gap")
def gap(data: RunData) -> pd.DataFrame:
    """softmax's accuracy minus each design's, per width (seeds pooled, bootstrap interval), and the
    least-squares slope per tenfold of parameters with its bootstrap interval: the fits C3's
    at-scale part reads (chains of 2-4 hops) and the needle cells at 1x."""
    rows = []
    tasks = [("chain 2-4 hops", "chain", 1, CS.HOPS), ("single 1x", "niah_single", 1, ()), ("multikey 1x", "niah_multikey", 1, ())]
    for design in F.designs_against(data.records):
        for label, task, factor, hops in tasks:
            fit = F.fit_gap(data.records, design, task, factor, hops, label=label)
            if fit is None:
                continue
            per_width = "; ".join(
                f"d={w} ({F.fmt_params(p)}, seeds {','.join(map(str, fit.seeds[w]))}): {g:+.2f} [{lo:+.2f}, {hi:+.2f}]"
                for w, p, g, lo, hi in zip(fit.widths, fit.params, fit.gap, fit.gap_lo, fit.gap_hi)
            )
            slope = "—" if fit.trend == "unknown" else f"{fit.slope:+.3f} [{fit.slope_lo:+.3f}, {fit.slope_hi:+.3f}]"
            rows.append({"design": design, "cell": label, "gap by width": per_width, "slope per 10x params": slope, "trend": fit.trend})
    return pd.DataFrame(rows)
