"""Leaf helpers every layer may use (they import nothing of attnbench): the hash behind config
hashes and checkpoint keys, the shipped models' and the cache's root folders, an atomic file write,
how lengths and byte counts are written, and the ``Range`` a config number is checked against (here
because the config and the designs' settings in attnbench/specs both declare ranges)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The models shipped with attnbench (one folder <design>-<key> each, final.pt + record.json): here, a leaf, so
# the verdicts can ask what is shipped without loading torch (training/checkpoints.py imports it from here).
SHIPPED = Path(__file__).resolve().parent / "trained"


def stable_hash(obj: Any, n: int = 16) -> str:
    """Hex digest of a JSON-able object, independent of dict order."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def cache_root() -> Path:
    """Where trained models, task data and other caches go: $ATTNBENCH_CACHE, else ~/.cache/attnbench."""
    return Path(os.environ.get("ATTNBENCH_CACHE", Path.home() / ".cache" / "attnbench"))


def atomic_write(path: Path, write) -> None:
    """Call write(file_object) on a temp file beside ``path``, fsync it, rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as ex:
        Path(tmp).unlink(missing_ok=True)
        cause = ex if isinstance(ex, OSError) else ex.__cause__ or ex.__context__  # torch.save's writer hides it
        if isinstance(cause, OSError) and cause.errno and not cause.filename:  # name the file (the cache's, not the run's)
            raise OSError(cause.errno, os.strerror(cause.errno), str(path)) from ex
        raise


def _missing(n) -> bool:
    import pandas as pd  # loaded already wherever a record table is written out

    return n is None or bool(pd.isna(n))


def fmt_len(n) -> str:
    """131072 -> 128K, 1048576 -> 1M, 1536 -> 1.5K, 1000 -> 1000."""
    if _missing(n):
        return "—"
    n = int(n)
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and (n * 2) % size == 0:
            q = n / size
            return f"{q:g}{unit}"
    return str(n)


def fmt_bytes(n) -> str:
    if _missing(n):
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


@dataclass(frozen=True)
class Range:
    """lo <= x <= hi (either end open with lo_open / hi_open; None: unbounded); always finite."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def holds(self, x: float) -> bool:
        import math

        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            return False
        if self.lo is not None and (x <= self.lo if self.lo_open else x < self.lo):
            return False
        return not (self.hi is not None and (x >= self.hi if self.hi_open else x > self.hi))

    def describe(self, integer: bool) -> str:
        def num(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"

        what = "an integer" if integer else "a finite number"
        lo = None if self.lo is None else f"{'>' if self.lo_open else '>='} {num(self.lo)}"
        hi = None if self.hi is None else f"{'<' if self.hi_open else '<='} {num(self.hi)}"
        if self.lo is not None and self.hi is not None and not (self.lo_open or self.hi_open):
            return f"{what} in {num(self.lo)} .. {num(self.hi)}"
        return " ".join([what, *(p for p in (lo, "and" if lo and hi else None, hi) if p)])
