"""exp=scale: does the gap between designs grow with the model? A width ladder (claim C3 at scale).

Every rung is the shared backbone at one width (``scale.widths``), built from the base model
(``model``, conf/model/tiny.yaml) by one rule (``ladder_model``; conf/model/w*.yaml write it
out): the head count, KV heads, experts and experts per token stay the base's and every width
scales with d (head_dim = d / n_heads, d_expert = d x the base's ratio). At the base width the
rule returns the base model unchanged, so its checkpoint keys are the shipped models' keys.

Training, per (seed, width, design): fair-v1 as everywhere, the needle curriculum (the stages
without hops) and then the chain stages, continued from the needle model (train.prefix_model),
as exp=multihop does. The token budgets (``budget_rule``, ``scale.budget_scaling``) are by
default fair-v1's own at every width (``fixed``): ``scale.needle_token_budget`` (needle_4m's)
for the needle stages, ``train.token_budget`` and ``train.chain_token_budget``
(conf/curriculum/chain.yaml, multihop's) for the chain stages, so a model stops where the
curriculum's floor says it learned, or at the same budget as every other. ``active_params``
scales each budget by the reference design's active parameters at the rung over those at the
base width (the same tokens per active parameter at every width); under it the width-16
hybrids ran out of tokens before passing the first stage (experiments/scale_per_param/),
which measured the budget, not the width. Nothing else changes with the width (learning rate,
warm-up, batch, max_steps, patience).

Measured for each model, on contexts seeded by (seed, task, length) only, so every design and
width at a seed sees the same ones: single-needle and multi-key needle accuracy at the needle
model's training length and at ``scale.factors`` times it; chain accuracy at 1 to ``eval.hops``
hops at the chain model's training length (scored on the final value, as multihop scores it).
Each ``scale/acc`` record carries its 95% Wilson interval over probes, the probe and haystack
counts and the hits per haystack (``hits``), which the report's bootstrap resamples
(attnbench/verdicts/scale_fit.py). The metrics are the experiment's own (``scale/acc``,
``scale/model``): no other experiment's tables or claims read a ladder model.
"""

from __future__ import annotations

import copy
import time

import numpy as np
from omegaconf import open_dict

from attnbench.evaluation.streaming import run_sample
from attnbench.records.stats import wilson
from attnbench.experiments.train import training_facts
from attnbench.model import Model, layout_for
from attnbench.evaluation.fit import prefill_chunk
from attnbench.runner import config_dict
from attnbench.tasks.generate import multihop, niah
from attnbench.training.trainer import get_model, vocab_of

ACC = "scale/acc"
MODEL = "scale/model"
TASK_CODES = {"niah_single": 1, "niah_multikey": 2, "chain": 3}  # part of each haystack's generator seed
CHAIN_SCORING = "final value"  # as exp=multihop scores its chains


def ladder_model(base, width: int) -> dict:
    """The backbone of one rung, as a ModelConfig dict: the base's with every width scaled to
    ``width`` (d_model; head_dim = width / n_heads; d_expert = width x d_expert / d_model) and
    every count kept (layers, heads, KV heads, experts, experts per token). Named ``w<width>``,
    except at the base's own width, where it is the base unchanged."""
    m = config_dict(base)
    if int(width) == int(m["d_model"]):
        return m
    if width % m["n_heads"] or (width * m["d_expert"]) % m["d_model"]:
        raise ValueError(f"width {width} does not divide into {m['n_heads']} heads and the base's expert ratio")
    return {
        **m,
        "name": f"w{width}",
        "d_model": int(width),
        "head_dim": width // m["n_heads"],
        "d_expert": width * m["d_expert"] // m["d_model"],
    }


def rung_cfg(cfg, width: int, seed: int):
    """The run's config at one rung and seed (its model the ladder's, validated as any run's)."""
    from attnbench.config import validate

    out = copy.deepcopy(cfg)
    with open_dict(out):
        for k, v in ladder_model(cfg.model, width).items():
            out.model[k] = v
        out.seed = int(seed)
    validate(out)
    return out


def active_params(cfg, design: str) -> int:
    """Active parameters a token of this design's model uses (Model.param_counts), built on the meta device."""
    import torch

    with torch.device("meta"):
        return int(Model(cfg.model, cfg.attention[design]).param_counts()["active"])


def needle_stages(cfg) -> int:
    """How many of the curriculum's first stages are needle stages (no hops): the needle model's curriculum."""
    n = 0
    for stage in cfg.train.stages:
        if stage.hops:
            break
        n += 1
    return n


