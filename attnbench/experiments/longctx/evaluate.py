"""Evaluating a planned long-context grid (the steps of longctx.run_grid after the plan):
GridRun records the cells the plan skipped, then evaluates each planned haystack with
streaming prefill and records it, or records it skipped when the budget no longer covers it;
aggregate turns the probe records into accuracies with 95% intervals.

Where this sits: flow.py (models, training-length checks, run_grid) and plan.py
(the Grid, plan_grid, budget_summary).
"""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict
from typing import Callable

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from attnbench.bench import planner
from attnbench.bench.calibrate import hardware_for_run
from attnbench.bench.timing import efficiency, noisy
from attnbench.config import HardwareConfig
from attnbench.designs import spec_of
from attnbench.evaluation.streaming import PeakRSS, ProbeResult, run_sample
from attnbench.records.stats import wilson
from attnbench.names import SkipReason
from attnbench.experiments.longctx.plan import Grid, haystack_rng, cell_name, compile_charge, plan_grid, runs_now, short_cut_len
from attnbench.experiments.train import training_facts
from attnbench.kernels import for_layout
from attnbench.kernels import label as backend_label
from attnbench.kernels.backend import COMPILE
from attnbench.evaluation.fit import calibration_lengths, measure_prefill, memory_allowed, prefill_chunk
from attnbench.records.read import read_jsonl
from attnbench.tasks.data import cached_samples
from attnbench.training.trainer import vocab_of


