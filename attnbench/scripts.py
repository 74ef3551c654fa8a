"""What the standalone experiment scripts (experiments/*/*.py, run outside attnbench.cli.main) share
with the CLI's results files: the footer line that tells a report a run ended, and how."""

from __future__ import annotations

import json
from pathlib import Path

from attnbench.records.lines import now


def script_footer(path: str | Path, exp: str, status: str, wall_s: float, error: str | None = None) -> None:
    """Append a footer (status completed | interrupted | failed) to a script's results file;
    nothing when the script stopped before it knew its file."""
    if not str(path):
        return
    line = {"type": "footer", "exp": exp, "ended": now(), "status": status, "wall_s": round(wall_s, 3)}
    if error:
        line["error"] = error
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