def budget_rule(cfg, width: int) -> dict:
    """The token budgets of a rung: the base width's times (reference design's active parameters
    at this width) / (those at the base width). Returned with the rule in words and its numbers."""
    ref = cfg.scale.reference
    at_base = active_params(cfg, ref)
    here = active_params(rung_cfg(cfg, width, cfg.seed), ref)
    ratio = here / at_base

    per_param = cfg.scale.budget_scaling == "active_params"
    if cfg.scale.budget_scaling not in ("fixed", "active_params"):
        raise ValueError(f"scale.budget_scaling={cfg.scale.budget_scaling!r}: fixed or active_params")

    def scaled(tokens: int) -> int:
        return int(round(tokens * ratio)) if per_param and int(width) != int(cfg.model.d_model) else int(tokens)

    needle = scaled(cfg.scale.needle_token_budget)
    rule = (
        f"tokens per active parameter of {ref} held at the base width's ({cfg.model.name}, d={cfg.model.d_model}): "
        f"each budget = the base width's x {ref}'s active parameters at this width / at the base"
        if per_param
        else f"fair-v1's budgets at every width (the base width's, {cfg.model.name}, d={cfg.model.d_model}): the same tokens for every model"
    )
    return {
        "budget_rule": rule,
        "budget_scaling": str(cfg.scale.budget_scaling),
        "reference": ref,
        "reference_active": here,
        "base_active": at_base,
        "budget_ratio": ratio if per_param else 1.0,  # the factor the budgets were scaled by
        "active_ratio": ratio,  # the reference's active parameters here / at the base width
        "needle_token_budget": needle,
        "token_budget": scaled(cfg.train.token_budget),
        "chain_token_budget": scaled(cfg.train.chain_token_budget),
        "needle_tokens_per_active_param": needle / here,
    }


def phase_cfgs(cfg, width: int, seed: int, budgets: dict):
    """(needle cfg, chain cfg or None) of a rung: the needle curriculum under the needle budget,
    then the whole curriculum (needles and chains) under the chain budgets."""
    chain = rung_cfg(cfg, width, seed)
    n = needle_stages(chain)
    with open_dict(chain):
        chain.train.token_budget = budgets["token_budget"]
        chain.train.chain_token_budget = budgets["chain_token_budget"]
    needle = copy.deepcopy(chain)
    with open_dict(needle):
        needle.train.stages = chain.train.stages[:n]
        needle.train.token_budget = budgets["needle_token_budget"]
        needle.train.chain_token_budget = 0
    return needle, (chain if n < len(chain.train.stages) else None)


def at_length(record: dict, cfg) -> int:
    """Where a model is measured: its true training length, or its first stage's when it passed none."""
    return training_facts(record)["train_len"] or int(cfg.train.stages[0].context_len)


def haystacks_of(cfg, task: str, length: int, hops: int = 0) -> list:
    """The haystacks of one cell, each seeded by (seed, task, length, hops, index) only."""
    vocab = vocab_of(cfg)

    def rng(i):
        return np.random.default_rng([cfg.seed, 17, TASK_CODES[task], length, hops, i])

    kind, noise = cfg.task.haystack, cfg.task.value_noise
    sc = cfg.scale
    if task == "niah_single":  # one needle a context: every probe its own haystack
        spread = np.linspace(0, 1, sc.needle_probes)
        return [niah(rng(i), vocab, length, "single", [float(d)], kind=kind, value_noise=noise)[0] for i, d in enumerate(spread)]
    if task == "niah_multikey":
        depths = [float(d) for d in cfg.eval.depths]
        return [niah(rng(i), vocab, length, "multikey", depths, kind=kind, value_noise=noise)[0] for i in range(sc.multikey_haystacks)]
    return [
        multihop(rng(i), vocab, length, "chain", hops, n_chains=cfg.eval.chains, kind=kind, value_noise=noise)
        for i in range(sc.chain_haystacks)
    ]


def measure(model, samples: list, device, chunk: int) -> tuple[list[int], list[int], float]:
    """Hits and probes per haystack (streaming prefill, every probe from the prefilled cache), and the seconds taken."""
    began = time.perf_counter()
    hits, sizes = [], []
    for sample in samples:
        results, _ = run_sample(model, sample, device, chunk)
        hits.append(sum(int(r.correct) for r in results))
        sizes.append(len(results))
    return hits, sizes, time.perf_counter() - began


