"""Train a task model of one design: AdamW, warm-up + cosine, clipping, a curriculum.

This is the trainer every experiment calls (get_model); attnbench/experiments/train.py is the
`+exp=train` experiment that runs it ahead of time and records the outcome. Its parts:
training/start.py (where a training starts), training/parallel.py (how a step runs over processes),
training/step.py (the compiled loss), training/state.py (state and record), training/rate.py (speed).

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
(``train.micro_batch``), the hooks of attnbench/training/distributed.py split each step's global batch
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

from attnbench.training.start import checkpoint_key
from attnbench.training import checkpoints, distributed
from attnbench.config import parse_duration
from attnbench.model import Model, layout_for
from attnbench.runner import config_dict
from attnbench.tasks.batches import IGNORE, answer_columns, chain_batch, mqar_batch
from attnbench.tasks.stage import Stage
from attnbench.tasks.stage import rows_of
from attnbench.tasks.vocab import Vocab
from attnbench.records.lines import git_commit
from attnbench.training.rate import calibrate_peak, device_name
from attnbench.training.state import TrainState, rule_of, stop_reason, training_record
from attnbench.training.parallel import for_training
from attnbench.training.prefetch import Prefetcher, workers_for
from attnbench.training.start import starting_point


def vocab_of(cfg) -> Vocab:
    return Vocab(cfg.task.n_keys, cfg.task.n_values, cfg.task.n_filler)


def lr_at(step: int, tc, warm_from: int = 0) -> float:
    """Linear warm-up from ``warm_from`` (0, or the step a continued run took over), then cosine to max_steps."""
    if step - warm_from < tc.warmup:
        return lr_at(max(step, tc.warmup), tc) * (step - warm_from + 1) / tc.warmup
    progress = min(1.0, (step - tc.warmup) / max(1, tc.max_steps - tc.warmup))
    return tc.lr * (tc.min_lr_ratio + (1 - tc.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_rng(seed: int, step: int) -> np.random.Generator:
    """The batch of a step depends only on (seed, step, stage): resumable and identical across designs."""
    return np.random.default_rng([seed, step])


def task_loss(model: Model, design, cfg, x: torch.Tensor, y: torch.Tensor, *, cols: torch.Tensor | None = None):
    """Cross-entropy at the answer positions + MoE balance + MSA index loss; and the accuracy.
    cols: answer_columns(y) read on the host before y moved to the device (none: read here)."""
    logits, targets, out = answer_logits(model, x, y, cols=cols)
    ce = F.cross_entropy(logits, targets)
    loss = ce + cfg.model.balance_coef * out.balance_loss + design.index_loss_weight * out.index_loss
    acc = (logits.argmax(-1) == targets).float().mean()
    return loss, ce, acc, out


def answer_logits(model: Model, x: torch.Tensor, y: torch.Tensor, *, cols: torch.Tensor | None = None):
    """(logits (n_answers, V), their targets (n_answers,), the model's Output) in the order of y's
    answers (row-major). The tasks put every row's answers at the same positions (the queries
    after the haystack): then the head runs only at those columns (Model.forward's logits_at),
    not at every position, which cost a tenth of a training step; a batch whose answers are not
    in shared columns gets the head at every position. cols: answer_columns(y) where the caller
    read it on the host (else it is read here, from y)."""
    if cols is None:
        cols = answer_columns(y)
    if cols is not None:
        out = model(x, logits_at=cols)  # logits (B, P, V)
        return out.logits.reshape(-1, out.logits.shape[-1]), y[:, cols].reshape(-1), out
    mask = y != IGNORE
    out = model(x)
    return out.logits[mask], y[mask], out


def task_loss_share(
    model: Model, design, cfg, x: torch.Tensor, y: torch.Tensor, n_answers: int, n_rows: int, *, cols: torch.Tensor | None = None
):
    """task_loss of a slice (x, y) of a global batch of n_rows rows and n_answers answers, as its
    share: the shares of all slices sum to task_loss of the whole batch (attnbench.training.distributed).

    Cross-entropy: the sum over the slice's answers / n_answers. Index loss: a mean over rows of
    equal length, so the slice's mean x its fraction of the rows. Balance: moe.GlobalRouting
    (set by the caller) gives the slice's share. Returns loss, the CE sum, the correct count, out.
    """
    logits, targets, out = answer_logits(model, x, y, cols=cols)  # (n_answers of the slice, V), (n_answers,)
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
    where ``train.compile`` is on and the batches are whole (one process), on the CPU (checked:
    tests/test_train_speed.py) or a CUDA device (CUDA graphs; not yet run on one); task_loss_share
    for a split batch."""
    from attnbench.kernels.backend import COMPILE

    if not par.whole_batches:
        return task_loss_share
    if cfg.train.compile and COMPILE and device.type in ("cpu", "cuda"):
        from attnbench.training.step import CompiledLoss

        return CompiledLoss(model, design, cfg, task_loss)
    return task_loss


def train_log(folder: Path, write: bool = True) -> logging.Logger:
    """One timestamped line per checkpoint in <work dir>/train.log (unattended runs, tail -f).

    ``write=False`` (a distributed run's other processes): a logger that writes nothing."""
    if not write:
        quiet = logging.getLogger("attnbench.training.trainer.quiet")
        quiet.propagate, quiet.disabled = False, True
        return quiet
    log = logging.getLogger(f"attnbench.training.trainer.{folder.name}")
    if not log.handlers:
        folder.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(folder / "train.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def kernel_backends(cfg, design_name: str, device) -> tuple[dict[str, str], bool]:
    """The kernel backend each op of the design trains with, and whether to fall back to the reference.

    On CUDA with backend=auto, the ops' Triton kernels (SDPA for softmax) must first pass the
    correctness gate (attnbench.bench.gate: dense float64 formulas) there; if one fails, the
    whole training runs on the reference backend. Rank 0 checks for every process.
    """
    from attnbench.kernels import for_layout, force

    layout = layout_for(cfg.model, cfg.attention[design_name])
    letters = sorted(set(layout))
    fallback = False
    if device.type == "cuda" and cfg.backend == "auto":
        from attnbench.bench.gate import check

        fallback = distributed.from_main(lambda: not all(check(letter, device=device)[0] for letter in letters))
    with force("reference") if fallback else contextlib.nullcontext():
        return for_layout(layout, "auto", device), fallback


def train(cfg, design_name: str, device, *, key: str | None = None) -> Trained:
    """Train (or resume) the design's model; on CUDA with the kernels that pass their gate (kernel_backends)."""
    from attnbench.kernels import force

    backends, fallback = kernel_backends(cfg, design_name, device)
    with force("reference") if fallback else contextlib.nullcontext():
        return _train(cfg, design_name, device, key=key, backends=backends)


def _train(cfg, design_name: str, device, *, key: str | None, backends: dict[str, str]) -> Trained:
    design = cfg.attention[design_name]
    tc = cfg.train
    key = key or checkpoint_key(cfg, design_name)
    folder = checkpoints.work_dir(design_name, key)
    stages = stages_of(tc)
    # How steps run: one process and whole batches (train_parallel.Local, as always), or a global
    # batch split over torchrun's processes (DDP / FSDP2) and micro-batches (train_parallel.Parallel).
    par = for_training(tc, device)
    par.check([rows_of(tc, stage.at(n).seq_len) for stage in stages for n in stage.lengths()])
    torch.manual_seed(cfg.seed)
    model = par.wrap(Model(cfg.model, design).to(device))
    # foreach: one multi-tensor kernel per update term instead of a loop over the 60-odd
    # parameters (the same update; it cost a twentieth of a short step)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=(0.9, tc.beta2), weight_decay=tc.weight_decay, foreach=True)
    partial = folder / "partial.pt"
    # rank 0 reads the checkpoints; every process gets the state, the weights and the optimiser's
    st = par.resume(lambda: starting_point(cfg, design_name, partial), model, opt)
    loop = _Loop(cfg, design, stages, par, model, opt, st, train_log(folder, write=par.main))
    loop.log.info(
        f"{design_name} {key}: {'resume at step ' + str(st.step) if st.step else 'start'}, "
        f"stage {st.stage + 1}/{len(stages)}, rule {rule_of(tc)}"
    )
    bar = tqdm(
        total=tc.max_steps,
        initial=st.step,
        desc=f"train {design_name}",
        unit="step",
        mininterval=2.0,
        dynamic_ncols=True,
        disable=not par.main,
    )
    loop.loss_fn = loss_for(cfg, model, design, par, device)
    if st.step < tc.max_steps and st.status == "running":  # the peak this (re)start runs against (CUDA: bf16)
        st.peaks.append({"step": st.step, "flops": calibrate_peak(device), "threads": torch.get_num_threads(), "cpu": device_name(device)})
        st.commits.append({"step": st.step, **git_commit()})
    loop.start = time.perf_counter() - st.wall_s
    if par.whole_batches and workers_for(device):
        vocab = loop.vocab
        loop.prefetch = Prefetcher(lambda i, s: step_batch(cfg, stages, i, s, vocab), max_steps=tc.max_steps, pin=device.type == "cuda")
    model.train()
    if st.continued_from:
        loop.log.info(f"continues {st.continued_from} (its first {len(st.stage_starts) - 1} stages) from step {st.step}")
    try:
        loop.run(bar, partial)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep every finished step, then stop
        st.wall_s = time.perf_counter() - loop.start
        loop.save_partial(partial)
        loop.log.info(f"interrupted at step {st.step}; partial checkpoint saved")
        raise
    finally:
        if loop.prefetch is not None:
            loop.prefetch.close()
    bar.close()
    return _finish(loop, design_name, key, folder, partial, device, backends)


class _Loop:
    """The training loop of _train: the state it advances, one step at a time, and the rolling
    accuracy that decides when a stage is passed."""

    def __init__(self, cfg, design, stages: list[Stage], par, model, opt, st: TrainState, log: logging.Logger) -> None:
        self.cfg, self.tc, self.design, self.stages, self.par = cfg, cfg.train, design, stages, par
        self.model, self.opt, self.st, self.log = model, opt, st, log
        self.vocab = vocab_of(cfg)
        self.budget = parse_duration(cfg.train.budget)
        self.rolling: deque[float] = deque(st.rolling, maxlen=cfg.train.window)
        self.loss_fn = None
        self.start = 0.0
        self.prefetch: Prefetcher | None = None  # the batches made ahead in background processes (not on the CPU)

    def save_partial(self, partial: Path) -> None:
        self.st.rolling = list(self.rolling)
        self.par.save(partial, self.model, self.opt, asdict(self.st))  # rank 0 writes

    def run(self, bar, partial: Path) -> None:
        """Steps until a limit, the floor or a failure stops training (st.status says which)."""
        st, tc, stages, start = self.st, self.tc, self.stages, self.start
        while st.step < tc.max_steps and st.status == "running":
            if stages[st.stage].hops and st.chain_from_tokens is None:
                st.chain_from_tokens = st.tokens  # the first chain stage begins: its budget counts from here
            reason = stop_reason(st, tc, self.par.agree(time.perf_counter() - start), self.budget)
            if reason:
                st.status = reason
                break
            step = st.step
            x, res = self.step(step)
            if res is None:
                st.status, st.failure = "failed", f"non-finite loss at step {step}"
                break  # the last partial checkpoint (good weights) stays on disk
            st.step += 1
            st.tokens += x.numel()
            self.rolling.append(res.acc)
            roll = sum(self.rolling) / len(self.rolling)
            if step % tc.log_every == 0:
                self.log_point(bar, step, x, res, roll)
            bar.update(1)
            if len(self.rolling) == tc.window and st.advance(roll, len(stages), tc):
                self.log.info(f"step {st.step}: passed stage {st.stage} (context {stages[st.stage - 1].longest}), acc {roll:.3f}")
                self.rolling.clear()
            if st.step % tc.checkpoint_every == 0 or st.status != "running":
                st.wall_s = time.perf_counter() - start
                self.log.info(
                    f"step {st.step} stage {st.stage + 1}/{len(stages)} loss {res.ce:.4f} acc {roll:.3f} "
                    f"tokens {st.tokens:,} wall {st.wall_s:.0f}s"
                )
                self.save_partial(partial)

    def step(self, step: int):
        """One optimiser step on the global batch, its time split by phase into st.phase_s;
        returns the batch and the step's result (None: a non-finite loss, nothing updated)."""
        st, tc, opt = self.st, self.tc, self.opt
        t_data = time.perf_counter()
        cols = None
        if self.prefetch is not None:  # made ahead; t_data: the wait for it
            x, y, cols = self.prefetch.get(st.stage, step)
        else:
            x, y = step_batch(self.cfg, self.stages, st.stage, step, self.vocab)  # the global batch, on every process
        t_data = time.perf_counter() - t_data
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tc, st.warm_from)
        # forward + backward; ce, acc, index loss: means over the global batch
        res = self.par.step(self.loss_fn, self.model, self.design, self.cfg, x, y, opt, cols=cols)
        if res is None:
            return x, None
        t_opt = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.grad_clip, foreach=True)
        opt.step()
        spent = {"data": t_data, **self.par.phase_s, "optimizer": time.perf_counter() - t_opt}
        if getattr(self.loss_fn, "compiled_now", False):  # a new batch shape compiled: the step is compile time
            spent = {"compile": sum(spent.values())}
        while len(st.phase_s) <= st.stage:
            st.phase_s.append({})
        for k, v in spent.items():
            st.phase_s[st.stage][k] = st.phase_s[st.stage].get(k, 0.0) + v
        return x, res

    def log_point(self, bar, step: int, x: torch.Tensor, res, roll: float) -> None:
        """A point of the loss curve, and the progress bar's figures."""
        st, start = self.st, self.start
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
            stage=f"{st.stage + 1}/{len(self.stages)}",
            loss=f"{res.ce:.3f}",
            acc=f"{roll:.2f}",
            tok_s=f"{st.tokens / max(1e-9, time.perf_counter() - start):.0f}",
        )


def _finish(loop: _Loop, design_name: str, key: str, folder: Path, partial: Path, device, backends: dict[str, str]) -> Trained:
    """After the loop: the last partial checkpoint, the plain model, its record and final weights."""
    st, cfg, par, stages = loop.st, loop.cfg, loop.par, loop.stages
    if st.status == "running":
        st.status = "max_steps"
    st.wall_s = time.perf_counter() - loop.start
    if st.status != "failed":
        loop.save_partial(partial)
    loop.log.info(
        f"stopped: {st.status} at step {st.step}, {st.tokens:,} tokens, {st.wall_s:.0f}s, stages passed {st.passed}/{len(stages)}"
    )
    model = par.unwrap(loop.model, lambda: Model(cfg.model, loop.design)).eval()  # plain, full weights
    record = training_record(cfg, design_name, key, model, st, stages, device, processes=par.world, backends=backends)
    if par.main:
        if st.status != "failed":  # a finished (or given-up) model is usable; a diverged one is not
            checkpoints.save_torch(folder / "final.pt", model.state_dict())
        checkpoints.save_json(folder / "record.json", record)
    return Trained(model, record, folder, "trained")
