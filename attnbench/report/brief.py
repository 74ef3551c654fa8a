"""The decision brief: the report's first section, what a reader decides from, before the tables
and the appendix. ``brief`` is its one entry point (report/build.py calls it, the template
renders what it returns); None leaves the section out.

For now it lists each claim's verdict and what it rests on, from the same verdicts the claims
section shows (verdicts/claims.py), so the brief cannot disagree with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .tables import Table


@dataclass
class Brief:
    title: str
    lines: list[str] = field(default_factory=list)  # one finding a line, first the one to decide on
    table: Table | None = None  # a small table under the lines (optional)
    note: str = ""  # how the brief was made, in small print


def brief(df: pd.DataFrame, train: pd.DataFrame, claims: list[tuple[Any, Any]]) -> Brief | None:
    """The brief of these records: ``df`` the records, ``train`` the checkpoints' training facts,
    ``claims`` the judged claims ((claim, verdict) pairs of verdicts.claims.judge_all)."""
    measured = [(c, v) for c, v in claims if v.verdict != "not yet measured"]
    if not measured:
        return None
    lines = [f"{c.id} {v.verdict}: {v.headline}" if v.headline else f"{c.id} {v.verdict}" for c, v in measured]
    return Brief("Decision brief", lines, note="Each line: a claim's verdict from its records (details in Claims under test).")


__all__ = ["Brief", "brief"]
