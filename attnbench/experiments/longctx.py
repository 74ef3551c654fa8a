"""The shared flow of needle_4m and multihop: train or load each design's model, check it at
its training length, plan the (design x length x sample) grid against the budget, evaluate the
cells that fit with streaming prefill, record the rest as skipped with their estimates, and
aggregate accuracies with 95% intervals.

Cells are resumable: a rerun of the same command skips every cell already recorded.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from attnbench.bench import planner
from attnbench.bench.calibrate import hardware_for_run
from attnbench.bench.timing import efficiency, noisy
from attnbench.config import parse_duration
from attnbench.designs import spec_of
from attnbench.evaluate import PeakRSS, ProbeResult, batch_accuracy, run_sample, wilson
from attnbench.experiments.train import record_training, training_facts
from attnbench.kernels import for_layout
from attnbench.kernels import label as backend_label
from attnbench.kernels.backend import COMPILE
from attnbench.plan import calibration_lengths, measure_prefill, memory_allowed, prefill_chunk
from attnbench.results import read_jsonl
from attnbench.tasks.data import cached_samples
from attnbench.tasks.generate import Sample, niah
from attnbench.train import get_model, vocab_of


@dataclass
class Grid:
    metric: str  # niah/acc | multihop/acc
    task: str  # the generator's name (cache key and record field)
    groups: list[dict]  # extra coordinates of a cell (e.g. {"hops": 2}); [{}] for none
    make: Callable[[np.random.Generator, int, dict], list[Sample]]  # (rng, context_len, group) -> samples
    by: str = "depth"  # the probe field accuracies are broken down by (depth | hops)
    params: dict = field(default_factory=dict)  # generator settings that define the data
    fields: dict = field(default_factory=dict)  # recorded with every accuracy (e.g. how a probe is scored)


def _rng(seed: int, *parts: int) -> np.random.Generator:
    return np.random.default_rng([seed, *parts])


def check_len(record: dict, cfg) -> int:
    """Where a model is checked: its true training length (the longest curriculum stage it
    passed), or the first stage's length when it passed none."""
    return training_facts(record)["train_len"] or int(cfg.train.stages[0].context_len)


CHECKS_FILE = "checks.json"  # beside a checkpoint: its training-length checks, keyed (stored_checks)
CHECKS_FORMAT = 1  # bump when the checks' computation changes: every stored file is then recomputed


def checks_key(cfg, trained, grid: Grid | None) -> str:
    """What decides a checkpoint's training-length checks: the checkpoint (its key), the probes'
    generator settings and count, and the experiment's task (none of the run's budget or speed)."""
    from attnbench.results import stable_hash

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
    from attnbench.checkpoints import cache_root

    folder = Path(trained.folder)
    return folder / CHECKS_FILE, cache_root() / "checks" / f"{folder.name}.json"


