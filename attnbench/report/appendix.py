"""The appendix's long parts, beside the report rather than in it, when many runs are merged (the
decision report): every config (configs.yaml), every environment (environments.yaml) and the
other-measurements table (other_measurements.csv). The report then says how many there are and
links the file; a single run's report prints them in its appendix.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from attnbench.records.redact import redact

from attnbench.report.pages import repo_paths, repository_root
from attnbench.report.tables.decision import Table


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(redact(repo_paths(text, [repository_root()])), encoding="utf-8")
    tmp.replace(path)


CONFIG_INLINE_LINES = 800  # configs longer than this in all (many runs merged) go to a file beside the report
CONFIG_FILE = "configs.yaml"


OTHER_INLINE_CELLS = 1500  # a larger "other measurements" table (many runs merged) goes to a CSV beside the report
OTHER_FILE = "other_measurements.csv"


def other_file(other: Table | None, out_dir: Path) -> str | None:
    """Write the other-measurements table to a CSV beside the report when it is too large to
    print; its name, else None (it prints in the appendix)."""
    path = out_dir / OTHER_FILE
    if other is None or len(other.rows) * len(other.columns) <= OTHER_INLINE_CELLS:
        path.unlink(missing_ok=True)
        return None
    frame = pd.DataFrame([[c.text for c in row] for row in other.rows], columns=[label for _, label in other.columns])
    _write(path, frame.to_csv(index=False))
    return OTHER_FILE


ENVIRONMENTS_INLINE = 4  # more environments than this (many runs merged) go to a file beside the report
ENVIRONMENTS_FILE = "environments.yaml"


def environments_file(environments: list[dict], out_dir: Path) -> str | None:
    """Write the environments to environments.yaml beside the report when there are too many to
    print; its name, else None (they print in the appendix)."""
    path = out_dir / ENVIRONMENTS_FILE
    if len(environments) <= ENVIRONMENTS_INLINE:
        path.unlink(missing_ok=True)
        return None
    docs = {e["label"]: dict(e["rows"]) for e in environments}
    _write(path, yaml.safe_dump(docs, sort_keys=False, width=100))
    return ENVIRONMENTS_FILE


def configs_file(configs: list[dict], out_dir: Path) -> str | None:
    """Write the configs to configs.yaml beside the report when they are too long to print (the
    decision report merges dozens of runs); its name, else None (they print in the appendix)."""
    path = out_dir / CONFIG_FILE
    if sum(c["yaml"].count("\n") for c in configs) <= CONFIG_INLINE_LINES:
        path.unlink(missing_ok=True)
        return None
    docs = [f"# config {c['hash']}\n# runs: {', '.join(c['run_dirs'])}\n{c['yaml']}" for c in configs]
    _write(path, "---\n".join(docs))
    return CONFIG_FILE
