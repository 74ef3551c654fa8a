"""The decision table's training cells: which of a design's trainings it shows, and how."""

from __future__ import annotations

import pandas as pd


PRIMARY_EXP = "needle_4m"  # the main job's experiment (the README's command)


def primary_training(tr: pd.DataFrame) -> pd.DataFrame:
    """A design's training rows for the decision table: those of the main job's experiment where
    it has any (other experiments train other curricula under the same design name: multihop's
    chains, capacity's pair ladder, the probes' variants), else all; the last row of each seed."""
    if "exp" in tr and (tr["exp"] == PRIMARY_EXP).any():
        tr = tr[tr["exp"] == PRIMARY_EXP]
    if "seed" not in tr or tr.empty:
        return tr
    return tr.groupby(tr["seed"].fillna(-1), sort=True).tail(1).sort_values("seed")


def training_cells(tr: pd.DataFrame) -> list[tuple[str, str, str]]:
    """trained to, steps / tokens, stopped, each as (text, kind, title) for a table cell: one
    model's facts, or each seed's (s0 ...; s1 ...)."""

    def one(t) -> tuple[str, str, str]:
        tl = int(t["train_len"]) if pd.notna(t["train_len"]) else None
        steps = f"{int(t['steps']):,}" if pd.notna(t["steps"]) else "?"
        steps = steps if t.get("steps_exact", True) is not False else f"~{steps}"
        tokens = f"{t['tokens'] / 1e6:.1f}M" if pd.notna(t["tokens"]) else "?"
        return (f"{tl:,}" if tl else "0 (no stage passed)"), f"{steps} / {tokens}", str(t["status"])

    facts = [one(t) for _, t in tr.iterrows()]
    seeds = [f"s{int(x)} " if pd.notna(x) else "" for x in tr["seed"]] if len(tr) > 1 and "seed" in tr else [""] * len(tr)
    last = tr.iloc[-1]
    failed = all(f[0].startswith("0 ") for f in facts)

    def joined(i: int) -> str:
        values = {f[i] for f in facts}
        return facts[0][i] if len(values) == 1 else "; ".join(f"{s}{f[i]}" for s, f in zip(seeds, facts))

    return [
        (joined(0), "failed" if failed else "", f"the longest curriculum stage passed (stage reached {last['stage']})"),
        (joined(1), "", "optimizer steps / training tokens" + (", per seed" if len(facts) > 1 else "")),
        (joined(2), "", f"{last['stop_reason']} ({last['source']})"),
    ]
