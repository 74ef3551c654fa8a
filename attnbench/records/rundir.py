"""A run directory belongs to one config and to one run at a time.

- ``check_writable``: the run directory and the cache directory can be written, checked before
  any work (a real probe file: ``os.access`` answers yes to root even on a read-only mount).
- ``claim``: an exclusive OS lock (``fcntl.lockf`` on RUN_DIR/.attnbench.lock, held until the
  process ends or ``release``) so that a second run on the same directory waits (``lock=wait``,
  the default) or stops (``lock=refuse``), saying which in one line. POSIX record locks are used
  rather than flock because they also hold across NFS, where cluster run directories live.
- ``check_identity``: a directory whose results.jsonl holds records of another config hash is
  refused in one line naming both hashes; ``force=true`` sets that file aside
  (results.jsonl.superseded-<time>, and its W&B runs to wandb.superseded-<time>/) and starts
  afresh, so configs are never mixed in one file.
- ``dir_name``: a run directory's name from the overrides typed (``${attnbench_dirname:}`` in
  conf/config.yaml, in place of Hydra's override_dirname): free text, a value with a character
  a path cannot hold plainly, an interpolation or a secret is named by a hash of its text, and the
  name stays within a file name's length, so no value puts a run directory outside runs/.
- ``check_contents``: what is already in a run directory (results.jsonl, .attnbench.lock, .hydra)
  is of the kind a run needs, checked before anything is created.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from attnbench.records.integrity import scan

LOCK_NAME = ".attnbench.lock"
RESULTS = "results.jsonl"
HYDRA_DIR = ".hydra"
# options that carry free text (and every *.description): never part of a directory's name, only a hash of it
FREE_TEXT = ("wandb.tags", "wandb.group", "wandb.project", "wandb.entity")
PLAIN = re.compile(r"[A-Za-z0-9_.,=+\-\[\]:@]*")  # a value written as it is in a directory name
NAME_MAX = 200  # bytes: below every common filesystem's 255, leaving room for Hydra's suffixes


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


def _hash(text: str) -> str:
    return "sha-" + hashlib.sha256(text.encode()).hexdigest()[:10]


def dir_name(overrides: list[str], exclude_keys: list[str], item_sep: str = ",", kv_sep: str = "=") -> str:
    """The run directory's name for the task ``overrides`` (as typed), Hydra's override_dirname made
    safe: sorted ``key=value`` items without ``exclude_keys``; an item whose value is free text, is
    not PLAIN, or holds a secret is ``key=sha-<hash of the item>``; a name over NAME_MAX bytes keeps
    its start and ends with a hash of the whole."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from attnbench.records.redact import holds_secret

    items = []
    for line in overrides:
        try:
            key = OverridesParser.create().parse_override(line).key_or_group
        except Exception:  # Hydra's own parse reports a bad override; name it by its hash
            key = line.split("=", 1)[0].lstrip("+~")
        if key in exclude_keys:
            continue
        value = line.split("=", 1)[1] if "=" in line else ""
        prefix = line[: len(line) - len(value)] if "=" in line else line
        free = key in FREE_TEXT or key.endswith(".description")
        if free or not PLAIN.fullmatch(value) or not PLAIN.fullmatch(prefix) or holds_secret(line) or value in (".", ".."):
            line = f"{prefix if PLAIN.fullmatch(prefix) else key + '='}{_hash(line)}"
        items.append(line)
    name = re.sub("=", kv_sep, item_sep.join(sorted(items)))
    if len(name.encode()) > NAME_MAX:
        name = name.encode()[: NAME_MAX - 20].decode(errors="ignore") + "," + _hash(name)
    return name


def check_contents(run_dir: Path) -> None:
    """Stop (RunDirError) when what ``run_dir`` holds is not what a run can use: results.jsonl or
    .attnbench.lock not a regular file (or unreadable, or read-only), .hydra not a directory, a
    symlink loop. Creates nothing."""
    run_dir = Path(run_dir).absolute()
    hint = "move it aside, or choose another directory with hydra.run.dir=..."
    try:
        for parent in (run_dir, *run_dir.parents):
            parent.exists()  # raises on a symlink loop
            if parent.is_symlink() and not parent.exists():
                raise OSError(errno.ELOOP, "a broken or looping symbolic link", str(parent))
        if not run_dir.exists():
            return
        for name, want in ((RESULTS, "file"), (LOCK_NAME, "file"), (HYDRA_DIR, "directory")):
            path = run_dir / name
            if not os.path.lexists(path):
                continue
            if path.is_symlink() and not path.exists():
                raise RunDirError(f"run directory {run_dir}: {name} is a broken or looping symbolic link; {hint}")
            kind = "directory" if path.is_dir() else "file" if path.is_file() else "special file"
            if kind != want:
                raise RunDirError(f"run directory {run_dir}: {name} is a {kind}, not a {want}; {hint}")
            # os.access, not open + close: closing any descriptor of the lock file would drop this
            # process's lockf lock on it (POSIX locks belong to the process), so a check made while
            # holding the claim would let another run in
            if want == "file" and not os.access(path, os.R_OK | os.W_OK):
                raise RunDirError(f"run directory {run_dir}: {name} cannot be read and written (permission denied); {hint}")
    except OSError as ex:
        if ex.errno == errno.ELOOP:
            raise RunDirError(f"run directory {run_dir}: a broken or looping symbolic link at {ex.filename or run_dir}; {hint}") from None
        raise RunDirError(f"run directory {run_dir}: {ex.strerror or ex}; {hint}") from None


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
    wandb_dir = results.with_name("wandb")
    if wandb_dir.is_dir():  # its W&B runs go aside with its records
        wandb_dir.rename(results.with_name(f"wandb.superseded-{stamp}"))
    say(f"attnbench: force=true: records of config {', '.join(others)} moved to {aside}; starting afresh")
