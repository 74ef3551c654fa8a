"""The tables of experiments/*/README.md, each made from that experiment's records.

One function per table, registered with ``@table(name)`` (report/readme.py explains the
markers). A table says where its numbers come from in its column names; accuracies carry
their count and 95% Wilson interval.
"""

from __future__ import annotations

import pandas as pd

from .data import DESIGN_ORDER, RunData, designs, fmt_bytes, fmt_len, metric, pooled
from .quality import learned, pooled_acc
from .readme import table


def _acc(d: pd.DataFrame) -> str:
    a = pooled_acc(d)
    return "—" if a is None else f"{a.p:.2f} ({a.lo:.2f}–{a.hi:.2f}), {a.fraction}"


def _skip(d: pd.DataFrame) -> str:
    s = d[d["status"].isin(["skipped", "failed"])]
    if s.empty:
        return "—"
    r = s.iloc[0]
    note = str(r.get("note") or "")
    if "budget ran out" in note:
        return f"{r['status']}: budget ran out"
    if "GiB" in note and "needs" in note:
        return f"{r['status']}: needs ~{r['estimated_bytes'] / 2**30:.0f} GiB" if pd.notna(r.get("estimated_bytes")) else r["status"]
    if pd.notna(r.get("estimated_s")):  # the planner's estimate for one haystack
        est = float(r["estimated_s"])
        return f"{r['status']}: ~{est / 60:.0f} min a haystack" if est < 3600 else f"{r['status']}: ~{est / 3600:.0f} h a haystack"
    return str(r["status"])


def _run_facts(data: RunData) -> pd.DataFrame:
    rows = []
    for f in data.footers:
        h = next((h for h in data.headers if h["run_dir"] == f["run_dir"]), {})
        rows.append({"run": f["run_dir"].split("experiments/")[-1], "started": h.get("started", ""), "ended": f.get("ended"),
                     "status": f.get("status"), "wall (s)": f"{f.get('wall_s', float('nan')):.1f}",
                     "commit": ((h.get("git") or {}).get("commit") or "")[:7]})
    recs = data.records
    rows.append({"run": "records", "started": "", "ended": "", "status": ", ".join(
        f"{n} {s}" for s, n in recs["status"].value_counts().items()), "wall (s)": "", "commit": ""})
    return pd.DataFrame(rows)


def training_rows(data: RunData) -> pd.DataFrame:
    df, train = data.records, data.train
    assert train is not None, "RunData without its training table (load() always adds it)"
    rows = []
    for _, t in train.iterrows():
        name = t["design"]
        p = metric(df, "params/total")
        a = metric(df, "params/active")
        p, a = p[p["design"] == name]["v"], a[a["design"] == name]["v"]
        wall = metric(df, "train/steps_to_floor")
        wall = wall[wall["design"] == name]["wall_s"] if "wall_s" in wall.columns else pd.Series(dtype=float)
        check = learned(df, name, "niah_single", train=train)
        rows.append({
            "design": name, "layout": next(iter(df[df["design"] == name]["layout"].dropna()), ""),
            "params (active)": f"{p.iloc[-1]:,.0f} ({a.iloc[-1]:,.0f})" if len(p) and len(a) else "—",
            "status": t["status"], "stop reason": t["stop_reason"],
            "steps": f"{t['steps']:,.0f}" if pd.notna(t["steps"]) else "—",
            "tokens": f"{t['tokens'] / 1e6:.1f}M" if pd.notna(t["tokens"]) else "—",
            "wall (min)": f"{wall.iloc[-1] / 60:.0f}" if len(wall) and pd.notna(wall.iloc[-1]) else "—",
            "stage reached": t["stage"], "trained to (tokens)": f"{t['train_len']:.0f}",
            "single needles at the check length": (f"{check.acc.fraction} at {check.context_len:.0f}"
                                                   if check.acc is not None else "—"),
            "learned (lower bound >= 0.8)": {True: "yes", False: "no", None: "—"}[check.flag],
        })
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
            row[fmt_len(L)] = _acc(c) if (c["status"] == "measured").any() else _skip(c)
        rows.append(row)
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
        rows.append({"_order": (designs(pre).index(name), L), "design": name, "length": fmt_len(L), "haystacks": len(g),
                     "prefill s (mean)": f"{g['v'].mean():.2f}", "prefill s (min–max)": f"{g['v'].min():.2f}–{g['v'].max():.2f}",
                     "measured / estimated": f"{ratio.mean():.2f}" if ratio.notna().any() else "—",
                     "cache": fmt_bytes(c.max()) if len(c) else "—",
                     "process peak RSS (not per cell)": fmt_bytes(r.max()) if len(r) else "—"})
    return pd.DataFrame(sorted(rows, key=lambda r: r["_order"])).drop(columns="_order")


