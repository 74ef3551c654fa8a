"""The main job's fixed costs: a checkpoint's training-length checks are stored with it and read
back by the next run, a compile still to come is charged the longest one the run measured
(tests/test_plan_grid.py covers the plan's order and the compile charge), a run whose budget
cannot cover the short cells says so at its start, and every run ends with one line naming what
the budget left out at the load seen."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnbench.cli import main as cli, preflight
from attnbench.training.checkpoints import SHIPPED

from helpers import compose_cfg

TINY = ["+exp=needle_4m", "exp.designs=[softmax]", "eval.context_lens=[1024]", "eval.depths=[0.5]", "eval.haystacks=1",
        "eval.haystacks_short=1", "eval.train_len_samples=2", "threads=1", "wandb.mode=disabled", "report.enabled=false"]  # fmt: skip


def run(tmp_path: Path, name: str, *extra: str) -> list[dict]:
    cfg = compose_cfg([*TINY, *extra])
    threads = torch.get_num_threads()
    try:
        preflight.prepare(cfg, tmp_path / name)
        cli.run(cfg, tmp_path / name)
    finally:
        torch.set_num_threads(threads)
    lines = [json.loads(line) for line in (tmp_path / name / "results.jsonl").read_text().splitlines()]
    return [r for r in lines if r.get("type") == "record"]


@pytest.mark.slow
def test_training_checks_are_stored_with_the_checkpoint_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    shipped = sorted(SHIPPED.glob("*/checks.json"))
    before = {p: p.read_bytes() for p in shipped}
    first = [r for r in run(tmp_path, "a") if r["metric"] == "train/acc"]
    assert first and {r["checks"] for r in first} == {"computed"} and all(r["check_s"] > 0 for r in first)
    stored = list((tmp_path / "cache" / "checks").glob("softmax-*.json"))  # a shipped checkpoint: its checks go to the cache
    assert len(stored) == 1
    assert {p: p.read_bytes() for p in sorted(SHIPPED.glob("*/checks.json"))} == before  # the package's files untouched

    second = [r for r in run(tmp_path, "b") if r["metric"] == "train/acc"]  # another run directory: a new user's second run
    assert {r["checks"] for r in second} == {"stored"} and all(r["check_s"] == 0 for r in second)
    keep = ("value", "n", "ci_low", "ci_high", "task", "context_len")
    assert [{k: r.get(k) for k in keep} for r in second] == [{k: r.get(k) for k in keep} for r in first]

    third = [r for r in run(tmp_path, "c", "eval.train_len_samples=3") if r["metric"] == "train/acc"]  # another key: computed again
    assert {r["checks"] for r in third} == {"computed"}


@pytest.mark.slow
def test_the_run_ends_with_what_the_budget_left_out_at_the_load_seen(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    # 1M of softmax takes hours on a CPU: skipped for the budget. Its cache (~2 GiB) fits half the memory a busy
    # machine has free; 4M's (~8 GiB) did not always, and a memory skip names no budget to rerun with.
    records = run(tmp_path, "a", "eval.context_lens=[1024,1048576]")
    summary = [r for r in records if r["metric"] == "eval/budget_summary"]
    assert len(summary) == 1
    s = summary[0]
    assert s["cells"] == 2 and s["value"] == 1 and s["memory"] == 0 and s["cores"] >= 1 and s["load"] >= 0, s["note"]
    assert f"of 2 cells skipped for the budget at load {s['load']:.1f} on {s['cores']} cores" in s["note"]
    minutes = re.search(r"; rerun with exp.budget=(\d+)m, or on a quiet machine$", s["note"])
    assert minutes and int(minutes.group(1)) >= 1, s["note"]
    from attnbench.report import build_report

    html = build_report([tmp_path / "a"], pdf=False).html.read_text()
    assert html.index(s["note"]) < html.index('<section id="summary"')  # the report's first line after its title


@pytest.mark.slow
def test_a_model_the_run_has_to_train_does_not_spend_the_evaluation_budget(tmp_path, monkeypatch):
    """exp.budget is the evaluation's: the seconds spent getting (training) the models are left out
    of the run's clock (a training of 48 minutes once left a 30-minute budget nothing to evaluate)."""
    from attnbench.experiments.longctx import flow as longctx

    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    real = longctx.get_model

    def training(*args, **kwargs):
        time.sleep(2.0)  # stands in for a training this run has to do
        return real(*args, **kwargs)

    monkeypatch.setattr(longctx, "get_model", training)
    began = time.perf_counter()
    records = run(tmp_path, "a")
    wall = time.perf_counter() - began
    (summary,) = [r for r in records if r["metric"] == "eval/budget_summary"]
    assert summary["elapsed_s"] <= wall - 2.0 + 0.05  # the run's clock left the 2 s out (0.05: its rounding)


