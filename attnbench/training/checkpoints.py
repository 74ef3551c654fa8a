"""Trained-model checkpoints: cached by a hash of everything that determines them.

Lookup order for a key: the checkpoints shipped with attnbench (attnbench/trained/,
each with its training record), then the user cache ($ATTNBENCH_CACHE or
~/.cache/attnbench/checkpoints/). Every write is atomic (temp file, fsync, rename), so a
killed run never leaves a torn checkpoint behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from attnbench.basics import SHIPPED, atomic_write, cache_root


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


# Statuses of a finished model whose training stopped at a limit outside the training rule (the
# wall-clock budget, train.budget): it is evaluated as it stands, and ships its partial.pt beside
# final.pt so that a later sitting resumes it on a fresh machine.
# statuses whose shipped final.pt may sit beside a partial.pt to resume: stopped by the wall clock,
# or by a token budget that a later version of the rule raised (lookup resumes only when the
# running config's limit is larger than the one that stopped it)
RESUMABLE = ("budget", "tokens", "chain_tokens")


def _status(folder: Path) -> str | None:
    try:
        return json.loads((folder / "record.json").read_text()).get("status")
    except (OSError, ValueError):
        return None


def shipped_partial(design: str, key: str) -> Path | None:
    """A partial checkpoint shipped in attnbench/trained/ (a training a sitting could not finish,
    ``ship``ped so that the next one resumes it on a fresh machine): its partial.pt, if any.
    Such a folder has no final.pt, so ``find`` never returns it and nothing evaluates it; or
    it has one, from a training stopped by its wall-clock budget (RESUMABLE), which is
    evaluated as it stands and resumed from this partial.pt when a run raises the budget."""
    path = SHIPPED / folder_name(design, key) / "partial.pt"
    if not path.exists():
        return None
    return path if not (path.parent / "final.pt").exists() or _status(path.parent) in RESUMABLE else None


def ship(folder: Path, into: Path | None = None) -> Path:
    """Copy a checkpoint folder of the cache into attnbench/trained/ (or ``into``): a finished one
    (final.pt, record.json, train.log), else its partial.pt with a record.json that says
    ``status: partial`` (steps, tokens, stage, wall time so far) and train.log."""
    import shutil

    dest = (into or SHIPPED) / folder.name
    dest.mkdir(parents=True, exist_ok=True)
    if (folder / "final.pt").exists() and (folder / "record.json").exists():
        names = ["final.pt", "record.json", "train.log"]
        if _status(folder) in RESUMABLE and (folder / "partial.pt").exists():
            names.append("partial.pt")  # stopped by a limit a later run may raise: the next sitting resumes it
        else:
            (dest / "partial.pt").unlink(missing_ok=True)
    elif (folder / "partial.pt").exists():
        saved = torch.load(folder / "partial.pt", map_location="cpu", weights_only=False)
        st = saved["state"]
        design, _, key = folder.name.rpartition("-")
        record = {
            "design": design,
            "key": key,
            "status": "partial",
            "note": "a training stopped before its end and shipped to be resumed (python -m attnbench +exp=train design=... resumes it); never evaluated",
            **{k: st.get(k) for k in ("step", "stage", "tokens", "wall_s", "stage_starts", "peaks")},
        }
        save_json(dest / "record.json", record)
        names = ["partial.pt", "train.log"]
    else:
        raise FileNotFoundError(f"{folder}: neither final.pt + record.json nor partial.pt")
    for name in names:
        if (folder / name).exists():
            shutil.copy2(folder / name, dest / name)
    return dest


if __name__ == "__main__":  # python -m attnbench.training.checkpoints ship <cache folder> ...
    import sys

    if len(sys.argv) < 3 or sys.argv[1] != "ship":
        sys.exit("usage: python -m attnbench.training.checkpoints ship <checkpoint folder> [<folder> ...]")
    for arg in sys.argv[2:]:
        print(ship(Path(arg)))