@table("needle_4m/run")
def needle_run(data: RunData) -> pd.DataFrame:
    return _run_facts(data)


# ---------------------------------------------------------------- multihop


@table("multihop/training")
def multihop_training(data: RunData) -> pd.DataFrame:
    return training_rows(data)


@table("multihop/accuracy")
def multihop_accuracy(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "multihop/acc")
    lens = sorted(d["context_len"].dropna().unique())
    rows = []
    for name in designs(d):
        for hops, g in d[d["design"] == name].groupby("hops"):
            row = {"design": name, "hops": f"{hops:g}",
                   "scoring": g["scoring"].dropna().iloc[0] if g["scoring"].notna().any() else "every hop, keys given"}
            for L in lens:
                row[fmt_len(L)] = _acc(g[g["context_len"] == L])
            rows.append(row)
    return pd.DataFrame(rows)


@table("multihop/run")
def multihop_run(data: RunData) -> pd.DataFrame:
    return _run_facts(data)


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
    return _grid(d, "needle at token", "context_len", lambda p: f"{p:.0f}", lambda L: f"L = {L:.0f}")


@table("depth_anomaly/multikey")
def anomaly_multikey(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "depth_anomaly/multikey_by_depth")
    return pd.DataFrame([{"depth": f"{r['depth']:.0%}", "context": fmt_len(r["context_len"]), "accuracy": _acc(d.loc[[i]])}
                         for i, r in d.iterrows()])


@table("depth_anomaly/run")
def anomaly_run(data: RunData) -> pd.DataFrame:
    return _run_facts(data)


# ---------------------------------------------------------------- smoke


@table("smoke/designs")
def smoke_designs(data: RunData) -> pd.DataFrame:
    df = data.records
    rows = []
    for name in designs(df):
        g = df[df["design"] == name]
        def val(m):
            return g[g["metric"] == m]["v"].iloc[-1] if (g["metric"] == m).any() else float("nan")
        rows.append({"design": name, "layout": g["layout"].dropna().iloc[0], "params": f"{val('params/total'):,.0f}",
                     "cache bytes (T=64, B=2)": f"{val('cache/bytes'):,.0f}",
                     "prefill vs full": f"{val('smoke/prefill_vs_full_rel_err'):.1e}",
                     "decode vs full": f"{val('smoke/decode_vs_full_rel_err'):.1e}",
                     "train loss (nats)": f"{val('smoke/train_loss'):.2f}"})
    return pd.DataFrame(rows)


@table("smoke/run")
def smoke_run(data: RunData) -> pd.DataFrame:
    return _run_facts(data)


# ---------------------------------------------------------------- kv_memory


