"""What the accuracies may be read as: chance and floor levels, intervals, learned flags and
effective context lengths (how each model was trained is read in quality_training.py). The
tables, figures and claims all take these from here.

Learned. A model "learned the task" when the 95% Wilson lower bound of its accuracy on the
task at its own training length (records ``train/acc``) is at least ``LEARNED_LOWER_BOUND``,
and it passed at least one curriculum stage (true training length > 0). 0.8 because: it is
well above every floor a task here has (the "values in context" floor of the 5-needle task is
0.23, of the 2-hop chain 0.17), the curriculum itself moves on at 0.9 rolling accuracy
(``train.advance_at``), and 200 probes (``eval.train_len_samples``) give a lower bound of 0.8
from 85% accuracy, so a model that passed the last stage clears it and one on a plateau
cannot. A model that did not learn the task at its training length says nothing about that
task at any other length, so no verdict uses it.

Which check decides: the experiment's own task at the training length when it was recorded
(multi-key needles for needle_4m; the k-hop chain for multihop), else the single-needle check
that every run records. The single needle has a "values in context" floor of 1 (finding the
one needle needs no key lookup), so the report says when it had to fall back on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from attnbench.records.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, cluster_bootstrap, wilson
from attnbench.tasks.levels import Levels, task_levels
from attnbench.tasks.vocab import Vocab

LEARNED_LOWER_BOUND = 0.8
EFFECTIVE_LOWER_BOUND = 0.5  # effective context length: the accuracy's lower bound stays above this
# relative effective length (after NoLiMa, Modarressi et al., 2025): the lower bound keeps this
# share of the model's own accuracy at its training length
KEPT_SHARE = 0.85
ACC_METRICS = ("niah/acc", "multihop/acc", "multihop/lookup_acc", "train/acc", "capacity/acc")
FINAL = "final value"  # multihop scoring of compositional probes (experiments/multihop.py)


WILSON = "95% Wilson interval over probes"


@dataclass
class Acc:
    k: float
    n: float
    p: float
    lo: float
    hi: float
    haystacks: float = float("nan")  # distinct haystacks behind the probes (NaN: the records do not say)
    how: str = WILSON  # how the interval was obtained

    def text(self, digits: int = 2) -> str:
        return f"{self.p:.{digits}f} [{self.lo:.{digits}f}–{self.hi:.{digits}f}]"

    @property
    def fraction(self) -> str:
        return f"{self.k:.0f}/{self.n:.0f}"

    @property
    def counted(self) -> str:
        """'27/30 probes from 6 haystacks' (or '... haystacks not recorded')."""
        where = f"from {self.haystacks:.0f} haystacks" if pd.notna(self.haystacks) else "haystacks not recorded"
        return f"{self.fraction} probes {where}"


def pooled_acc(g: pd.DataFrame) -> Acc | None:
    """One accuracy from measured records (runs, seeds pooled): successes and probes summed,
    95% Wilson interval of the pooled count. Records without ``n`` fall back on their own
    interval (the mean of their bounds)."""
    g = g[(g["status"] == "measured") & g["v"].notna()]
    # the same probes recorded by two runs are one measurement, not two: a haystack is seeded by
    # (seed, index) alone, so two runs of one cell at one seed with 6 and 40 haystacks share the
    # first 6 (and a model's check in two experiments is the same 200 probes). Per cell and seed,
    # the record of the most probes stands for the nested rest.
    cell = [c for c in ("design", "metric", "task", "hop_task", "hops", "scoring", "context_len", "depth", "seed") if c in g.columns]
    g = g.sort_values("n", na_position="first", kind="stable").drop_duplicates(subset=cell, keep="last")
    if g.empty:
        return None
    if g["n"].notna().all():
        n = float(g["n"].sum())
        k = float((g["v"] * g["n"]).round().sum())
        lo, hi = wilson(int(k), int(n))
        return Acc(k, n, k / n, lo, hi)
    p = float(g["v"].mean())
    lo = float(g["ci_low"].mean()) if g["ci_low"].notna().all() else float("nan")
    hi = float(g["ci_high"].mean()) if g["ci_high"].notna().all() else float("nan")
    return Acc(float("nan"), float("nan"), p, lo, hi)


def per_seed(g: pd.DataFrame) -> dict[int, Acc]:
    """Each seed's own pooled accuracy (pooled_acc of its records): the spread a pooled cell hides.
    Empty where the records name fewer than two seeds."""
    if "seed" not in g.columns:
        return {}
    out = {int(s): a for s, gs in g.groupby("seed") if (a := pooled_acc(gs)) is not None}
    return out if len(out) > 1 else {}


def seed_spread(accs: dict[int, Acc]) -> str:
    """'s0 0.85 · s1 0.79 · s2 0.83 (spread 0.06)': each seed's accuracy, and max minus min."""
    if not accs:
        return ""
    ps = [a.p for a in accs.values()]
    return " · ".join(f"s{s} {a.p:.2f}" for s, a in sorted(accs.items())) + f" (spread {max(ps) - min(ps):.2f})"


