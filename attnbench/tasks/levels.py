"""What an accuracy must beat: a task's chance level and its "values in context" floor.

Both are computed from the task's own generator (tasks/generate.py), on samples made the way
the experiments make them, so they follow the task when it changes:

  chance  a model that guesses each scored answer uniformly from the task's answer vocabulary
          (a value: 1 / n_values; a key: 1 / n_keys); a probe with several scored targets
          needs all of them.
  floor   the "values in context" strategy: a model that has learned which tokens are needle
          answers but does no lookup, and answers with one of this context's needle values
          (the token after a key) uniformly (keys: one of the context's keys). It is the
          plateau every design sat on in training ("one of the 4 values in this context").
          A single needle has a floor of 1: finding the one needle is not a lookup.

An accuracy whose 95% interval does not clear the floor shows no lookup at all. Both are two of
the simple policies of tasks/policies.py, run on the generated samples; ``Levels.policies``
holds every one of them (for chains: also "a value whose key never appears", the end of a
chain found with no lookup, and "the first hop").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .generate import Sample, task_samples
from .policies import CHANCE, FLOOR, POLICIES, policy_accuracies, probe_accuracy
from .vocab import Vocab


@dataclass(frozen=True)
class Levels:
    chance: float  # mean over probes
    floor: float  # mean over probes: the "values in context" strategy's expected accuracy
    probes: int  # how many probes the means are over
    policies: tuple[tuple[str, float], ...] = ()  # every simple policy's mean accuracy (tasks/policies.py)


def probe_levels(context: np.ndarray, targets: list[int], vocab: Vocab) -> tuple[float, float]:
    """(chance, floor) of one probe: the uniform guess's and the values-in-context policy's expected accuracy."""
    return probe_accuracy(POLICIES[CHANCE], context, [], targets, vocab), probe_accuracy(POLICIES[FLOOR], context, [], targets, vocab)


def levels_of(samples: list[Sample], vocab: Vocab, *, lookups: bool = False) -> Levels:
    """Mean chance, floor and every policy's accuracy over every probe of ``samples`` (``lookups``:
    the multi-hop diagnostic probes, every intermediate key given, instead of the compositional ones)."""
    acc = policy_accuracies(samples, vocab, lookups=lookups)
    n = sum(len(s.probes) for s in samples)
    if not n:
        return Levels(float("nan"), float("nan"), 0)
    return Levels(acc[CHANCE], acc[FLOOR], n, tuple(acc.items()))


@lru_cache(maxsize=256)
def task_levels(
    vocab: Vocab,
    task: str,
    *,
    depths: tuple = (0.0, 0.25, 0.5, 0.75, 1.0),
    hops: int = 1,
    chains: int = 2,
    kind: str = "noise",
    value_noise: float = 0.0,
    lookups: bool = False,
    haystacks: int = 100,
    context_len: int = 256,
) -> Levels:
    """Levels of ``task`` (as tasks.generate.task_samples names it) from ``haystacks`` generated
    haystacks (fixed seed). Needle counts do not depend on the length, so a short one serves."""
    need = 2 + 2 * max(len(depths), chains * hops) + 2
    length = max(context_len, need)
    samples = []
    for i in range(haystacks):
        samples += task_samples(
            np.random.default_rng([20240, i]),
            vocab,
            length,
            task,
            depths=depths,
            hops=hops,
            chains=chains,
            kind=kind,
            value_noise=value_noise,
        )
    return levels_of(samples, vocab, lookups=lookups)


def batch_levels(inputs, targets, vocab: Vocab, context_len: int) -> Levels:
    """Chance and floor of a training batch (tasks/batches.py): every scored position of every
    row, its context being the row's first ``context_len`` tokens."""
    x, y = np.asarray(inputs), np.asarray(targets)
    pairs = [probe_levels(row_x[:context_len], [int(t)], vocab) for row_x, row_y in zip(x, y) for t in row_y if t >= 0]
    chance, floor = np.mean(pairs, axis=0)
    return Levels(float(chance), float(floor), len(pairs))
