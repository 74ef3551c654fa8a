"""Streaming evaluation: prefill a haystack chunk by chunk into the caches, then probe it.

Memory grows only with what the design's cache keeps (KV buffers, a lightning state, a ring
buffer, MSA's K/V and index keys), never with an activation of the whole context. One prefill
serves every probe of a haystack: each probe starts from a snapshot of the cache and the
cache is restored after it, so no probe sees another's answers. The last layer writes only
its cache during the prefill (its outputs are needed only at the probe positions).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import psutil
import torch

from attnbench.model import Model
from attnbench.tasks.generate import Probe, Sample


class PeakRSS:
    """Resident memory of this process while the block runs (sampled every 50 ms).

    ``peak`` is the process's high-water mark during the block, which includes whatever an
    earlier cell left allocated; ``increase`` = peak - the resident memory at the block's start,
    i.e. what this block added (the per-cell figure the experiments record).
    """

    def __enter__(self):
        self.proc, self.peak, self._stop = psutil.Process(), 0, threading.Event()
        self.start = self.peak = self.proc.memory_info().rss

        def watch():
            while not self._stop.wait(0.05):
                self.peak = max(self.peak, self.proc.memory_info().rss)

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def increase(self) -> int:
        return max(0, self.peak - self.start)


@dataclass
class ProbeResult:
    correct: bool  # every target position predicted exactly
    hits: int
    targets: int
    depth: float | None
    hops: int | None
    lookups: "ProbeResult | None" = None  # multi-hop diagnostic: the k single lookups, scored apart
    pred: list[int] | None = None  # the predicted token at each scored position


def score(logits: torch.Tensor, probe: Probe) -> ProbeResult:
    """logits (T', V) at the probe's positions -> exact match on its targets."""
    targets = torch.tensor(probe.targets)
    mask = targets >= 0
    pred = logits.argmax(-1).cpu()
    hits = int((pred[mask] == targets[mask]).sum())
    n = int(mask.sum())
    return ProbeResult(hits == n, hits, n, probe.depth, probe.hops, pred=pred[mask].tolist())


@torch.no_grad()
def run_sample(model: Model, sample: Sample, device: torch.device, chunk: int) -> tuple[list[ProbeResult], dict]:
    """Prefill one context, answer all its probes. Returns results and costs (seconds, bytes)."""
    context = torch.from_numpy(sample.context).to(device)[None]  # (1, L)
    L = context.shape[1]
    cache = model.new_cache()
    cache.reserve(L + max(max(len(p.tokens), len(p.lookups[0]) if p.lookups else 0) for p in sample.probes))
    start = time.perf_counter()
    for s in range(0, L, chunk):
        model.prefill(context[:, s : s + chunk], cache)
    prefill_s = time.perf_counter() - start
    cache_bytes = cache.nbytes()
    snap = cache.snapshot()
    results = []
    start = time.perf_counter()
    for probe in sample.probes:
        tokens = torch.tensor(probe.tokens, device=device)[None]
        result = score(model(tokens, cache).logits[0], probe)
        cache.restore(snap)
        if probe.lookups:  # the diagnostic from the same snapshot: every intermediate key given
            diag = Probe(*probe.lookups, probe.depth, probe.hops)
            result.lookups = score(model(torch.tensor(diag.tokens, device=device)[None], cache).logits[0], diag)
            cache.restore(snap)
        results.append(result)
    return results, {"prefill_s": prefill_s, "probe_s": time.perf_counter() - start, "cache_bytes": cache_bytes}


@torch.no_grad()
def batch_accuracy(model: Model, samples: list[Sample], device: torch.device, batch: int = 64) -> tuple[int, int]:
    """Exact-match count over samples of equal context length, run as full-sequence batches."""
    correct = total = 0
    for i in range(0, len(samples), batch):
        group = samples[i : i + batch]
        for probe_i in range(len(group[0].probes)):
            seqs = [np.concatenate([s.context, s.probes[probe_i].tokens]) for s in group]
            x = torch.from_numpy(np.stack(seqs)).to(device)
            n = len(group[0].probes[probe_i].tokens)
            logits = model(x, logits_at=slice(x.shape[1] - n, None)).logits  # (B, n, V)
            for s, lg in zip(group, logits):
                correct += score(lg, s.probes[probe_i]).correct
                total += 1
    return correct, total
