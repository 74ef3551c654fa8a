"""Why does the shipped softmax model miss the needle at depth 100%? (issue #11, item 6)

    python experiments/depth_anomaly/run.py            # ~5 min on one CPU thread; rewrites results.jsonl here

The needle_4m run scored softmax 0/8 at depth 100% (2 haystacks x 4 lengths), although it
scores 199/200 single needles at its training length (256). Three measurements, each with
many more probes than the needle_4m cells, on the shipped checkpoint (CPU, fp32):

1. ``depth_anomaly/acc_by_depth``: single needles at 9 depths, at 256, 512 and 1,024 tokens.
2. ``depth_anomaly/acc_by_position``: one needle placed at absolute token position p (its key
   at index p of the context) in contexts of length L, for a grid of (p, L). If the failure
   were about the needle sitting right before the query (RoPE at a short distance, or the
   SEP boundary), accuracy would depend on L - p; if it is about where the needle was written,
   it depends on p.
3. ``depth_anomaly/multikey_by_depth``: the needle_4m task itself (5 needles, depths 0-100%)
   at 1,024 tokens with 40 haystacks instead of 2, to see what the 0/2 at 1K was.

Every accuracy is recorded with its count and 95% Wilson interval; README.md's tables are
generated from these records (python -m attnbench.report.readme.regenerate).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from attnbench import config as config_mod
from attnbench.evaluation.streaming import batch_accuracy, run_sample
from attnbench.records.write import Recorder
from attnbench.basics import stable_hash
from attnbench.records.stats import wilson
from attnbench.tasks.generate import Probe, Sample, haystack, niah
from attnbench.tasks.vocab import BOS, SEP
from attnbench.training.trainer import get_model, vocab_of

HERE = Path(__file__).resolve().parent
N = 64  # probes per cell (single needle), 40 haystacks x 5 for the multikey check
DEPTH_LENGTHS = (256, 512, 1024)
POSITIONS = (64, 256, 448, 640, 832, 1020, 1532, 2044)
LENGTHS = (512, 768, 1024, 1536, 2048)


def needle_at(rng, vocab, L: int, p: int, cfg) -> Sample:
    """A context of L tokens with one needle whose key sits at index p (BOS is index 0)."""
    body = haystack(rng, L - 2, vocab, cfg.task.haystack, cfg.task.value_noise)
    k, v = int(rng.integers(0, vocab.n_keys)), int(rng.integers(0, vocab.n_values))
    ctx = np.concatenate([[BOS], body, [SEP]]).astype(np.int64)
    ctx[p], ctx[p + 1] = vocab.key(k), vocab.value(v)
    return Sample("niah_single", ctx, [Probe([int(vocab.key(k))], [int(vocab.value(v))], (p - 1) / (L - 3))])


def run_config(cfg, trained) -> dict:
    """What the results file's header says the run was."""
    return {
        "exp": {"name": "depth_anomaly", "description": "why softmax misses the depth-100% needle"},
        "model": OmegaConf.to_container(cfg.model),
        "task": OmegaConf.to_container(cfg.task),
        "eval": {"depths": list(cfg.eval.depths)},
        "train": OmegaConf.to_container(cfg.train),
        "checkpoint": trained.record["key"],
        "probes_per_cell": N,
        "seed": 0,
        "device": "cpu",
    }


def multikey_hits(model, vocab, cfg, device, n_hay: int):
    """Hits per depth over n_hay multi-key haystacks of 1024 tokens (each probe scored on its own)."""
    hits = np.zeros(len(cfg.eval.depths))
    for i in range(n_hay):
        (s,) = niah(
            np.random.default_rng([3, 1024, i]),
            vocab,
            1024,
            "multikey",
            [float(d) for d in cfg.eval.depths],
            kind=cfg.task.haystack,
            value_noise=cfg.task.value_noise,
        )
        results, _ = run_sample(model, s, device, cfg.eval.chunk)
        hits += [r.correct for r in results]
    return hits, n_hay


def main() -> None:
    start = time.perf_counter()
    torch.set_num_threads(1)
    os.environ.setdefault("ATTNBENCH_CACHE", str(Path.home() / ".cache" / "attnbench"))
    config_mod.register()
    with initialize_config_module(config_module="attnbench.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+exp=needle_4m"])
    device = torch.device("cpu")
    trained = get_model(cfg, "softmax", device)
    model, vocab = trained.model, vocab_of(cfg)
    out = HERE / "results.jsonl"
    out.unlink(missing_ok=True)
    config = run_config(cfg, trained)
    rec = Recorder(out, "depth_anomaly", config, stable_hash(config))
    common = dict(
        design="softmax",
        layout=trained.record["layout"],
        unit="fraction",
        status="measured",
        dtype="float32",
        device="cpu",
        backend="reference",
        train_len=256,
        checkpoint=f"attnbench/trained/softmax-{trained.record['key']}",
    )

    def record(metric, k, n, **fields):
        lo, hi = wilson(k, n)
        rec.record(metric=metric, value=k / n, n=n, k=k, ci_low=lo, ci_high=hi, **common, **fields)
        print(metric, fields, f"{k}/{n}", flush=True)

    for L in DEPTH_LENGTHS:
        for d in np.linspace(0, 1, 9):
            samples = [
                niah(
                    np.random.default_rng([1, L, int(round(d * 8)), i]),
                    vocab,
                    L,
                    "single",
                    [float(d)],
                    kind=cfg.task.haystack,
                    value_noise=cfg.task.value_noise,
                )[0]
                for i in range(N)
            ]
            k, n = batch_accuracy(model, samples, device)
            pos = int(np.flatnonzero(samples[0].context == samples[0].probes[0].tokens[0])[0])
            record("depth_anomaly/acc_by_depth", k, n, task="niah_single", context_len=L, depth=float(d), needle_pos=pos)
    for L in LENGTHS:
        for p in POSITIONS:
            if p + 1 >= L - 1:
                continue
            samples = [needle_at(np.random.default_rng([2, L, p, i]), vocab, L, p, cfg) for i in range(N)]
            k, n = batch_accuracy(model, samples, device)
            record(
                "depth_anomaly/acc_by_position",
                k,
                n,
                task="niah_single",
                context_len=L,
                needle_pos=p,
                distance=L - p,
                depth=round((p - 1) / (L - 3), 3),
            )
    hits, n_hay = multikey_hits(model, vocab, cfg, device, n_hay=40)
    for d, k in zip(cfg.eval.depths, hits):
        record("depth_anomaly/multikey_by_depth", int(k), n_hay, task="niah_multikey", context_len=1024, depth=float(d))
    rec.close("completed", time.perf_counter() - start)


if __name__ == "__main__":
    main()
