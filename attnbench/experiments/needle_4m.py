"""exp=needle_4m: does each design retrieve a needle at 1K .. 4M tokens? (claims C2, C5, C6)

Every haystack holds one needle per depth (the others act as distractors: RULER's multi-key
form) and each needle is probed from the same prefill; see attnbench/experiments/longctx/flow.py.
"""

from __future__ import annotations

from attnbench.experiments.longctx.plan import Grid
from attnbench.experiments.longctx.flow import run_grid
from attnbench.tasks.generate import niah
from attnbench.training.trainer import vocab_of


def run(ctx) -> None:
    cfg = ctx.cfg
    vocab = vocab_of(cfg)
    depths = [float(d) for d in cfg.eval.depths]
    variant = cfg.eval.variant

    def make(rng, context_len, group):
        return niah(rng, vocab, context_len, variant, depths, kind=cfg.task.haystack, value_noise=cfg.task.value_noise)

    run_grid(
        ctx,
        Grid(
            metric="niah/acc",
            task=f"niah_{variant}",
            groups=[{}],
            make=make,
            by="depth",
            params={"depths": depths, "haystack": cfg.task.haystack, "value_noise": cfg.task.value_noise},
        ),
    )
