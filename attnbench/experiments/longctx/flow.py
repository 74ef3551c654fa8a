"""The shared flow of needle_4m and multihop: train or load each design's model, check it at
its training length, plan the (design x length x sample) grid against the budget, evaluate the
cells that fit with streaming prefill, record the rest as skipped with their estimates, and
aggregate accuracies with 95% intervals.

Cells are resumable: a rerun of the same command skips every cell already recorded.

The flow is in three modules: this one (each design's model and its training-length checks,
and run_grid, which strings the steps together), experiments/longctx/plan.py (the Grid, the plan against
the budget, the run's budget line) and experiments/longctx/evaluate.py (recording the skipped cells,
evaluating and recording each planned one, the accuracies).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from attnbench.evaluation.streaming import batch_accuracy
from attnbench.records.stats import wilson
from attnbench.experiments.longctx.evaluate import GridRun, aggregate
from attnbench.experiments.longctx.plan import Grid, haystack_rng, budget_summary
from attnbench.experiments.train import record_training, training_facts
from attnbench.tasks.generate import niah
from attnbench.training.trainer import get_model, vocab_of


def check_len(record: dict, cfg) -> int:
    """Where a model is checked: its true training length (the longest curriculum stage it
    passed), or the first stage's length when it passed none."""
    return training_facts(record)["train_len"] or int(cfg.train.stages[0].context_len)


CHECKS_FILE = "checks.json"  # beside a checkpoint: its training-length checks, keyed (stored_checks)
CHECKS_FORMAT = 1  # bump when the checks' computation changes: every stored file is then recomputed


def checks_key(cfg, trained, grid: Grid | None) -> str:
    """What decides a checkpoint's training-length checks: the checkpoint (its key), the probes'
    generator settings and count, and the experiment's task (none of the run's budget or speed)."""
    from attnbench.basics import stable_hash

    task = None if grid is None else {"task": grid.task, "groups": grid.groups, "params": grid.params, "fields": grid.fields}
    return stable_hash(
        {
            "format": CHECKS_FORMAT,
            "checkpoint": trained.record.get("key"),
            "seed": cfg.seed,
            "samples": cfg.eval.train_len_samples,
            "at": check_len(trained.record, cfg),
            "vocab": list(vocab_of(cfg).__dict__.values()),
            "haystack": str(cfg.task.haystack),
            "value_noise": cfg.task.value_noise,
            "task": task,
        }
    )


def checks_places(trained) -> tuple[Path, Path]:
    """Where a checkpoint's checks are read from, in order: beside it, then the user cache."""
    from attnbench.basics import cache_root

    folder = Path(trained.folder)
    return folder / CHECKS_FILE, cache_root() / "checks" / f"{folder.name}.json"


def stored_checks(trained, key: str) -> tuple[list[dict] | None, Path]:
    """The checks stored for this checkpoint under ``key`` (None: none stored under that key),
    and where they were found or are to be written. A shipped checkpoint's folder is read but
    written only when ATTNBENCH_SHIP_CHECKS=1 (how the files shipped in attnbench/trained/ are
    made: README there); runs write to the user cache, a trained checkpoint's beside it."""
    from attnbench.training.checkpoints import SHIPPED

    beside, cached = checks_places(trained)
    for path in (beside, cached):
        entries = _read_checks(path)
        if key in entries:
            return entries[key], path
    shipped = Path(trained.folder).resolve().is_relative_to(SHIPPED.resolve())
    return None, beside if (not shipped or os.environ.get("ATTNBENCH_SHIP_CHECKS") == "1") else cached


def _read_checks(path: Path) -> dict[str, list[dict]]:
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    entries = stored.get("entries") if isinstance(stored, dict) and stored.get("format") == CHECKS_FORMAT else None
    return {k: v for k, v in entries.items() if isinstance(v, list)} if isinstance(entries, dict) else {}


def store_checks(path: Path, key: str, records: list[dict]) -> None:
    """Add this key's checks to the file (other keys, other experiments' checks, are kept)."""
    from attnbench.training.checkpoints import save_json

    try:
        save_json(path, {"format": CHECKS_FORMAT, "entries": {**_read_checks(path), key: records}})
    except OSError:
        pass  # a cache that cannot be written only costs the next run the checks again