@table("kv_memory/presets")
def kv_presets(data: RunData) -> pd.DataFrame:
    df = data.records
    p = df[df["preset"].notna() & (df["dtype"] == "bfloat16")]
    rows = []
    for preset, g in p.groupby("preset", sort=False):
        per = g[g["metric"] == "memory/cache_bytes_per_token"]["v"]
        fixed = g[g["metric"] == "memory/fixed_state_bytes"]["v"]
        tot = g[g["metric"] == "memory/total_bytes"]
        row = {"preset": preset, "bytes/token (BF16)": f"{per.iloc[0]:,.0f}" if len(per) else "—",
               "fixed state": fmt_bytes(fixed.iloc[0]) if len(fixed) else "—"}
        for _, r in tot.sort_values("context_len").iterrows():
            row[f"at {fmt_len(r['context_len'])}"] = fmt_bytes(r["v"])
        row["status"] = ", ".join(sorted(set(g["status"])))
        rows.append(row)
    return pd.DataFrame(rows)


@table("kv_memory/check")
def kv_check(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "memory/total_bytes")
    d = d[(d["status"] == "measured") & d["preset"].isna()]
    return pd.DataFrame([{"design": r["design"], "dtype": r["dtype"], "tokens": f"{r['context_len']:.0f}",
                          "cache objects hold (B)": f"{r['v']:,.0f}", "formula (B)": f"{r['analytic']:,.0f}",
                          "equal": "yes" if r["equal"] else "NO"} for _, r in d.iterrows()])


# ---------------------------------------------------------------- kernels


@table("kernels/cpu")
def kernels_cpu(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "latency/prefill_ms")
    rows = []
    for L, g in d.groupby("context_len"):
        row = {"T": f"{L:.0f}"}
        base = g[(g["op"] == "softmax") & (g["status"] == "measured")]["v"]
        for (op, backend), gg in g.groupby(["op", "backend"], sort=False):
            if (gg["status"] != "measured").all():
                row[f"{op} ({backend}) ms"] = f"{gg['status'].iloc[0]}"
                continue
            ms = gg[gg["status"] == "measured"]["v"].iloc[0]
            ratio = f" ({base.iloc[0] / ms:.1f}x)" if len(base) and op != "softmax" else ""
            row[f"{op} ({backend}) ms"] = f"{ms:.1f}{ratio}"
        load = g["loadavg"].dropna()
        row["load avg (1 min)"] = f"{load.iloc[0][0]:.2f}" if len(load) else "—"
        rows.append(row)
    return pd.DataFrame(rows).fillna("—")


# ---------------------------------------------------------------- msa_speedup


@table("msa_speedup/predicted")
def msa_predicted(data: RunData) -> pd.DataFrame:
    df = data.records
    rows = []
    for phase in ("prefill", "decode"):
        d = metric(df, f"msa_speedup/{phase}")
        d = d[(d["status"] != "measured") & (d["hardware"] == "h200")]
        for (vs, scope), g in d.groupby(["vs", "scope"], sort=False):
            row = {"H200": f"{phase}, {scope}, vs {vs}"}
            for _, r in g.sort_values("context_len").iterrows():
                row[fmt_len(r["context_len"])] = f"{r['v']:.1f}x"
            rows.append(row)
    return pd.DataFrame(rows)


@table("msa_speedup/verdicts")
def msa_verdicts(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "msa_speedup/verdict")
    return pd.DataFrame([{"claim": f"{r['claim']} ({r['hardware']})", "published": f"{r['published']:g}x",
                          "predicted, attention": f"{r['predicted_attention']:.1f}x",
                          "predicted, whole model": f"{r['predicted_model']:.1f}x" if pd.notna(r.get("predicted_model")) else "—",
                          "verdict (status projected)": r["value"]} for _, r in d.iterrows()])


@table("msa_speedup/measured")
def msa_measured(data: RunData) -> pd.DataFrame:
    rows = []
    for phase in ("prefill", "decode"):
        d = metric(data.records, f"msa_speedup/{phase}")
        for _, r in d[d["status"] == "measured"].sort_values("context_len").iterrows():
            rows.append({"phase": phase, "n": f"{r['context_len']:.0f}", "t(softmax) / t(msa), measured": f"{r['v']:.2f}",
                         "cost model": f"{r['predicted']:.2f}"})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- crossover


