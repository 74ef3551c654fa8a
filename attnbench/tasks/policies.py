"""Simple policies that answer a probe without doing the task, run on generated samples: the
floors an accuracy must clear before it says anything.

Each policy looks at a probe's context (and at the probe's own tokens, never at its answers)
and names, for every scored target, the tokens it guesses among uniformly. Its expected
accuracy on a probe is the product over targets of ``(answer in pool) / len(pool)``: exact, so
running it on the generator's samples gives the floor with no sampling noise of its own.

  uniform guess                a value from the task's value vocabulary (a key: from the keys):
                               the chance level
  a value in the context       a needle value of this context (the token after a key): the
                               "values in context" plateau every design sat on in training
  a value whose key never      a needle value whose other form (V_i -> K_i) is not a needle key
  appears                      of this context: the end of a chain, found with no lookup (with 3
                               chains a haystack, 1/3 at every hop count)
  the first hop                the one lookup the probe's own token names (the needle value
                               after the start key): right at 1 hop, wrong from 2 on; on a
                               needle probe this is the task itself, so it is not a floor there

``task_levels`` (tasks/levels.py) reports them all for a task; the report draws the first two
(chance and the values-in-context floor) and lists every one under the claims that use them.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .generate import Probe, Sample
from .vocab import Vocab

# (context, the probe's tokens, the index of a scored target, whether that answer is a key, vocab)
# -> the tokens guessed among. Whether the answer is a key or a value is the task's format
# (a chain ends on a value, variable tracking on a key); the answer itself is never seen.
Policy = Callable[[np.ndarray, list[int], int, bool, Vocab], set[int]]


def needles(context: np.ndarray, vocab: Vocab) -> list[tuple[int, int]]:
    """Every [K V] pair of a context: (key token, the token after it)."""
    ctx = np.asarray(context)
    at = np.flatnonzero(vocab.is_key(ctx[:-1]))
    return [(int(ctx[i]), int(ctx[i + 1])) for i in at]


def _is_key(token: int, vocab: Vocab) -> bool:
    return bool(vocab.is_key([token])[0])


def _other_form(token: int, vocab: Vocab) -> int:
    """K_i <-> V_i (multi-hop chains use both forms of a symbol)."""
    if _is_key(token, vocab):
        return int(vocab.value(token - int(vocab.key(0))))
    return int(vocab.key(token - int(vocab.value(0))))


def uniform(context, tokens, j, key: bool, vocab: Vocab) -> set[int]:
    first, n = (int(vocab.key(0)), vocab.n_keys) if key else (int(vocab.value(0)), vocab.n_values)
    return set(range(first, first + n))


def in_context(context, tokens, j, key: bool, vocab: Vocab) -> set[int]:
    pairs = needles(context, vocab)
    if key:
        return {k for k, _ in pairs}
    return {v for _, v in pairs if vocab.value(0) <= v < vocab.value(vocab.n_values)}


def unseen_other_form(context, tokens, j, key: bool, vocab: Vocab) -> set[int]:
    present = {t for pair in needles(context, vocab) for t in pair}
    return {t for t in in_context(context, tokens, j, key, vocab) if _other_form(t, vocab) not in present}


def first_hop(context, tokens, j, key: bool, vocab: Vocab) -> set[int]:
    """The needle partner of the token the target is predicted at (key -> its value, value -> its key)."""
    q = int(tokens[j])
    pairs = needles(context, vocab)
    if _is_key(q, vocab):
        return {v for k, v in pairs if k == q}
    return {k for k, v in pairs if v == q}


POLICIES: dict[str, Policy] = {
    "uniform guess": uniform,
    "a value in the context": in_context,
    "a value whose key never appears": unseen_other_form,
    "the first hop": first_hop,
}
CHANCE, FLOOR = "uniform guess", "a value in the context"  # what tasks/levels.Levels calls chance and floor


def probe_accuracy(policy: Policy, context: np.ndarray, tokens: list[int], targets: list[int], vocab: Vocab) -> float:
    """Expected exact-match accuracy of ``policy`` on one probe (every scored target right)."""
    acc = 1.0
    for j, t in enumerate(targets):
        if t < 0:
            continue
        pool = policy(context, tokens, j, _is_key(int(t), vocab), vocab)
        acc *= (t in pool) / len(pool) if pool else 0.0
    return acc


def policy_accuracies(samples: list[Sample], vocab: Vocab, *, lookups: bool = False) -> dict[str, float]:
    """Mean expected accuracy of every policy over every probe of ``samples`` (``lookups``: the
    multi-hop diagnostic probes, every intermediate key given, instead of the compositional ones)."""
    scores: dict[str, list[float]] = {name: [] for name in POLICIES}
    for s in samples:
        for p in s.probes:
            tokens, targets = _scored(p, lookups)
            for name, policy in POLICIES.items():
                scores[name].append(probe_accuracy(policy, s.context, tokens, targets, vocab))
    return {name: float(np.mean(v)) if v else float("nan") for name, v in scores.items()}


def _scored(p: Probe, lookups: bool) -> tuple[list[int], list[int]]:
    if lookups and p.lookups:
        return list(p.lookups[0]), list(p.lookups[1])
    return list(p.tokens), list(p.targets)