def stored_checks(trained, key: str) -> tuple[list[dict] | None, Path]:
    """The checks stored for this checkpoint under ``key`` (None: none stored under that key),
    and where they were found or are to be written. A shipped checkpoint's folder is read but
    written only when ATTNBENCH_SHIP_CHECKS=1 (how the files shipped in attnbench/trained/ are
    made: README there); runs write to the user cache, a trained checkpoint's beside it."""
    from attnbench.checkpoints import SHIPPED

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
    from attnbench.checkpoints import save_json

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
    for name in ctx.design_names:
        trained = get_model(cfg, name, ctx.device, console=ctx.console)
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
        return niah(_rng(cfg.seed, 7, i), vocab, at, "single", [float(d)], kind=cfg.task.haystack, value_noise=cfg.task.value_noise)[0]

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
                per = len(make(_rng(cfg.seed, 8, c_i, 0), at, group)[0].probes)
                samples = [s for i in range(-(-cfg.eval.train_len_samples // per)) for s in make(_rng(cfg.seed, 8, c_i, i), at, group)]
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
    cfg, dev = ctx.cfg, ctx.device
    start = time.perf_counter()
    budget = parse_duration(cfg.exp.budget)
    models = prepare_models(ctx, grid)
    train_lens = {name: training_facts(t.record)["train_len"] for name, t in models.items()}
    mem_cap = memory_allowed(cfg.eval.memory_fraction)
    lengths = sorted(cfg.eval.context_lens)

    compiling = bool(cfg.eval.compile and COMPILE)  # ATTNBENCH_COMPILE=0 (the tests) keeps everything eager

    def compiles_at(name: str, L: int) -> bool:
        """Whether a cell of L tokens runs compiled lightning blocks (compiled when its first such cell starts)."""
        model = models[name].model
        return compiling and any(spec_of(c).compiled_prefill for c in model.layout[:-1]) and L >= prefill_chunk(model, cfg.eval.chunk)

    ctx.console.print("calibrating prefill cost per design ...")
    cal = {
        name: measure_prefill(
            t.model, dev, prefill_chunk(t.model, cfg.eval.chunk), cfg.model.vocab_size, calibration_lengths(t.model, lengths[-1])
        )
        for name, t in models.items()
    }
    hw = hardware_for_run(ctx) if dev.type == "cpu" else None  # the peak each prefill's GFLOP/s is held to

    def haystacks(L):
        return (cfg.eval.haystacks_short or cfg.eval.haystacks) if L <= cfg.eval.short_len else cfg.eval.haystacks

    unlearned = frozenset(name for name, L in train_lens.items() if not L)  # passed no curriculum stage

    def estimate(name, L, g_i, group):
        passes = len(grid.make(_rng(cfg.seed, L, g_i, 0), min(L, 64), group)) if grid.task == "niah_single" else 1
        return cal[name].estimate(L, passes)

    planned, skipped = plan_grid(
        list(models),
        lengths,
        grid.groups,
        estimate,
        haystacks,
        budget - (time.perf_counter() - start),
        mem_cap,
        cfg.eval.short_len,
        cfg.exp.budget,
        unlearned,
        setup=lambda name, L: COMPILE_ESTIMATE_S if compiles_at(name, L) else 0.0,
    )
    names = list(models)
    skipped.sort(key=lambda c: (c[0]["context_len"], names.index(c[0]["design"])))
    loads = [os.getloadavg()[0]]  # the load seen: at the plan and at every cell's start
    cores = os.cpu_count() or 1
    short_cut = [c for c, _, why in skipped if c["context_len"] <= cfg.eval.short_len and c["design"] not in unlearned and "GiB" not in why]
    if short_cut:
        short_s = sum(est.seconds * haystacks(c["context_len"]) for c, est, _ in skipped if c in short_cut)
        need = math.ceil((time.perf_counter() - start + short_s + sum(p[2].seconds for p in planned)) / 60)
        ctx.console.print(
            f"attnbench: exp.budget={cfg.exp.budget} does not cover every learned design's cells to {short_cut_len(cfg)} at this load "
            f"({loads[0]:.1f} on {cores} cores): it skips {', '.join(cell_name(c) for c in short_cut)}; "
            f"give it exp.budget={need}m to measure them",
            markup=False,
            highlight=False,
        )

    for coords, est, reason in skipped:
        # keyed without the reason (its minutes-left differ between runs), and not recorded over
        # samples an earlier run of this command measured: a rerun adds no second verdict
        cell = ctx.cell(**coords, part="skip", budget=cfg.exp.budget)
        measured = any(ctx.cell(**coords, sample=i, part="eval").done for i in range(haystacks(coords["context_len"])))
        if not cell.done and not measured:
            cell.record(
                coords["design"],
                grid.metric,
                None,
                "fraction",
                "skipped",
                task=grid.task,
                train_len=train_lens[coords["design"]],
                **grid.fields,
                context_len=coords["context_len"],
                note=reason,
                **{k: v for k, v in coords.items() if k not in ("design", "context_len")},
                **est.as_fields(),
            )
            cell.commit()
        ctx.console.print(f"  skip {coords}: {reason}")

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[note]}")]
    with Progress(*columns, console=ctx.console, transient=False) as progress:
        bar = progress.add_task("evaluating", total=len(planned), note="")

        def finished(note: str) -> None:
            progress.update(bar, advance=1, note=note)
            if not ctx.console.is_terminal:  # a log file gets no live bar: one line per finished cell instead
                ctx.console.print(f"  [{time.strftime('%H:%M:%S')}] {progress.tasks[bar].completed:.0f}/{len(planned)} {note}")

        given_up: set[tuple] = set()  # cells skipped whole after the plan (their haystacks are skipped too)
        compiled: set[str] = set()  # designs whose prefill was compiled (at their first cell that needs it)
        late: set[tuple] = set()  # cells with a haystack skipped after the plan
        for coords, i, _, phase in planned:  # the plan's estimate is refitted below
            cell = ctx.cell(**coords, sample=i, part="eval")
            others = "".join(f" {k}={v}" for k, v in coords.items() if k not in ("design", "context_len"))
            label = f"{coords['design']} n={coords['context_len']:,}{others} #{i}"
            if cell.done:
                finished(f"{label}: recorded earlier")
                continue
            left = budget - (time.perf_counter() - start)
            group = {k: v for k, v in coords.items() if k not in ("design", "context_len")}
            g_i = grid.groups.index(group)
            est = estimate(coords["design"], coords["context_len"], g_i, group)  # refitted with every prefill measured so far
            key = tuple(coords.items())
            to_do = [j for j in range(haystacks(coords["context_len"])) if j >= i and not ctx.cell(**coords, sample=j, part="eval").done]
            if not runs_now(est.seconds, i, to_do, left, key, given_up):
                cell2 = ctx.cell(**coords, sample=i, part="skip-late", budget=cfg.exp.budget)
                if not cell2.done:
                    cell2.record(
                        coords["design"],
                        grid.metric,
                        None,
                        "fraction",
                        "skipped",
                        task=grid.task,
                        context_len=coords["context_len"],
                        sample=i,
                        **group,
                        note=(
                            f"budget ran out: ~{est.seconds:.0f} s a haystack needed (re-estimated from this run's prefills), "
                            f"{max(0, left):.0f} s left"
                            + (f"; the cell's {len(to_do)} haystacks did not fit, so none ran" if key in given_up else "")
                        ),
                        **est.as_fields(),
                    )
                    cell2.commit()
                late.add(key)
                finished(f"{label}: skipped, budget")
                continue
            loads.append(os.getloadavg()[0])
            design = coords["design"]
            if compiles_at(design, coords["context_len"]) and design not in compiled:
                compiled.add(design)
                progress.update(bar, note=f"{design}: compiling its prefill for its first cell of {coords['context_len']:,} tokens")
                compile_prefills(ctx, {design: models[design]})
            progress.update(bar, note=f"{label} (est {est.seconds:.0f} s)")
            samples = cached_samples(
                grid.task,
                {
                    **grid.params,
                    "context_len": coords["context_len"],
                    "group": group,
                    "seed": cfg.seed,
                    "sample": i,
                    "vocab": list(vocab_of(cfg).__dict__.values()),
                },
                lambda: grid.make(_rng(cfg.seed, coords["context_len"], g_i, i), coords["context_len"], group),
            )
            model = models[coords["design"]].model
            load_before = os.getloadavg()[0]
            with PeakRSS() as rss:
                results: list[ProbeResult] = []
                costs: defaultdict[str, float] = defaultdict(float)
                for sample in samples:
                    got, c = run_sample(model, sample, dev, prefill_chunk(model, cfg.eval.chunk))
                    results += got
                    for k, v in c.items():
                        costs[k] += v if k != "cache_bytes" else 0
                    costs["cache_bytes"] = max(costs["cache_bytes"], c["cache_bytes"])
            common = dict(
                task=grid.task,
                context_len=coords["context_len"],
                sample=i,
                train_len=train_lens[coords["design"]],
                dtype="float32",
                backend=backend_label(for_layout(model.layout, cfg.backend, dev)),
                **group,
            )
            for j, r in enumerate(results):
                extra = {"depth": _grid_depth(r.depth, cfg.eval.depths)} if grid.by == "depth" else {}
                if r.lookups is not None:
                    extra["lookups_correct"] = float(r.lookups.correct)
                cell.record(
                    coords["design"],
                    f"{grid.metric.split('/')[0]}/probe",
                    float(r.correct),
                    "fraction",
                    "measured",
                    probe=j,
                    hits=r.hits,
                    targets=r.targets,
                    **extra,
                    **grid.fields,
                    **common,
                )
            load_after = os.getloadavg()[0]
            cal[coords["design"]] = cal[coords["design"]].with_measurement(coords["context_len"], costs["prefill_s"] / len(samples))
            eff = prefill_efficiency(cfg, coords["design"], coords["context_len"], len(samples), costs["prefill_s"], hw)
            cell.record(
                coords["design"],
                "eval/prefill_s",
                costs["prefill_s"],
                "s",
                **common,
                estimated_s=round(est.seconds, 1),
                planned=phase,
                haystacks=len(samples),
                chunk=prefill_chunk(model, cfg.eval.chunk),
                compiled=model.compiled_for(coords["context_len"]),
                load_before=load_before,
                load=load_after,
                noisy=noisy(load_before, load_after),
                **eff,
            )
            cell.record(
                coords["design"],
                "eval/peak_rss_increase_bytes",
                rss.increase,
                "bytes",
                **common,
                note="per cell: peak resident memory while this cell ran minus the resident memory at its start",
            )
            cell.record(coords["design"], "eval/cache_bytes", costs["cache_bytes"], "bytes", **common)
            cell.commit()
            acc = sum(r.correct for r in results) / max(1, len(results))
            rate = f", {eff['gflop_per_s']:.1f} GFLOP/s" if "gflop_per_s" in eff else ""
            rate += f" ({100 * eff['peak_fraction']:.0f}% of peak)" if "peak_fraction" in eff else ""
            finished(
                f"{label}: acc {acc:.2f}, prefill {costs['prefill_s']:.1f} s{rate}" + (" NOISY" if noisy(load_before, load_after) else "")
            )

    aggregate(ctx, grid, train_lens, haystacks)
    budget_summary(ctx, grid, planned, skipped, late, given_up, loads, cores, time.perf_counter() - start)


COMPILE_ESTIMATE_S = 60.0  # the plan's charge for a design's first compiled cell (recorded compiles: 24-96 s on 2 cores)


def short_cut_len(cfg) -> str:
    from attnbench.report.data import fmt_len

    return fmt_len(cfg.eval.short_len)


def cell_name(coords: dict) -> str:
    from attnbench.report.data import fmt_len

    extra = "".join(f" {k}={v}" for k, v in coords.items() if k not in ("design", "context_len"))
    return f"{coords['design']} {fmt_len(coords['context_len'])}{extra}"


def budget_summary(ctx, grid: Grid, planned, skipped, late: set, given_up: set, loads: list[float], cores: int, elapsed: float) -> str:
    """The run's last line, also recorded (eval/budget_summary, the report's first line): how
    many cells the budget left out at the load seen, and how much more budget would cover them
    (the cells of the designs that learned, each no longer than the budget itself)."""
    cfg = ctx.cfg
    cells = {tuple(c.items()) for c, *_ in planned} | {tuple(c.items()) for c, *_ in skipped}
    memory = {tuple(c.items()) for c, _, why in skipped if "GiB" in why}
    short = cfg.eval.haystacks_short or cfg.eval.haystacks
    ran_some = {  # a cell given up after some of its haystacks ran is partial, not skipped
        k for k in given_up
        if any(ctx.cell(**dict(k), sample=j, part="eval").done for j in range(short if dict(k)["context_len"] <= cfg.eval.short_len else cfg.eval.haystacks))
    }  # fmt: skip
    budget_cut = ({tuple(c.items()) for c, _, why in skipped} - memory) | (given_up - ran_some)
    partial = (late - given_up) | ran_some
    load = sum(loads) / len(loads)
    limit = parse_duration(cfg.exp.budget)
    more = sum(
        est.seconds * (cfg.eval.haystacks_short or cfg.eval.haystacks if c["context_len"] <= cfg.eval.short_len else cfg.eval.haystacks)
        for c, est, why in skipped
        if "GiB" not in why and "no curriculum stage" not in why and est.seconds <= limit
    )
    line = f"{len(budget_cut)} of {len(cells)} cells skipped for the budget" + (f", {len(partial)} partial" if partial else "")
    line += f" at load {load:.1f} on {cores} cores" + (f" ({len(memory)} more do not fit in memory)" if memory else "")
    if budget_cut or partial:
        line += f"; rerun with exp.budget={math.ceil((elapsed + more) / 60)}m, or on a quiet machine"
    cell = ctx.cell(part="budget_summary", skipped=sorted(map(str, budget_cut)), partial=sorted(map(str, partial)))
    if not cell.done:
        first = ctx.design_names[0]
        cell.record(
            first, "eval/budget_summary", len(budget_cut), "cells", "measured", layout="", cells=len(cells), partial=len(partial),
            memory=len(memory), load=round(load, 2), cores=cores, budget=cfg.exp.budget, elapsed_s=round(elapsed, 1), note=line,
        )  # fmt: skip
        cell.commit()
    ctx.console.print(line, markup=False, highlight=False)
    return line


def compile_prefills(ctx, models: dict) -> None:
    """Model.compile_prefill for every model with lightning blocks, at its prefill chunk, each
    timed and recorded (eval/compile_s); a compile that fails is recorded `failed` and that model
    runs eagerly (its prefill records say compiled=false)."""
    for name, t in models.items():
        chunk = prefill_chunk(t.model, ctx.cfg.eval.chunk)
        began = time.perf_counter()
        try:
            compiled = t.model.compile_prefill(chunk)
        except Exception as ex:
            why = " ".join(f"{type(ex).__name__}: {ex}".split())[:300]
            ctx.console.print(f"  {name}: torch.compile failed, its prefill runs eagerly ({why})", markup=False)
            ctx.record(name, "eval/compile_s", None, "s", "failed", key=("chunk",), chunk=chunk, note=why)
            continue
        if not compiled:
            continue
        seconds = time.perf_counter() - began
        ctx.console.print(f"  {name}: prefill compiled for chunks of {chunk:,} tokens in {seconds:.1f} s")
        cell = ctx.cell(design=name, part="compile")
        if not cell.done:
            note = "torch.compile of the lightning blocks' prefill, with its warm-up prefill (Model.compile_prefill)"
            cell.record(name, "eval/compile_s", seconds, "s", "measured", chunk=chunk, note=note)
            cell.commit()


def runs_now(seconds: float, i: int, to_do: list[int], left: float, key: tuple, given_up: set[tuple]) -> bool:
    """Whether haystack i of a planned cell runs, from its estimate now (refitted with the run's
    prefills): seconds a haystack, to_do the cell's haystacks not yet recorded (i first among
    them), left the budget's seconds. At its first haystack a cell runs only if all of to_do fit;
    otherwise it is given up whole (added to given_up): no half cell that spends what a later
    cell needed. A haystack that no longer fits is skipped (estimates were optimistic)."""
    if key not in given_up and to_do and i == to_do[0] and seconds * len(to_do) > left:
        given_up.add(key)
    return key not in given_up and seconds <= left


def prefill_efficiency(cfg, design: str, n: int, prefills: int, seconds: float, hw) -> dict:
    """Achieved GFLOP/s of `prefills` prefills of n tokens (the cost model's FLOP count of
    Model.prefill), its fraction of the calibrated fp32 peak, the compute roofline time
    (FLOPs / peak) and the cost model's predicted time of the reference code."""
    cost = planner.prefill_cost(cfg.model, cfg.attention[design], n)
    peak = hw.flops.get("float32") if hw is not None else None
    out = efficiency(prefills * cost.flops, seconds, peak)
    if peak:
        out["roofline_s"] = prefills * cost.flops / peak
        out["predicted_s"] = prefills * cost.seconds(hw, "float32")
    return out


def plan_grid(
    names: list[str],
    lengths: list[int],
    groups: list[dict],
    estimate,
    haystacks,
    left: float,
    mem_cap: float,
    short_len: int,
    budget: str,
    unlearned: frozenset[str] = frozenset(),
    setup: Callable[[str, int], float] = lambda name, L: 0.0,
):
    """Which (design, length, group) cells run, in run order; the rest skipped with a reason.

    estimate(name, L, g_i, group) -> Estimate of one haystack; haystacks(L) -> haystacks a cell;
    left: seconds of the budget left. Three passes, each in ascending length, the headline
    design (names[0]) first at each length:
      short     every design at every length <= short_len (the short cells are never starved);
      fair      what is left is shared equally among the designs that learned: each takes its
                longer lengths while their total fits its share (so no design's long cells
                starve the others);
      leftover  the shares a design could not use go to the cells still waiting (the designs
                whose cells cost the most, e.g. quadratic ones, get every length that still
                fits), the cells of the designs in `unlearned` last: a model that never passed
                a curriculum stage says nothing about its design far past it.
    A cell needs all its haystacks to fit. setup(name, L): seconds a design's first cell at L
    costs once before it (its prefill's compile), charged to the first such cell taken. The short
    pass takes the learned designs' cells before those of `unlearned`. Returns planned
    [(coords, haystack, estimate, pass)] and skipped [(coords, estimate, reason)].
    """
    cells = []  # (L, name, coords, est, total)
    skipped = []
    for L in lengths:
        for name in names:
            for g_i, group in enumerate(groups):
                est = estimate(name, L, g_i, group)
                coords = dict(design=name, context_len=L, **group)
                if est.bytes > mem_cap:
                    skipped.append((coords, est, f"needs ~{est.bytes / 2**30:.1f} GiB, more than the {mem_cap / 2**30:.1f} GiB allowed"))
                else:
                    cells.append((L, name, coords, est, est.seconds * haystacks(L)))
    planned, waiting = [], []
    charged: set[str] = set()

    def cost(cell) -> float:
        extra = setup(cell[1], cell[0])
        return cell[4] + (extra if cell[1] not in charged else 0.0)

    def take(cell, phase):
        L, name, coords, est, _ = cell
        if setup(name, L):
            charged.add(name)
        planned.extend((coords, i, est, phase) for i in range(haystacks(L)))

    cells.sort(key=lambda cell: cell[0] <= short_len and cell[1] in unlearned)  # stable: learned designs' short cells first
    for cell in cells:
        c = cost(cell)
        if cell[0] <= short_len and c <= left:
            take(cell, "short")
            left -= c
        elif cell[0] <= short_len:
            skipped.append(
                (
                    cell[2],
                    cell[3],
                    f"would take ~{cell[4] / 60:.1f} min for {haystacks(cell[0])} haystacks, "
                    f"more than the {max(0.0, left) / 60:.1f} min left of exp.budget={budget}",
                )
            )
        else:
            waiting.append(cell)
    share = max(0.0, left) / max(1, len([n for n in names if n not in unlearned]))
    spent = {name: 0.0 for name in names}
    rest = []
    waiting.sort(key=lambda cell: cell[0])
    for cell in waiting:
        c = cost(cell)
        if cell[1] not in unlearned and spent[cell[1]] + c <= share:
            take(cell, "fair")
            spent[cell[1]] += c
        else:
            rest.append(cell)
    pool = max(0.0, left) - sum(spent.values())
    rest.sort(key=lambda cell: cell[1] in unlearned)  # stable: ascending length within each part
    for cell in rest:
        c = cost(cell)
        if c <= pool:
            take(cell, "leftover")
            pool -= c
        else:
            why = (
                "passed no curriculum stage, so its long cells get only the leftovers, last"
                if cell[1] in unlearned
                else f"more than its fair share ({share / 60:.1f} min of exp.budget={budget})"
            )
            skipped.append(
                (
                    cell[2],
                    cell[3],
                    f"would take ~{cell[4] / 60:.1f} min for {haystacks(cell[0])} haystacks, {why}, and the "
                    f"{pool / 60:.1f} min the other designs left did not cover it",
                )
            )
    return planned, skipped


def _grid_depth(depth: float | None, grid: list[float]) -> float | None:
    if depth is None:
        return None
    return float(min(grid, key=lambda d: abs(d - depth)))


def aggregate(ctx, grid: Grid, train_lens: dict, haystacks: Callable[[int], int] | None = None) -> None:
    """Accuracy per (design, length, group[, depth]) from every probe record of this config,
    with the haystacks it pooled and those planned (``haystacks(L)``): a partial cell says so."""
    probe_metric = f"{grid.metric.split('/')[0]}/probe"
    probes = [
        r
        for r in read_jsonl(ctx.recorder.path)
        if r.get("type") == "record" and r.get("metric") == probe_metric and r.get("config_hash") == ctx.recorder.config_hash
    ]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    group_keys = sorted({k for g in grid.groups for k in g})
    for r in probes:
        groups[(r["design"], r["context_len"], *(r.get(k) for k in group_keys))].append(r)
    for key, rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        design, L, *gvals = key
        group = dict(zip(group_keys, gvals))
        contributing = sorted({(r["sample"], r["probe"]) for r in rs})
        counts = {"haystacks": len({r["sample"] for r in rs})}
        if haystacks is not None:
            counts["haystacks_planned"] = max(haystacks(L), counts["haystacks"])
        cell = ctx.cell(design=design, context_len=L, part="aggregate", probes=contributing, **group)
        if cell.done:
            continue
        splits = [("all", rs)]
        if grid.by == "depth":
            by_depth = defaultdict(list)
            for r in rs:
                by_depth[r.get("depth")].append(r)
            splits += sorted(((d, v) for d, v in by_depth.items() if d is not None), key=lambda x: x[0])

        def record_acc(metric_name: str, hits: list, **fields) -> None:
            """One accuracy record of this cell: hits / n with its 95% Wilson interval."""
            k, n = int(sum(hits)), len(hits)
            lo, hi = wilson(k, n)
            cell.record(
                design,
                metric_name,
                k / n,
                "fraction",
                "measured",
                task=grid.task,
                context_len=L,
                n=n,
                ci_low=lo,
                ci_high=hi,
                train_len=train_lens.get(design),
                dtype="float32",
                **counts,
                **fields,
                **group,
            )

        for split, items in splits:
            record_acc(grid.metric, [r["value"] for r in items], **grid.fields, **({"depth": split} if split != "all" else {}))
        diag = [r["lookups_correct"] for r in rs if r.get("lookups_correct") is not None]
        if diag:  # the multi-hop diagnostic: the same chains as k single lookups, every key given
            record_acc(f"{grid.metric.split('/')[0]}/lookup_acc", diag, scoring="every hop, intermediate keys given (diagnostic)")
        cell.commit()
        overall = sum(r["value"] for r in rs) / len(rs)
        ctx.console.print(f"  {design:<18} n={L:>9,} {group or ''} acc={overall:.2f} ({len(rs)} probes)")