# ---------------------------------------------------------------- the haystack as the unit

PROBE_METRIC = {"niah/acc": "niah/probe", "multihop/acc": "multihop/probe"}  # each accuracy's per-probe records
HAYSTACK_OF = ("seed", "sample")  # what names a haystack within a (design, task, length, hops) cell
CLUSTERED = (
    f"95% interval with the haystack as the unit: the wider of a percentile cluster bootstrap over haystacks "
    f"({BOOTSTRAP_RESAMPLES:,} resamples, seed {BOOTSTRAP_SEED}) and the Wilson interval over probes"
)
NO_HAYSTACKS = "the records do not say which haystack each probe came from (no per-probe records with `sample`)"


def haystack_acc(df: pd.DataFrame, metric_name: str, design: str, length, **group) -> Acc | None:
    """Pooled accuracy of one cell (runs and seeds pooled) whose interval counts the haystack as
    the unit: the probes of one haystack share its context, so they are not independent.

    Per-probe records (``niah/probe``, ``multihop/probe``) name their haystack by the generator
    seed and index (``seed``, ``sample``: the same seed and index give the same haystack in any
    run, so a haystack measured by two runs is one haystack, and its probes are counted once).
    The interval is the wider of a percentile cluster bootstrap over haystacks (stats.cluster_bootstrap)
    and the Wilson interval over probes: the bootstrap carries the clustering, Wilson keeps a width
    where every haystack agrees (all right: the bootstrap collapses to a point). Without per-probe
    records, or where they do not name their haystack, the cell's Wilson interval, saying so
    (``how``), with ``haystacks`` NaN: haystacks are not guessed from the generator's layout.
    """
    p = df[(df["metric"] == PROBE_METRIC.get(metric_name, "")) & (df["design"] == design) & (df["status"] == "measured") & df["v"].notna()]
    p = p[p["context_len"] == length]
    acc_rows = df[(df["metric"] == metric_name) & (df["design"] == design) & (df["context_len"] == length)]
    for col, want in group.items():
        p = p[p[col] == want] if col in p.columns else p.iloc[0:0]
        acc_rows = acc_rows[acc_rows[col] == want] if col in acc_rows.columns else acc_rows.iloc[0:0]
    if p.empty or "sample" not in p.columns or p["sample"].isna().any():
        from attnbench.verdicts.readings import pooled

        acc = pooled_acc(pooled(acc_rows))
        if acc is not None:
            acc.how = f"{WILSON}: {NO_HAYSTACKS}"
        return acc
    same = [c for c in ("design", "task", "hop_task", "hops", "context_len", *HAYSTACK_OF, "probe", "v") if c in p.columns]
    p = p.drop_duplicates(subset=same)  # the same probe of the same haystack recorded by two runs is one measurement
    grouped = p.groupby(list(HAYSTACK_OF), dropna=False)["v"]
    hits, sizes = grouped.sum().to_numpy(dtype=float), grouped.size().to_numpy(dtype=float)  # per haystack
    k, n = float(hits.sum()), float(sizes.sum())
    w_lo, w_hi = wilson(int(round(k)), int(n))
    b_lo, b_hi = cluster_bootstrap(hits.tolist(), sizes.tolist())
    return Acc(k, n, k / n, min(w_lo, b_lo), max(w_hi, b_hi), haystacks=float(len(hits)), how=CLUSTERED)


# ---------------------------------------------------------------- chance and floor


