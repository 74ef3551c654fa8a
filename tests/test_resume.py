"""Nothing lost, nothing redone, nothing mixed: a run killed with SIGKILL and rerun ends with the
same records as an uninterrupted run; a rerun skips finished cells; two identical runs at once on
one directory record each cell once; a directory holding another config's records is refused;
a torn or garbled record line is named and its cell redone."""

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
VOLATILE = {"time", "started", "cell", "crc32"}


def start(run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "attnbench", "+exp=smoke", "threads=1", f"hydra.run.dir={run_dir}", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=run_dir.parent,
    )


QUICK = ("exp.designs=[softmax,msa]", "report.pdf=false", "wandb.mode=disabled")  # two cells, no sinks to wait for


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


def test_reusing_a_directory_with_another_config_is_refused_in_one_line(tmp_path):
    run = tmp_path / "run"
    assert start(run, *QUICK, "attention.msa.top_k=3").wait(timeout=300) == 0
    before = (run / "results.jsonl").read_bytes()
    hydra_before = (run / ".hydra" / "overrides.yaml").read_text()
    proc = start(run, *QUICK, "attention.msa.top_k=2")
    _, err = proc.communicate(timeout=300)
    lines = [l for l in err.splitlines() if l.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in err, err
    old_hash = json.loads(before.splitlines()[0])["config_hash"]
    assert old_hash in lines[0] and "this run is config" in lines[0] and "another directory" in lines[0], lines[0]
    assert (run / "results.jsonl").read_bytes() == before  # nothing added, nothing mixed
    assert (run / ".hydra" / "overrides.yaml").read_text() == hydra_before  # Hydra did not overwrite it either
    # force=true sets the other config's records aside and starts afresh: still one config per file
    proc = start(run, *QUICK, "attention.msa.top_k=2", "force=true")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "force=true" in err, err[-2000:]
    (aside,) = run.glob("results.jsonl.superseded-*")
    assert aside.read_bytes() == before
    assert len({r["config_hash"] for r in records(run)}) == 1 and old_hash not in (run / "results.jsonl").read_text()


def test_two_concurrent_identical_runs_record_each_cell_once(tmp_path):
    from attnbench.records import rundir

    run = tmp_path / "run"
    held = rundir.claim(run, "any", say=lambda line: None)  # hold the directory until both runs are waiting
    logs = [tmp_path / "first.err", tmp_path / "second.err"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "attnbench", "+exp=smoke", "threads=1", f"hydra.run.dir={run}", *QUICK],
            stdout=subprocess.DEVNULL,
            stderr=open(log, "w"),
            cwd=tmp_path,
        )
        for log in logs
    ]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all("waiting for it to finish" in l.read_text() for l in logs):
            assert all(p.poll() is None for p in procs), [l.read_text()[-2000:] for l in logs]
            time.sleep(0.1)
    finally:
        held.release()  # now both race for the lock; one runs, the other waits again, then resumes
    codes = [p.wait(timeout=300) for p in procs]
    errs = [l.read_text() for l in logs]
    assert codes == [0, 0] and all("waiting for it to finish" in e for e in errs), errs
    rs = records(run)
    per_cell = Counter(r["cell"] for r in rs)
    assert len(per_cell) == 2 and len(set(per_cell.values())) == 1, per_cell  # both cells, each once
    assert sum("already recorded in this run directory" in e for e in errs) == 1  # the later one skipped them
    assert len(rs) == len({json.dumps({k: v for k, v in r.items() if k not in VOLATILE}, sort_keys=True) for r in rs})
    footers = [json.loads(l) for l in (run / "results.jsonl").read_text().splitlines() if '"footer"' in l]
    assert [f["status"] for f in footers] == ["completed", "completed"]


