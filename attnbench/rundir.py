"""A run directory belongs to one config and to one run at a time.

- ``check_writable``: the run directory and the cache directory can be written, checked before
  any work (a real probe file: ``os.access`` answers yes to root even on a read-only mount).
- ``claim``: an exclusive OS lock (``fcntl.lockf`` on RUN_DIR/.attnbench.lock, held until the
  process ends or ``release``) so that a second run on the same directory waits (``lock=wait``,
  the default) or stops (``lock=refuse``), saying which in one line. POSIX record locks are used
  rather than flock because they also hold across NFS, where cluster run directories live.
- ``check_identity``: a directory whose results.jsonl holds records of another config hash is
  refused in one line naming both hashes; ``force=true`` sets that file aside
  (results.jsonl.superseded-<time>) and starts afresh, so configs are never mixed in one file.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .results import scan

LOCK_NAME = ".attnbench.lock"
RESULTS = "results.jsonl"


class RunDirError(Exception):
    """A run or cache directory that cannot be used; the message is one line."""


def check_writable(path: Path, what: str, hint: str) -> None:
    """Stop (RunDirError) unless ``path`` is, or can be created as, a writable directory."""
    path = Path(path).absolute()
    if path.exists() and not path.is_dir():
        raise RunDirError(f"{what} {path} is a file, not a directory; {hint}")
    base = path
    while not base.exists():
        base = base.parent
    if not base.is_dir():
        raise RunDirError(f"{what} {path}: {base} is a file, not a directory; {hint}")
    try:
        fd, probe = tempfile.mkstemp(dir=base, prefix=".attnbench-probe-")
    except OSError as ex:
        raise RunDirError(f"{what} {path}: cannot write in {base} ({ex.strerror}); {hint}") from None
    os.close(fd)
    os.unlink(probe)


@dataclass
class Claim:
    """This process's hold on a run directory (see ``claim``)."""

    run_dir: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the file drops its POSIX locks
            self.fd = -1
            _held.pop(self.run_dir, None)


_held: dict[Path, Claim] = {}


def claim(run_dir: Path, config_hash: str, *, lock: str = "wait", force: bool = False, say: Callable[[str], None] = print) -> Claim:
    """Lock ``run_dir`` for this run, then check (or with ``force``, make) that it holds only this config."""
    run_dir = _key(run_dir)
    if run_dir in _held:
        return _held[run_dir]
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):
            holder = _holder(run_dir)
            if lock == "refuse":
                raise RunDirError(
                    f"run directory {run_dir} is in use by another run ({holder}); refused (lock=refuse): "
                    f"wait for it, or choose another directory with hydra.run.dir=..."
                ) from None
            say(
                f"attnbench: run directory {run_dir} is in use by another run ({holder}); waiting for it to finish "
                f"(lock=refuse stops instead)"
            )
            fcntl.lockf(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {dt.datetime.now().isoformat(timespec='seconds')}\n".encode(), 0)
        check_identity(run_dir, config_hash, force=force, say=say)
    except BaseException:
        os.close(fd)
        raise
    _held[run_dir] = Claim(run_dir, fd)
    return _held[run_dir]


def _key(run_dir: Path) -> Path:
    return Path(os.path.abspath(run_dir))  # as Hydra's runtime.output_dir spells it ("a/../b" -> "b")


def release(run_dir: Path) -> None:
    held = _held.get(_key(run_dir))
    if held:
        held.release()


def _holder(run_dir: Path) -> str:
    try:
        return (run_dir / LOCK_NAME).read_text().strip() or "pid unknown"
    except OSError:
        return "pid unknown"


def check_identity(run_dir: Path, config_hash: str, *, force: bool = False, say: Callable[[str], None] = print) -> None:
    """Refuse a directory holding another config's records; with ``force``, set its results aside."""
    results = Path(run_dir) / RESULTS
    if not results.is_file():
        return
    others = [h for h in scan(results).config_hashes() if h != config_hash]
    if not others:
        return
    if not force:
        raise RunDirError(
            f"run directory {run_dir} holds records of config {', '.join(others)}; this run is config "
            f"{config_hash}: choose another directory (hydra.run.dir=...), or force=true to set those "
            f"records aside and start afresh"
        )
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    aside = results.with_name(f"{RESULTS}.superseded-{stamp}")
    results.rename(aside)
    say(f"attnbench: force=true: records of config {', '.join(others)} moved to {aside}; starting afresh")