def test_the_budget_line_comes_after_the_report_and_wandb_lines(tmp_path):
    """cli_run.finish: the experiment's last line (longctx.budget_summary sets ctx.last_line)
    is printed after "completed in", the report's and W&B's lines: the run's last line."""
    from types import SimpleNamespace

    from attnbench.cli import run as cli_run

    printed: list[str] = []
    cfg = compose_cfg(["+exp=needle_4m", "wandb.mode=disabled", "report.enabled=false"])
    recorder = SimpleNamespace(close=lambda *a: None, path=tmp_path / "results.jsonl", done_cells=set())
    line = "3 of 35 cells skipped for the budget at load 5.8 on 2 cores; rerun with exp.budget=40m, or on a quiet machine"
    ctx = SimpleNamespace(recorder=recorder, console=SimpleNamespace(print=lambda s, **_: printed.append(s)), last_line=line)
    assert cli_run.finish(cfg, tmp_path, ctx, "completed", None, 1.0, sinks=True) == 0
    assert printed[0].startswith("completed in") and printed[1].startswith("W&B: disabled") and printed[-1] == line, printed


def test_needle_4m_models_ship_their_checks_under_the_key_a_run_computes(monkeypatch):
    """The README's main command reads every model's training-length checks from the checks.json
    shipped beside it (none computed on a fresh machine): the file holds the key a run computes
    from today's config and code (rerun the command in attnbench/trained/README.md when not)."""
    from types import SimpleNamespace

    from attnbench.training import checkpoints
    from attnbench.experiments.longctx import flow as longctx
    from attnbench.experiments import needle_4m
    from attnbench.training.start import checkpoint_key

    cfg = compose_cfg(["+exp=needle_4m"])
    grids: list = []
    monkeypatch.setattr(needle_4m, "run_grid", lambda ctx, grid: grids.append(grid))
    needle_4m.run(SimpleNamespace(cfg=cfg))
    for design in cfg.exp.designs:
        folder = checkpoints.find(design, checkpoint_key(cfg, design))
        assert folder is not None and folder.is_relative_to(SHIPPED), design
        trained = SimpleNamespace(record=json.loads((folder / "record.json").read_text()), folder=folder)
        stored, where = longctx.stored_checks(trained, longctx.checks_key(cfg, trained, grids[0]))
        assert stored is not None and where == folder / longctx.CHECKS_FILE, f"{design}: no shipped checks under today's key"
        assert {r["fields"]["task"] for r in stored} == {"niah_single", grids[0].task}


def test_a_cell_given_up_after_some_haystacks_ran_is_partial_not_skipped():
    """budget_summary: a cell whose later haystacks were given up after the first ran (msa 16K
    in experiments/needle_4m_loaded/run: 2 of 6) is counted partial, not skipped."""
    from types import SimpleNamespace

    from attnbench.evaluation.fit import Estimate
    from attnbench.experiments.longctx.plan import Haystack, Skip, budget_summary
    from attnbench.names import SkipReason

    cfg = compose_cfg(["+exp=needle_4m"])
    done = {("msa", 16384, 0), ("msa", 16384, 1)}  # the haystacks that ran
    recorded: list[dict] = []

    def cell(**k):
        ran = (k.get("design"), k.get("context_len"), k.get("sample")) in done and k.get("part") == "eval"
        return SimpleNamespace(done=ran, record=lambda *a, **f: recorded.append(f), commit=lambda: None)

    printed: list[str] = []
    console = SimpleNamespace(print=lambda s, **_: printed.append(s))
    ctx = SimpleNamespace(cfg=cfg, cell=cell, design_names=["msa"], console=console, budget=budget_of(cfg))
    msa16, msa64 = {"design": "msa", "context_len": 16384}, {"design": "msa", "context_len": 65536}
    est = Estimate(seconds=10.0, bytes=0.0, how="test")
    planned = [Haystack(msa16, i, est, "short") for i in range(6)]
    key16 = tuple(msa16.items())
    skipped = [Skip(msa64, est, SkipReason.BUDGET, "budget")]
    line = budget_summary(ctx, None, planned, skipped, {key16}, {key16}, [3.0], 2, 60.0)
    assert line.startswith("1 of 2 cells skipped for the budget, 1 partial at load 3.0 on 2 cores"), line
    assert recorded[0]["partial"] == 1


def budget_of(cfg):
    """What RunContext.budget holds for this config."""
    from attnbench.config import parse_duration
    from attnbench.runner import Budget

    return Budget(str(cfg.exp.budget), parse_duration(cfg.exp.budget))


def grid_run(budget: str, seconds: dict, learned: dict):
    """A GridRun of needle_4m over stub models without a prefill: seconds[name](L) a haystack,
    learned[name] its training length (0: it passed no stage); returns it, what it printed and
    the fields it recorded."""
    from types import SimpleNamespace

    from attnbench.experiments.longctx.plan import Grid
    from attnbench.experiments.longctx.evaluate import GridRun
    from attnbench.evaluation.fit import Estimate

    printed: list[str] = []
    recorded: list[dict] = []

    def cell(**k):
        return SimpleNamespace(done=False, record=lambda *a, **f: recorded.append(f), commit=lambda: None)

    cfg = compose_cfg(["+exp=needle_4m", f"exp.budget={budget}"])
    console = SimpleNamespace(print=lambda s, **_: printed.append(s))
    ctx = SimpleNamespace(cfg=cfg, device=torch.device("cpu"), cell=cell, console=console, budget=budget_of(cfg))
    models = {name: SimpleNamespace(record={"rule": {}, "train_len": L}, model=None) for name, L in learned.items()}
    run = GridRun(ctx, Grid("niah/acc", "stub", [{}], make=lambda *a: []), models, time.perf_counter())
    run.cal = {name: SimpleNamespace(estimate=lambda L, passes, f=f: Estimate(f(L), 0.0, "stub")) for name, f in seconds.items()}
    return run, printed, recorded