def run_configs(headers: list[dict]) -> dict[str, dict]:
    """run_dir -> the config of its last (re)start."""
    out = {}
    for h in headers:
        if h.get("config"):
            out[h["run_dir"]] = h["config"]
    return out


def config_value(cfg: dict, path: str, default=None):
    """The value at a dotted ``path`` of a config dict, or ``default`` where it has none."""
    for part in path.split("."):
        if not isinstance(cfg, dict) or part not in cfg:
            return default
        cfg = cfg[part]
    return cfg


@lru_cache(maxsize=512)
def _levels(task_cfg: tuple, task: str, depths: tuple, hops: int, chains: int, lookups: bool) -> Levels:
    n_keys, n_values, n_filler, kind, value_noise = task_cfg
    return task_levels(
        Vocab(n_keys, n_values, n_filler),
        task,
        depths=depths,
        hops=hops,
        chains=chains,
        kind=kind,
        value_noise=value_noise,
        lookups=lookups,
    )


@lru_cache(maxsize=64)
def _mqar_levels(task_cfg: tuple, stage: tuple, pairs: int) -> Levels:
    import numpy as np

    from attnbench.tasks.generate import mqar_samples
    from attnbench.tasks.stage import Stage
    from attnbench.tasks.levels import levels_of as sample_levels

    n_keys, n_values, n_filler, _, _ = task_cfg
    st = Stage(**{**dict(stage), "n_pairs": pairs, "n_queries": 1, "max_context_len": 0})
    return sample_levels(
        mqar_samples(np.random.default_rng([20240, pairs]), Vocab(n_keys, n_values, n_filler), st, 100), Vocab(n_keys, n_values, n_filler)
    )


def record_levels(row, cfg: dict) -> Levels | None:
    """Chance and floor of the task an accuracy record measured, from its run's config."""
    task = row.get("task")
    if not isinstance(task, str) or not cfg:
        return None
    task_cfg = (
        int(config_value(cfg, "task.n_keys", 64)),
        int(config_value(cfg, "task.n_values", 16)),
        int(config_value(cfg, "task.n_filler", 64)),
        str(config_value(cfg, "task.haystack", "noise")),
        float(config_value(cfg, "task.value_noise", 0.0)),
    )
    if task.startswith("niah_"):
        return _levels(task_cfg, task, tuple(float(d) for d in config_value(cfg, "eval.depths", [0.0, 0.25, 0.5, 0.75, 1.0])), 1, 2, False)
    if task == "mqar" and pd.notna(row.get("n_pairs")):  # exp=capacity: its last stage with the record's pair count
        last = dict((config_value(cfg, "train.stages", []) or [{}])[-1])
        return _mqar_levels(task_cfg, tuple(sorted(last.items())), int(row["n_pairs"]))
    if task == "multihop":
        hop_task = row.get("hop_task") if isinstance(row.get("hop_task"), str) else "chain"
        hops = int(row["hops"]) if pd.notna(row.get("hops")) else 1
        # records before compositional probes (no `scoring`) scored every hop with every key given
        lookups = row.get("metric") == "multihop/lookup_acc" or row.get("scoring") != FINAL
        return _levels(task_cfg, hop_task, (), hops, int(config_value(cfg, "eval.chains", 2)), lookups)
    return None


def add_levels(df: pd.DataFrame, headers: list[dict]) -> pd.DataFrame:
    """Columns ``chance`` and ``floor`` on every accuracy record (NaN elsewhere), and ``policies``:
    every simple policy's accuracy on the task (tasks/policies.py; a tuple of (name, accuracy))."""
    configs = run_configs(headers)
    chance, floor = pd.Series(float("nan"), index=df.index), pd.Series(float("nan"), index=df.index)
    policies = pd.Series([()] * len(df), index=df.index, dtype=object)
    acc = df[df["metric"].isin(ACC_METRICS)]
    cols = [c for c in ("metric", "task", "hop_task", "hops", "scoring", "n_pairs", "run_dir") if c in acc.columns]
    for key, g in acc.groupby(cols, dropna=False, sort=False):
        row = dict(zip(cols, key if isinstance(key, tuple) else (key,)))
        row = {k: (None if isinstance(v, float) and pd.isna(v) and k not in ("hops", "n_pairs") else v) for k, v in row.items()}
        try:
            lv = record_levels(row, configs.get(str(row.get("run_dir")), {}))
        except ValueError:  # a config the generator refuses: no levels rather than no report
            lv = None
        if lv is not None:
            chance[g.index], floor[g.index] = lv.chance, lv.floor
            policies[g.index] = pd.Series([lv.policies] * len(g), index=g.index, dtype=object)
    return df.assign(chance=chance, floor=floor, policies=policies).copy()


