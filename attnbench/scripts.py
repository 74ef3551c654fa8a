"""What the standalone experiment scripts (experiments/*/*.py, run outside attnbench.cli.main) share
with the CLI's results files: the footer line that tells a report a run ended, and how."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

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


def run_script(main: Callable[[], None], exp: str, out: list[str]) -> None:
    """Run a script's ``main`` and append its footer to ``out[0]`` (the results file, once the
    script set it): completed, interrupted (Ctrl-C / SIGTERM) or failed with the error's first
    300 characters; the exception goes on after the footer is written."""
    t0, status, error = time.perf_counter(), "completed", None
    try:
        main()
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except Exception as e:
        status, error = "failed", f"{type(e).__name__}: {e}"[:300]
        raise
    finally:
        script_footer(out[0], exp, status, time.perf_counter() - t0, error)
