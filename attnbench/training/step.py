"""The training step's loss through torch.compile: one graph per batch shape.

A curriculum stage has fixed lengths (a mixed stage draws from a few powers of two), so a
training sees a handful of batch shapes, each compiled once (``dynamic=False``) and reused for
every later step of that shape. Inductor fuses the elementwise work around the small matmuls
of the 64-wide task models (norms, RoPE, SiLU/GELU, the lightning reference's decays, the
optimiser-free part of the step) in the forward and in the backward that AOTAutograd derives
from it: at 24-token rows a step is mostly such ops (experiments/train_speed).

The mathematics is train.task_loss's, unchanged: the same model, the same loss at the same
answer positions; the equal-loss test (tests/test_train_speed.py) holds 50 steps of it to the
eager path for every layout letter. The MoE stays in the graph because its grouped GEMM is a
custom op with a fake-tensor rule (model/moe.py: grouped_mm).

On a CUDA device the graphs are CUDA graphs too (``mode="reduce-overhead"``). Only whole
batches in one process are compiled (train_parallel.Local): a split batch's balance
loss reads a ContextVar (moe.GLOBAL_ROUTING) that Dynamo cannot trace. If compiling fails (e.g.
no C++ compiler for Inductor), the step says so once and runs eagerly from then on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench.tasks.batches import answer_columns

log = logging.getLogger(__name__)

# Graphs one training may hold: every (stage, length) shape of the curriculum for each
# compiled function; Dynamo's default limit (8) would fall back to eager past the 8th shape.
MAX_SHAPES = 64


@dataclass
class Aux:
    """What the caller reads of the model's Output besides the loss (train_parallel.Local.step)."""

    index_loss: torch.Tensor


class CompiledLoss:
    """A drop-in for train.task_loss (same signature and results) that compiles per batch shape.

    Batches whose answers do not sit in shared columns (none of attnbench's tasks), the first
    step and every step after a compiler failure go through ``eager``, train.task_loss itself
    (passed in by train.loss_for, so this module does not import the trainer)."""

    def __init__(self, model, design, cfg, eager):
        self.eager = eager
        self.balance_coef = float(cfg.model.balance_coef)  # plain floats: reading a DictConfig inside a graph breaks it
        self.index_loss_weight = float(design.index_loss_weight)
        self.model = model
        self.failed: str | None = None
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, MAX_SHAPES)
        # On a GPU each graph is also captured as a CUDA graph (one per batch shape, like the
        # compiled graphs): a step is then a few launches, not thousands. Never run here (no GPU
        # in any sitting so far); a failure trains on eagerly, with its reason logged.
        self.cuda = next(model.parameters()).device.type == "cuda"
        self._compiled = torch.compile(self._loss, dynamic=False, mode="reduce-overhead" if self.cuda else None)
        self._warm = False
        self._shapes: set[tuple[int, ...]] = set()
        self.compiled_now = False  # the last call compiled a graph (its step's time is compile time)

    def _loss(self, x: torch.Tensor, targets: torch.Tensor, cols: torch.Tensor):
        """x (B, T) ids; cols (P,) the answer columns; targets (B P,) -> loss, ce, acc, index loss."""
        out = self.model(x, logits_at=cols)  # logits (B, P, V)
        logits = out.logits.reshape(-1, out.logits.shape[-1])
        ce = F.cross_entropy(logits, targets)
        loss = ce + self.balance_coef * out.balance_loss + self.index_loss_weight * out.index_loss
        acc = (logits.argmax(-1) == targets).float().mean()
        return loss, ce, acc, out.index_loss

    def __call__(self, model, design, cfg, x: torch.Tensor, y: torch.Tensor, *, cols: torch.Tensor | None = None):
        """cols: batches.answer_columns(y) as the caller read it on the host (None: read here)."""
        if cols is None:
            cols = answer_columns(y)
        self.compiled_now = False
        if self.failed or not self._warm or cols is None:
            self._warm = True  # the first step runs eagerly: it resolves each op's backend (an import Dynamo cannot trace)
            return self.eager(model, design, cfg, x, y, cols=cols)
        shape = (*x.shape, cols.numel())
        self.compiled_now = shape not in self._shapes
        self._shapes.add(shape)
        try:
            if self.cuda:  # a new training iteration for the CUDA graphs' memory pool (the last step's outputs are read)
                torch.compiler.cudagraph_mark_step_begin()
            loss, ce, acc, index_loss = self._compiled(x, y[:, cols].reshape(-1), cols)
        except Exception as e:  # noqa: BLE001 - any compiler failure: train on, eagerly
            self.failed = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            log.warning("train.compile: compiling the training step failed (%s); training on eagerly", self.failed)
            return self.eager(model, design, cfg, x, y, cols=cols)
        return loss, ce, acc, Aux(index_loss)
