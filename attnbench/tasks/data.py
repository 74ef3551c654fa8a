"""Evaluation samples cached as Hugging Face ``datasets`` on disk, keyed by what made them.

A rerun (or another experiment asking for the same haystacks) loads them instead of
generating again. Each dataset carries a card-like description of its fields.

The task data (what a model is evaluated on); attnbench/report/frame.py is another thing, the
records of finished runs loaded into one table for the report.
"""

from __future__ import annotations

import math
import os
import shutil
from typing import Callable

import numpy as np

from attnbench.basics import cache_root
from attnbench.basics import stable_hash
from .generate import Probe, Sample

SAMPLES_FORMAT = 2  # 2: multi-hop probes are compositional ([HOP_k K_a] -> V_z) with per-hop lookups apart

DESCRIPTION = """attnbench long-context task samples (generated, deterministic by seed).

Fields:
  task           str        niah_single | niah_multikey | niah_multivalue | niah_multiquery | chain | vartrack
  context        int32[L]   BOS, haystack with needles [K_a V_b], SEP (L = the context length)
  probe_tokens   int32[][]  per probe, the tokens fed after the context
  probe_targets  int32[][]  per probe, the expected token at each position (-1: not scored);
                            a probe is correct when every target is predicted exactly
  probe_depth    float32[]  per probe, its needle's relative position in the haystack (NaN: n/a)
  probe_hops     int32[]    per probe, lookups it chains (-1: n/a)
  probe_lookup_tokens, probe_lookup_targets  int32[][]  multi-hop only (else empty): the
                            diagnostic k single lookups with every intermediate key given
Vocabulary: attnbench.tasks.vocab (PAD 0, BOS 1, SEP 2, HOP1-4 3..6, then keys, values, filler).
"""


def _features():
    from datasets import Features, Sequence, Value

    return Features(
        {
            "task": Value("string"),
            "context": Sequence(Value("int32")),
            "probe_tokens": Sequence(Sequence(Value("int32"))),
            "probe_targets": Sequence(Sequence(Value("int32"))),
            "probe_depth": Sequence(Value("float32")),
            "probe_hops": Sequence(Value("int32")),
            "probe_lookup_tokens": Sequence(Sequence(Value("int32"))),
            "probe_lookup_targets": Sequence(Sequence(Value("int32"))),
        }
    )


def _row(s: Sample) -> dict:
    return {
        "task": s.task,
        "context": s.context.astype(np.int32),
        "probe_tokens": [p.tokens for p in s.probes],
        "probe_targets": [p.targets for p in s.probes],
        "probe_depth": [float("nan") if p.depth is None else p.depth for p in s.probes],
        "probe_hops": [-1 if p.hops is None else p.hops for p in s.probes],
        "probe_lookup_tokens": [list(p.lookups[0]) if p.lookups else [] for p in s.probes],
        "probe_lookup_targets": [list(p.lookups[1]) if p.lookups else [] for p in s.probes],
    }


def _sample(row: dict) -> Sample:
    n = len(row["probe_tokens"])
    lt, lg = row.get("probe_lookup_tokens") or [[]] * n, row.get("probe_lookup_targets") or [[]] * n
    probes = [
        Probe(list(t), list(g), None if math.isnan(d) else float(d), None if h < 0 else int(h), (list(a), list(b)) if len(a) else None)
        for t, g, d, h, a, b in zip(row["probe_tokens"], row["probe_targets"], row["probe_depth"], row["probe_hops"], lt, lg)
    ]
    return Sample(row["task"], np.asarray(row["context"], dtype=np.int64), probes)


def cached_samples(name: str, params: dict, make: Callable[[], list[Sample]]) -> list[Sample]:
    """Load the samples for (name, params) from the cache, or make and save them."""
    from datasets import Dataset, DatasetInfo, disable_progress_bars, load_from_disk

    disable_progress_bars()  # the experiment shows its own progress; these saves take < 1 s

    folder = cache_root() / "data" / f"{name}-{stable_hash({**params, 'samples_format': SAMPLES_FORMAT})}"
    if (folder / "dataset_info.json").exists():
        ds = load_from_disk(str(folder)).with_format("numpy", columns=["context"], output_all_columns=True)
        return [_sample(row) for row in ds]
    samples = make()
    info = DatasetInfo(description=DESCRIPTION + f"\nGenerator: {name} {params}\n", features=_features())
    ds = Dataset.from_list([_row(s) for s in samples], features=_features(), info=info)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    ds.save_to_disk(str(tmp))
    if folder.exists():  # another process finished first; theirs is identical
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, folder)
    return samples
