"""Every experiment checks its sizes and designs before any work, each refusal one line naming the
field: lengths and counts against the bounds of docs/long-runs.md, memory against this machine's,
repeated or no designs; and every experiment stops within one cell of a spent exp.budget: those
that spend it cell by cell at the next cell boundary, recording the stop ``skipped`` (note
``budget``), longctx's grids (needle_4m, multihop) at the next haystack and the bench sweep
(crossover) at the next timing cell, each recording the cells left out ``skipped``."""

from __future__ import annotations

import json
import signal

import pytest

from attnbench.cli import main as cli, preflight
from attnbench.records import rundir
from attnbench.cli.preflight import config_error

from helpers import compose_cfg


@pytest.mark.parametrize(
    "exp, override, field",
    [
        ("kv_memory", "exp.seq_len=100000000000", "exp.seq_len"),
        ("kv_memory", "exp.seq_len=1000000000", "exp.seq_len"),  # within the bound, beyond this machine's memory
        ("serving", "eval.haystacks=1000000000000", "eval.haystacks"),
        ("capacity", "eval.train_len_samples=1000000000", "eval.train_len_samples"),
        ("crossover", "bench.prefill_lens=[256,100000000000]", "bench.prefill_lens[1]"),
        ("multihop", "eval.chains=1000000000", "eval.chains"),
        ("needle_4m", "eval.context_lens=[1024,100000000000]", "eval.context_lens[1]"),
        ("smoke", "model.d_model=1000000000", "d_model=1000000000"),
    ],
)
def test_an_impossible_size_is_refused_in_one_line_naming_its_field(exp, override, field):
    line = config_error([f"+exp={exp}", override])
    assert line is not None and "\n" not in line and field in line, line
    if exp == "smoke":
        assert "exp.seq_len" not in line, line  # the model's size is to blame, not the length


@pytest.mark.parametrize("exp", ["smoke", "kv_memory", "serving", "capacity", "multihop", "needle_4m"])
def test_repeated_or_no_designs_are_refused_in_one_line(exp):
    line = config_error([f"+exp={exp}", "exp.designs=[softmax,softmax]"])
    assert line == "exp.designs[1]='softmax': repeated (exp.designs[0]); name each design once", line
    line = config_error([f"+exp={exp}", "exp.designs=[]"])
    assert line is not None and line.startswith("exp.designs=[]: at least one design"), line


def run_in_process(run, overrides: list[str]) -> None:
    import torch

    threads = torch.get_num_threads()
    cfg = compose_cfg(["threads=1", "report.enabled=false", "wandb.mode=disabled", *overrides])
    try:
        preflight.prepare(cfg, run)
        cli.run(cfg, run)
    finally:
        torch.set_num_threads(threads)
        rundir.release(run)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("exp", ["smoke", "kv_memory", "capacity", pytest.param("serving", marks=pytest.mark.slow)])
def test_a_spent_budget_stops_at_the_next_cell_and_records_the_stop(exp, tmp_path, monkeypatch, capsys):
    from attnbench import runner

    from test_experiments import TINY

    run, tiny = tmp_path / "run", [o for o in TINY[exp] if not o.startswith("exp.designs=")]
    designs = {"smoke": "[softmax,lightning,msa]", "kv_memory": "[softmax,lightning]"}.get(exp, "[softmax,lightning_h2]")
    if exp == "serving":
        designs = "[softmax,lightning_hybrid]"
    real = runner.RunContext.cell

    def cell(self, **key):  # the budget is spent once the first cell is committed
        if self.recorder.done_cells:
            self.budget_s = 0.0
        return real(self, **key)

    monkeypatch.setattr(runner.RunContext, "cell", cell)
    run_in_process(run, [f"+exp={exp}", *tiny, f"exp.designs={designs}", "exp.budget=1h"])
    lines = [json.loads(l) for l in (run / "results.jsonl").read_text().splitlines()]
    (stop,) = [l for l in lines if l.get("metric") == "budget/stopped_at"]
    assert stop["status"] == "skipped" and stop["note"].startswith("budget: exp.budget=1h spent"), stop
    assert lines[-1]["type"] == "footer" and lines[-1]["status"] == "completed"
    commits = [l for l in lines if l["type"] == "commit"]
    assert lines[-3]["type"] == "record" and lines[-3]["metric"] == "budget/stopped_at" and len(commits) >= 2, lines[-3:]
    if exp in ("smoke", "kv_memory"):
        assert len(commits) == 2  # the first cell, then the stop
    err = capsys.readouterr().err
    assert "rerun the same command to continue" in err.strip().splitlines()[-1], err[-2000:]
    monkeypatch.undo()  # the rerun continues where the budget stopped
    run_in_process(run, [f"+exp={exp}", *tiny, f"exp.designs={designs}", "exp.budget=1h"])
    lines = [json.loads(l) for l in (run / "results.jsonl").read_text().splitlines()]
    assert lines[-1]["status"] == "completed" and len([l for l in lines if l.get("metric") == "budget/stopped_at"]) == 1


