"""Trained-model checkpoints: cached by a hash of everything that determines them.

Lookup order for a key: the checkpoints shipped with attnbench (attnbench/trained/,
each with its training record), then the user cache ($ATTNBENCH_CACHE or
~/.cache/attnbench/checkpoints/). Every write is atomic (temp file, fsync, rename), so a
killed run never leaves a torn checkpoint behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

SHIPPED = Path(__file__).resolve().parent / "trained"


def cache_root() -> Path:
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
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_torch(path: Path, obj: Any) -> None:
    atomic_write(path, lambda f: torch.save(obj, f))


def save_json(path: Path, obj: Any) -> None:
    atomic_write(path, lambda f: f.write(json.dumps(obj, indent=1, default=str).encode()))


def folder_name(design: str, key: str) -> str:
    return f"{design}-{key}"


def find(design: str, key: str) -> Path | None:
    """The folder holding a finished checkpoint (final.pt + record.json) for this key, if any."""
    for root in (SHIPPED, cache_root() / "checkpoints"):
        folder = root / folder_name(design, key)
        if (folder / "final.pt").exists() and (folder / "record.json").exists():
            return folder
    return None


def work_dir(design: str, key: str) -> Path:
    """Where training writes (partial checkpoints, then the final one)."""
    return cache_root() / "checkpoints" / folder_name(design, key)
