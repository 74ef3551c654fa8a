"""Records read as text, damage named precisely (issue 30, K and L): NUL runs and random bytes are
damage like any other; every message names the line, what is wrong and the cell; a record lost to
a repair makes its cell run again; duplicated records and cells are kept once and say so."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from attnbench.records.write import Recorder
from attnbench.records.integrity import scan


def finished(path: Path) -> Recorder:
    """A results file with two whole cells of three records each."""
    rec = Recorder(path, "smoke", {}, "h0")
    for design in ("softmax", "msa"):
        rows = [rec.make(design=design, layout="S", metric=f"smoke/m{i}", value=i, unit="ratio", status="measured") for i in range(3)]
        rec.write_cell(f"cell-{design}", rows, {"design": design})
    return rec


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


def with_crc(obj: dict) -> bytes:
    """A line whose checksum was recomputed after an edit (damage a CRC cannot see)."""
    body = json.dumps({k: v for k, v in obj.items() if k != "crc32"}).encode()
    return body[:-1] + b', "crc32": "%08x"}' % zlib.crc32(body)


def test_a_nul_filled_tail_is_damage_named_and_repaired(tmp_path):
    path = tmp_path / "results.jsonl"
    finished(path)
    with open(path, "ab") as f:
        f.write(b"\0" * 1001)  # what a power loss leaves
    found = scan(path)
    n = len(found.lines)
    assert found.done_cells == {"cell-softmax", "cell-msa"} and found.damaged[0].no == n
    assert f"line {n}: 1001 NUL bytes" in found.summary(), found.summary()
    found.repair()
    again = scan(path)
    assert not again.needs_repair and again.done_cells == {"cell-softmax", "cell-msa"}
    assert Recorder(path, "smoke", {}, "h0").done_cells == {"cell-softmax", "cell-msa"}  # the run resumes


def test_random_bytes_are_named_not_a_crash(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(os.urandom(200_000) + b"\n\0\0\0{\n" + "\u00fc".encode("utf-16"))
    found = scan(path)
    assert found.lines and not found.objects and not found.done_cells
    assert all(l.problem for l in found.damaged) and "damaged line" in found.summary()


def test_a_record_line_appended_twice_is_named_and_counted_once(tmp_path):
    path = tmp_path / "results.jsonl"
    finished(path)
    lines = lines_of(path)
    copy = next(i for i, l in enumerate(lines) if b'"msa"' in l and b'"record"' in l)
    path.write_bytes(path.read_bytes() + lines[copy] + b"\n")
    found = scan(path)
    summary = found.summary()
    assert f"line {len(lines) + 1}: duplicate: a second copy of line {copy + 1} (cell design=msa" in summary, summary
    assert "each cell kept once" in summary and "run again" not in summary, summary
    assert found.done_cells == {"cell-softmax", "cell-msa"} and len([o for o in found.objects if o["type"] == "record"]) == 6


def test_a_commit_counting_too_few_records_makes_its_cell_run_again(tmp_path):
    path = tmp_path / "results.jsonl"
    finished(path)
    lines = lines_of(path)
    j = next(i for i, l in enumerate(lines) if b'"commit"' in l and b"cell-msa" in l)
    lines[j] = with_crc({**json.loads(lines[j]), "records": 2})  # one record now outside its commit
    path.write_bytes(b"\n".join(lines) + b"\n")
    found = scan(path)
    summary = found.summary()
    assert found.done_cells == {"cell-softmax"} and set(found.bad_cells) == {"cell-msa"}
    assert "1 cell not whole, run again (design=msa [cell-msa]: line" in summary and "a record outside any commit" in summary, summary
    found.repair()
    damaged = (tmp_path / "results.jsonl.damaged").read_bytes()
    assert damaged.count(b"cell-msa") == 4  # its three records and its commit: kept, and the cell redone whole
    assert scan(path).done_cells == {"cell-softmax"} and Recorder(path, "smoke", {}, "h0").done_cells == {"cell-softmax"}


def test_a_commit_counting_too_many_records_names_the_line_and_cell(tmp_path):
    path = tmp_path / "results.jsonl"
    finished(path)
    lines = lines_of(path)
    j = next(i for i, l in enumerate(lines) if b'"commit"' in l and b"cell-msa" in l)
    lines[j] = with_crc({**json.loads(lines[j]), "records": 12})
    path.write_bytes(b"\n".join(lines) + b"\n")
    found = scan(path)
    assert found.done_cells == {"cell-softmax"} and set(found.bad_cells) == {"cell-msa"}
    assert f"line {j + 1}: its commit counts 12 records" in found.summary() or "is not one of them" in found.summary()


def test_a_cell_committed_twice_is_kept_once_and_not_redone(tmp_path):
    path = tmp_path / "results.jsonl"
    finished(path)
    lines = lines_of(path)
    block = [l for l in lines if b"cell-msa" in l]
    path.write_bytes(path.read_bytes() + b"\n".join(block) + b"\n")
    found = scan(path)
    summary = found.summary()
    assert found.done_cells == {"cell-softmax", "cell-msa"} and not found.bad_cells
    assert "4 duplicate lines removed, each cell kept once" in summary and "is already whole at lines" in summary, summary
    assert "run again" not in summary


def test_a_garbled_line_names_its_cell(tmp_path):
    path = tmp_path / "results.jsonl"
    finished(path)
    lines = lines_of(path)
    i = next(i for i, l in enumerate(lines) if b'"softmax"' in l and b'"record"' in l)
    lines[i] = lines[i].replace(b'"value": 0', b'"value": 9')
    path.write_bytes(b"\n".join(lines) + b"\n")
    summary = scan(path).summary()
    assert f"line {i + 1}: checksum mismatch (garbled), in cell design=softmax [cell-sof]" in summary, summary


def test_report_counts_duplicate_records_once_and_says_so(tmp_path):
    """Records written outside cells by older runs (kv_memory's, rerun in place): each counted once, named, a caveat."""
    import contextlib
    import io

    from attnbench.cli.main import report_main
    from attnbench.report.frame import load
    from attnbench.records.integrity import encode_line

    run = tmp_path / "run"
    run.mkdir()
    header = {"type": "header", "exp": "kv_memory", "config_hash": "h0", "config": {}}
    rec = {"type": "record", "exp": "kv_memory", "design": "softmax", "layout": "S", "metric": "memory/total_bytes"}
    rows = [{**rec, "value": 10 * n, "unit": "bytes", "status": "projected", "context_len": n, "time": "t1"} for n in (1, 2)]
    again = [{**r, "time": "t2"} for r in rows]  # the same records, written again by a rerun
    (run / "results.jsonl").write_bytes(b"".join(encode_line(o) for o in [header, *rows, header, *again]))
    data = load([run])
    assert len(data.records) == 2 and len(data.problems) == 1
    assert "2 duplicate lines removed" in data.problems[0] and "line 5: duplicate: the record of line 2 recorded again" in data.problems[0]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = report_main([str(run), "--no-pdf"])
    assert code == 2 and len(err.getvalue().strip().splitlines()) == 1 and "duplicate" in err.getvalue()
    assert "duplicate records are counted once" in (run / "report.html").read_text()


def test_report_sets_another_configs_cell_aside_with_a_caveat_and_rc_2(tmp_path):
    """A whole committed cell of another config appended (valid checksums): the run refuses the
    directory; the report sets those records aside, says so in one line and a caveat, exits 2."""
    import contextlib
    import io

    from attnbench.cli.main import report_main

    run = tmp_path / "run"
    path = run / "results.jsonl"
    finished(path).close("completed", 1.0)
    foreign = Recorder(path, "smoke", {}, "h1")
    rows = [foreign.make(design="lightning", layout="L", metric="smoke/m0", value=123456789, unit="ratio", status="measured")]
    foreign.write_cell("cell-foreign", rows, {"design": "lightning"})
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = report_main([str(run), "--no-pdf"])
    lines = err.getvalue().strip().splitlines()
    assert code == 2 and len(lines) == 1 and "config h1" in lines[0] and "h0" in lines[0], err.getvalue()
    page = (run / "report.html").read_text()
    assert "123456789" not in page and "123,456,789" not in page and "1.23e+08" not in page
    assert "set aside" in page


def test_a_repaired_header_is_line_1(tmp_path):
    """A damaged header is removed by the repair; the next run's header goes first, not after the records."""
    path = tmp_path / "results.jsonl"
    finished(path)
    lines = lines_of(path)
    path.write_bytes(b"garbage" + lines[0][7:] + b"\n" + b"".join(l + b"\n" for l in lines[1:]))
    Recorder(path, "smoke", {}, "h0")
    first = json.loads(lines_of(path)[0])
    assert first["type"] == "header" and first["config_hash"] == "h0"
    assert scan(path).done_cells == {"cell-softmax", "cell-msa"}
