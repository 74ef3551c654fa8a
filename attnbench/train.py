"""Train a task model of one design: AdamW, warm-up + cosine, clipping, a curriculum.

Every design trains the same backbone on the same generator with the same seed and the same
step budget; the curriculum (DESIGN.md "Training small models on this CPU") moves to its next
stage when the rolling query accuracy reaches ``train.advance_at``, and training ends early
once the last stage (the evaluation format at the training length) holds ``train.floor``.
What a design needed to get there (steps, tokens, wall time) is part of the result; a design
that never gets there is recorded as such, with its loss curve.

Partial checkpoints are written atomically every ``checkpoint_every`` steps; a rerun resumes
from the last one. A NaN or inf loss stops training, keeps the last good checkpoint, and
marks the record ``failed`` at that step.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from tqdm import tqdm

from . import checkpoints
from .config import parse_duration
from .model import Model, layout_for
from .results import git_commit, stable_hash
from .tasks.batches import IGNORE, Stage, mqar_batch
from .tasks.vocab import Vocab

FORMAT = 1  # bump when the checkpoint contents or training semantics change
# Design fields added after FORMAT 1 whose default reproduces the old behaviour: left out of
# the key while at that default, so checkpoints trained before they existed stay valid.
ADDED_AT_DEFAULT = {"lightning_heads": 0}


def vocab_of(cfg) -> Vocab:
    return Vocab(cfg.task.n_keys, cfg.task.n_values, cfg.task.n_filler)


def checkpoint_key(cfg, design: str) -> str:
    """Hash of everything that determines the trained weights."""
    train = OmegaConf.to_container(cfg.train, resolve=True)
    # Limits that only decide when to stop (not what a step does) are not part of the key: a
    # run stopped by them resumes from its partial checkpoint when they are raised.
    for k in ("force", "budget", "patience", "checkpoint_every", "log_every"):
        train.pop(k, None)
    return stable_hash({
        "format": FORMAT,
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "design": {k: v for k, v in OmegaConf.to_container(cfg.attention[design], resolve=True).items()
                   if k != "description" and not (k in ADDED_AT_DEFAULT and v == ADDED_AT_DEFAULT[k])},
        "task": OmegaConf.to_container(cfg.task, resolve=True),
        "train": train,
        "seed": cfg.seed,
    })


def lr_at(step: int, tc) -> float:
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    progress = min(1.0, (step - tc.warmup) / max(1, tc.max_steps - tc.warmup))
    return tc.lr * (tc.min_lr_ratio + (1 - tc.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_rng(seed: int, step: int) -> np.random.Generator:
    """The batch of a step depends only on (seed, step): resumable and identical across designs."""
    return np.random.default_rng([seed, step])


def task_loss(model: Model, design, cfg, x: torch.Tensor, y: torch.Tensor):
    """Cross-entropy at the answer positions + MoE balance + MSA index loss; and the accuracy."""
    out = model(x)
    mask = y != IGNORE
    logits = out.logits[mask]  # (n_answers, V)
    ce = F.cross_entropy(logits, y[mask])
    loss = ce + cfg.model.balance_coef * out.balance_loss + design.index_loss_weight * out.index_loss
    acc = (logits.argmax(-1) == y[mask]).float().mean()
    return loss, ce, acc, out


@dataclass
class Trained:
    model: Model
    record: dict
    folder: Path
    source: str  # trained | cache | shipped


def load(cfg, design_name: str, folder: Path, device) -> Model:
    model = Model(cfg.model, cfg.attention[design_name])
    model.load_state_dict(torch.load(folder / "final.pt", map_location="cpu", weights_only=True))
    return model.to(device).eval()


def get_model(cfg, design_name: str, device, *, console=None) -> Trained:
    """A trained model for this config: shipped or cached if one matches, else trained now."""
    key = checkpoint_key(cfg, design_name)
    found = None if cfg.train.force else checkpoints.find(design_name, key)
    if found is not None:
        import json

        record = json.loads((found / "record.json").read_text())
        stopped_early = record["status"] == "budget" or (
            record["status"] == "stalled" and record["config"]["train"]["patience"] < cfg.train.patience)
        if stopped_early and (checkpoints.work_dir(design_name, key) / "partial.pt").exists():
            if console:
                console.print(f"  {design_name}: resuming training stopped by its limits ({record['status']})")
            return train(cfg, design_name, device, key=key)
        source = "shipped" if found.is_relative_to(checkpoints.SHIPPED) else "cache"
        if console:
            console.print(f"  {design_name}: using {source} checkpoint {found}")
        return Trained(load(cfg, design_name, found, device), record, found, source)
    return train(cfg, design_name, device, key=key)


def train(cfg, design_name: str, device, *, key: str | None = None) -> Trained:
    design = cfg.attention[design_name]
    tc = cfg.train
    key = key or checkpoint_key(cfg, design_name)
    folder = checkpoints.work_dir(design_name, key)
    vocab = vocab_of(cfg)
    stages = [Stage(**OmegaConf.to_container(s, resolve=True)) if not isinstance(s, Stage) else s for s in tc.stages]
    torch.manual_seed(cfg.seed)
    model = Model(cfg.model, design).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=(0.9, tc.beta2), weight_decay=tc.weight_decay)
    state = {"step": 0, "stage": 0, "tokens": 0, "wall_s": 0.0, "curve": [], "stage_starts": [0],
             "status": "running", "reached_floor": False, "failure": None}
    partial = folder / "partial.pt"
    if partial.exists() and not tc.force:
        saved = torch.load(partial, map_location="cpu", weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
    budget = parse_duration(tc.budget)
    rolling: deque[float] = deque(state.get("rolling", []), maxlen=tc.window)
    use_autocast = device.type == "cuda"  # bf16 autocast on GPUs; fp32 on CPU (bf16 matmuls are 100-500x slower here)

    def save_partial():
        state["rolling"] = list(rolling)
        checkpoints.save_torch(partial, {"model": model.state_dict(), "opt": opt.state_dict(), "state": state})

    bar = tqdm(total=tc.max_steps, initial=state["step"], desc=f"train {design_name}", unit="step",
               mininterval=2.0, dynamic_ncols=True)
    start = time.perf_counter() - state["wall_s"]
    model.train()
    while state["step"] < tc.max_steps:
        if time.perf_counter() - start > budget:
            state["status"] = "budget"
            break
        step, stage = state["step"], stages[state["stage"]]
        if step - state["stage_starts"][-1] >= tc.patience:
            state["status"] = "stalled"  # no stage passed in `patience` steps: record it, stop spending CPU
            break
        x, y = mqar_batch(batch_rng(cfg.seed, step), vocab, stage, tc.batch)
        x, y = x.to(device), y.to(device)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tc)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_autocast):
            loss, ce, acc, out = task_loss(model, design, cfg, x, y)
        if not torch.isfinite(loss):
            state["status"], state["failure"] = "failed", f"non-finite loss at step {step}"
            break  # the last partial checkpoint (good weights) stays on disk
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        state["step"] += 1
        state["tokens"] += x.numel()
        rolling.append(float(acc))
        roll = sum(rolling) / len(rolling)
        if step % tc.log_every == 0:
            state["curve"].append({"step": step, "loss": float(ce.detach()), "acc": float(acc), "stage": state["stage"],
                                   "tokens": state["tokens"], "wall_s": round(time.perf_counter() - start, 2),
                                   "index_loss": float(out.index_loss.detach())})
            bar.set_postfix(stage=f"{state['stage'] + 1}/{len(stages)}", loss=f"{float(ce.detach()):.3f}", acc=f"{roll:.2f}",
                            tok_s=f"{state['tokens'] / max(1e-9, time.perf_counter() - start):.0f}")
        bar.update(1)
        if len(rolling) == tc.window:
            if state["stage"] < len(stages) - 1 and roll >= tc.advance_at:
                state["stage"] += 1
                state["stage_starts"].append(state["step"])
                rolling.clear()
            elif state["stage"] == len(stages) - 1 and roll >= tc.floor:
                state["reached_floor"], state["status"] = True, "done"
                break
        if state["step"] % tc.checkpoint_every == 0:
            state["wall_s"] = time.perf_counter() - start
            save_partial()
    bar.close()
    if state["status"] == "running":
        state["status"] = "max_steps"
    state["wall_s"] = time.perf_counter() - start
    if state["status"] != "failed":
        save_partial()
    model.eval()
    record = {
        "design": design_name,
        "layout": layout_for(cfg.model, design),
        "key": key,
        "status": state["status"],  # done (reached the floor) | max_steps | stalled | budget | failed
        "failure": state["failure"],
        "reached_floor": state["reached_floor"],
        "steps": state["step"],
        "tokens": state["tokens"],
        "wall_s": round(state["wall_s"], 1),
        "final_stage": state["stage"] + 1,
        "n_stages": len(stages),
        "stage_starts": state["stage_starts"],
        "device": str(device),
        "threads": torch.get_num_threads(),
        "params": model.param_counts(),
        "train_len": stages[-1].seq_len,
        "curve": state["curve"],
        "config": {"model": OmegaConf.to_container(cfg.model, resolve=True),
                   "design": OmegaConf.to_container(design, resolve=True),
                   "task": OmegaConf.to_container(cfg.task, resolve=True),
                   "train": OmegaConf.to_container(cfg.train, resolve=True), "seed": cfg.seed},
        "git": git_commit(),
        "command": f"python -m attnbench +exp=train design={design_name} seed={cfg.seed} "
                   f"train.budget={tc.budget} train.patience={tc.patience}",  # the limits are not in the key
    }
    if state["status"] != "failed":  # a finished (or given-up) model is usable; a diverged one is not
        checkpoints.save_torch(folder / "final.pt", model.state_dict())
    checkpoints.save_json(folder / "record.json", record)
    return Trained(model, record, folder, "trained")