@pytest.mark.parametrize("exp", ["needle_4m", "multihop"])
def test_a_long_context_grid_stops_at_the_next_haystack_once_its_budget_is_spent(exp, tmp_path, monkeypatch, capsys):
    """longctx plans its grid against exp.budget and checks the budget left before every
    haystack: spent after the first one, every later haystack is recorded skipped, never run."""
    from attnbench.experiments.longctx.evaluate import GridRun

    from test_experiments import TINY

    run, real, ran = tmp_path / "run", GridRun.haystack, []

    def haystack(self, coords, i, phase, note):  # the budget is spent once the first haystack has run
        if ran:
            self.budget = 0.0
        ran.append(i)
        return real(self, coords, i, phase, note)

    monkeypatch.setattr(GridRun, "haystack", haystack)
    tiny = [o for o in TINY[exp] if not o.startswith(("eval.haystacks=", "eval.haystacks_short="))]
    run_in_process(run, [f"+exp={exp}", *tiny, "eval.haystacks=3", "eval.haystacks_short=3", "exp.budget=1h"])
    lines = [json.loads(l) for l in (run / "results.jsonl").read_text().splitlines()]
    metric = {"needle_4m": "niah/acc", "multihop": "multihop/acc"}[exp]
    measured = {l["sample"] for l in lines if l.get("status") == "measured" and l.get("sample") is not None}
    late = [l for l in lines if l.get("metric") == metric and l.get("status") == "skipped"]
    assert measured == {0} and sorted(l["sample"] for l in late) == [1, 2], (measured, late)
    assert all(l["note"].startswith("budget ran out") and "exp.budget=1h" in l["note"] for l in late), late
    assert all(l["skip_reason"] == "late" for l in late), late
    assert lines[-1]["type"] == "footer" and lines[-1]["status"] == "completed"
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cells skipped for the budget" in last and "1 partial" in last, last


def test_crossover_skips_every_cell_after_its_budget_is_spent_naming_exp_budget(tmp_path, monkeypatch, capsys):
    """The sweep checks each cell's predicted time against the budget left: spent after the first
    timed cell, the others are recorded skipped (reason naming exp.budget) and the run's last line counts them."""
    from attnbench.bench import sweep

    from test_experiments import TINY

    timed, real = [], sweep.time_fn

    def time_fn(*a, **k):
        timed.append(1)
        return real(*a, **k)

    monkeypatch.setattr(sweep, "time_fn", time_fn)
    monkeypatch.setattr(sweep.Budget, "left", lambda self: -1.0 if timed else 1e9)
    run = tmp_path / "run"
    run_in_process(run, ["+exp=crossover", *TINY["crossover"], "exp.budget=1h"])
    lines = [json.loads(l) for l in (run / "results.jsonl").read_text().splitlines()]
    cells = [l for l in lines if str(l.get("metric", "")).startswith("latency/")]
    skipped = [l for l in cells if l["status"] == "skipped"]
    assert len(timed) == 1 and len(cells) == 4 and len(skipped) == 3, cells
    assert all(l["reason"].startswith("budget: ") and l["reason"].endswith("left of exp.budget=1h") for l in skipped), skipped
    assert lines[-1]["type"] == "footer" and lines[-1]["status"] == "completed"
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("attnbench: 3 of 4 timing cells skipped for exp.budget=1h "), last
