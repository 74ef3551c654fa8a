"""How long does the host take to make a training step's batch, against the time a GPU step of
the same batch would take? (issue 42, item 4: "the host's time per step ... below 5% of the
step's FLOPs at 40% of the GPU peak")

    python experiments/host_data/measure.py [--widths 128 256 512] [--steps 30] [--kinds thread process]
                                            [--out experiments/host_data/results.jsonl]

For every stage of the needle curriculum (exp=train) and of the chain curriculum (exp=multihop),
with rows packed to 64K tokens a step (train.tokens_per_step=65536):

- ``inline``: the seconds trainer.step_batch (numpy, on this host) plus the answer columns take,
  median of ``--calls`` calls with min-max: the host's time a step when the batch is made in line;
- ``prefetched``: the seconds the training loop waits for the batch when training/prefetch.py's
  background thread makes the steps ahead, the device's step stood in for by a sleep of its
  duration (the host waits for the device there, in Local.step's one read a step, which
  releases the GIL as a sleep does): median and max over ``--steps`` steps after four warm-up
  steps; ``process``: the same with torch's DataLoader and one worker process instead of the
  thread (``ProcessPrefetcher`` below, the first version of training/prefetch.py), which pays for
  moving each batch between processes;
- the device's step: the cost model's FLOPs of that batch (bench.planner.train_flops; the
  lightning_hybrid_h8 design at the ladder's width) at 40% of an H100's dense bf16 peak
  (conf/hardware/h100.yaml), and the target, 5% of it.

The device step is a formula (``projected``); the host's times are measured on this CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers import compose_cfg  # noqa: E402

from attnbench.bench.planner import train_flops  # noqa: E402
from attnbench.experiments.scale import ladder_model  # noqa: E402
from attnbench.records.lines import git_commit  # noqa: E402
from attnbench.tasks.batches import answer_columns  # noqa: E402
from attnbench.records.lines import hardware, now  # noqa: E402
from attnbench.training.prefetch import Prefetcher  # noqa: E402
from attnbench.training.rate import device_name  # noqa: E402
from attnbench.training.trainer import stages_of, step_batch, vocab_of  # noqa: E402

OUT = [""]  # the results file, once known (for the footer)
DESIGN = "lightning_hybrid_h8"
TOKENS = 65536
FRACTION, SHARE = 0.4, 0.05


class _StageBatches(torch.utils.data.Dataset):
    """Item ``step``: (x, y, answer columns) of that step at one stage (ProcessPrefetcher's)."""

    def __init__(self, cfg, stages, stage_i: int, vocab):
        self.cfg, self.stages, self.stage_i, self.vocab = cfg, stages, stage_i, vocab

    def __len__(self) -> int:
        return int(self.cfg.train.max_steps)

    def __getitem__(self, step: int):
        x, y = step_batch(self.cfg, self.stages, self.stage_i, step, self.vocab)
        return x, y, answer_columns(y)


class ProcessPrefetcher:
    """The steps ahead from DataLoader worker processes, in order (one stage, from step 0)."""

    def __init__(self, cfg, stages, vocab, stage_i: int, workers: int = 1, ahead: int = 2):
        loader = torch.utils.data.DataLoader(
            _StageBatches(cfg, stages, stage_i, vocab),
            batch_size=None,
            sampler=range(int(cfg.train.max_steps)),
            num_workers=workers,
            prefetch_factor=ahead,
        )
        self._it = iter(loader)
        self.wait_s = 0.0

    def get(self, stage_i: int, step: int):
        t0 = time.perf_counter()
        batch = next(self._it)
        self.wait_s = time.perf_counter() - t0
        return batch

    def close(self) -> None:
        self._it._shutdown_workers()  # type: ignore[attr-defined]


def _prefetcher(kind: str, cfg, stages, vocab, stage_i: int) -> Prefetcher | ProcessPrefetcher:
    if kind == "thread":
        return Prefetcher(lambda i, s: step_batch(cfg, stages, i, s, vocab), max_steps=cfg.train.max_steps, pin=False)
    return ProcessPrefetcher(cfg, stages, vocab, stage_i)


def _waits(pre, stage_i: int, steps: int, step_s: float) -> list[float]:
    """The loop's wait for each of ``steps`` batches after four warm-up steps, the device's step
    stood in for by a sleep of ``step_s`` (the host waits for the device there); closes ``pre``."""
    waits = []
    try:
        for s in range(steps + 4):
            pre.get(stage_i, s)
            if s >= 4:
                waits.append(pre.wait_s)
            time.sleep(step_s)
    finally:
        pre.close()
    return waits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--calls", type=int, default=9)
    ap.add_argument("--kinds", nargs="+", default=["thread", "process"], choices=["thread", "process"])
    ap.add_argument("--out", default=str(HERE / "results.jsonl"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    hw = OmegaConf.load(ROOT / "conf" / "hardware" / "h100.yaml")
    peak = float(hw.flops.bfloat16)
    env = {
        "cpu": device_name(torch.device("cpu")),
        "host_cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "git": git_commit(),
        "command": "python " + " ".join(sys.argv),
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    OUT[0] = str(out)
    header: dict[str, Any] = {"type": "header", "exp": "host_data", "started": now(), "git": env["git"], "hardware": hardware()}
    header |= {"torch": torch.__version__, "threads": 1, "load_before": os.getloadavg()[0], "command": env["command"]}
    with out.open("w") as f:
        f.write(json.dumps(header) + "\n")
        for exp in ("train", "multihop"):
            cfg = compose_cfg([f"+exp={exp}", f"design={DESIGN}", f"train.tokens_per_step={TOKENS}", "train.batch=1000000"])
            stages, vocab = stages_of(cfg.train), vocab_of(cfg)
            for i, stage in enumerate(stages):
                inline = []
                for c in range(a.calls):
                    t0 = time.perf_counter()
                    x, y = step_batch(cfg, stages, i, c, vocab)
                    answer_columns(y)
                    inline.append(time.perf_counter() - t0)
                rows, T = x.shape  # the last call's (a mixed stage draws its length per step)
                answers = int((y != -100).sum())
                for w in a.widths:
                    model = OmegaConf.create(ladder_model(cfg.model, w))
                    flops = train_flops(model, cfg.attention[DESIGN], batch=rows, seq_len=T, answers=answers)
                    step_s = flops / (FRACTION * peak)
                    target = SHARE * step_s
                    for prefetcher in a.kinds:
                        waits = _waits(_prefetcher(prefetcher, cfg, stages, vocab, i), i, a.steps, step_s)
                        rec = {
                            "type": "record",
                            "metric": "host_data/wait",
                            "unit": "s",
                            "value": statistics.median(waits),
                            "device": "cpu",
                            "exp": "host_data",
                            "curriculum": exp,  # the needle (train) or chain (multihop) curriculum
                            "stage": i + 1,
                            "lengths": stage.lengths(),
                            "rows_x_len": [rows, T],
                            "width": w,
                            "design": DESIGN,
                            "prefetcher": prefetcher,
                            "inline_s": {"median": statistics.median(inline), "min": min(inline), "max": max(inline), "calls": a.calls},
                            "prefetched_wait_s": {"median": statistics.median(waits), "max": max(waits), "steps": len(waits)},
                            "device_step_s": step_s,
                            "device_step": f"projected: {flops:.3e} FLOPs at {FRACTION:.0%} of the H100's dense bf16 peak {peak:.3e}",
                            "target_s": target,
                            "inline_meets": statistics.median(inline) < target,
                            "prefetched_meets": statistics.median(waits) < target,
                            "status": "measured",
                            "load_1min": os.getloadavg()[0],
                            **env,
                        }
                        f.write(json.dumps(rec) + "\n")
                        f.flush()
                        print(
                            f"{exp} stage {i + 1} w{w} {prefetcher}: inline {statistics.median(inline) * 1e3:.2f} ms, "
                            f"wait {statistics.median(waits) * 1e6:.0f} us (max {max(waits) * 1e6:.0f}), target {target * 1e6:.0f} us"
                        )


if __name__ == "__main__":
    from attnbench.scripts import run_script

    run_script(main, "host_data", OUT)
