"""Why a long-context cell has no measured haystack, as a README table cell says it: read from its
skip record's ``skip_reason`` (names.SkipReason), or, for records written before that field, from
their structured fields (``legacy_skip_reason``), never from the note's words."""

from __future__ import annotations

import pandas as pd

from attnbench.names import SkipReason


def skip_text(d: pd.DataFrame, headers: list[dict]) -> str:
    """A cell no haystack of which was measured: its first skipped (or failed) record's reason,
    from the record's ``skip_reason`` (older records: legacy_skip_reason); headers: the runs' headers."""
    s = d[d["status"].isin(["skipped", "failed"])]
    if s.empty:
        return "—"
    r = s.iloc[0]
    reason = r.get("skip_reason")
    reason = SkipReason(reason) if isinstance(reason, str) else legacy_skip_reason(r, headers)
    if reason is SkipReason.LATE:
        return f"{r['status']}: budget ran out"
    if reason is SkipReason.MEMORY:
        return f"{r['status']}: needs ~{r['estimated_bytes'] / 2**30:.0f} GiB" if pd.notna(r.get("estimated_bytes")) else r["status"]
    if pd.notna(r.get("estimated_s")):  # the planner's estimate for one haystack
        est = float(r["estimated_s"])
        return f"{r['status']}: ~{est / 60:.0f} min a haystack" if est < 3600 else f"{r['status']}: ~{est / 3600:.0f} h a haystack"
    return str(r["status"])


def legacy_skip_reason(r: pd.Series, headers: list[dict]) -> SkipReason | None:
    """The reason of a long-context skip record written before records carried ``skip_reason``
    (the committed records are not rewritten), from its structured fields; None where they tell
    no MEMORY or LATE reason (the plan's BUDGET and UNLEARNED skips read alike: their estimate).

    LATE: only GridRun.skip_late records a haystack's ``sample`` with a skip. MEMORY: the plan's
    limit was eval.memory_fraction of the memory available at the plan, which no record or header
    holds; the header holds the machine's total memory, so ``estimated_bytes`` over that fraction
    of the total is surely over the limit. The converse is not sure (an estimate between the two
    reads as not MEMORY), but every committed memory skip needs >= 12.0 GiB and every other
    planned skip <= 8.3 GiB, with the bound at 11.8 GiB on each machine that wrote them."""
    if pd.notna(r.get("sample")):
        return SkipReason.LATE
    head = next((h for h in headers if h.get("run_dir") == r.get("run_dir") and h.get("started") == r.get("run_start")), None)
    if head is None or pd.isna(r.get("estimated_bytes")):
        return None
    fraction = ((head.get("config") or {}).get("eval") or {}).get("memory_fraction")
    total = (head.get("hardware") or {}).get("memory_bytes")
    return SkipReason.MEMORY if fraction and total and float(r["estimated_bytes"]) > fraction * total else None
