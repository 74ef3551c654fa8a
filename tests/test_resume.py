"""Nothing lost, nothing redone: a run killed with SIGKILL and rerun ends with the same records
as an uninterrupted run; a rerun skips finished cells; same config and seed, same records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TIMING_UNITS = {"ms", "s"}
VOLATILE = {"time", "started", "cell"}


def start(run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "attnbench", "+exp=smoke", "threads=1", f"hydra.run.dir={run_dir}", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=run_dir.parent)


def records(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        r = json.loads(line)  # every line must be whole
        if r["type"] == "record":
            out.append(r)
    return out


def comparable(rs: list[dict]) -> Counter:
    """Records as a multiset, without timings and bookkeeping fields."""
    keep = [r for r in rs if r["unit"] not in TIMING_UNITS]
    return Counter(json.dumps({k: v for k, v in r.items() if k not in VOLATILE}, sort_keys=True) for r in keep)


def cells(run_dir: Path) -> set[str]:
    path = run_dir / "results.jsonl"
    if not path.exists():
        return set()
    found = set()
    for line in path.read_text().splitlines():
        try:
            found.add(json.loads(line).get("cell"))
        except json.JSONDecodeError:
            pass
    return found - {None}


def test_sigkill_then_rerun_equals_uninterrupted_run(tmp_path):
    whole = tmp_path / "whole"
    proc = start(whole)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()[-2000:]

    killed = tmp_path / "killed"
    proc = start(killed)
    deadline = time.time() + 300
    while len(cells(killed)) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = cells(killed)
    assert 2 <= len(done_before) < 6, done_before

    proc = start(killed)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert err.count("already recorded in this run directory") == len(done_before)
    assert comparable(records(killed)) == comparable(records(whole))


def test_rerun_of_a_finished_run_redoes_nothing(tmp_path):
    run = tmp_path / "run"
    assert start(run).wait(timeout=300) == 0
    before = records(run)
    proc = start(run)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and err.count("already recorded") == 6
    assert records(run) == before


def test_changed_config_is_not_skipped(tmp_path):
    run = tmp_path / "run"
    assert start(run, "design=softmax").wait(timeout=300) == 0
    proc = start(run, "design=softmax", "exp.seq_len=32")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "already recorded" not in err