def levels_of(d: pd.DataFrame) -> tuple[float, float]:
    """(chance, floor) of a set of accuracy records of one task: their mean (NaN if unknown)."""
    return float(d["chance"].mean()), float(d["floor"].mean())


# ---------------------------------------------------------------- learned


@dataclass
class Learned:
    flag: bool | None  # None: no check recorded
    acc: Acc | None
    task: str
    context_len: float
    train_len: float
    why: str  # one line a reader can check
    fallback: bool = False  # decided on the single-needle check (floor 1)


def learned(
    df: pd.DataFrame,
    design: str,
    task: str | None = None,
    hops=None,
    train: pd.DataFrame | None = None,
    threshold: float = LEARNED_LOWER_BOUND,
) -> Learned:
    """Did ``design`` learn ``task`` (``hops`` for multihop) at its training length?"""
    t = df[(df["metric"] == "train/acc") & (df["design"] == design) & (df["status"] == "measured")]
    own = t[t["task"] == task] if task else t.iloc[0:0]
    if task == "multihop" and hops is not None:
        own = own[own["hops"] == hops]
    fallback = own.empty
    use = t[t["task"].isin(["niah_single"]) | t["task"].isna()] if fallback else own
    train_len = float("nan")
    if not use.empty and pd.to_numeric(use["train_len"], errors="coerce").notna().any():
        train_len = float(pd.to_numeric(use["train_len"], errors="coerce").max())  # what the checked model was trained to
    elif train is not None and not train[train["design"] == design].empty:
        train_len = float(train[train["design"] == design]["train_len"].iloc[-1])
    if use.empty:
        return Learned(None, None, task or "", float("nan"), train_len, f"{design}: no check at the training length recorded")
    acc = pooled_acc(use)
    if acc is None:  # records at the training length, none of them a measured accuracy
        return Learned(None, None, task or "", float("nan"), train_len, f"{design}: no measured check at the training length")
    at = float(use["context_len"].max())
    label = "single needle" if fallback or not task else (task if task != "multihop" else f"{int(hops)}-hop chain" if hops else task)
    if pd.notna(train_len) and train_len <= 0:
        return Learned(
            False,
            acc,
            label,
            at,
            train_len,
            f"{design} passed no curriculum stage (true training length 0; {label} at {at:.0f} tokens: {acc.fraction})",
            fallback,
        )
    flag = bool(pd.notna(acc.lo) and acc.lo >= threshold)
    where = (
        f"at its training length {at:.0f}"
        if at == train_len or pd.isna(train_len)
        else f"at {at:.0f} tokens (its true training length is {train_len:.0f})"
    )
    count = f"{acc.fraction} = " if pd.notna(acc.n) else ""
    why = f"{design}: {label} {where}: {count}{acc.text()}, lower bound {'>=' if flag else '<'} {threshold}"
    if fallback and task:
        why += " (no check of the experiment's own task was recorded; a single needle needs no key lookup)"
    return Learned(flag, acc, label, at, train_len, why, fallback)


