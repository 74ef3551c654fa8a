"""Train a task model of one design: AdamW, warm-up + cosine, clipping, a curriculum.

Every design trains the same backbone on the same generator with the same seed under one
recorded rule (``rule_of``: token budget, patience per stage, advance and floor thresholds).
The curriculum (docs/DESIGN.md "Training small models on this CPU") moves to its next stage when
the rolling query accuracy reaches ``train.advance_at``; its last stage mixes lengths from 128
to 1,024 tokens, and training ends early once that stage holds ``train.floor``. What a design
needed to get there (steps, tokens, wall time) is part of the result, and so is its true
training length: the longest context of a stage it passed. A design that never gets there is
recorded as such, with its loss curve and why it stopped.

Partial checkpoints are written atomically every ``checkpoint_every`` steps, each with one
timestamped line in ``train.log`` beside them; a rerun resumes from the last one. A NaN or inf
loss stops training, keeps the last good checkpoint, and marks the record ``failed``.

Across processes (torchrun or SLURM tasks, ``train.parallel=ddp|fsdp``) and micro-batches
(``train.micro_batch``), the hooks of attnbench/distributed.py split each step's global batch
(the same batches, the same step within fp32 rounding) and let rank 0 alone read and write.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from . import checkpoints, distributed
from .config import execution_free, parse_duration
from .model import Model, layout_for
from .results import stable_hash
from .runner import config_dict
from .tasks.batches import IGNORE, Stage, chain_batch, mqar_batch
from .tasks.stage import rows_of
from .tasks.vocab import Vocab
from .train_rate import calibrate_peak, cpu_name
from .train_record import TrainState, rule_of, stop_reason, training_record

FORMAT = 2  # bump when the checkpoint contents or training semantics change (2: the fair rule, mixed lengths)
# Design fields added after FORMAT 1 whose default reproduces the old behaviour: left out of
# the key while at that default, so checkpoints trained before they existed stay valid.
ADDED_AT_DEFAULT = {"lightning_heads": 0, "position": "partial", "qkv_conv": 0}


def vocab_of(cfg) -> Vocab:
    return Vocab(cfg.task.n_keys, cfg.task.n_values, cfg.task.n_filler)


def checkpoint_key(cfg, design: str) -> str:
    """Hash of everything that determines the trained weights."""
    # How a run is spread over processes is not part of the key (a run resumes on any number).
    train = execution_free(config_dict(cfg.train))
    # Limits that only decide when to stop (not what a step does) are not part of the key: a
    # run stopped by them resumes from its partial checkpoint when they are raised.
    for k in ("force", "budget", "patience", "token_budget", "chain_token_budget", "checkpoint_every", "log_every"):
        train.pop(k, None)
    return stable_hash(
        {
            "format": FORMAT,
            "model": config_dict(cfg.model),
            "design": {
                k: v
                for k, v in config_dict(cfg.attention[design]).items()
                if k != "description" and not (k in ADDED_AT_DEFAULT and v == ADDED_AT_DEFAULT[k])
            },
            "task": config_dict(cfg.task),
            "train": train,
            "seed": cfg.seed,
        }
    )


def lr_at(step: int, tc, warm_from: int = 0) -> float:
    """Linear warm-up from ``warm_from`` (0, or the step a continued run took over), then cosine to max_steps."""
    if step - warm_from < tc.warmup:
        return lr_at(max(step, tc.warmup), tc) * (step - warm_from + 1) / tc.warmup
    progress = min(1.0, (step - tc.warmup) / max(1, tc.max_steps - tc.warmup))
    return tc.lr * (tc.min_lr_ratio + (1 - tc.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_rng(seed: int, step: int) -> np.random.Generator:
    """The batch of a step depends only on (seed, step, stage): resumable and identical across designs."""
    return np.random.default_rng([seed, step])


def task_loss(model: Model, design, cfg, x: torch.Tensor, y: torch.Tensor):
    """Cross-entropy at the answer positions + MoE balance + MSA index loss; and the accuracy."""
    logits, targets, out = answer_logits(model, x, y)
    ce = F.cross_entropy(logits, targets)
    loss = ce + cfg.model.balance_coef * out.balance_loss + design.index_loss_weight * out.index_loss
    acc = (logits.argmax(-1) == targets).float().mean()
    return loss, ce, acc, out


def answer_logits(model: Model, x: torch.Tensor, y: torch.Tensor):
    """(logits (n_answers, V), their targets (n_answers,), the model's Output) in the order of y's
    answers (row-major). The tasks put every row's answers at the same positions (the queries
    after the haystack): then the head runs only at those columns (Model.forward's logits_at),
    not at every position, which cost a tenth of a training step; a batch whose answers are not
    in shared columns gets the head at every position."""
    mask = y != IGNORE
    cols = mask.any(0).nonzero().squeeze(1)  # (P,)
    if bool(mask[:, cols].all()) and int(mask.sum()) == mask.shape[0] * cols.numel():
        out = model(x, logits_at=cols)  # logits (B, P, V)
        return out.logits.reshape(-1, out.logits.shape[-1]), y[:, cols].reshape(-1), out
    out = model(x)
    return out.logits[mask], y[mask], out


def task_loss_share(model: Model, design, cfg, x: torch.Tensor, y: torch.Tensor, n_answers: int, n_rows: int):
    """task_loss of a slice (x, y) of a global batch of n_rows rows and n_answers answers, as its
    share: the shares of all slices sum to task_loss of the whole batch (attnbench.distributed).

    Cross-entropy: the sum over the slice's answers / n_answers. Index loss: a mean over rows of
    equal length, so the slice's mean x its fraction of the rows. Balance: moe.GlobalRouting
    (set by the caller) gives the slice's share. Returns loss, the CE sum, the correct count, out.
    """
    logits, targets, out = answer_logits(model, x, y)  # (n_answers of the slice, V), (n_answers,)
    ce_sum = F.cross_entropy(logits, targets, reduction="sum")
    loss = (
        ce_sum / n_answers + cfg.model.balance_coef * out.balance_loss + design.index_loss_weight * out.index_loss * (x.shape[0] / n_rows)
    )
    correct = (logits.argmax(-1) == targets).sum()
    return loss, ce_sum, correct, out


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


def lookup(cfg, design_name: str, key: str) -> tuple[Path | None, dict | None, bool]:
    """A finished checkpoint for this key (folder, record), and whether its training stopped
    at a limit since raised, with a partial checkpoint to resume from."""
    import json

    found = None if cfg.train.force else checkpoints.find(design_name, key)
    if found is None:
        return None, None, False
    record = json.loads((found / "record.json").read_text())
    limits = record["config"]["train"]
    stopped_early = (
        record["status"] == "budget"
        or (record["status"] == "stalled" and limits["patience"] < cfg.train.patience)
        or (record["status"] == "tokens" and limits.get("token_budget", 0) < cfg.train.token_budget)
        or (record["status"] == "chain_tokens" and limits.get("chain_token_budget", 0) < cfg.train.chain_token_budget)
    )
    # the cache's partial.pt, or one shipped beside a model its wall-clock budget stopped (a fresh machine)
    partial = (checkpoints.work_dir(design_name, key) / "partial.pt").exists() or checkpoints.shipped_partial(design_name, key) is not None
    return found, record, stopped_early and partial


def get_model(cfg, design_name: str, device, *, console=None) -> Trained:
    """A trained model for this config: shipped or cached if one matches, else trained now."""
    key = checkpoint_key(cfg, design_name)
    # rank 0 looks (a distributed run's processes must all take the same branch)
    found, record, resumable = distributed.from_main(lookup, cfg, design_name, key)
    if found is not None:
        if resumable:
            if console:
                console.print(f"  {design_name}: resuming training stopped by its limits ({record['status']})")
            return train(cfg, design_name, device, key=key)
        source = "shipped" if found.is_relative_to(checkpoints.SHIPPED) else "cache"
        if console:
            console.print(f"  {design_name}: using {source} checkpoint {found}")
        return Trained(load(cfg, design_name, found, device), record, found, source)
    return train(cfg, design_name, device, key=key)


def stages_of(tc) -> list[Stage]:
    """The curriculum; ``train.max_len`` (the GPU presets) stretches the last stage's lengths."""
    stages = [Stage(**config_dict(s)) if not isinstance(s, Stage) else s for s in tc.stages]
    if tc.get("max_len", 0):
        stages[-1] = replace(stages[-1], max_context_len=tc.max_len)
    return stages


def step_batch(cfg, stages: list[Stage], stage_i: int, step: int, vocab: Vocab):
    """The (inputs, targets) of one step: a mixed-length stage draws this step's length, and
    longer sequences get fewer rows (rows_of). A distributed run splits these rows."""
    rng = batch_rng(cfg.seed, step)
    stage = stages[stage_i]
    lengths = stage.lengths()
    if len(lengths) > 1:
        stage = stage.at(lengths[int(rng.integers(len(lengths)))])
    rows = rows_of(cfg.train, stage.seq_len)
    if not stage.hops:
        return mqar_batch(rng, vocab, stage, rows)
    return chain_batch(rng, vocab, stage, rows, hops=int(rng.integers(1, stage.hops + 1)))


def loss_for(cfg, model: Model, design, par, device):
    """The step's loss function: task_loss, compiled per batch shape (train_step.CompiledLoss)
    where ``train.compile`` is on, the batches are whole (one process) and the device is the
    CPU (the only one it was checked on); task_loss_share for a split batch."""
    from .kernels.backend import COMPILE

    if not par.whole_batches:
        return task_loss_share
    if cfg.train.compile and COMPILE and device.type == "cpu":
        from .train_step import CompiledLoss

        return CompiledLoss(model, design, cfg, task_loss)
    return task_loss


def train_log(folder: Path, write: bool = True) -> logging.Logger:
    """One timestamped line per checkpoint in <work dir>/train.log (unattended runs, tail -f).

    ``write=False`` (a distributed run's other processes): a logger that writes nothing."""
    if not write:
        quiet = logging.getLogger("attnbench.train.quiet")
        quiet.propagate, quiet.disabled = False, True
        return quiet
    log = logging.getLogger(f"attnbench.train.{folder.name}")
    if not log.handlers:
        folder.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(folder / "train.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def prefix_model(cfg, design_name: str) -> tuple[Path, dict, int] | None:
    """A finished model of a shorter curriculum that this one extends, everything else equal.

    multihop's curriculum is needle_4m's plus chain stages: its models start from the needle
    models (shipped or cached) instead of training those stages again. Returns (folder,
    record, stages it covers) of the longest such prefix, or None.
    """
    import copy
    import json

    from omegaconf import open_dict

    for n in range(len(cfg.train.stages) - 1, 0, -1):
        short = copy.deepcopy(cfg)
        with open_dict(short):
            short.train.stages = cfg.train.stages[:n]
        found = checkpoints.find(design_name, checkpoint_key(short, design_name))
        if found is not None:
            return found, json.loads((found / "record.json").read_text()), n
    return None


def kernel_backends(cfg, design_name: str, device) -> tuple[dict[str, str], bool]:
    """The kernel backend each op of the design trains with, and whether to fall back to the reference.

    On CUDA with backend=auto, the ops' Triton kernels (SDPA for softmax) must first pass the
    correctness gate (attnbench.bench.gate: dense float64 formulas) there; if one fails, the
    whole training runs on the reference backend. Rank 0 checks for every process.
    """
    from .kernels import for_layout, force

    layout = layout_for(cfg.model, cfg.attention[design_name])
    letters = sorted(set(layout))
    fallback = False
    if device.type == "cuda" and cfg.backend == "auto":
        from .bench.gate import check

        fallback = distributed.from_main(lambda: not all(check(letter, device=device)[0] for letter in letters))
    with force("reference") if fallback else contextlib.nullcontext():
        return for_layout(layout, "auto", device), fallback


def train(cfg, design_name: str, device, *, key: str | None = None) -> Trained:
    """Train (or resume) the design's model; on CUDA with the kernels that pass their gate (kernel_backends)."""
    from .kernels import force

    backends, fallback = kernel_backends(cfg, design_name, device)
    with force("reference") if fallback else contextlib.nullcontext():
        return _train(cfg, design_name, device, key=key, backends=backends)


def _train(cfg, design_name: str, device, *, key: str | None, backends: dict[str, str]) -> Trained:
    design = cfg.attention[design_name]
    tc = cfg.train
    key = key or checkpoint_key(cfg, design_name)
    folder = checkpoints.work_dir(design_name, key)
    vocab = vocab_of(cfg)
    stages = stages_of(tc)
    # How steps run: one process and whole batches (distributed.Local, as always), or a global
    # batch split over torchrun's processes (DDP / FSDP2) and micro-batches (distributed.Parallel).
    par = distributed.for_training(tc, device)
    par.check([rows_of(tc, stage.at(n).seq_len) for stage in stages for n in stage.lengths()])
    torch.manual_seed(cfg.seed)
    model = par.wrap(Model(cfg.model, design).to(device))
    # foreach: one multi-tensor kernel per update term instead of a loop over the 60-odd
    # parameters (the same update; it cost a twentieth of a short step)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=(0.9, tc.beta2), weight_decay=tc.weight_decay, foreach=True)
    partial = folder / "partial.pt"
    # rank 0 reads the checkpoints; every process gets the state, the weights and the optimiser's
    st = par.resume(lambda: starting_point(cfg, design_name, partial), model, opt)
    budget = parse_duration(tc.budget)
    rolling: deque[float] = deque(st.rolling, maxlen=tc.window)
    log = train_log(folder, write=par.main)
    log.info(
        f"{design_name} {key}: {'resume at step ' + str(st.step) if st.step else 'start'}, "
        f"stage {st.stage + 1}/{len(stages)}, rule {rule_of(tc)}"
    )

    def save_partial():
        st.rolling = list(rolling)
        par.save(partial, model, opt, asdict(st))  # rank 0 writes

    bar = tqdm(
        total=tc.max_steps,
        initial=st.step,
        desc=f"train {design_name}",
        unit="step",
        mininterval=2.0,
        dynamic_ncols=True,
        disable=not par.main,
    )
    loss_fn = loss_for(cfg, model, design, par, device)
    if device.type == "cpu" and st.step < tc.max_steps and st.status == "running":  # the peak this (re)start runs against
        st.peaks.append({"step": st.step, "flops": calibrate_peak(), "threads": torch.get_num_threads(), "cpu": cpu_name()})
    start = time.perf_counter() - st.wall_s
    model.train()
    if st.continued_from:
        log.info(f"continues {st.continued_from} (its first {len(st.stage_starts) - 1} stages) from step {st.step}")
    try:
        while st.step < tc.max_steps and st.status == "running":
            if stages[st.stage].hops and st.chain_from_tokens is None:
                st.chain_from_tokens = st.tokens  # the first chain stage begins: its budget counts from here
            reason = stop_reason(st, tc, par.agree(time.perf_counter() - start), budget)
            if reason:
                st.status = reason
                break
            step = st.step
            t_data = time.perf_counter()
            x, y = step_batch(cfg, stages, st.stage, step, vocab)  # the global batch, on every process
            t_data = time.perf_counter() - t_data
            for group in opt.param_groups:
                group["lr"] = lr_at(step, tc, st.warm_from)
            # forward + backward; ce, acc, index loss: means over the global batch
            res = par.step(loss_fn, model, design, cfg, x, y, opt)
            if res is None:
                st.status, st.failure = "failed", f"non-finite loss at step {step}"
                break  # the last partial checkpoint (good weights) stays on disk
            t_opt = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip, foreach=True)
            opt.step()
            spent = {"data": t_data, **par.phase_s, "optimizer": time.perf_counter() - t_opt}
            if getattr(loss_fn, "compiled_now", False):  # a new batch shape compiled: the step is compile time
                spent = {"compile": sum(spent.values())}
            while len(st.phase_s) <= st.stage:
                st.phase_s.append({})
            for k, v in spent.items():
                st.phase_s[st.stage][k] = st.phase_s[st.stage].get(k, 0.0) + v
            st.step += 1
            st.tokens += x.numel()
            rolling.append(res.acc)
            roll = sum(rolling) / len(rolling)
            if step % tc.log_every == 0:
                st.curve.append(
                    {
                        "step": step,
                        "loss": res.ce,
                        "acc": res.acc,
                        "stage": st.stage,
                        "tokens": st.tokens,
                        "wall_s": round(time.perf_counter() - start, 2),
                        "seq_len": x.shape[1],
                        "index_loss": res.index_loss,
                    }
                )
                bar.set_postfix(
                    stage=f"{st.stage + 1}/{len(stages)}",
                    loss=f"{res.ce:.3f}",
                    acc=f"{roll:.2f}",
                    tok_s=f"{st.tokens / max(1e-9, time.perf_counter() - start):.0f}",
                )
            bar.update(1)
            if len(rolling) == tc.window and st.advance(roll, len(stages), tc):
                log.info(f"step {st.step}: passed stage {st.stage} (context {stages[st.stage - 1].longest}), acc {roll:.3f}")
                rolling.clear()
            if st.step % tc.checkpoint_every == 0 or st.status != "running":
                st.wall_s = time.perf_counter() - start
                log.info(
                    f"step {st.step} stage {st.stage + 1}/{len(stages)} loss {res.ce:.4f} acc {roll:.3f} "
                    f"tokens {st.tokens:,} wall {st.wall_s:.0f}s"
                )
                save_partial()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep every finished step, then stop
        st.wall_s = time.perf_counter() - start
        save_partial()
        log.info(f"interrupted at step {st.step}; partial checkpoint saved")
        raise
    bar.close()
    if st.status == "running":
        st.status = "max_steps"
    st.wall_s = time.perf_counter() - start
    if st.status != "failed":
        save_partial()
    log.info(f"stopped: {st.status} at step {st.step}, {st.tokens:,} tokens, {st.wall_s:.0f}s, stages passed {st.passed}/{len(stages)}")
    model = par.unwrap(model, lambda: Model(cfg.model, design)).eval()  # plain, full weights
    record = training_record(cfg, design_name, key, model, st, stages, device, processes=par.world, backends=backends)
    if par.main:
        if st.status != "failed":  # a finished (or given-up) model is usable; a diverged one is not
            checkpoints.save_torch(folder / "final.pt", model.state_dict())
        checkpoints.save_json(folder / "record.json", record)
    return Trained(model, record, folder, "trained")


def starting_point(cfg, design_name: str, partial: Path) -> tuple[TrainState, dict | None, dict | None]:
    """Where training starts: (state, weights, optimiser state) of its partial checkpoint, a
    shorter curriculum's finished model (prefix_model), or scratch (TrainState(), None, None)."""
    # the cache's own partial checkpoint, else one shipped in attnbench/trained/ by an earlier sitting
    source = partial if partial.exists() else checkpoints.shipped_partial(design_name, partial.parent.name.rpartition("-")[2])
    if source is not None and not cfg.train.force:
        saved = torch.load(source, map_location="cpu", weights_only=False)
        st = TrainState(**saved["state"])
        if st.status != "failed":
            st.status = "running"  # stopped by a limit that may have been raised since
        return st, saved["model"], saved["opt"]
    if (prefix := prefix_model(cfg, design_name)) is not None:
        base, base_record, n = prefix
        st = TrainState(
            step=base_record["steps"],
            stage=n,
            tokens=base_record["tokens"],
            wall_s=base_record["wall_s"],
            curve=list(base_record["curve"]),
            stage_starts=[*base_record["stage_starts"], base_record["steps"]],
            warm_from=base_record["steps"],
            continued_from=base_record["key"],
        )
        if not base_record["reached_floor"]:  # it did not pass its own stages: the longer curriculum stops there too
            st.stage, st.stage_starts = n - 1, list(base_record["stage_starts"])
            st.status = base_record["status"]
        return st, torch.load(base / "final.pt", map_location="cpu", weights_only=True), None
    return TrainState(), None, None
