"""Writing a results file: the ``Recorder`` (a header per (re)start, each cell's records and its
commit line in one write, a footer), and a full disk (``DiskFull``, ``free_bytes``), the write
cut back off the file so that no line is ever left torn.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from attnbench.records.integrity import CHECKSUM, cell_name, encode_line, scan, write_atomic
from attnbench.records.lines import REQUIRED, STATUSES, git_commit, hardware, now, versions, with_diff
from attnbench.basics import stable_hash

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(OSError):
    """A write the disk could not take; the message is the one line the CLI prints."""

    def __init__(self, path: Path):
        path = Path(path)
        super().__init__(errno.ENOSPC, f"disk full writing {path}: {free_bytes(path):,} bytes free", str(path))

    def __str__(self) -> str:
        return str(self.strerror)


def free_bytes(path: Path) -> int:
    """Bytes free on the filesystem holding ``path`` (or its nearest existing parent)."""
    import shutil

    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return 0


class Recorder:
    """Appends records to ``path``; every record carries the run's exp and config hash.

    Opening a Recorder checks the file (``scan``) and repairs it if needed, before appending
    the header: ``repaired`` says what was found (its ``summary()`` is '' when nothing was).
    ``write=False`` (the other processes of a distributed run, whose rank 0 writes): the same
    calls, nothing written or repaired.
    """

    def __init__(self, path: Path, exp: str, config: dict, config_hash: str, write: bool = True):
        self.path, self.exp, self.config_hash, self.write = Path(path), exp, config_hash, write
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired = scan(self.path)
        if write:
            self.repaired.repair()
        # Cells already recorded, whole, by an earlier (possibly killed) run in this directory.
        self.done_cells = set(self.repaired.done_cells)
        self._by_cell: dict[str, list[dict]] = {}
        self._written: dict[str, list[dict]] = {}  # cells this run has written (or found done and skipped)
        for obj in self.repaired.objects:
            if obj.get("type") == "record" and obj.get("cell") in self.done_cells:
                self._by_cell.setdefault(obj["cell"], []).append({k: v for k, v in obj.items() if k != CHECKSUM})
        git = git_commit()
        header = {
            "type": "header",
            "exp": exp,
            "config_hash": config_hash,
            "started": now(),
            "git": with_diff(git, self.path.parent) if write else git,
            "versions": versions(),
            "hardware": hardware(),
            "config": config,
        }
        if write and self.repaired.objects and self.repaired.objects[0].get("type") != "header":
            # the repair removed the file's first header: this one takes line 1, where readers look
            write_atomic(self.path, encode_line(header) + self.path.read_bytes())
        else:
            self._append(header)

    def _append(self, *objs: dict) -> None:
        """Append whole lines with one write(2), fsync'ed (secrets masked); nothing when ``write`` is off.

        A Python signal handler (Ctrl-C, SIGTERM) runs between statements, never inside the one
        os.write call, so a signal lands before or after a cell's lines, not between them. A write
        the disk cannot take whole (ENOSPC, a quota) is cut back off the file and raised as
        ``DiskFull``: the file never ends in a torn line, the header included.
        """
        if not self.write:
            return
        data = b"".join(encode_line(o) for o in objs)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:  # a regular file takes it all at once; a full disk may not
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError as ex:
                os.ftruncate(fd, size)  # this run holds the directory's lock: nobody else appends
                if ex.errno in DISK_FULL:
                    raise DiskFull(self.path) from None
                raise
        finally:
            os.close(fd)

    def close(self, status: str, wall_s: float, error: str | None = None) -> None:
        """A footer line: how this (re)start ended (completed | interrupted | failed) and why."""
        footer = {
            "type": "footer",
            "exp": self.exp,
            "config_hash": self.config_hash,
            "ended": now(),
            "status": status,
            "wall_s": round(wall_s, 3),
        }
        if error:
            footer["error"] = error
        self._append(footer)

    def make(self, **fields: Any) -> dict:
        """A checked record (not yet written)."""
        fields.setdefault("exp", self.exp)
        missing = [k for k in REQUIRED if k not in fields]
        if missing:
            raise ValueError(f"record is missing {missing}: {fields}")
        if fields["status"] not in STATUSES:
            raise ValueError(f"status {fields['status']!r}: allowed {STATUSES}")
        # a record copied from elsewhere (a checkpoint's training curve) keeps its own time
        return {"type": "record", **fields, "config_hash": self.config_hash, "time": fields.get("time", now())}

    def record(self, **fields: Any) -> dict:
        """One checked record written at once as a cell of its own (keyed by its content and
        time): the stand-alone probes under experiments/ (measure.py, probe.py, run.py) record
        each measurement this way, so that a killed probe keeps what it measured."""
        rec = self.make(**fields)
        self.write_cell(stable_hash(rec), [rec], {"metric": rec["metric"]})
        return rec

    def records_of(self, cell: str) -> list[dict]:
        """The records of a cell an earlier run in this file committed whole (empty if none)."""
        return list(self._by_cell.get(cell, []))

    def write_cell(self, cell: str, records: list[dict], coords: dict | None = None) -> None:
        """All records of one cell and its commit line in one write: after a kill a cell is whole or absent.

        A cell already done in this file is not written again (each record exactly once): an
        experiment that recomputes a cell regardless (a cheap check) keeps the first records.
        Two different sets of records under one key in one run are a bug (the key misses a
        coordinate, and the second would be lost): that raises.
        """
        if cell in self._written:
            if _content(self._written[cell]) != _content(records):
                raise ValueError(f"cell {cell_name(coords, cell)} written twice in one run with other records: its key misses a coordinate")
            return
        self._written[cell] = records
        if cell in self.done_cells:
            return
        commit = {"type": "commit", "cell": cell, "coords": coords or {}, "records": len(records)}
        self._append(*({**r, "cell": cell} for r in records), commit)
        self.done_cells.add(cell)


def _content(records: list[dict]) -> list[str]:
    return [json.dumps({k: v for k, v in r.items() if k not in ("time", "cell")}, sort_keys=True, default=str) for r in records]