def add_learned(df: pd.DataFrame, train: pd.DataFrame) -> pd.DataFrame:
    """On accuracy records: ``learned`` (True/False/None: did the design learn this task at its
    training length) and the true ``train_len`` (the longest stage passed, from the training
    records; what older records wrote, the config's last stage, is kept in ``train_len_recorded``)."""
    df = df.assign(train_len_recorded=df["train_len"], learned=None)
    # keyed by (experiment, design, seed): each seed's model has its own training length (a
    # chain model trained to 1K at one seed and to 128 at another are two models)
    true = (
        {(e, d, _seed_key(s)): t for e, d, s, t in zip(train["exp"], train["design"], train["seed"], train["train_len"])}
        if train is not None and not train.empty
        else {}
    )
    seeds = df["seed"] if "seed" in df.columns else pd.Series(None, index=df.index)
    key = pd.Series([(e, d, _seed_key(s)) for e, d, s in zip(df["exp"], df["design"], seeds)], index=df.index)
    acc = df["metric"].isin(ACC_METRICS) & key.isin(list(true))
    df.loc[acc, "train_len"] = key[acc].map(true).astype(float)
    flags: dict = {}
    for metric_name in ("niah/acc", "multihop/acc", "multihop/lookup_acc", "capacity/acc"):
        rows = df[df["metric"] == metric_name]
        if rows.empty:
            continue
        task = experiment_task(df, metric_name)
        for (name, hops, seed), g in rows.groupby(["design", "hops", "seed"], dropna=False):
            key = (name, task, None if pd.isna(hops) else hops, _seed_key(seed))
            if key not in flags:  # each seed's model its own check
                at = df if key[3] is None else df[df["seed"] == key[3]]
                tr = train if key[3] is None or train is None or train.empty else train[train["seed"] == key[3]]
                flags[key] = learned(at, name, task, hops=key[2], train=tr).flag
            df.loc[g.index, "learned"] = flags[key]
    return df


def _seed_key(seed) -> int | None:
    """A seed as a dictionary key (NaN and None alike: a record without a seed)."""
    return None if seed is None or pd.isna(seed) else int(seed)


def experiment_task(df: pd.DataFrame, metric_name: str) -> str | None:
    """The task an accuracy metric's records measured (the most common one)."""
    d = df[(df["metric"] == metric_name) & df["task"].notna()]
    return None if d.empty else str(d["task"].mode().iloc[0])


# ---------------------------------------------------------------- effective context length


def effective_length(df: pd.DataFrame, design: str, metric_name: str = "niah/acc") -> tuple[float, str]:
    """The longest evaluated length up to which every evaluated length's accuracy has a 95%
    lower bound above EFFECTIVE_LOWER_BOUND (the definition of an effective length: at least 90% kept). (length or 0, text)."""
    from attnbench.verdicts.readings import pooled
    from attnbench.basics import fmt_len

    d = pooled(df[(df["metric"] == metric_name) & (df["design"] == design) & (df["status"] == "measured")])
    lens = sorted(d["context_len"].dropna().unique())
    if not lens:
        return float("nan"), "—"
    best = 0.0
    for L in lens:
        a = pooled_acc(d[d["context_len"] == L])
        if a is None or not (a.lo > EFFECTIVE_LOWER_BOUND):
            break
        best = L
    return best, (fmt_len(best) if best else f"< {fmt_len(lens[0])}")


RELATIVE_RULE = (
    f"relative effective length (after NoLiMa): the longest length up to which every evaluated length's 95% lower "
    f"bound is at least {KEPT_SHARE:.0%} of the model's own accuracy at its true training length. RULER's fixed "
    "threshold (85.6, Llama-2-7B's score at 4K) is not used: it is one large model's score on another task, and means "
    "nothing for models of this size on these tasks; a share of the model's own score at home does"
)


def relative_effective_length(df: pd.DataFrame, design: str, train_len, metric_name: str = "niah/acc") -> tuple[float, str]:
    """RELATIVE_RULE: (length, text); the training length itself keeps its own score by definition,
    longer lengths keep KEPT_SHARE of it when their lower bound says so. NaN and why when the model
    was not evaluated at its training length (no base to keep a share of)."""
    from attnbench.verdicts.readings import pooled
    from attnbench.basics import fmt_len

    d = pooled(df[(df["metric"] == metric_name) & (df["design"] == design) & (df["status"] == "measured")])
    base = pooled_acc(d[d["context_len"] == train_len]) if pd.notna(train_len) and train_len else None
    if base is None or not base.p > 0:
        return float("nan"), "— (no accuracy at its training length)"
    bar = KEPT_SHARE * base.p
    best = float(train_len)  # the training length keeps its own score by definition
    for L in sorted(L for L in d["context_len"].dropna().unique() if L > train_len):
        a = pooled_acc(d[d["context_len"] == L])
        if a is None or not (a.lo >= bar):
            break
        best = L
    return best, fmt_len(best)
