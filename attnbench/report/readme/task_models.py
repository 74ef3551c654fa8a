"""The tables of experiments/*/README.md, each made from that experiment's records.

One function per table, registered with ``@table(name)`` (report/readme/regenerate.py explains the
markers). A table says where its numbers come from in its column names; accuracies carry
their count and 95% Wilson interval.
"""

from __future__ import annotations

import pandas as pd

from attnbench.report.readme.skips import skip_text
from attnbench.report.frame import RunData, designs
from attnbench.verdicts.readings import metric, pooled
from attnbench.basics import fmt_bytes, fmt_len
from attnbench.verdicts.quality import (
    KEPT_SHARE,
    LEARNED_LOWER_BOUND,
    effective_length,
    experiment_task,
    haystack_acc,
    learned,
    pooled_acc,
    relative_effective_length,
)
from attnbench.report.readme.registry import Tables

TABLES = Tables()  # this module's README tables (report/readme/regenerate.py merges every module's)
table = TABLES.table


def _acc(d: pd.DataFrame) -> str:
    a = pooled_acc(d)
    return "—" if a is None else f"{a.p:.2f} ({a.lo:.2f}–{a.hi:.2f}), {a.fraction}"


def run_facts(data: RunData) -> pd.DataFrame:
    rows = []
    for f in data.footers:
        h = next((h for h in data.headers if h["run_dir"] == f["run_dir"]), {})
        rows.append(
            {
                "run": f["run_dir"].split("experiments/")[-1],
                "started": h.get("started", ""),
                "ended": f.get("ended"),
                "status": f.get("status"),
                "wall (s)": f"{f.get('wall_s', float('nan')):.1f}",
                "commit": ((h.get("git") or {}).get("commit") or "")[:7],
            }
        )
    recs = data.records
    rows.append(
        {
            "run": "records",
            "started": "",
            "ended": "",
            "status": ", ".join(f"{n} {s}" for s, n in recs["status"].value_counts().items()),
            "wall (s)": "",
            "commit": "",
        }
    )
    return pd.DataFrame(rows)


def learned_text(df: pd.DataFrame, name: str, train: pd.DataFrame) -> str:
    """Did ``name`` learn this experiment's own task at its training length (quality.learned, the one
    definition the report and the claims use)? Multi-hop: the hop counts it learned."""
    task = next((t for m in ("niah/acc", "multihop/acc", "capacity/acc") if (t := experiment_task(df, m))), None)
    if task == "multihop":
        c = df[(df["metric"] == "train/acc") & (df["design"] == name) & (df["task"] == "multihop")]
        hops = sorted(c["hops"].dropna().unique())
        if not hops:
            return "—"
        got = [h for h in hops if learned(df, name, "multihop", hops=h, train=train).flag]
        return f"{', '.join(f'{h:g}' for h in got) or 'no'} of {', '.join(f'{h:g}' for h in hops)} hops"
    check = learned(df, name, task, train=train)
    flag = {True: "yes", False: "no", None: "—"}[check.flag]
    return f"{flag} ({check.task}, {check.acc.fraction})" if check.acc is not None else flag


