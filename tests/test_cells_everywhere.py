"""Every experiment writes through cells (issue 30, A): each conf/exp experiment, at its tiny size,
records nothing outside a committed cell; run again in the same directory it writes no cell; killed
part-way (every later write lost, as with kill -9) and rerun, it ends with each cell once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from attnbench.cli import main as cli, preflight
from attnbench.records.write import Recorder
from attnbench.records.integrity import scan

from helpers import compose_cfg
from test_experiments import EXPS, SLOW, TINY


class Killed(BaseException):
    """The process dying at a write: that write and every later one never reach the disk."""


def run_exp(exp: str, run: Path, kill_after: int | None = None, monkeypatch=None) -> None:
    cfg = compose_cfg([f"+exp={exp}", *TINY[exp], "threads=1", "wandb.mode=disabled", "report.enabled=false"])
    threads = torch.get_num_threads()
    if kill_after is not None:
        real, seen = Recorder._append, {"cells": 0}

        def append(self, *objs):
            if seen["cells"] >= kill_after:
                raise Killed()
            seen["cells"] += any(o.get("type") == "commit" for o in objs)
            real(self, *objs)

        monkeypatch.setattr(Recorder, "_append", append)
    try:
        preflight.prepare(cfg, run)
        cli.run(cfg, run)
    finally:
        torch.set_num_threads(threads)
        from attnbench.records import rundir

        rundir.release(run)
        if kill_after is not None:
            monkeypatch.undo()


def commits(run: Path) -> Counter:
    return Counter(o["cell"] for o in scan(run / "results.jsonl").objects if o.get("type") == "commit")


def check_whole(run: Path) -> None:
    found = scan(run / "results.jsonl")
    assert not found.needs_repair, found.summary()
    loose = [o for o in found.objects if o.get("type") == "record" and not o.get("cell")]
    assert not loose, loose[:3]  # every record belongs to a committed cell
    twice = {k: n for k, n in commits(run).items() if n > 1}
    assert not twice, twice


@pytest.mark.parametrize("exp", [pytest.param(e, marks=pytest.mark.slow) if e in SLOW else e for e in EXPS])
def test_rerun_writes_no_cell_and_a_kill_plus_rerun_records_each_cell_once(exp, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    whole = tmp_path / "whole"
    run_exp(exp, whole)
    check_whole(whole)
    cells = commits(whole)
    assert cells, "no cell recorded"
    records = sum(1 for o in scan(whole / "results.jsonl").objects if o.get("type") == "record")

    run_exp(exp, whole)  # the same command again: everything is done
    assert commits(whole) == cells
    assert sum(1 for o in scan(whole / "results.jsonl").objects if o.get("type") == "record") == records

    killed = tmp_path / "killed"
    with pytest.raises(Killed):
        run_exp(exp, killed, kill_after=max(1, len(cells) // 2), monkeypatch=monkeypatch)
    assert 0 < len(commits(killed)) < len(cells) or len(cells) == 1
    run_exp(exp, killed)
    check_whole(killed)
    assert set(commits(killed)) == set(cells), sorted(set(commits(killed)) ^ set(cells))[:5]


def test_one_key_for_two_different_records_is_refused(tmp_path):
    """A cell key that misses a coordinate would lose the second record silently: it raises instead."""
    rec = Recorder(tmp_path / "results.jsonl", "smoke", {}, "h0")
    row = rec.make(design="softmax", layout="S", metric="smoke/x", value=1.0, unit="ratio", status="measured")
    rec.write_cell("k", [row])
    rec.write_cell("k", [row])  # the same records again: fine, written once
    with pytest.raises(ValueError, match="misses a coordinate"):
        rec.write_cell("k", [{**row, "value": 2.0}])
    assert [json.loads(l)["type"] for l in (tmp_path / "results.jsonl").read_text().splitlines()] == ["header", "record", "commit"]


def test_a_standalone_probe_records_each_measurement_as_its_own_cell(tmp_path):
    """Recorder.record (experiments/*/measure.py, probe.py, run.py): one record, committed at once."""
    path = tmp_path / "results.jsonl"
    rec = Recorder(path, "probe", {}, "h0")
    for v in (1.0, 2.0):
        rec.record(design="softmax", layout="S", metric="probe/x", value=v, unit="ratio", status="measured")
    rec.close("completed", 1.0)
    lines = [json.loads(l) for l in path.read_text().splitlines()]
    assert [l["type"] for l in lines] == ["header", "record", "commit", "record", "commit", "footer"]
    assert lines[1]["cell"] != lines[3]["cell"] and not scan(path).needs_repair
