"""exp=capacity: how many key-value pairs can each design look up at its training length? (claim C6)

After Zoology's multi-query associative recall sweeps (Arora et al., 2023, "Zoology: Measuring
and Improving Recall in Efficient Language Models"): pure lightning at several state sizes
(heads x head dim at the same width, so the state of a layer is H x D x D floats) against
softmax at the same width, every model trained under one rule on one curriculum (conf/exp/
capacity.yaml: a warm-up, then a ladder of pair counts at the training length). Each model is
then scored at its training length on every pair count of the stages at that length and on
the most pairs it holds, ``eval.train_len_samples``
contexts each with one query (the probes are independent: no haystack is shared), the same
contexts for every design. A lightning layer's state is fixed, so past some pair count it must
lose pairs; softmax keeps every token. The report's C6 rule reads ``capacity/acc``.
"""

from __future__ import annotations

import time

import numpy as np

from attnbench.designs import spec_of
from attnbench.evaluation.streaming import batch_accuracy
from attnbench.records.stats import wilson
from attnbench.experiments.train import record_training, training_facts
from attnbench.model import layout_for
from attnbench.tasks.generate import mqar_samples
from attnbench.tasks.stage import Stage
from attnbench.training.trainer import get_model, vocab_of

TASK = "mqar"  # the task name of the records (train/acc checks and capacity/acc)


def state_floats(cfg, name: str) -> float:
    """Floats of one lightning layer's state, H x D x D (D = width / H); NaN for a design without lightning layers."""
    design = cfg.attention[name]
    if not any(spec_of(c).state for c in layout_for(cfg.model, design)):
        return float("nan")
    heads = int(design.get("lightning_heads", 0) or cfg.model.n_heads)
    d = cfg.model.n_heads * cfg.model.head_dim // heads
    return float(heads * d * d)


def eval_stage(cfg, pairs: int) -> Stage:
    """The last curriculum stage (the training length and vocabulary in play) with ``pairs`` pairs."""
    last = dict(cfg.train.stages[-1])
    return Stage(**{**last, "n_pairs": int(pairs), "n_queries": 1, "max_context_len": 0})


def pair_counts(cfg) -> list[int]:
    """The pair counts scored: those of the curriculum's stages at the training length (the last
    stage's length), and the most a context of that length holds (every slot a needle, at most
    one pair a key)."""
    last = cfg.train.stages[-1]
    most = min(int(last.n_keys), (int(last.context_len) - 2) // 2)
    return sorted({int(s.n_pairs) for s in cfg.train.stages if s.context_len == last.context_len} | {most})


def run(ctx) -> None:
    cfg = ctx.cfg
    vocab = vocab_of(cfg)
    pairs = pair_counts(cfg)
    n = int(cfg.eval.train_len_samples)
    length = int(cfg.train.stages[-1].context_len)
    for name in ctx.design_names:
        began = time.perf_counter()
        trained = get_model(cfg, name, ctx.device, console=ctx.console)
        ctx.train_s += time.perf_counter() - began  # exp.budget is the evaluation's, not the training's
        cell = ctx.cell(design=name, part="train", key=trained.record["key"], pairs=pairs, n=n)
        if cell.done:
            continue
        record_training(ctx, cell, name, trained)
        train_len = training_facts(trained.record)["train_len"]
        state = state_floats(cfg, name)
        for i, p in enumerate(pairs):
            # the same contexts for every design: seeded by the run's seed and the pair count only
            samples = mqar_samples(np.random.default_rng([cfg.seed, 11, p]), vocab, eval_stage(cfg, p), n)
            k, got = batch_accuracy(trained.model, samples, ctx.device)
            lo, hi = wilson(k, got)
            common = dict(task=TASK, context_len=length, n_pairs=p, n=got, ci_low=lo, ci_high=hi, train_len=train_len, dtype="float32")
            cell.record(
                name,
                "capacity/acc",
                k / got,
                "fraction",
                "measured",
                state_size=state,
                pairs_per_state=p / state if state == state else None,
                haystacks=got,
                note="one query a context: every probe has its own haystack",
                **common,
            )
            if i == 0:  # the learned-the-task check (attnbench/verdicts/quality.learned): the fewest pairs at the training length
                cell.record(name, "train/acc", k / got, "fraction", "measured", note=f"{TASK}, {p} pairs, at the training length", **common)
            ctx.console.print(f"  {name}: {p} pairs at {length} tokens: {k}/{got}")
        cell.commit()
