"""What every experiment gets: the validated config, its run directory, a recorder, a device."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from attnbench.config import execution_free, parse_duration, selected_designs
from .config.schema import hashed_sections
from attnbench.records.write import Recorder
from attnbench.basics import stable_hash

# Experiments whose budget is spent cell by cell (``RunContext.cell``): the others plan their
# own cells against exp.budget (longctx's grid, crossover's sweep, the trainings' token budgets)
# or run unbounded (presets, kernels_cpu, msa_speedup: their sizes are fixed by the config).
CELL_BUDGET = ("smoke", "kv_memory", "serving", "capacity")


class BudgetSpent(Exception):
    """exp.budget ran out: raised at the next cell boundary, before the cell's work (attnbench.cli_run
    records the stop ``skipped`` and ends the run completed)."""

    def __init__(self, cell: "Cell", spent_s: float):
        super().__init__(cell.coords)
        self.cell, self.spent_s = cell, spent_s


# Keys that say where, how loudly or how a run happens, not what it computes.
NOT_IN_HASH = ("hydra", "wandb", "report", "threads", "force", "lock")


def config_dict(cfg: DictConfig) -> dict:
    """The plain dict of a config node, interpolations resolved, Enum fields (config/choices.py) as strings."""
    out = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    assert isinstance(out, dict), type(out)  # a DictConfig node is always a dict
    return out


def config_hash(cfg: DictConfig) -> str:
    d = {k: v for k, v in hashed_sections(config_dict(cfg)).items() if k not in NOT_IN_HASH}
    d["train"] = execution_free(d["train"])  # a run resumes on any number of processes
    return stable_hash(d)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda but torch sees no CUDA device")
    return torch.device(name)


def seed_everything(seed: int) -> dict[str, int]:
    """Seed every random source; return what was seeded (recorded in the header)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return {"python": seed, "numpy": seed, "torch": seed}


@dataclass(frozen=True)
class Budget:
    """exp.budget, parsed once: as configured (``text``: what records and messages quote) and in seconds."""

    text: str
    seconds: float


def text_console(**kwargs: Any) -> Console:
    """The run's console (stderr): what it prints is text, paths and user values as they are (no
    Rich markup, emoji codes or highlighting: a run directory named ``exp.designs=[softmax]``)."""
    return Console(stderr=True, soft_wrap=True, markup=False, emoji=False, highlight=False, **kwargs)


@dataclass
class RunContext:
    cfg: DictConfig
    run_dir: Path
    recorder: Recorder
    device: torch.device
    console: Console = field(default_factory=text_console)
    last_line: str = ""  # the experiment's closing word, printed after the sinks' lines (longctx.budget_summary)
    train_s: float = 0.0  # seconds spent getting the models, training any not trained yet (longctx keeps them out of exp.budget)
    budget_s: float | None = None  # exp.budget, for the experiments of CELL_BUDGET (None: the experiment plans its own)
    started: float = field(default_factory=time.perf_counter)

    @cached_property
    def budget(self) -> Budget:
        """The experiment's wall-clock budget (exp.budget)."""
        return Budget(str(self.cfg.exp.budget), parse_duration(self.cfg.exp.budget))

    @property
    def design_names(self) -> list[str]:
        return selected_designs(self.cfg)

    def make_record(self, design: str, metric: str, value: Any, unit: str, status: str = "measured", **extra) -> dict:
        """A record for ``design`` (layout, seed, device filled in; ``layout`` may be overridden)."""
        if "layout" not in extra:
            from .model import layout_for

            extra["layout"] = layout_for(self.cfg.model, self.cfg.attention[design]) if design in self.cfg.attention else ""
        extra.setdefault("seed", self.cfg.seed)
        extra.setdefault("device", self.device.type)
        return self.recorder.make(design=design, metric=metric, value=value, unit=unit, status=status, **extra)

    def record(self, design: str, metric: str, value: Any, unit: str, status: str = "measured", *, key: tuple[str, ...], **extra) -> dict:
        """One record as a cell of its own, committed now: identified by its design, metric and the
        fields of ``extra`` named in ``key`` (its coordinates), so a rerun writes it no second time.
        Records that belong together (a row of a table) go through one ``cell`` instead."""
        cell = self.cell(design=design, metric=metric, **{k: extra.get(k) for k in key})
        rec = cell.record(design, metric, value, unit, status, **extra)
        cell.commit()
        return rec

    def cell(self, **key: Any) -> "Cell":
        """A unit of work whose records are written together; ``cell.done`` if an earlier run did it.
        Raises ``BudgetSpent`` for a cell still to do once ``budget_s`` is spent (training excluded)."""
        cell = Cell(self, stable_hash({"config": self.recorder.config_hash, **key}), key)
        spent = time.perf_counter() - self.started - self.train_s
        if self.budget_s is not None and not cell.done and spent > self.budget_s:
            raise BudgetSpent(cell, spent)
        return cell


class Cell:
    """Records of one cell of an experiment (design x length x ...), committed atomically.

    Usage:  cell = ctx.cell(design=name, context_len=n)
            if cell.done: continue
            cell.record(name, "niah/acc", 0.9, "fraction", ...)
            cell.commit()
    The key hashes the run's config hash with the cell's own coordinates, so rerunning the
    same command skips finished cells and a changed config redoes them.
    """

    def __init__(self, ctx: RunContext, key: str, coords: dict):
        self.ctx, self.key, self.coords = ctx, key, coords
        self.done = key in ctx.recorder.done_cells
        self.pending: list[dict] = []

    @property
    def recorded(self) -> list[dict]:
        """The records an earlier run committed for this cell (empty unless ``done``): what a rerun
        reads back instead of measuring again."""
        return self.ctx.recorder.records_of(self.key)

    def record(self, design: str, metric: str, value: Any, unit: str, status: str = "measured", **extra) -> dict:
        rec = self.ctx.make_record(design, metric, value, unit, status, **extra)
        self.pending.append(rec)
        return rec

    def commit(self) -> None:
        self.ctx.recorder.write_cell(self.key, self.pending, self.coords)
        self.pending = []