def _xo(r) -> str:
    if pd.notna(r["v"]):
        b = r["bracket"] if isinstance(r["bracket"], (list, tuple)) else None
        br = f" [{b[0]:,.0f}, {b[1]:,.0f}]" if b and r["status"] == "measured" and None not in b else ""
        return f"{r['v']:,.0f}{br}"
    b = r["bracket"] if isinstance(r["bracket"], (list, tuple)) else [None, None]
    return f"< {fmt_len(b[1])}" if r.get("relation") == "<" else f"> {b[0]:,.0f}" if b[0] else "never"


@table("crossover/measured")
def crossover_measured(data: RunData) -> pd.DataFrame:
    df = data.records
    rows = []
    for name in designs(df[df["metric"].str.startswith("crossover/")]):
        row = {"design vs softmax": name}
        for phase in ("prefill", "decode", "memory"):
            d = metric(df, f"crossover/{phase}_len")
            d = d[(d["design"] == name) & (d["method"] == "measured")]
            for _, r in d.iterrows():
                row[f"{phase}, {r['scope']} (measured)"] = _xo(r)
            a = metric(df, f"crossover/{phase}_len")
            a = a[(a["design"] == name) & (a["status"] == "analytic")]
            if phase == "memory" and not a.empty:
                row["memory (analytic)"] = ", ".join(f"{_xo(r)} {r['dtype']}" for _, r in a.iterrows())
        rows.append(row)
    return pd.DataFrame(rows).fillna("—")


@table("crossover/analytic")
def crossover_analytic(data: RunData) -> pd.DataFrame:
    df = data.records
    rows = []
    for phase in ("prefill", "decode"):
        d = metric(df, f"crossover/{phase}_len")
        d = d[(d["status"] == "projected") & d["design"].isin(["lightning", "sliding_window", "msa"])]
        for (shape, name, scope), g in d.groupby(["shape", "design", "scope"], sort=True):
            row = {"shape": shape, "design": name, "phase": phase, "scope": scope}
            for _, r in g.iterrows():
                row[str(r["hardware"])] = _xo(r)
            rows.append(row)
    return pd.DataFrame(rows).fillna("—")


@table("crossover/costmodel")
def crossover_costmodel(data: RunData) -> pd.DataFrame:
    d = metric(data.records, "costmodel/rel_error")
    rows = []
    for (scope, op, phase), g in d.groupby(["scope", "op", "phase"], sort=True):
        worst = g.loc[(g["v"].map(lambda x: max(x, 1 / x))).idxmax()]
        rows.append({"scope": scope, "op": op, "phase": phase, "lengths": f"{g['context_len'].min():.0f}–{g['context_len'].max():.0f}",
                     "predicted / measured": f"{g['v'].min():.2f}–{g['v'].max():.2f}",
                     "worst at": f"{worst['context_len']:.0f}", "within 2x": "all" if g["within"].all() else
                     f"{int(g['within'].sum())} of {len(g)}"})
    return pd.DataFrame(rows)


@table("crossover/calibration")
def crossover_calibration(data: RunData) -> pd.DataFrame:
    d = data.records[data.records["metric"].str.startswith("calibration/")]
    return pd.DataFrame([{"rate": r["metric"].split("/")[1], "value": f"{r['v']:.3g}", "unit": r["unit"]} for _, r in d.iterrows()])


@table("crossover/skipped")
def crossover_skipped(data: RunData) -> pd.DataFrame:
    d = data.records[data.records["status"] == "skipped"]
    return pd.DataFrame([{"metric": r["metric"], "design": r["design"], "scope": r["scope"], "n": f"{r['context_len']:.0f}",
                          "why": r.get("reason") or r.get("note")} for _, r in d.iterrows()])


