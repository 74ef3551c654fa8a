"""Reading a results file (records/__init__.py describes the format): its good objects, its records."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from attnbench.records.integrity import scan


def read_jsonl(path: Path) -> list[dict]:
    """The good objects of a results file (damaged lines and cells that are not whole left out)."""
    return scan(path).objects


def load_records(paths: Iterable[Path]) -> list[dict]:
    """The measurement records of one or more results files (headers dropped)."""
    return [r for p in paths for r in read_jsonl(Path(p)) if r.get("type") == "record"]