def test_a_budget_short_of_the_learned_designs_short_cells_says_so_at_the_start():
    """GridRun.warn_short_cut: one line naming the learned designs' 1K-16K cells the plan skips
    (not those of a design that learned nothing) and the budget that covers them."""
    seconds = {name: lambda L: L / 4096 for name in ("a", "b", "c")}  # 6 haystacks: 1.5 s at 1K, 6 s at 4K, 24 s at 16K
    run, printed, _ = grid_run("40s", seconds, {"a": 1024, "b": 1024, "c": 0})  # 39 s of the 63 s the learned designs need
    planned, skipped = run.plan()
    run.warn_short_cut(planned, skipped)
    assert len(printed) == 1, printed
    assert printed[0].startswith("attnbench: exp.budget=40s does not cover every learned design's cells to 16K at this load ("), printed
    assert printed[0].endswith(f" on {run.cores} cores): it skips b 16K; give it exp.budget=2m to measure them"), printed
    run, printed, _ = grid_run("2m", seconds, {"a": 1024, "b": 1024, "c": 0})
    run.warn_short_cut(*run.plan())
    assert printed == []


def test_a_cell_whose_compile_is_still_to_come_is_charged_the_longest_compile_measured(monkeypatch):
    """GridRun.haystack: lightning_hybrid31's 64K cell in experiments/needle_4m_loaded/run-busy2
    (2 haystacks of ~12 s, ~107 s left, the hybrid's compile measured at 96.0 s) is given up whole
    when the compile it still needs is charged the longest compile measured, and runs when it is
    charged COMPILE_ESTIMATE_S (no compile measured yet); the compile it runs is then measured."""
    from attnbench.experiments.longctx import evaluate as longctx_eval
    from attnbench.experiments.longctx.evaluate import GridRun

    monkeypatch.setattr(GridRun, "compiles_at", lambda self, name, L: L >= 65536)
    monkeypatch.setattr(longctx_eval, "compile_prefills", lambda ctx, models: [124.5])
    coords = {"design": "h31", "context_len": 65536}

    def first_haystack(measured: list[float]):
        run, _, recorded = grid_run("18m", {"h31": lambda L: 12.1}, {"h31": 1024})
        run.compile_s = list(measured)
        run.start = time.perf_counter() - (run.budget - 107.0)
        monkeypatch.setattr(run, "measure", lambda *a: "measured")
        monkeypatch.setattr(run, "samples", lambda *a: [])
        return run, recorded, run.haystack(coords, 0, "leftover", lambda text: None)

    run, recorded, line = first_haystack([96.0])
    assert line.endswith("skipped, budget") and tuple(coords.items()) in run.given_up and not run.compiled
    assert "after a compile charged 96 s" in recorded[0]["note"], recorded
    run, _, line = first_haystack([])
    assert line.endswith("measured") and run.compiled == {"h31"} and run.compile_s == [124.5]


def test_a_planned_and_a_late_skip_record_carry_their_reason_as_a_field(monkeypatch):
    """GridRun.record_skips records each plan skip's SkipReason value as ``skip_reason`` (memory,
    budget, unlearned), and GridRun.skip_late its haystack's as "late": the report reads the
    field, not the note."""
    from attnbench.evaluation.fit import Estimate
    from attnbench.experiments.longctx.evaluate import GridRun

    monkeypatch.setattr(GridRun, "compiles_at", lambda self, name, L: False)
    run, _, recorded = grid_run("1m", {"a": lambda L: L / 4096, "c": lambda L: L / 4096}, {"a": 1024, "c": 0})
    run.cal = {name: SimpleNamespace(estimate=lambda L, passes: Estimate(L / 4096, L * 1000.0, "stub")) for name in ("a", "c")}
    run.mem_cap = 1e9  # the 4M cells' 4.2e9 bytes do not fit
    planned, skipped = run.plan()
    run.record_skips(skipped)
    assert [r["skip_reason"] for r in recorded] == [s.reason.value for s in skipped]
    assert {r["skip_reason"] for r in recorded} == {"memory", "budget", "unlearned"}, recorded
    assert all(r["skip_reason"] == "memory" for r in recorded if r["context_len"] == 4194304)

    recorded.clear()
    run.start = time.perf_counter() - run.budget  # the budget is spent before the first planned haystack
    h = planned[0]
    assert run.haystack(h.coords, h.index, h.phase, lambda text: None).endswith("skipped, budget")
    (late,) = recorded
    assert late["sample"] == h.index and late["skip_reason"] == "late", late
