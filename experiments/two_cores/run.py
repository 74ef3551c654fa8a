"""Two cores, two ways (issue 24, item 3): which way of using the machine's two cores trains the
most task models per hour?

    python experiments/two_cores/run.py [--designs lightning_hybrid_h8 softmax] [--stages 1 6]
                                        [--budget 100] [--out experiments/two_cores/run/results.jsonl]

For each design and curriculum stage, three ways of spending the two cores, run one after the
other on an otherwise idle machine, each a real ``+exp=train`` of the CLI (the fast step,
fair-v1's batch and optimiser) whose curriculum is that one stage, stopped by ``train.budget``:

- ``one_2t``: one training at ``threads=2``;
- ``two_1t``: two trainings at ``threads=1`` at once, pinned to a core each (``taskset``), seeds
  0 and 1 (two models);
- ``ddp_2p``: one training over ``torchrun --standalone --nproc_per_node=2`` (DDP over gloo,
  ``threads=1`` a process; the global batch split in two).

The rate of a way is the sum of its trainings' steady tokens/s, read from each training's own
``record.json`` (``stage_rates``: the steps' own seconds, compile time left out). Models per hour
is that rate over a model's tokens, so the ratios between the ways are what decides; the
fraction of the two-thread matmul peak (calibrated here first) puts them in the run's own terms.
Every training runs in a fresh cache, so nothing is found trained.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

# The needle curriculum's stages by number (conf/curriculum of exp=train: config.default_stages)
WAYS = ("one_2t", "two_1t", "ddp_2p")


def stage_override(stage: dict) -> str:
    body = ",".join(f"{k}:{v}" for k, v in stage.items())
    return f"train.stages=[{{{body}}}]"


def train_cmd(design: str, stage: dict, threads: int, seed: int, budget: int, rundir: Path) -> list[str]:
    return [
        "-m",
        "attnbench",
        "+exp=train",
        f"design={design}",
        f"seed={seed}",
        f"threads={threads}",
        f"train.budget={budget}s",
        "wandb.mode=disabled",
        stage_override(stage),
        f"hydra.run.dir={rundir}",
    ]


def records(cache: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((cache / "checkpoints").glob("*/record.json"))]


def run_way(way: str, design: str, stage: dict, budget: int, work: Path) -> dict:
    cache = work / f"cache_{way}"
    cache.mkdir(parents=True)
    env = {**os.environ, "ATTNBENCH_CACHE": str(cache), "PYTHONHASHSEED": "0"}
    t0 = time.perf_counter()
    if way == "one_2t":
        procs = [subprocess.Popen([sys.executable, *train_cmd(design, stage, 2, 0, budget, work / way)], env=env)]
    elif way == "two_1t":
        procs = [
            subprocess.Popen(
                ["taskset", "-c", str(core), sys.executable, *train_cmd(design, stage, 1, core, budget, work / f"{way}_{core}")], env=env
            )
            for core in (0, 1)
        ]
    else:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc_per_node=2",
                    *train_cmd(design, stage, 1, 0, budget, work / way)[1:],
                    "train.parallel=ddp",
                ],
                env=env,
            )
        ]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    recs = records(cache)
    rates = []
    for r in recs:
        rows = r.get("stage_rates") or []
        rates.append(
            {
                "key": r.get("key"),
                "seed": r.get("config", {}).get("seed"),
                "status": r.get("status"),
                "steps": r.get("steps"),
                "tokens_s": rows[0]["tokens_s"] if rows else None,
                "compile_s": rows[0].get("compile_s") if rows else None,
                "shares": rows[0].get("shares") if rows else None,
            }
        )
    ok = all(c == 0 for c in codes) and len(rates) == (2 if way == "two_1t" else 1) and all(x["tokens_s"] for x in rates)
    return {
        "way": way,
        "status": "measured" if ok else "failed",
        "exit_codes": codes,
        "wall_s": round(wall, 1),
        "trainings": rates,
        "tokens_s": round(sum(x["tokens_s"] or 0 for x in rates), 1) if ok else None,
    }


OUT = [""]  # the results file main() writes (its footer is appended when the script ends)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--designs", nargs="+", default=["lightning_hybrid_h8", "softmax"])
    ap.add_argument("--stages", nargs="+", type=int, default=[1, 6], help="needle curriculum stages, 1-based")
    ap.add_argument("--budget", type=int, default=100, help="seconds of each training (train.budget)")
    ap.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    ap.add_argument("--out", default=str(Path(__file__).with_name("run") / "results.jsonl"))
    args = ap.parse_args()
    OUT[0] = args.out

    import torch
    from omegaconf import OmegaConf

    from attnbench.training import rate as train_rate
    from attnbench.records.lines import git_commit, hardware, now
    from helpers import compose_cfg

    peaks = {}
    for n in (1, 2):
        torch.set_num_threads(n)
        peaks[n] = train_rate.calibrate_peak()
    cfg = compose_cfg(["+exp=train"])
    stages = OmegaConf.to_container(cfg.train.stages)
    assert isinstance(stages, list), stages  # train.stages is a list of stages
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "type": "header",
        "exp": "two_cores",
        "started": now(),
        "git": git_commit(),
        "hardware": hardware(),
        "torch": torch.__version__,
        "matmul_flops_1t": peaks[1],
        "matmul_flops_2t": peaks[2],
        "load_before": os.getloadavg()[0],
        "budget_s": args.budget,
        "command": " ".join(["python", *sys.argv]),
    }
    with open(out, "a") as f:
        f.write(json.dumps(header) + "\n")
    for design in args.designs:
        dcfg = compose_cfg(["+exp=train", f"design={design}"])
        for no in args.stages:
            stage = {k: v for k, v in stages[no - 1].items() if v is not None}
            flops = train_rate.stage_flops(dcfg, dcfg.attention[design], stages_of(dcfg)[no - 1])
            rows = []
            for way in args.ways:
                with tempfile.TemporaryDirectory(prefix=f"two_cores_{way}_") as work:
                    before = os.getloadavg()[0]
                    row = run_way(way, design, stage, args.budget, Path(work))
                row.update(
                    type="record",
                    exp="two_cores",
                    design=design,
                    stage=no,
                    lengths=stages_of(dcfg)[no - 1].lengths(),
                    metric="train_tokens_s/two_cores",
                    unit="tokens/s",
                    value=row["tokens_s"],
                    flops_per_token=round(flops),
                    fraction_of_2t_peak=round(row["tokens_s"] * flops / peaks[2], 4) if row["tokens_s"] else None,
                    load_before=before,
                    load_after=os.getloadavg()[0],
                )
                rows.append(row)
                with open(out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{design} stage {no} {way}: {row['tokens_s']} tokens/s ({row['status']}, {row['wall_s']} s)", flush=True)


def stages_of(cfg):
    from attnbench.training.trainer import stages_of as f

    return f(cfg.train)


if __name__ == "__main__":
    from attnbench.scripts import run_script

    run_script(main, "two_cores", OUT)
