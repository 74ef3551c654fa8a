"""The width ladder's trend (exp=scale), from its records only: accuracy per rung, the gap
between softmax and a design against parameters, and the gap's slope against log parameters
with a bootstrap interval over seeds and haystacks.

Read from ``scale/acc`` records (attnbench/experiments/scale.py): one per (design, width,
seed, task, length factor, hops), with the hits and probes of each haystack (``hits``,
``sizes``). A rung's size on the x axis is ``rung_params``: the reference design's active
parameters at that width (the number its token budget was scaled by), so the designs' gaps
at a width share one x.

The bootstrap (numpy, seeded): per resample, at each width, the seeds are drawn with
replacement (the same draw for both designs: a seed's models share their data and contexts),
then within each drawn seed its haystacks are drawn with replacement (probes in a haystack
share a context, so the haystack is the unit); the pooled accuracies give that width's gap, and
an ordinary least-squares line through the widths' gaps against log10 parameters gives the
slope. The interval is the percentile interval of the slopes. With two seeds a width has only
three distinct seed draws, so the interval carries little of the seed-to-seed spread; the
records say how many seeds each width had.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from attnbench.records.stats import wilson

ACC = "scale/acc"
MODEL = "scale/model"
REFERENCE = "softmax"
RESAMPLES, SEED, LEVEL = 2000, 0, 0.95


def records(df: pd.DataFrame) -> pd.DataFrame:
    """The measured scale/acc records (hits per haystack present) of models trained under the
    ladder's budget rule: fair-v1's budgets at every width. Models whose budgets were scaled by
    their active parameters (scale/model ``budget_ratio`` other than 1:
    experiments/scale_per_param/) are left out, so no trend mixes the two rules."""
    if df.empty or "metric" not in df.columns:
        return df.iloc[0:0]
    d = df[(df["metric"] == ACC) & (df["status"] == "measured")]
    if d.empty or "hits" not in d.columns:
        return d.iloc[0:0]
    m = df[df["metric"] == MODEL]
    if "budget_ratio" in m.columns and "key" in d.columns:
        # by (key, run config): a model's key leaves out its token budget, so a fair-v1 run that resumed
        # such a model under the larger budget has the same key (experiments/scale's width 16)
        by = ["key", "config_hash"] if "config_hash" in d.columns and "config_hash" in m.columns else ["key"]
        bad = set(m.loc[m["budget_ratio"].fillna(1.0) != 1.0, by].itertuples(index=False, name=None))
        d = d[[t not in bad for t in d[by].itertuples(index=False, name=None)]]
    return d[d["hits"].map(lambda h: isinstance(h, (list, tuple)) and len(h) > 0)]


def select(df: pd.DataFrame, task: str, factor: int = 1, hops: tuple[int, ...] = ()) -> pd.DataFrame:
    """The records of one task cell: a needle task at a length factor, or chains at the given hop counts."""
    d = records(df)
    d = d[d["task"] == task]
    if "factor" in d.columns:
        d = d[d["factor"] == factor]
    if hops:
        d = d[d["hops"].isin(hops)] if "hops" in d.columns else d.iloc[0:0]
    return d


@dataclass
class Seeded:
    """One (design, width, seed): the hits and probes of each haystack, pooled over its cells."""

    hits: np.ndarray
    sizes: np.ndarray

    @property
    def k(self) -> float:
        return float(self.hits.sum())

    @property
    def n(self) -> float:
        return float(self.sizes.sum())


def by_seed(d: pd.DataFrame) -> dict[tuple[str, int], dict[int, Seeded]]:
    """(design, width) -> seed -> its haystacks (the cells of several hop counts concatenated).

    The same cell recorded twice (two runs of one config) counts once."""
    if d.empty or not {"design", "width", "seed", "hits", "sizes"} <= set(d.columns):
        return {}  # a run that has just started: no scale records yet
    keep = [c for c in ("design", "width", "seed", "task", "factor", "hops", "context_len", "key") if c in d.columns]
    d = d.drop_duplicates(subset=keep)
    out: dict[tuple[str, int], dict[int, Seeded]] = {}
    for (design, width, seed), g in d.groupby(["design", "width", "seed"]):
        hits = np.concatenate([np.asarray(h, dtype=float) for h in g["hits"]])
        sizes = np.concatenate([np.asarray(s, dtype=float) for s in g["sizes"]])
        out.setdefault((str(design), int(width)), {})[int(seed)] = Seeded(hits, sizes)
    return out


@dataclass
class Point:
    """A design's pooled accuracy at one width (seeds pooled), with its Wilson interval over probes."""

    design: str
    width: int
    params: float  # the design's own active parameters (median over its records)
    rung_params: float
    k: float
    n: float
    lo: float
    hi: float
    seeds: list[int]
    learned: bool  # every model behind it passed at least one curriculum stage

    @property
    def p(self) -> float:
        return self.k / self.n if self.n else float("nan")


def points(df: pd.DataFrame, task: str, factor: int = 1, hops: tuple[int, ...] = ()) -> list[Point]:
    d = select(df, task, factor, hops)
    out = []
    for (design, width), seeds in sorted(by_seed(d).items()):
        g = d[(d["design"] == design) & (d["width"] == width)]
        k, n = sum(s.k for s in seeds.values()), sum(s.n for s in seeds.values())
        lo, hi = wilson(int(round(k)), int(n))
        learned = bool((g["train_len"].fillna(0) > 0).all()) if "train_len" in g.columns else True
        out.append(
            Point(design, width, float(g["active_params"].median()), float(g["rung_params"].median()), k, n, lo, hi, sorted(seeds), learned)
        )
    return out


