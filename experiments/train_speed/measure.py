"""Old vs new training steps, timed alternately in one process (issue 24): ratios, not absolutes.

    python experiments/train_speed/measure.py [--designs softmax lightning_hybrid_h8] [--stages 1 6]
                                              [--calls 5] [--threads 1] [--base REV] [--out PATH]
                                              [--old base|eager]

The "old" package is attnbench (with its kernels) as it was at BASE, the commit before this
work, exported from git into a temporary folder and imported under another name
(``attnbench_old``), so both run in the same process, on the same batches, with the same
threads. A training step is everything train.py does per step: the batch from the generator,
forward, loss, backward, gradient clipping and the AdamW update. For a mixed-length stage a
"call" is one step at each of its lengths (so tokens weigh as the stage's draw does). Calls
alternate old, new, old, new ...; the speedup is the median over pairs of old_s / new_s, with its
spread. Before timing, the two paths' first steps are checked to give the same losses (fp32
tolerance). Each record also carries the new path's achieved GFLOP/s (the cost model's FLOPs of a
training token, attnbench.train_speed) and its fraction of the matmul peak calibrated in this
process at these threads.

``--old eager`` times the current package against itself with only the compile taken away: the
old side is the fast step (grouped GEMMs, head at the answers, foreach AdamW) with train.task_loss
run eagerly, the new side the same step compiled (what train.compile adds, per design).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
BASE = "c0b7929"  # main before the training-speed work (issue 24)
sys.path.insert(0, str(ROOT / "tests"))


def export_old(rev: str, into: Path) -> None:
    """attnbench at rev as the package attnbench_old (kernels and conf where pyproject maps them)."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "attnbench", "kernels", "conf"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    pkg = into / "attnbench_old"
    (into / "attnbench").rename(pkg)
    (into / "kernels").rename(pkg / "kernels")
    (into / "conf").rename(pkg / "conf")
    word = re.compile(r"\battnbench(?=[.\s;,)\]'\"]|$)")
    for py in pkg.rglob("*.py"):
        src = py.read_text()
        src = re.sub(r"\battnbench::", "attnbench_old::", src)  # custom-op namespaces
        py.write_text(word.sub("attnbench_old", src))


def import_old(rev: str):
    tmp = Path(tempfile.mkdtemp(prefix="attnbench_old_"))
    export_old(rev, tmp)
    sys.path.insert(0, str(tmp))
    # attnbench_old exists only once exported: imported by name, not by an import statement
    importlib.import_module("attnbench_old.model")
    return importlib.import_module("attnbench_old.train")


def load() -> float:
    return os.getloadavg()[0]


class Stepper:
    """train.py's step with one package's code: batch, forward, loss, backward, clipping, AdamW.

    old: BASE's task_loss, Model and AdamW as BASE built it; new: train.loss_for's loss (compiled
    per batch shape), foreach AdamW and clipping, as train.py now runs them."""

    def __init__(self, mod, cfg, design_name: str, stage_i: int, fast: bool, compiled: bool = True):
        self.mod, self.cfg, self.stage_i, self.fast = mod, cfg, stage_i, fast
        self.design = cfg.attention[design_name]
        self.stages, self.vocab = mod.stages_of(cfg.train), mod.vocab_of(cfg)
        torch.manual_seed(cfg.seed)
        self.model = mod.Model(cfg.model, self.design).train()
        tc = cfg.train
        extra = {"foreach": True} if fast else {}
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, tc.beta2), weight_decay=tc.weight_decay, **extra)
        if fast:
            from attnbench.training.parallel import Local

            self.loss = (
                mod.loss_for(cfg, self.model, self.design, Local(torch.device("cpu")), torch.device("cpu")) if compiled else mod.task_loss
            )
        else:
            self.loss = mod.task_loss

    def batch(self, n: int, step: int):
        stage = self.stages[self.stage_i].at(n)
        rows = self.mod.rows_of(self.cfg.train, stage.seq_len)
        rng = self.mod.batch_rng(self.cfg.seed, step)
        from attnbench.tasks.batches import chain_batch, mqar_batch

        return (
            chain_batch(rng, self.vocab, stage, rows, hops=1 + step % stage.hops)
            if stage.hops
            else mqar_batch(rng, self.vocab, stage, rows)
        )

    def step(self, n: int, step: int) -> float:
        """One training step at context length n; returns its loss."""
        x, y = self.batch(n, step)
        loss, ce, acc, out = self.loss(self.model, self.design, self.cfg, x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.fast:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip, foreach=True)
        else:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
        self.opt.step()
        return float(loss.detach())

    def tokens(self, n: int) -> int:
        s = self.stages[self.stage_i].at(n)
        return self.mod.rows_of(self.cfg.train, s.seq_len) * s.seq_len


OUT = [""]  # the results file main() writes (its footer is appended when the script ends)


