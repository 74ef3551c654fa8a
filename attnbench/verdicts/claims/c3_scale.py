"""C3 at scale: does the hybrids' multi-hop gap to softmax grow with the model? (exp=scale)

A sub-verdict of C3, added to its parts and evidence by ``with_scale`` (the one hook in
verdicts/claims/judge.py); it never changes C3's own verdict, which is judged at one width. Read from
the width ladder's records only (verdicts/scale_fit.py fits the trend).

The rule (``SCALE_RULE``, appended to C3's rule): the gap is softmax's accuracy minus the
hybrid's on compositional chains of ``hops`` at the training length, seeds pooled, at each
width; its least-squares slope against log10 active parameters (the reference design's at each
width) comes with a percentile bootstrap interval over seeds and haystacks. Judged for each 7:1
hybrid with ladder records, the first in the claim's order of closeness to Text-01 first:

- fewer than ``min_widths`` widths where both designs have ``min_seeds`` seeds: not yet measured;
- the interval above 0: the gap grows with size; below 0: it shrinks; else no trend within the
  interval.

Every sub-verdict states the sizes it rests on: a few million parameters at most, against the
456B of the model the claim is about, so no trend here extrapolates to that scale.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from attnbench.verdicts import scale_fit as F

GROWS, SHRINKS, NO_TREND, NOT_YET = (
    "the gap grows with size",
    "the gap shrinks with size",
    "no trend within the interval",
    "not yet measured",
)
HOPS: tuple[int, ...] = (2, 3, 4)  # the chains the gap is read on: C3's multi-hop (at least 2 hops)
MIN_WIDTHS, MIN_SEEDS = 3, 2  # a trend needs this many widths, each with this many seeds of both designs
THRESHOLDS: dict[str, object] = {"hops": HOPS, "min_widths": MIN_WIDTHS, "min_seeds": MIN_SEEDS}
CLAIMED_SCALE = "456B"  # MiniMax-Text-01's total parameters, the scale the claim speaks of
SCALE_RULE = (
    " At scale (exp=scale, a sub-verdict that does not change the verdict above): for each 7:1 hybrid with width-ladder "
    "records, softmax's accuracy minus the hybrid's on chains of {hops} hops at the training length (seeds pooled) at "
    "each width, fitted by least squares against log10 active parameters, with a {level:.0%} percentile bootstrap "
    "interval over seeds and haystacks ({resamples:,} resamples, seed {seed}); fewer than {min_widths} widths with "
    "{min_seeds} seeds each: not yet measured; the slope's interval above 0: the gap grows with size; below 0: it "
    "shrinks; else no trend within the interval. It states the sizes measured, which are not the 456B of the claim."
).format(hops="-".join(str(h) for h in HOPS), level=F.LEVEL, resamples=F.RESAMPLES, seed=F.SEED, min_widths=MIN_WIDTHS, min_seeds=MIN_SEEDS)


def hybrids_with_records(df: pd.DataFrame, order: tuple[str, ...]) -> list[str]:
    """The 7:1 hybrids with ladder chain records: those of ``order`` first, in it, then any other by name."""
    d = F.select(df, "chain", 1, HOPS)
    if d.empty:
        return []
    lay = d[["design", "layout"]].drop_duplicates()
    seven = {str(n) for n, lo in zip(lay["design"], lay["layout"]) if isinstance(lo, str) and lo and lo == "LLLLLLLS" * (len(lo) // 8)}
    return [h for h in order if h in seven] + sorted(seven - set(order))


def size_range(fit: F.GapFit) -> str:
    return f"widths {min(fit.widths)}-{max(fit.widths)}, {F.fmt_params(min(fit.params))}-{F.fmt_params(max(fit.params))} active parameters"


def judge_at_scale(df: pd.DataFrame, order: tuple[str, ...] = ()) -> tuple[dict[str, str], list[str]]:
    """(parts, evidence) of C3 at scale; both empty where exp=scale has no records at all."""
    if F.records(df).empty:
        return {}, []
    hybrids = hybrids_with_records(df, order)
    label = "-".join(str(h) for h in HOPS)
    if not hybrids:
        return {"at scale": NOT_YET}, [f"at scale: the width ladder has no chain records of a 7:1 hybrid at {label} hops"]
    parts, evidence = {}, []
    for name in hybrids:
        fit = F.fit_gap(df, name, "chain", 1, HOPS, f"chains of {label} hops")
        if fit is None:
            parts[f"at scale, {name}"] = NOT_YET
            evidence.append(f"at scale, {name}: no width where it and softmax have chain records of the same seed")
            continue
        seeded = [w for w in fit.widths if len(fit.seeds[w]) >= MIN_SEEDS]
        key = f"at scale, {name} ({size_range(fit)})"
        have = ", ".join(f"d={w}: {len(fit.seeds[w])} seed{'s' if len(fit.seeds[w]) != 1 else ''}" for w in fit.widths)
        if len(seeded) < MIN_WIDTHS:
            parts[key] = NOT_YET
            evidence.append(
                f"at scale, {name}: {len(seeded)} width(s) with {MIN_SEEDS} seeds of both designs ({have}); "
                f"the trend needs {MIN_WIDTHS}: not yet measured"
            )
            continue
        verdict = {"grows": GROWS, "shrinks": SHRINKS}.get(fit.trend, NO_TREND)
        parts[key] = verdict
        gaps = "; ".join(
            f"d={w} ({F.fmt_params(p)}): {g:+.2f} [{lo:+.2f}, {hi:+.2f}] from {fit.probes[w][0]:.0f} and {fit.probes[w][1]:.0f} probes"
            for w, p, g, lo, hi in zip(fit.widths, fit.params, fit.gap, fit.gap_lo, fit.gap_hi)
        )
        evidence.append(
            f"at scale, {name}: softmax minus {name} on chains of {label} hops at the training length, per width: {gaps} ({have}); "
            f"slope {fit.slope:+.3f} per tenfold of active parameters, {fit.level:.0%} bootstrap interval "
            f"[{fit.slope_lo:+.3f}, {fit.slope_hi:+.3f}] over seeds and haystacks ({fit.resamples:,} resamples, seed "
            f"{fit.seed}): {verdict}, over {size_range(fit)} only; {F.fmt_params(max(fit.params))} parameters is not "
            f"{CLAIMED_SCALE}, and a trend over {len(fit.widths)} widths says nothing about that scale"
        )
        unlearned = not_learned(df, name, fit)
        if unlearned:
            evidence.append(f"at scale, {name}: the gap includes models that passed no curriculum stage ({unlearned})")
    return parts, evidence


def not_learned(df: pd.DataFrame, name: str, fit: F.GapFit) -> str:
    d = F.select(df, "chain", 1, HOPS)
    d = d[d["design"].isin([name, F.REFERENCE]) & (d["train_len"].fillna(0) <= 0)] if "train_len" in d.columns else d.iloc[0:0]
    return ", ".join(sorted({f"{r.design} d={int(r.width)} seed {int(r.seed)}" for r in d.itertuples()}))


def with_scale(judge: Callable, order=()) -> Callable:
    """C3's judge with the at-scale sub-verdict added to its parts and evidence (its verdict unchanged)."""
    order = tuple(order)

    def judged(df: pd.DataFrame, t: dict, train=None):
        v = judge(df, t, train)
        parts, evidence = judge_at_scale(df, order)
        v.parts.update(parts)
        v.evidence.extend(evidence)
        return v

    judged.__name__ = getattr(judge, "__name__", "judge")
    judged.__doc__ = judge.__doc__
    return judged