@dataclass
class GapFit:
    """softmax minus ``design`` against the rungs' parameters, and its fitted slope."""

    design: str
    label: str
    widths: list[int]
    params: list[float]  # rung_params of each width
    seeds: dict[int, list[int]]  # width -> the seeds both designs have there
    gap: list[float]  # per width, seeds pooled
    gap_lo: list[float]  # per width, the bootstrap interval
    gap_hi: list[float]
    slope: float  # gap per tenfold of parameters (NaN with fewer than 2 widths)
    intercept: float
    slope_lo: float
    slope_hi: float
    resamples: int = RESAMPLES
    seed: int = SEED
    level: float = LEVEL
    probes: dict[int, tuple[float, float]] = field(default_factory=dict)  # width -> (softmax's probes, the design's)

    @property
    def trend(self) -> str:
        """grows | shrinks | none (the interval holds 0) | unknown (no slope)."""
        if not np.isfinite(self.slope_lo) or not np.isfinite(self.slope_hi):
            return "unknown"
        return "grows" if self.slope_lo > 0 else "shrinks" if self.slope_hi < 0 else "none"

    @property
    def fitted_widths(self) -> int:
        return len(self.widths)


def _slopes(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OLS slope and intercept of each row of y (R, W) against x (W,)."""
    xc = x - x.mean()
    slope = (y - y.mean(axis=-1, keepdims=True)) @ xc / (xc @ xc)
    return slope, y.mean(axis=-1) - slope * x.mean()


def _resampled_acc(rng: np.random.Generator, seeds: dict[int, Seeded], draws: np.ndarray, order: list[int]) -> np.ndarray:
    """Pooled accuracy of each resample (R,): draws (R, S) index ``order`` (the seeds), each drawn
    seed's haystacks resampled with replacement."""
    R, S = draws.shape
    k, n = np.zeros(R), np.zeros(R)
    for slot in range(S):
        for j, s in enumerate(order):
            got = seeds[s]
            idx = rng.integers(0, len(got.hits), (R, len(got.hits)))
            mine = draws[:, slot] == j
            k += np.where(mine, got.hits[idx].sum(axis=1), 0.0)
            n += np.where(mine, got.sizes[idx].sum(axis=1), 0.0)
    return k / np.maximum(n, 1e-12)


def fit_gap(
    df: pd.DataFrame,
    design: str,
    task: str,
    factor: int = 1,
    hops: tuple[int, ...] = (),
    label: str = "",
    reference: str = REFERENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> GapFit | None:
    """The gap reference - design at every width where both have records of the same seeds; None if none."""
    d = select(df, task, factor, hops)
    cells = by_seed(d)
    widths = sorted(w for (name, w) in cells if name == design and (reference, w) in cells)
    rows = []
    for w in widths:
        common = sorted(set(cells[(reference, w)]) & set(cells[(design, w)]))
        if common:
            rows.append((w, common))
    if not rows:
        return None
    rng = np.random.default_rng(seed)
    params, gap, boot, probes = [], [], [], {}
    for w, common in rows:
        ref, mine = cells[(reference, w)], cells[(design, w)]
        g = d[(d["width"] == w) & (d["design"] == reference)]
        params.append(float(g["rung_params"].median()))
        acc = {name: sum(c[s].k for s in common) / sum(c[s].n for s in common) for name, c in ((reference, ref), (design, mine))}
        gap.append(acc[reference] - acc[design])
        probes[w] = (sum(ref[s].n for s in common), sum(mine[s].n for s in common))
        draws = rng.integers(0, len(common), (resamples, len(common)))  # the same seed draw for both designs
        boot.append(_resampled_acc(rng, ref, draws, common) - _resampled_acc(rng, mine, draws, common))
    tail = (1 - level) / 2
    B = np.stack(boot, axis=1)  # (R, W)
    lo_w, hi_w = np.quantile(B, [tail, 1 - tail], axis=0)
    x = np.log10(np.asarray(params))
    if len(rows) >= 2 and np.ptp(x) > 0:
        one_s, one_i = _slopes(x, np.asarray(gap)[None, :])
        slope, intercept = float(one_s[0]), float(one_i[0])
        s_boot, _ = _slopes(x, B)
        s_lo, s_hi = (float(v) for v in np.quantile(s_boot, [tail, 1 - tail]))
    else:
        slope = intercept = s_lo = s_hi = float("nan")
    return GapFit(
        design=design,
        label=label or task,
        widths=[w for w, _ in rows],
        params=params,
        seeds={w: c for w, c in rows},
        gap=gap,
        gap_lo=[float(v) for v in lo_w],
        gap_hi=[float(v) for v in hi_w],
        slope=slope,
        intercept=intercept,
        slope_lo=s_lo,
        slope_hi=s_hi,
        resamples=resamples,
        seed=seed,
        level=level,
        probes=probes,
    )


def designs_against(df: pd.DataFrame, reference: str = REFERENCE) -> list[str]:
    """The designs with scale records besides the reference, in name order."""
    d = records(df)
    return sorted(str(n) for n in d["design"].unique() if n != reference) if not d.empty else []


def fmt_params(n: float) -> str:
    return f"{n / 1e6:.2g}M" if n >= 1e5 else f"{n / 1e3:.3g}K"