def measure_stage(args, cfg, design: str, stage_no: int, old_train, new_train, peak: float) -> None:
    """One stage of one design: old and new steps checked equal, then timed alternately; one record."""
    from attnbench.records.lines import now
    from attnbench.training import rate as train_rate

    stages = new_train.stages_of(cfg.train)
    stage = stages[stage_no - 1]
    old = Stepper(old_train, cfg, design, stage_no - 1, fast=args.old == "eager", compiled=False)
    new = Stepper(new_train, cfg, design, stage_no - 1, fast=True)
    lengths = stage.lengths()
    # a call: steps at each of the stage's lengths, at least 8 steps (tokens weigh as the stage's draw does)
    plan = lengths * max(1, -(-8 // len(lengths)))
    # the same weights and batch give the same loss (both warm up here: compiles, backends)
    for i, n in enumerate(lengths):
        a, b = old.step(n, i), new.step(n, i)
        if i == 0 and abs(a - b) > 1e-5 * max(1.0, abs(a)):
            raise AssertionError(f"{design} stage {stage_no} T {n}: old loss {a} != new loss {b}")
    for n in lengths:  # the new path's first compiled step of each shape
        new.step(n, 0)
    t_old: list[float] = []
    t_new: list[float] = []
    before = load()
    for c in range(args.calls):
        for who, acc in ((old, t_old), (new, t_new)):
            t0 = time.perf_counter()
            for i, n in enumerate(plan):
                who.step(n, 1000 + c * len(plan) + i)
            acc.append(time.perf_counter() - t0)
    after = load()
    tokens = sum(new.tokens(n) for n in plan)
    ratios = [a / b for a, b in zip(t_old, t_new)]
    flops = train_rate.stage_flops(cfg, cfg.attention[design], stage)
    old_s, new_s = statistics.median(t_old), statistics.median(t_new)
    rec = dict(
        type="record",
        exp="train_speed",
        design=design,
        metric="speedup/train_step" if args.old == "base" else "compile_speedup/train_step",
        unit="x",
        status="measured",
        stage=stage_no,
        lengths=lengths,
        steps_per_call=len(plan),
        tokens_per_call=tokens,
        threads=args.threads,
        value=statistics.median(ratios),
        ratio_min=min(ratios),
        ratio_max=max(ratios),
        old_s=old_s,
        old_s_min=min(t_old),
        old_s_max=max(t_old),
        new_s=new_s,
        new_s_min=min(t_new),
        new_s_max=max(t_new),
        old_tokens_s=tokens / old_s,
        new_tokens_s=tokens / new_s,
        flops_per_token=flops,
        peak_gflops=peak / 1e9,
        old_fraction_of_peak=flops * tokens / old_s / peak,
        new_fraction_of_peak=flops * tokens / new_s / peak,
        calls=args.calls,
        load_before=round(before, 2),
        load_after=round(after, 2),
        noisy=max(before, after) > (os.cpu_count() or 1),
        old=f"{args.base}: eager, MoE loop over experts, logits at every position, AdamW and clipping per parameter"
        if args.old == "base"
        else "this commit's step with the loss run eagerly (grouped GEMMs, head at the answer columns, foreach AdamW)",
        new="MoE grouped GEMMs, head at the answer columns, the loss compiled per batch shape, foreach AdamW and clipping",
        time=now(),
    )
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rec.items() if k not in ("old", "new")}), flush=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(rec) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--designs", nargs="+", default=["softmax", "lightning_hybrid_h8"])
    ap.add_argument("--stages", nargs="+", type=int, default=[1, 6], help="curriculum stages, 1-based")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--base", default=BASE)
    ap.add_argument("--out", default=str(Path(__file__).with_name("measure") / "results.jsonl"))
    ap.add_argument(
        "--old", choices=["base", "eager"], default="base", help="base: attnbench at --base; eager: this package, loss not compiled"
    )
    args = ap.parse_args()
    OUT[0] = args.out
    torch.set_num_threads(args.threads)

    from attnbench import heap
    from attnbench.training import rate as train_rate
    from attnbench.training import trainer as new_train
    from attnbench.records.lines import git_commit, hardware, now
    from helpers import compose_cfg

    heap.keep_freed_memory()
    cfgs = {d: compose_cfg(["+exp=train", f"design={d}"]) for d in args.designs}  # before the old package registers its schemas
    old_train = import_old(args.base) if args.old == "base" else new_train
    peak = train_rate.calibrate_peak()
    header = {
        "type": "header",
        "exp": "train_speed",
        "started": now(),
        "git": git_commit(),
        "hardware": hardware(),
        "base": args.base if args.old == "base" else "this commit, the loss run eagerly",
        "threads": args.threads,
        "torch": torch.__version__,
        "matmul_flops": peak,
        "command": " ".join(sys.argv),
    }
    with open(args.out, "a") as f:
        f.write(json.dumps(header) + "\n")
    for design in args.designs:
        cfg = cfgs[design]
        for stage_no in args.stages:
            measure_stage(args, cfg, design, stage_no, old_train, new_train, peak)


if __name__ == "__main__":
    from attnbench.scripts import run_script

    run_script(main, "train_speed", OUT)