def prepare_models(ctx, grid: Grid | None = None) -> dict:
    """Get every design's model (trained once, then cached) and record training + the checks
    at its training length: single needles (``train/acc``, task niah_single) and, with
    ``grid``, the experiment's own task (``train/acc`` with the grid's task and group), each on
    ``eval.train_len_samples`` probes, with 95% Wilson intervals. Whether a model "learned the
    task" is decided from these by the verdicts (attnbench/verdicts/quality.py).

    The checks cannot change for a given checkpoint and settings, so they are stored beside the
    checkpoint (``checks.json``, keyed by checks_key) and read back by every later run; they are
    computed only when missing or stored under another key. Each record says which
    (``checks``: computed | stored) and the seconds this run spent on them (``check_s``)."""
    cfg, models = ctx.cfg, {}
    vocab = vocab_of(cfg)
    ctx.train_s = 0.0
    for name in ctx.design_names:
        began = time.perf_counter()
        trained = get_model(cfg, name, ctx.device, console=ctx.console)
        ctx.train_s += time.perf_counter() - began
        models[name] = trained
        cell = ctx.cell(design=name, part="train", key=trained.record["key"])
        if cell.done:
            continue
        record_training(ctx, cell, name, trained)
        began = time.perf_counter()
        key = checks_key(cfg, trained, grid)
        stored, where = stored_checks(trained, key)
        if stored is not None:
            for r in stored:
                cell.record(name, r["metric"], r["value"], r["unit"], r["status"], **r["fields"], checks="stored", check_s=0.0)
            ctx.console.print(f"  {name}: training-length checks read from {where} ({len(stored)} records)")
            cell.commit()
            continue
        computed = list(_training_checks(ctx, name, trained, grid, vocab))
        seconds = time.perf_counter() - began
        for r in computed:
            cell.record(name, r["metric"], r["value"], r["unit"], r["status"], **r["fields"], checks="computed", check_s=round(seconds, 2))
        store_checks(where, key, computed)
        cell.commit()
    return models


def _training_checks(ctx, name: str, trained, grid: Grid | None, vocab):
    """The checks of prepare_models, as {metric, value, unit, status, fields} dicts."""
    cfg = ctx.cfg
    train_len, at = training_facts(trained.record)["train_len"], check_len(trained.record, cfg)
    where = "" if train_len else f" (it passed no curriculum stage: checked at the first stage's {at} tokens)"

    def single(i, d):
        return niah(
            haystack_rng(cfg.seed, 7, i), vocab, at, "single", [float(d)], kind=cfg.task.haystack, value_noise=cfg.task.value_noise
        )[0]

    checks: list[tuple[str, dict, Callable | None]] = [("niah_single", {}, None)] + (
        [(grid.task, g, grid.make) for g in grid.groups] if grid else []
    )
    for c_i, (task, group, make) in enumerate(checks):
        common = dict(
            task=task,
            context_len=at,
            train_len=train_len,
            dtype="float32",
            **group,
            **(grid.fields if grid is not None and make is not None else {}),
        )
        try:
            if make is None:  # one needle per sample, at depths spread over the haystack
                samples = [single(i, d) for i, d in enumerate(np.linspace(0, 1, cfg.eval.train_len_samples))]
            else:
                per = len(make(haystack_rng(cfg.seed, 8, c_i, 0), at, group)[0].probes)
                samples = [
                    s for i in range(-(-cfg.eval.train_len_samples // per)) for s in make(haystack_rng(cfg.seed, 8, c_i, i), at, group)
                ]
        except ValueError as ex:  # the task does not fit in this length
            yield dict(metric="train/acc", value=None, unit="fraction", status="skipped", fields={"note": str(ex), **common})
            continue
        k, n = batch_accuracy(trained.model, samples, ctx.device)
        lo, hi = wilson(k, n)
        label = "single needle" if task == "niah_single" else f"{task} {group or ''}".strip()
        fields = dict(n=n, ci_low=lo, ci_high=hi, note=f"{label} at the training length{where}", **common)
        yield dict(metric="train/acc", value=k / n, unit="fraction", status="measured", fields=fields)
        ctx.console.print(f"  {name}: {label} at the training length {at}: {k}/{n}")


def run_grid(ctx, grid: Grid) -> None:
    """The experiment's grid, in steps: models and their checks, prefill calibration, the plan
    against the budget, the skipped cells recorded, each planned haystack evaluated and
    recorded, the accuracies aggregated, and the budget's last line."""
    start = time.perf_counter()
    models = prepare_models(ctx, grid)
    start += ctx.train_s  # exp.budget is the evaluation's: a training has its own (token budgets, train.budget)
    run = GridRun(ctx, grid, models, start)
    run.calibrate()
    planned, skipped = run.plan()
    run.warn_short_cut(planned, skipped)
    run.record_skips(skipped)
    run.evaluate(planned)
    aggregate(ctx, grid, run.train_lens, run.haystacks)
    budget_summary(ctx, grid, planned, skipped, run.late, run.given_up, run.loads, run.cores, time.perf_counter() - start)