class GridRun:
    """One run of a grid over its models: their prefill calibrations (refitted with every
    prefill measured), the budget, and what the run has seen so far: the load at the plan and at
    each cell's start, the cells given up whole or cut late, the designs already compiled."""

    def __init__(self, ctx, grid: Grid, models: dict, start: float) -> None:
        cfg = ctx.cfg
        self.ctx, self.cfg, self.dev, self.grid, self.models, self.start = ctx, cfg, ctx.device, grid, models, start
        self.budget = ctx.budget.seconds
        self.train_lens = {name: training_facts(t.record)["train_len"] for name, t in models.items()}
        self.mem_cap = memory_allowed(cfg.eval.memory_fraction)
        self.lengths = sorted(cfg.eval.context_lens)
        self.compiling = bool(cfg.eval.compile and COMPILE)  # ATTNBENCH_COMPILE=0 (the tests) keeps everything eager
        self.unlearned = frozenset(name for name, L in self.train_lens.items() if not L)  # passed no curriculum stage
        self.cal: dict = {}
        self.hw: HardwareConfig | None = None  # the peak each prefill's GFLOP/s is held to (CPU only)
        self.loads: list[float] = []  # the load seen: at the plan and at every cell's start
        self.cores = os.cpu_count() or 1
        self.given_up: set[tuple] = set()  # cells skipped whole after the plan (their haystacks are skipped too)
        self.compiled: set[str] = set()  # designs whose prefill was compiled (at their first cell that needs it)
        self.compile_s: list[float] = []  # the seconds of each compile this run measured (compile_charge)
        self.late: set[tuple] = set()  # cells with a haystack skipped after the plan

    def compiles_at(self, name: str, L: int) -> bool:
        """Whether a cell of L tokens runs compiled lightning blocks (compiled when its first such cell starts)."""
        model = self.models[name].model
        return (
            self.compiling
            and any(spec_of(c).compiled_prefill for c in model.layout[:-1])
            and L >= prefill_chunk(model, self.cfg.eval.chunk)
        )

    def compile_cost(self, name: str, L: int) -> float:
        """Seconds a cell of L tokens is charged for its design's compile still to come (0: none due)."""
        return compile_charge(self.compile_s) if self.compiles_at(name, L) and name not in self.compiled else 0.0

    def haystacks(self, L: int) -> int:
        cfg = self.cfg
        return (cfg.eval.haystacks_short or cfg.eval.haystacks) if L <= cfg.eval.short_len else cfg.eval.haystacks

    def estimate(self, name: str, L: int, g_i: int, group: dict):
        grid = self.grid
        passes = len(grid.make(haystack_rng(self.cfg.seed, L, g_i, 0), min(L, 64), group)) if grid.task == "niah_single" else 1
        return self.cal[name].estimate(L, passes)

    def calibrate(self) -> None:
        """Time each design's prefill on this machine (the plan's estimates start from these)."""
        cfg, dev = self.cfg, self.dev
        self.ctx.console.print("calibrating prefill cost per design ...")
        self.cal = {
            name: measure_prefill(
                t.model, dev, prefill_chunk(t.model, cfg.eval.chunk), cfg.model.vocab_size, calibration_lengths(t.model, self.lengths[-1])
            )
            for name, t in self.models.items()
        }
        self.hw = hardware_for_run(self.ctx) if dev.type == "cpu" else None

    def plan(self) -> tuple[list, list]:
        """plan_grid over the budget left: planned haystacks and skipped cells (sorted by length)."""
        cfg = self.cfg
        planned, skipped = plan_grid(
            list(self.models),
            self.lengths,
            self.grid.groups,
            self.estimate,
            self.haystacks,
            self.budget - (time.perf_counter() - self.start),
            self.mem_cap,
            cfg.eval.short_len,
            self.ctx.budget.text,
            self.unlearned,
            setup=self.compile_cost,
        )
        names = list(self.models)
        skipped.sort(key=lambda s: (s.coords["context_len"], names.index(s.coords["design"])))
        self.loads.append(os.getloadavg()[0])
        return planned, skipped

    def warn_short_cut(self, planned: list, skipped: list) -> None:
        """One line when the budget leaves out a learned design's short cell, with the budget that covers them."""
        cfg = self.cfg
        short_cut = [
            s.coords
            for s in skipped
            if s.coords["context_len"] <= cfg.eval.short_len
            and s.coords["design"] not in self.unlearned
            and s.reason is not SkipReason.MEMORY
        ]
        if not short_cut:
            return
        short_s = sum(s.est.seconds * self.haystacks(s.coords["context_len"]) for s in skipped if s.coords in short_cut)
        need = math.ceil((time.perf_counter() - self.start + short_s + sum(h.est.seconds for h in planned)) / 60)
        self.ctx.console.print(
            f"attnbench: exp.budget={self.ctx.budget.text} does not cover every learned design's cells to {short_cut_len(cfg)} at this load "
            f"({self.loads[0]:.1f} on {self.cores} cores): it skips {', '.join(cell_name(c) for c in short_cut)}; "
            f"give it exp.budget={need}m to measure them",
            markup=False,
            highlight=False,
        )

    def record_skips(self, skipped: list) -> None:
        """Record each cell the plan skipped, with its estimate and the reason."""
        ctx, grid = self.ctx, self.grid
        for skip in skipped:
            coords, est, reason = skip.coords, skip.est, skip.why
            # keyed without the reason (its minutes-left differ between runs), and not recorded over
            # samples an earlier run of this command measured: a rerun adds no second verdict
            cell = ctx.cell(**coords, part="skip", budget=ctx.budget.text)
            measured = any(ctx.cell(**coords, sample=i, part="eval").done for i in range(self.haystacks(coords["context_len"])))
            if not cell.done and not measured:
                cell.record(
                    coords["design"], grid.metric, None, "fraction", "skipped",
                    task=grid.task,
                    train_len=self.train_lens[coords["design"]],
                    **grid.fields,
                    context_len=coords["context_len"],
                    note=reason,
                    skip_reason=skip.reason.value,
                    **{k: v for k, v in coords.items() if k not in ("design", "context_len")},
                    **est.as_fields(),
                )  # fmt: skip
                cell.commit()
            ctx.console.print(f"  skip {coords}: {reason}")

    def evaluate(self, planned: list) -> None:
        """Every planned haystack in turn under a progress bar (one line per haystack in a log file)."""
        ctx = self.ctx
        columns = [
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}"),
        ]
        with Progress(*columns, console=ctx.console, transient=False) as progress:
            bar = progress.add_task("evaluating", total=len(planned), note="")

            def note(text: str) -> None:
                progress.update(bar, note=text)

            for h in planned:  # the plan's estimate is refitted in haystack()
                coords, i, phase = h.coords, h.index, h.phase
                done = self.haystack(coords, i, phase, note)
                progress.update(bar, advance=1, note=done)
                if not ctx.console.is_terminal:  # a log file gets no live bar: one line per finished cell instead
                    ctx.console.print(f"  [{time.strftime('%H:%M:%S')}] {progress.tasks[bar].completed:.0f}/{len(planned)} {done}")

    def haystack(self, coords: dict, i: int, phase: str, note: Callable[[str], None]) -> str:
        """Evaluate haystack i of a planned cell and record it, or record it skipped when the
        budget no longer covers it (estimate refitted with every prefill measured so far);
        returns the line saying what happened."""
        ctx = self.ctx
        cell = ctx.cell(**coords, sample=i, part="eval")
        others = "".join(f" {k}={v}" for k, v in coords.items() if k not in ("design", "context_len"))
        label = f"{coords['design']} n={coords['context_len']:,}{others} #{i}"
        if cell.done:
            return f"{label}: recorded earlier"
        left = self.budget - (time.perf_counter() - self.start)
        group = {k: v for k, v in coords.items() if k not in ("design", "context_len")}
        g_i = self.grid.groups.index(group)
        est = self.estimate(coords["design"], coords["context_len"], g_i, group)
        key = tuple(coords.items())
        to_do = [j for j in range(self.haystacks(coords["context_len"])) if j >= i and not ctx.cell(**coords, sample=j, part="eval").done]
        design = coords["design"]
        setup = self.compile_cost(design, coords["context_len"])
        if not runs_now(est.seconds, i, to_do, left, key, self.given_up, setup):
            self.skip_late(coords, i, group, est, left, len(to_do), key, setup)
            self.late.add(key)
            return f"{label}: skipped, budget"
        self.loads.append(os.getloadavg()[0])
        if setup:
            self.compiled.add(design)
            note(f"{design}: compiling its prefill for its first cell of {coords['context_len']:,} tokens")
            self.compile_s += compile_prefills(ctx, {design: self.models[design]})
        note(f"{label} (est {est.seconds:.0f} s)")
        samples = self.samples(coords, group, g_i, i)
        return f"{label}: " + self.measure(cell, coords, i, group, phase, est, samples)

    def skip_late(self, coords: dict, i: int, group: dict, est, left: float, to_do: int, key: tuple, setup: float = 0.0) -> None:
        """Record haystack i skipped after the plan: the budget left no longer covers it (with
        setup, the seconds charged for its design's compile still to come)."""
        cell = self.ctx.cell(**coords, sample=i, part="skip-late", budget=self.ctx.budget.text)
        if cell.done:
            return
        cell.record(
            coords["design"],
            self.grid.metric,
            None,
            "fraction",
            "skipped",
            task=self.grid.task,
            context_len=coords["context_len"],
            sample=i,
            **group,
            note=(
                f"budget ran out: ~{est.seconds:.0f} s a haystack needed (re-estimated from this run's prefills)"
                + (f" after a compile charged {setup:.0f} s" if setup else "")
                + f", {max(0, left):.0f} s left of exp.budget={self.ctx.budget.text}"
                + (f"; the cell's {to_do} haystacks did not fit, so none ran" if key in self.given_up else "")
            ),
            skip_reason=SkipReason.LATE.value,
            **est.as_fields(),
        )
        cell.commit()

    def samples(self, coords: dict, group: dict, g_i: int, i: int) -> list:
        """Haystack i of a cell, generated from the seed (or read from the data cache)."""
        cfg, grid = self.cfg, self.grid
        return cached_samples(
            grid.task,
            {
                **grid.params,
                "context_len": coords["context_len"],
                "group": group,
                "seed": cfg.seed,
                "sample": i,
                "vocab": list(vocab_of(cfg).__dict__.values()),
            },
            lambda: grid.make(haystack_rng(cfg.seed, coords["context_len"], g_i, i), coords["context_len"], group),
        )

    def measure(self, cell, coords: dict, i: int, group: dict, phase: str, est, samples: list) -> str:
        """Prefill each sample and answer its probes, record the probes, the prefill time, memory
        and cache bytes in one cell, and refit the design's estimate; returns what it measured."""
        cfg, design = self.cfg, coords["design"]
        model = self.models[design].model
        load_before = os.getloadavg()[0]
        with PeakRSS() as rss:
            results: list[ProbeResult] = []
            costs: defaultdict[str, float] = defaultdict(float)
            for sample in samples:
                got, c = run_sample(model, sample, self.dev, prefill_chunk(model, cfg.eval.chunk))
                results += got
                for k, v in c.items():
                    costs[k] += v if k != "cache_bytes" else 0
                costs["cache_bytes"] = max(costs["cache_bytes"], c["cache_bytes"])
        common = dict(
            task=self.grid.task,
            context_len=coords["context_len"],
            sample=i,
            train_len=self.train_lens[design],
            dtype="float32",
            backend=backend_label(for_layout(model.layout, cfg.backend, self.dev)),
            **group,
        )
        self.record_probes(cell, design, results, common)
        load_after = os.getloadavg()[0]
        self.cal[design] = self.cal[design].with_measurement(coords["context_len"], costs["prefill_s"] / len(samples))
        eff = prefill_efficiency(cfg, design, coords["context_len"], len(samples), costs["prefill_s"], self.hw)
        cell.record(
            design,
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
            design,
            "eval/peak_rss_increase_bytes",
            rss.increase,
            "bytes",
            **common,
            note="per cell: peak resident memory while this cell ran minus the resident memory at its start",
        )
        cell.record(design, "eval/cache_bytes", costs["cache_bytes"], "bytes", **common)
        cell.commit()
        acc = sum(r.correct for r in results) / max(1, len(results))
        rate = f", {eff['gflop_per_s']:.1f} GFLOP/s" if "gflop_per_s" in eff else ""
        rate += f" ({100 * eff['peak_fraction']:.0f}% of peak)" if "peak_fraction" in eff else ""
        return f"acc {acc:.2f}, prefill {costs['prefill_s']:.1f} s{rate}" + (" NOISY" if noisy(load_before, load_after) else "")

    def record_probes(self, cell, design: str, results: list[ProbeResult], common: dict) -> None:
        """One record per probe answered: correct or not, with its depth (or its lookups)."""
        grid = self.grid
        for j, r in enumerate(results):
            extra = {"depth": _grid_depth(r.depth, self.cfg.eval.depths)} if grid.by == "depth" else {}
            if r.lookups is not None:
                extra["lookups_correct"] = float(r.lookups.correct)
            cell.record(
                design,
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


def compile_prefills(ctx, models: dict) -> list[float]:
    """Model.compile_prefill for every model with lightning blocks, at its prefill chunk, each
    timed and recorded (eval/compile_s); a compile that fails is recorded `failed` and that model
    runs eagerly (its prefill records say compiled=false). Returns the seconds of each compile
    measured."""
    spent: list[float] = []
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
        spent.append(seconds)
        ctx.console.print(f"  {name}: prefill compiled for chunks of {chunk:,} tokens in {seconds:.1f} s")
        cell = ctx.cell(design=name, part="compile")
        if not cell.done:
            note = "torch.compile of the lightning blocks' prefill, with its warm-up prefill (Model.compile_prefill)"
            cell.record(name, "eval/compile_s", seconds, "s", "measured", chunk=chunk, note=note)
            cell.commit()
    return spent


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