def training_rows(data: RunData) -> pd.DataFrame:
    df, train = data.records, data.train
    assert train is not None, "RunData without its training table (load() always adds it)"
    rows = []
    seeded = train["seed"].nunique(dropna=True) > 1  # a seed column where models of several seeds are here
    all_records = df
    for _, t in train.iterrows():
        name = t["design"]
        df = all_records if pd.isna(t["seed"]) else all_records[all_records["seed"] == t["seed"]]  # this seed's model
        p = metric(df, "params/total")
        a = metric(df, "params/active")
        p, a = p[p["design"] == name]["v"], a[a["design"] == name]["v"]
        wall = metric(df, "train/steps_to_floor")
        wall = wall[wall["design"] == name]["wall_s"] if "wall_s" in wall.columns else pd.Series(dtype=float)
        check = learned(df, name, "niah_single", train=train)
        rows.append(
            {
                "design": name,
                **({"seed": f"{t['seed']:.0f}" if pd.notna(t["seed"]) else "—"} if seeded else {}),
                "layout": next(iter(df[df["design"] == name]["layout"].dropna()), ""),
                "params (active)": f"{p.iloc[-1]:,.0f} ({a.iloc[-1]:,.0f})" if len(p) and len(a) else "—",
                "status": t["status"],
                "stop reason": t["stop_reason"],
                "steps": f"{t['steps']:,.0f}" if pd.notna(t["steps"]) else "—",
                "tokens": f"{t['tokens'] / 1e6:.1f}M" if pd.notna(t["tokens"]) else "—",
                "wall (min)": f"{wall.iloc[-1] / 60:.0f}" if len(wall) and pd.notna(wall.iloc[-1]) else "—",
                "stage reached": t["stage"],
                "trained to (tokens)": f"{t['train_len']:.0f}",
                "single needles at the check length": (
                    f"{check.acc.fraction} at {check.context_len:.0f}" if check.acc is not None else "—"
                ),
                f"learned the experiment's task (lower bound >= {LEARNED_LOWER_BOUND})": learned_text(df, name, train),
                **(
                    {"tokens from the first chain stage": f"{t['chain_tokens'] / 1e6:.1f}M" if pd.notna(t["chain_tokens"]) else "—"}
                    if train["chain_tokens"].notna().any()
                    else {}
                ),
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- needle_4m


@table("needle_4m/training")
def needle_training(data: RunData) -> pd.DataFrame:
    return training_rows(data)


@table("needle_4m/accuracy")
def needle_accuracy(data: RunData) -> pd.DataFrame:
    d = pooled(metric(data.records, "niah/acc"))
    lens = sorted(d["context_len"].dropna().unique())
    rows = []
    for name in designs(d):
        g = d[d["design"] == name]
        row = {"design": name}
        for L in lens:
            c = g[g["context_len"] == L]
            row[fmt_len(L)] = _acc(c) if (c["status"] == "measured").any() else skip_text(c, data.headers)
        rows.append(row)
    return pd.DataFrame(rows)


@table("needle_4x/by_seed")
def needle_by_seed(data: RunData) -> pd.DataFrame:
    """Per design and length: the accuracy of each seed's model on its own haystacks, and all seeds
    pooled, each with the haystack as the unit of its interval (quality.haystack_acc)."""
    df = data.records
    d = pooled(metric(df, "niah/acc"))
    task = experiment_task(df, "niah/acc")
    rows = []
    for name in designs(d):
        for L in sorted(d[d["design"] == name]["context_len"].dropna().unique()):
            seeds = sorted({int(s) for s in d[(d["design"] == name) & (d["context_len"] == L)]["seed"].dropna()})
            row = {"design": name, "length": fmt_len(L)}
            for s in seeds:
                a = haystack_acc(df[df["seed"] == s], "niah/acc", name, L, task=task)
                row[f"seed {s}"] = f"{a.text()}, {a.counted}" if a is not None else "—"
            a = haystack_acc(df, "niah/acc", name, L, task=task)
            row["seeds pooled"] = f"{a.text()}, {a.counted}" if a is not None and len(seeds) > 1 else "—"
            if any(v != "—" for k, v in row.items() if k.startswith("seed")):  # a length no seed measured (skipped) has no row
                rows.append(row)
    every = sorted({c for r in rows for c in r if c.startswith("seed ") and c != "seeds pooled"}, key=lambda c: int(c.split()[1]))
    return pd.DataFrame(rows, columns=["design", "length", *every, "seeds pooled"]).fillna("—")


@table("needle_4m/effective")
def needle_effective(data: RunData) -> pd.DataFrame:
    """Per design: its true training length, its effective context length two ways (quality.effective_length,
    absolute; quality.relative_effective_length, a share of its own accuracy at home) and its accuracy at 16x the training length (the bar: 0.9 there)."""
    df, train = data.records, data.train
    d = pooled(metric(df, "niah/acc"))
    rows = []
    for name in designs(d):
        t = train[train["design"] == name] if train is not None else pd.DataFrame()
        L = float(t["train_len"].iloc[0]) if len(t) else float("nan")  # NaN (no training record): no 16x cell
        at16 = d[(d["design"] == name) & (d["context_len"] == 16 * L)]
        rows.append(
            {
                "design": name,
                "trained to (tokens)": f"{L:.0f}" if pd.notna(L) else "—",
                "effective length (lower bound > 0.5)": effective_length(df, name)[1],
                f"relative effective length (lower bound >= {KEPT_SHARE:.0%} of its own at the training length)": (
                    relative_effective_length(df, name, L)[1]
                ),
                "accuracy at 16x the training length": _acc(at16) if (at16["status"] == "measured").any() else "—",
            }
        )
    return pd.DataFrame(rows)


@table("needle_4m/depth")
def needle_depth(data: RunData) -> pd.DataFrame:
    p = metric(data.records, "niah/probe")
    rows = []
    for name in designs(p):
        g = p[p["design"] == name]
        row = {"design": name}
        for depth, gg in g.groupby("depth"):
            row[f"{depth:.0%}"] = f"{int(gg['v'].sum())}/{len(gg)}"
        rows.append(row)
    return pd.DataFrame(rows)


@table("needle_4m/cost")
def needle_cost(data: RunData) -> pd.DataFrame:
    df = data.records
    pre = metric(df, "eval/prefill_s")
    cache = metric(df, "eval/cache_bytes")
    rss = metric(df, "eval/peak_rss_bytes")
    rows = []
    for (name, L), g in pre.groupby(["design", "context_len"]):
        c = cache[(cache["design"] == name) & (cache["context_len"] == L)]["v"]
        r = rss[(rss["design"] == name) & (rss["context_len"] == L)]["v"]
        est = g["estimated_s"].astype(float) if "estimated_s" in g.columns else pd.Series(dtype=float)
        ratio = (g["v"] / est).where(est > 0)
        rate = g["gflop_per_s"].astype(float) if "gflop_per_s" in g.columns else pd.Series(dtype=float)
        frac = g["peak_fraction"].astype(float) if "peak_fraction" in g.columns else pd.Series(dtype=float)
        rows.append(
            {
                "_order": (designs(pre).index(name), L),
                "design": name,
                "length": fmt_len(L),
                "haystacks": len(g),
                "prefill s (mean)": f"{g['v'].mean():.2f}",
                "prefill s (min–max)": f"{g['v'].min():.2f}–{g['v'].max():.2f}",
                "measured / estimated": f"{ratio.mean():.2f}" if ratio.notna().any() else "—",
                "GFLOP/s (% of peak), mean": (f"{rate.mean():.1f}" + (f" ({100 * frac.mean():.0f}%)" if frac.notna().any() else ""))
                if rate.notna().any()
                else "—",
                "compiled blocks": ("yes" if g["compiled"].eq(True).all() else "no") if "compiled" in g.columns else "—",
                "cache": fmt_bytes(c.max()) if len(c) else "—",
                "process peak RSS (not per cell)": fmt_bytes(r.max()) if len(r) else "—",
            }
        )
    if not rows:  # a run that has not prefilled a haystack yet
        return pd.DataFrame()
    return pd.DataFrame(sorted(rows, key=lambda r: r["_order"])).drop(columns="_order")


@table("needle_4m/compile")
def needle_compile(data: RunData) -> pd.DataFrame:
    """eval/compile_s: Model.compile_prefill at the start of the evaluation (with its warm-up prefill)."""
    df = metric(data.records, "eval/compile_s")
    return pd.DataFrame(
        [{"design": r["design"], "chunk (tokens)": f"{int(r['chunk']):,}", "compile s": f"{r['v']:.1f}"} for _, r in df.iterrows()]
    )


@table("needle_4m/run")
def needle_run(data: RunData) -> pd.DataFrame:
    return run_facts(data)


# ---------------------------------------------------------------- multihop


@table("multihop/training")
def multihop_training(data: RunData) -> pd.DataFrame:
    return training_rows(data)


@table("multihop/accuracy")
def multihop_accuracy(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "multihop/acc")
    lens = sorted(d["context_len"].dropna().unique())
    rows = []
    seeds = d["seed"] if "seed" in d.columns else pd.Series(0, index=d.index)
    for name in designs(d):
        for (seed, hops), g in d[d["design"] == name].groupby([seeds[d["design"] == name].fillna(0), "hops"]):
            row = {
                "design": name,
                "seed": f"{seed:g}",
                "hops": f"{hops:g}",
                "scoring": g["scoring"].dropna().iloc[0] if g["scoring"].notna().any() else "every hop, keys given",
            }
            for L in lens:
                row[fmt_len(L)] = _acc(g[g["context_len"] == L])
            rows.append(row)
    return pd.DataFrame(rows)


@table("multihop/floors")
def multihop_floors(data: RunData) -> pd.DataFrame:
    """Per hop count: every simple policy's accuracy on the compositional probe, run on the
    generator's samples with the run's settings (tasks/policies.py); the shortcuts a score must clear."""
    d = metric(data.records, "multihop/acc")
    d = d[d["scoring"] == "final value"] if "scoring" in d.columns else d.iloc[0:0]
    rows = []
    for hops, g in d.groupby("hops"):
        pol = next((p for p in g["policies"] if isinstance(p, tuple) and p), ())
        rows.append({"hops": f"{hops:g}", **{name: f"{acc:.3f}" for name, acc in pol}})
    return pd.DataFrame(rows)


@table("multihop/run")
def multihop_run(data: RunData) -> pd.DataFrame:
    return run_facts(data)


# ---------------------------------------------------------------- depth_anomaly


def _grid(d: pd.DataFrame, index: str, columns: str, fmt_index=str, fmt_col=str) -> pd.DataFrame:
    rows = []
    for i, g in d.groupby(index, sort=True):
        row = {index: fmt_index(i)}
        for c, gg in g.groupby(columns, sort=True):
            row[fmt_col(c)] = _acc(gg)
        rows.append(row)
    return pd.DataFrame(rows).fillna("—")


@table("depth_anomaly/by_depth")
def anomaly_by_depth(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "depth_anomaly/acc_by_depth")
    return _grid(d, "depth", "context_len", lambda x: f"{x:.1%}".replace(".0%", "%"), lambda L: f"{L:.0f} tokens")


@table("depth_anomaly/by_position")
def anomaly_by_position(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "depth_anomaly/acc_by_position").rename(columns={"needle_pos": "needle at token"})
    if d.empty:
        return pd.DataFrame()
    return _grid(d, "needle at token", "context_len", lambda p: f"{p:.0f}", lambda L: f"L = {L:.0f}")


@table("depth_anomaly/multikey")
def anomaly_multikey(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "depth_anomaly/multikey_by_depth")
    return pd.DataFrame(
        [{"depth": f"{r['depth']:.0%}", "context": fmt_len(r["context_len"]), "accuracy": _acc(d.loc[[i]])} for i, r in d.iterrows()]
    )


@table("depth_anomaly/run")
def anomaly_run(data: RunData) -> pd.DataFrame:
    return run_facts(data)


# ---------------------------------------------------------------- plateau_probe


@table("plateau_probe/runs")
def plateau_runs(data: RunData) -> pd.DataFrame:
    """One row per probe run: what it changed, whether it left the first-stage plateau, when."""
    df = data.records
    rows = []
    for h in data.headers:
        run = df[df["run_dir"] == h["run_dir"]]
        done = run[run["metric"] == "train/steps_to_floor"]
        if done.empty:
            continue
        r, curve = done.iloc[-1], run[run["metric"] == "train/loss"].sort_values("step")
        c = h["config"]
        design = c["attention"][r["design"]]  # the probed design (exp.designs)
        last = curve.iloc[-1] if len(curve) else None
        rows.append(
            {
                "probe": h["run_dir"].split("plateau_probe/")[-1].split("/")[0],
                "layout": design["layout"],
                "lightning heads": design.get("lightning_heads", 0) or c["model"]["n_heads"],
                "qkv conv": design.get("qkv_conv", 0),
                "lr": c["train"]["lr"],
                "stop": r["train_status"],
                "steps to 90%": f"{r['v']:,.0f}" if pd.notna(r["v"]) else "—",
                "steps run": f"{last['step']:,.0f}" if last is not None else "—",
                "last logged acc": f"{float(last['acc']):.2f}" if last is not None else "—",
                "wall (min)": f"{float(r['wall_s']) / 60:.0f}" if pd.notna(r.get("wall_s")) else "—",
            }
        )
    out = pd.DataFrame(rows)
    return out.sort_values(["probe", "layout", "lightning heads", "qkv conv", "lr"]) if len(out) else out


@table("multihop/check")
def multihop_check(data: RunData) -> pd.DataFrame:
    """Each model (design and seed) on the chain task at its own training length (train/acc records, by hops)."""
    d = metric(data.records, "train/acc")
    d = d[(d["status"] == "measured") & (d["task"] != "niah_single") & d["hops"].notna()]
    rows = []
    if "seed" not in d.columns:
        d = d.assign(seed=0)
    for name in designs(d):
        for seed, mine in d[d["design"] == name].groupby(d["seed"].fillna(0)):
            row = {"design": name, "seed": f"{seed:g}", "training length": f"{mine['context_len'].iloc[-1]:.0f}"}
            for hops, g in mine.groupby("hops"):
                r = g.iloc[-1]
                row[f"{hops:g} hops"] = f"{r['v']:.2f} ({r['ci_low']:.2f}–{r['ci_high']:.2f}), {round(r['v'] * r['n']):.0f}/{r['n']:.0f}"
            rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- capacity


@table("capacity/training")
def capacity_training(data: RunData) -> pd.DataFrame:
    return training_rows(data)


@table("capacity/accuracy")
def capacity_accuracy(data: RunData) -> pd.DataFrame:
    """Per design and seed (a model a row, never pooled): its state size and its accuracy at the
    training length at every pair count (one query a context, so every probe has its own haystack)."""
    d = metric(data.records, "capacity/acc")
    d = d[d["status"] == "measured"]
    rows = []
    # softmax (no state) first, then the fixed states from the largest down
    size = {n: d.loc[d["design"] == n, "state_size"].max() if "state_size" in d else float("nan") for n in designs(d)}
    for name in sorted(size, key=lambda n: (pd.notna(size[n]), -size[n] if pd.notna(size[n]) else 0, n)):
        state = size[name]
        for seed, mine in d[d["design"] == name].groupby(d["seed"].fillna(0).astype(int)):
            row = {
                "design": name,
                "seed": f"{seed}",
                "state floats a layer": f"{state:,.0f}" if pd.notna(state) else "— (every token kept)",
            }
            for pairs, g in mine.groupby("n_pairs"):
                row[f"{pairs:g} pairs"] = _acc(g)
            rows.append(row)
    return pd.DataFrame(rows)


@table("capacity/run")
def capacity_run(data: RunData) -> pd.DataFrame:
    return run_facts(data)