def test_lock_refuse_stops_in_one_line_while_another_run_holds_the_directory(tmp_path):
    from attnbench.records import rundir

    run = tmp_path / "run"
    held = rundir.claim(run, "any", say=lambda line: None)  # this test process is the other run
    try:
        proc = start(run, *QUICK, "lock=refuse")
        _, err = proc.communicate(timeout=300)
    finally:
        held.release()
    lines = [l for l in err.splitlines() if l.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "in use by another run" in lines[0] and "refused" in lines[0], err
    assert f"pid {os.getpid()}" in lines[0] and not (run / "results.jsonl").exists() and not (run / ".hydra").exists()


def test_torn_or_garbled_record_lines_are_named_and_their_cells_redone(tmp_path):
    whole, damaged = tmp_path / "whole", tmp_path / "damaged"
    for run in (whole, damaged):
        assert start(run, *QUICK).wait(timeout=300) == 0
    path = damaged / "results.jsonl"
    lines = path.read_bytes().split(b"\n")[:-1]
    lines.insert(1, b"\xff\xfe not UTF-8")  # an undecodable line, right after the header
    garbled = next(i for i, l in enumerate(lines) if b'"design": "softmax"' in l and b'"type": "record"' in l)
    lines[garbled] = lines[garbled].replace(b'"status": "measured"', b'"status": "skipped!"', 1)  # still valid JSON
    torn = next(i for i, l in enumerate(lines) if b'"type": "commit"' in l and b'"msa"' in l)
    kept = b"\n".join(lines[:torn]) + b"\n" + lines[torn][:20]  # the msa cell's commit line cut short, the rest lost
    path.write_bytes(kept)

    proc = start(damaged, *QUICK)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    named = [l for l in err.splitlines() if "damaged line" in l]
    assert len(named) == 1, err
    assert f"line {garbled + 1}: checksum mismatch" in named[0] and f"line {torn + 1}: not valid JSON" in named[0], named
    assert "line 2: not UTF-8" in named[0] and "3 damaged lines" in named[0], named
    assert "design=softmax" in named[0] and "design=msa" in named[0], named  # the cells, by their coordinates
    assert err.count("already recorded") == 0  # both cells ran again
    assert comparable(records(damaged)) == comparable(records(whole))
    set_aside = (damaged / "results.jsonl.damaged").read_bytes()
    assert lines[garbled] in set_aside and lines[torn][:20] in set_aside and lines[1] in set_aside  # nothing thrown away
    from attnbench.records.integrity import scan

    assert scan(path).summary() == "" and not scan(path).needs_repair


# ---------------------------------------------------------------- the file format, in process (fast)


def recorder(path: Path):
    from attnbench.records.write import Recorder

    return Recorder(path, "smoke", {}, "h0")


def test_a_cell_already_done_is_not_written_again(tmp_path):
    from attnbench.records.integrity import scan

    rec = recorder(tmp_path / "results.jsonl")
    rows = [rec.make(design="softmax", layout="S", metric="smoke/x", value=1.0, unit="ratio", status="measured")]
    rec.write_cell("k1", rows, {"design": "softmax"})
    rec.write_cell("k1", rows, {"design": "softmax"})  # an experiment that recomputes a cheap cell
    found = scan(rec.path)
    assert [o["type"] for o in found.objects] == ["header", "record", "commit"] and found.done_cells == {"k1"}
    assert recorder(rec.path).done_cells == {"k1"}  # and a rerun sees it done


def test_scan_names_every_kind_of_damage_and_repair_keeps_what_it_removes(tmp_path):
    from attnbench.records.integrity import encode_line, scan

    path = tmp_path / "results.jsonl"
    rec = recorder(path)

    def row(i):
        return rec.make(design="msa", layout="M", metric=f"smoke/m{i}", value=i, unit="ratio", status="measured")

    rec.write_cell("whole", [row(0), row(1)], {"design": "msa"})
    rec.write_cell("garbled", [row(2), row(3)], {"design": "softmax"})
    data = path.read_bytes().replace(b'"value": 3', b'"value": 4')  # valid JSON still; the checksum says no
    dup = b"".join(
        encode_line(o)
        for o in ({**row(0), "cell": "whole"}, {**row(1), "cell": "whole"}, {"type": "commit", "cell": "whole", "coords": {}, "records": 2})
    )
    path.write_bytes(data + dup + b"\xff\xfe\n" + b"[1, 2]\n" + b'{"type": "record"}\n' + b'{"type": "hea')
    found = scan(path)
    assert found.done_cells == {"whole"} and set(found.bad_cells) == {"garbled"}
    problems = {l.no: l.problem for l in found.damaged}
    assert problems == {
        6: "checksum mismatch (garbled)",
        11: "not UTF-8 (byte 1 is 0xff)",
        12: "not a JSON object (list)",
        13: "no checksum",
        14: "not valid JSON (cut short)",
    }, problems
    summary = found.summary()
    assert "5 damaged lines" in summary and "design=softmax" in summary and "3 duplicate lines" in summary, summary
    found.repair()
    again = scan(path)
    assert not again.needs_repair and again.done_cells == {"whole"}
    assert [o["type"] for o in again.objects] == ["header", "record", "record", "commit"]
    removed = (tmp_path / "results.jsonl.damaged").read_bytes()
    assert removed.count(b"\n") == 10 and b"\xff\xfe" in removed and removed.endswith(b'{"type": "hea\n')


def test_lines_written_before_checksums_still_read(tmp_path):
    """Results recorded before this format (experiments/*/results.jsonl): no checksum, no commit line."""
    import json

    from attnbench.records.integrity import scan

    path = tmp_path / "results.jsonl"
    legacy = [{"type": "header", "config_hash": "h0"}, {"type": "record", "metric": "smoke/x", "value": 1, "cell": "old"}]
    path.write_text("".join(json.dumps(o) + "\n" for o in legacy))
    rec = recorder(path)  # resuming it: the old cell is done, nothing set aside
    assert rec.done_cells == {"old"} and not rec.repaired.needs_repair
    assert [o["type"] for o in scan(path).objects] == ["header", "record", "header"]
