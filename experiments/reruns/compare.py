"""Do the runs recorded from dirty checkouts reproduce from a clean commit? (issue 47, item 3)

    python experiments/reruns/compare.py OLD_COMMIT RUN_DIR...   # e.g. 194b106 experiments/capacity/run

For each run folder: its records at OLD_COMMIT (the dirty run's, from git) against the records in the
working tree (the rerun's), cell by cell for the deterministic metrics (accuracies, probe counts and
byte counts: what a rerun of the same models on the same haystacks must give again). Timings are not
compared (they depend on the machine and its load). One JSON line a run on stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# deterministic: the same models and haystacks give the same value (a process's resident memory does not)
EXACT = ("/acc", "_acc", "bytes", "bytes_per_token")
CELL = (
    "metric",
    "design",
    "layout",
    "seed",
    "context_len",
    "depth",
    "hops",
    "n_pairs",
    "fmt",
    "when",
    "scoring",
    "task",
    "width",
    "op",
    "phase",
    "kind",
)


def _records(text: str) -> tuple[dict, dict[tuple, list]]:
    header: dict = {}
    cells: dict[tuple, list] = {}
    for line in text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("type") == "header":
            header = r
        elif r.get("status") == "measured" and str(r.get("metric", "")).endswith(EXACT) and "rss" not in str(r.get("metric")):
            cells.setdefault(tuple(str(r.get(k)) for k in CELL), []).append(r.get("value"))
    return header, cells


def compare(old_commit: str, run_dir: str) -> dict:
    path = Path(run_dir) / "results.jsonl"
    old_text = subprocess.run(["git", "show", f"{old_commit}:{path}"], capture_output=True, text=True, check=True).stdout
    (h_old, old), (h_new, new) = _records(old_text), _records(path.read_text())
    same = [k for k in old if k in new and sorted(map(str, old[k])) == sorted(map(str, new[k]))]
    return {
        "run": str(Path(run_dir).relative_to("experiments")),
        "old": {
            "commit": h_old.get("git", {}).get("commit", "")[:7],
            "dirty": h_old.get("git", {}).get("dirty"),
            "started": h_old.get("started"),
        },
        "new": {
            "commit": h_new.get("git", {}).get("commit", "")[:7],
            "dirty": h_new.get("git", {}).get("dirty"),
            "started": h_new.get("started"),
        },
        "cells": len(old),
        "identical": len(same),
        "differ": sorted(str([v for v in k if v != "None"]) for k in old if k in new and k not in same),
        "only_old": len(set(old) - set(new)),
        "only_new": len(set(new) - set(old)),
    }


if __name__ == "__main__":
    for d in sys.argv[2:]:
        print(json.dumps(compare(sys.argv[1], d)))