def record_model(cell, name: str, phase: str, trained, common: dict, budgets: dict) -> None:
    r, facts = trained.record, training_facts(trained.record)
    cell.record(
        name,
        MODEL,
        r["params"]["active"],
        "count",
        "failed" if r["status"] == "failed" else "measured",
        phase=phase,
        params=r["params"],
        key=r["key"],
        checkpoint=trained.source,
        train_status=r["status"],
        stop_reason=facts["stop_reason"],
        steps=r["steps"],
        tokens=r["tokens"],
        wall_s=r["wall_s"],
        train_len=facts["train_len"],
        final_stage=r["final_stage"],
        n_stages=r["n_stages"],
        continued_from=r.get("continued_from"),
        train_device=r["device"],
        rule=facts["rule"],
        **budgets,
        **common,
    )


def run(ctx) -> None:
    cfg = ctx.cfg
    sc = cfg.scale
    widths = sorted({int(w) for w in sc.widths})
    for seed in sc.seeds:
        for width in widths:
            budgets = budget_rule(cfg, width)
            for name in ctx.design_names:
                needle_cfg, chain_cfg = phase_cfgs(cfg, width, seed, budgets)
                rung(ctx, name, width, int(seed), needle_cfg, chain_cfg, budgets)


def rung(ctx, name: str, width: int, seed: int, needle_cfg, chain_cfg, budgets: dict) -> None:
    """Train (or find) one design's models at one rung and seed, and measure them."""
    dev = ctx.device
    m = needle_cfg.model
    common = dict(
        seed=seed,
        width=width,
        model=m.name,
        layout=layout_for(m, needle_cfg.attention[name]),
        rung_params=budgets["reference_active"],
        n_layers=int(m.n_layers),
    )
    phases = [("needle", needle_cfg)] + ([("chain", chain_cfg)] if chain_cfg is not None else [])
    for phase, pcfg in phases:
        trained = None
        model_cell = ctx.cell(design=name, width=width, seed=seed, phase=phase, part="model")
        if not model_cell.done:
            trained = get_model(pcfg, name, dev, console=ctx.console)
            record_model(model_cell, name, phase, trained, common, budgets)
            model_cell.commit()
        tasks = [("niah_single", 0), ("niah_multikey", 0)] if phase == "needle" else [("chain", int(h)) for h in pcfg.eval.hops]
        for task, hops in tasks:
            factors = [int(f) for f in pcfg.scale.factors] if phase == "needle" else [1]
            for factor in factors:
                cell = ctx.cell(design=name, width=width, seed=seed, task=task, hops=hops, factor=factor, part="acc")
                if cell.done:
                    continue
                if trained is None:
                    trained = get_model(pcfg, name, dev, console=ctx.console)
                acc_cell(ctx, cell, name, trained, pcfg, task, hops, factor, common)


def acc_cell(ctx, cell, name: str, trained, cfg, task: str, hops: int, factor: int, common: dict) -> None:
    facts = training_facts(trained.record)
    length = at_length(trained.record, cfg) * factor
    fields = dict(
        task=task,
        factor=factor,
        context_len=length,
        train_len=facts["train_len"],
        train_status=trained.record["status"],
        key=trained.record["key"],
        active_params=int(trained.record["params"]["active"]),
        dtype="float32",
        **({"hops": hops, "scoring": CHAIN_SCORING} if task == "chain" else {}),
        **common,
    )
    try:
        samples = haystacks_of(cfg, task, length, hops)
    except ValueError as ex:  # the task does not fit this length or vocabulary
        cell.record(name, ACC, None, "fraction", "skipped", note=str(ex), **fields)
        cell.commit()
        return
    model = trained.model
    hits, sizes, seconds = measure(model, samples, ctx.device, prefill_chunk(model, cfg.eval.chunk))
    k, n = sum(hits), sum(sizes)
    lo, hi = wilson(k, n)
    cell.record(
        name,
        ACC,
        k / n,
        "fraction",
        "measured",
        k=k,
        n=n,
        ci_low=lo,
        ci_high=hi,
        haystacks=len(hits),
        hits=hits,
        sizes=sizes,
        eval_s=round(seconds, 2),
        note="95% Wilson interval over probes; hits and sizes: per haystack",
        **fields,
    )
    cell.commit()
    what = f"{hops} hops" if task == "chain" else f"{factor}x"
    ctx.console.print(f"  {name} d={common['width']} seed {common['seed']}: {task} {what} at {length:,} tokens: {k}/{n}")
