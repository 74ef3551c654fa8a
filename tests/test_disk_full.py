"""A full disk (issue 30, E), by an injected write error (ENOSPC after part of a write, as a full
filesystem answers): one line "attnbench: disk full writing <path>: N bytes free", exit 1, no
torn line (the header is written like a record), and a rerun with space again completes."""

from __future__ import annotations

import errno
import json
import os
import signal

import pytest

from attnbench.cli import main as cli, preflight
from attnbench.records import integrity, rundir, write as results_write

from helpers import compose_cfg


def fill_disk_after(monkeypatch, commits: int) -> None:
    """os.write in records/write.py takes half of a write, then fails with ENOSPC, once ``commits`` cells are on disk."""
    real, seen = os.write, {"cells": 0}

    def write(fd, data):
        if seen["cells"] >= commits:
            real(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        seen["cells"] += b'"type": "commit"' in bytes(data)
        return real(fd, data)

    monkeypatch.setattr(results_write.os, "write", write)


def run(tmp_path):
    import torch

    threads = torch.get_num_threads()
    cfg = compose_cfg(["+exp=smoke", "exp.designs=[softmax,msa]", "threads=1", "report.pdf=false", "wandb.mode=disabled"])
    try:
        preflight.prepare(cfg, tmp_path / "run")
        cli.run(cfg, tmp_path / "run")
    finally:
        torch.set_num_threads(threads)
        rundir.release(tmp_path / "run")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("commits", [0, 1], ids=["at the header", "after one cell"])
def test_a_full_disk_is_one_line_exit_1_and_no_torn_line(commits, tmp_path, monkeypatch, capsys):
    path = tmp_path / "run" / "results.jsonl"
    if commits == 0:
        monkeypatch.setattr(results_write.os, "write", _header_fails())
    else:
        fill_disk_after(monkeypatch, commits)
    with pytest.raises(SystemExit) as ex:
        run(tmp_path)
    assert ex.value.code == 1
    err = capsys.readouterr().err
    full = [l for l in err.splitlines() if "disk full" in l]
    assert len(full) == 1 and "Traceback" not in err, err[-3000:]
    assert full[0].startswith(f"attnbench: disk full writing {path}: ") and full[0].endswith(" bytes free"), full[0]
    data = path.read_bytes() if path.exists() else b""
    assert data == b"" or data.endswith(b"\n")  # nothing torn: the cut-off write was taken back
    for line in data.splitlines():
        json.loads(line)
    found = integrity.scan(path)
    assert not found.needs_repair and len(found.done_cells) == commits
    monkeypatch.undo()  # space again: the rerun completes what is missing
    run(tmp_path)
    assert len(integrity.scan(path).done_cells) == 2 and integrity.scan(path).objects[-1]["status"] == "completed"


def _header_fails():
    real = os.write

    def write(fd, data):
        real(fd, bytes(data[:8192]))  # the 8 KiB a nearly full disk still took
        raise OSError(errno.ENOSPC, "No space left on device")

    return write


def test_disk_full_line_names_other_writes_too(tmp_path):
    """An ENOSPC raised anywhere (a checkpoint, the report), even wrapped: the same one line."""
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "ckpt.pt"))
        except OSError as inner:
            raise RuntimeError("file write failed") from inner
    except RuntimeError as ex:
        line = cli.disk_full(ex, tmp_path)
    assert line is not None and line.startswith(f"attnbench: disk full writing {tmp_path / 'ckpt.pt'}: ") and line.endswith("bytes free")
    assert cli.disk_full(RuntimeError("other"), tmp_path) is None