@table("msa_speedup/terms")
def msa_terms(data: RunData) -> pd.DataFrame:
    """Where the time goes at 1M tokens on H200 (attention, vs M2): the cost model's terms."""
    rows = []
    for phase in ("prefill", "decode"):
        d = metric(data.records, f"msa_speedup/{phase}")
        d = d[(d["hardware"] == "h200") & (d["vs"] == "m2") & (d["scope"] == "attention") & (d["context_len"] == 2**20)]
        for _, r in d.iterrows():
            unit, k = ("s", 1.0) if phase == "prefill" else ("ms", 1e3)
            for who, terms, total in (("M2", r["baseline_terms_s"], r["baseline_s"]), ("M3", r["m3_terms_s"], r["m3_s"])):
                parts = "; ".join(f"{t} {v * k:,.1f}" for t, v in sorted(terms.items(), key=lambda kv: -kv[1]))
                rows.append({"phase": phase, "model": who, "total": f"{total * k:,.1f} {unit}", "terms": parts,
                             "bytes read": f"{(r['baseline_bytes'] if who == 'M2' else r['m3_bytes']) / 1e9:,.1f} GB"})
    return pd.DataFrame(rows)


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
        design = c["attention"]["lightning_hybrid"]
        last = curve.iloc[-1] if len(curve) else None
        rows.append({
            "probe": h["run_dir"].split("plateau_probe/")[-1].split("/")[0],
            "layout": design["layout"], "lightning heads": design.get("lightning_heads", 0) or c["model"]["n_heads"],
            "qkv conv": design.get("qkv_conv", 0), "lr": c["train"]["lr"],
            "stop": r["train_status"], "steps to 90%": f"{r['v']:,.0f}" if pd.notna(r["v"]) else "—",
            "steps run": f"{last['step']:,.0f}" if last is not None else "—",
            "last logged acc": f"{float(last['acc']):.2f}" if last is not None else "—",
            "wall (min)": f"{float(r['wall_s']) / 60:.0f}" if pd.notna(r.get("wall_s")) else "—",
        })
    out = pd.DataFrame(rows)
    return out.sort_values(["probe", "layout", "lightning heads", "qkv conv", "lr"]) if len(out) else out


# ---------------------------------------------------------------- presets


@table("presets/params")
def preset_params(data: RunData) -> pd.DataFrame:
    """Parameter counts of every design at each preset, in millions (params/* records)."""
    df = data.records[data.records["metric"].astype(str).str.startswith("params/")]
    order = {p: i for i, p in enumerate(("tiny", "small", "base", "base24"))}
    rows = []
    for (preset, name), g in df.groupby(["preset", "design"], sort=False):
        val = {m.split("/", 1)[1]: v for m, v in zip(g["metric"], g["v"])}
        rows.append({"preset": preset, "design": name, "layers": f"{int(g['n_layers'].iloc[-1])}" if "n_layers" in g else "",
                     **{k: f"{val[k] / 1e6:.2f}M" for k in ("total", "active", "attention", "experts", "embedding") if k in val}})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["_p"], out["_d"] = out["preset"].map(order), out["design"].map(lambda d: (DESIGN_ORDER + (d,)).index(d))
    return out.sort_values(["_p", "_d"]).drop(columns=["_p", "_d"])


@table("multihop/check")
def multihop_check(data: RunData) -> pd.DataFrame:
    """Each model on the chain task at its own training length (train/acc records, by hops)."""
    d = metric(data.records, "train/acc")
    d = d[(d["status"] == "measured") & (d["task"] != "niah_single") & d["hops"].notna()]
    rows = []
    for name in designs(d):
        mine = d[d["design"] == name]
        row = {"design": name, "training length": f"{mine['context_len'].iloc[-1]:.0f}"}
        for hops, g in mine.groupby("hops"):
            r = g.iloc[-1]
            row[f"{hops:g} hops"] = f"{r['v']:.2f} ({r['ci_low']:.2f}–{r['ci_high']:.2f}), {round(r['v'] * r['n']):.0f}/{r['n']:.0f}"
        rows.append(row)
    return pd.DataFrame(rows)
