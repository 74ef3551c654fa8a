"""What a long-context grid is and how its cells are planned against the budget (the first
step of longctx.run_grid): the Grid an experiment hands over, plan_grid's three passes,
runs_now's check before each haystack, and budget_summary, the run's last line.

The rest of the flow: flow.py (models and their training-length checks, run_grid) and
experiments/longctx/evaluate.py (evaluating and recording each planned cell, then the accuracies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from attnbench.names import SkipReason
from attnbench.tasks.generate import Sample

COMPILE_ESTIMATE_S = 60.0  # a compile's charge before this run has measured one (recorded compiles: 24-129 s on 2 cores)


def compile_charge(measured: list[float]) -> float:
    """Seconds a compile still to come is charged: the longest compile this run has measured (a
    compile at this run's load can take twice the estimate, and charging less ends a run past its
    budget), never less than COMPILE_ESTIMATE_S (a quick first compile says little about a longer
    one to come)."""
    return max([*measured, COMPILE_ESTIMATE_S])


@dataclass
class Grid:
    metric: str  # niah/acc | multihop/acc
    task: str  # the generator's name (cache key and record field)
    groups: list[dict]  # extra coordinates of a cell (e.g. {"hops": 2}); [{}] for none
    make: Callable[[np.random.Generator, int, dict], list[Sample]]  # (rng, context_len, group) -> samples
    by: str = "depth"  # the probe field accuracies are broken down by (depth | hops)
    params: dict = field(default_factory=dict)  # generator settings that define the data
    fields: dict = field(default_factory=dict)  # recorded with every accuracy (e.g. how a probe is scored)


def haystack_rng(seed: int, *parts: int) -> np.random.Generator:
    """The generator of one haystack: the run's seed and the cell's coordinates (length, group, haystack)."""
    return np.random.default_rng([seed, *parts])


@dataclass
class Cell:
    """One (design, context length, group) cell of the grid: its estimate for one haystack and
    the seconds of all its haystacks."""

    context_len: int
    design: str
    coords: dict
    est: Any  # evaluation.fit's Estimate (seconds, bytes) of one haystack
    seconds: float


@dataclass
class Skip:
    """A cell the plan left out: its coordinates, its estimate, why (the reason, and the sentence recorded)."""

    coords: dict
    est: Any
    reason: SkipReason
    why: str


@dataclass
class Haystack:
    """One planned haystack: its cell's coordinates, its index in the cell, the estimate, the pass that took it."""

    coords: dict
    index: int
    est: Any
    phase: str  # short | fair | leftover


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
    left: seconds of the budget left. Three passes, the first two in ascending length, the headline
    design (names[0]) first at each length:
      short     every design at every length <= short_len (the short cells are never starved);
      fair      what is left is shared equally among the designs that learned: each takes its
                longer lengths while their total fits its share (so no design's long cells
                starve the others);
      leftover  the shares a design could not use go to the cells still waiting, cheapest
                first (the designs whose cells cost the most, e.g. quadratic ones, get what
                still fits after them), the cells of the designs in `unlearned` last: a model
                that never passed a curriculum stage says nothing about its design far past it.
    A cell needs all its haystacks to fit. setup(name, L): seconds a design's first cell at L
    costs once before it (its prefill's compile), charged to the first such cell taken. The short
    pass takes the learned designs' cells before those of `unlearned`. Returns the planned
    haystacks (Haystack) and the skipped cells (Skip).
    """
    cells, skipped = _cells_in_memory(names, lengths, groups, estimate, haystacks, mem_cap)
    plan = _Plan(haystacks, setup, budget)
    waiting, left = _short_pass(plan, cells, short_len, unlearned, left, skipped)
    rest, share, pool = _fair_pass(plan, waiting, names, unlearned, left)
    _leftover_pass(plan, rest, unlearned, share, pool, skipped)
    return plan.planned, skipped


def _cells_in_memory(names, lengths, groups, estimate, haystacks, mem_cap: float) -> tuple[list[Cell], list[Skip]]:
    """Every cell in ascending length, the headline design first; those over the memory allowed skipped instead."""
    cells: list[Cell] = []
    skipped: list[Skip] = []
    for L in lengths:
        for name in names:
            for g_i, group in enumerate(groups):
                est = estimate(name, L, g_i, group)
                coords = dict(design=name, context_len=L, **group)
                if est.bytes > mem_cap:
                    why = f"needs ~{est.bytes / 2**30:.1f} GiB, more than the {mem_cap / 2**30:.1f} GiB allowed"
                    skipped.append(Skip(coords, est, SkipReason.MEMORY, why))
                else:
                    cells.append(Cell(L, name, coords, est, est.seconds * haystacks(L)))
    return cells, skipped


class _Plan:
    """The haystacks planned so far, in run order, and the designs whose setup is charged."""

    def __init__(self, haystacks, setup: Callable[[str, int], float], budget: str) -> None:
        self.haystacks, self.setup, self.budget = haystacks, setup, budget
        self.planned: list[Haystack] = []
        self.charged: set[str] = set()

    def cost(self, cell: Cell) -> float:
        extra = self.setup(cell.design, cell.context_len)
        return cell.seconds + (extra if cell.design not in self.charged else 0.0)

    def take(self, cell: Cell, phase: str) -> None:
        if self.setup(cell.design, cell.context_len):
            self.charged.add(cell.design)
        self.planned.extend(Haystack(cell.coords, i, cell.est, phase) for i in range(self.haystacks(cell.context_len)))

    def too_long(self, cell: Cell, why: str, reason: SkipReason = SkipReason.BUDGET) -> Skip:
        """A skipped entry for a cell the budget does not cover, saying why."""
        text = f"would take ~{cell.seconds / 60:.1f} min for {self.haystacks(cell.context_len)} haystacks, {why}"
        return Skip(cell.coords, cell.est, reason, text)


def _short_pass(
    plan: _Plan, cells: list[Cell], short_len: int, unlearned: frozenset[str], left: float, skipped: list
) -> tuple[list, float]:
    """Take every short cell that fits (the learned designs' first); returns the longer cells
    still waiting and the seconds left."""
    waiting = []
    cells.sort(key=lambda cell: cell.context_len <= short_len and cell.design in unlearned)  # stable: learned designs' short cells first
    for cell in cells:
        c = plan.cost(cell)
        if cell.context_len <= short_len and c <= left:
            plan.take(cell, "short")
            left -= c
        elif cell.context_len <= short_len:
            skipped.append(plan.too_long(cell, f"more than the {max(0.0, left) / 60:.1f} min left of exp.budget={plan.budget}"))
        else:
            waiting.append(cell)
    return waiting, left


def _fair_pass(plan: _Plan, waiting: list, names: list[str], unlearned: frozenset[str], left: float) -> tuple[list, float, float]:
    """Each learned design takes its longer cells while they fit an equal share of what is left;
    returns the cells still waiting, the share, and the seconds no design used."""
    share = max(0.0, left) / max(1, len([n for n in names if n not in unlearned]))
    spent = {name: 0.0 for name in names}
    rest = []
    waiting.sort(key=lambda cell: cell.context_len)
    for cell in waiting:
        c = plan.cost(cell)
        if cell.design not in unlearned and spent[cell.design] + c <= share:
            plan.take(cell, "fair")
            spent[cell.design] += c
        else:
            rest.append(cell)
    return rest, share, max(0.0, left) - sum(spent.values())


def _leftover_pass(plan: _Plan, rest: list, unlearned: frozenset[str], share: float, pool: float, skipped: list) -> None:
    """The seconds the shares left go to the cells still waiting, the unlearned designs' last."""
    # cheapest first (the most cells for the seconds left; a design's longer cells cost more, so
    # each design's stay in ascending length): in ascending length, one quadratic design's 256K
    # cell took the pool that the headline hybrid's 4M cell needed, at a third of its cost
    rest.sort(key=lambda cell: (cell.design in unlearned, plan.cost(cell)))
    for cell in rest:
        c = plan.cost(cell)
        if c <= pool:
            plan.take(cell, "leftover")
            pool -= c
        else:
            learned = cell.design not in unlearned
            why = (
                f"more than its fair share ({share / 60:.1f} min of exp.budget={plan.budget})"
                if learned
                else "passed no curriculum stage, so its long cells get only the leftovers, last"
            )
            reason = SkipReason.BUDGET if learned else SkipReason.UNLEARNED
            skipped.append(plan.too_long(cell, f"{why}, and the {pool / 60:.1f} min the other designs left did not cover it", reason))


def runs_now(seconds: float, i: int, to_do: list[int], left: float, key: tuple, given_up: set[tuple], setup: float = 0.0) -> bool:
    """Whether haystack i of a planned cell runs, from its estimate now (refitted with the run's
    prefills): seconds a haystack, to_do the cell's haystacks not yet recorded (i first among
    them), left the budget's seconds, setup the seconds due before haystack i (its design's
    compile still to come: compile_charge). At its first haystack a cell runs only if setup and
    all of to_do fit; otherwise it is given up whole (added to given_up): no half cell that spends
    what a later cell needed. A haystack that no longer fits is skipped (estimates were optimistic)."""
    if key not in given_up and to_do and i == to_do[0] and setup + seconds * len(to_do) > left:
        given_up.add(key)
    return key not in given_up and setup + seconds <= left


def short_cut_len(cfg) -> str:
    from attnbench.basics import fmt_len

    return fmt_len(cfg.eval.short_len)


def cell_name(coords: dict) -> str:
    from attnbench.basics import fmt_len

    extra = "".join(f" {k}={v}" for k, v in coords.items() if k not in ("design", "context_len"))
    return f"{coords['design']} {fmt_len(coords['context_len'])}{extra}"


def budget_summary(ctx, grid: Grid, planned, skipped, late: set, given_up: set, loads: list[float], cores: int, elapsed: float) -> str:
    """The run's last line, also recorded (eval/budget_summary, the report's first line): how
    many cells the budget left out at the load seen, and how much more budget would cover them
    (the cells of the designs that learned, each no longer than the budget itself)."""
    cfg = ctx.cfg
    cells = {tuple(h.coords.items()) for h in planned} | {tuple(s.coords.items()) for s in skipped}
    memory = {tuple(s.coords.items()) for s in skipped if s.reason is SkipReason.MEMORY}
    short = cfg.eval.haystacks_short or cfg.eval.haystacks
    ran_some = {  # a cell given up after some of its haystacks ran is partial, not skipped
        k for k in given_up
        if any(ctx.cell(**dict(k), sample=j, part="eval").done for j in range(short if dict(k)["context_len"] <= cfg.eval.short_len else cfg.eval.haystacks))
    }  # fmt: skip
    budget_cut = ({tuple(s.coords.items()) for s in skipped} - memory) | (given_up - ran_some)
    partial = (late - given_up) | ran_some
    load = round(sum(loads) / len(loads), 2)  # the figure recorded: the line says it, not a value it rounds apart from
    limit = ctx.budget.seconds
    more = sum(
        s.est.seconds
        * (cfg.eval.haystacks_short or cfg.eval.haystacks if s.coords["context_len"] <= cfg.eval.short_len else cfg.eval.haystacks)
        for s in skipped
        if s.reason is SkipReason.BUDGET and s.est.seconds <= limit
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
            memory=len(memory), load=load, cores=cores, budget=ctx.budget.text, elapsed_s=round(elapsed, 1), note=line,
        )  # fmt: skip
        cell.commit()
    ctx.last_line = line  # printed after the report's and W&B's lines (cli_run.finish)
    return line
