"""Task generators: deterministic by seed, numpy, one sample = a context and its probes.

A context is ``[BOS] haystack-with-needles [SEP]``; a needle is two tokens ``[K_a V_b]``
("a maps to b"). A probe is a token sequence fed after the context, with a target token at
some positions (-1 elsewhere); it is scored by exact match on all its targets. Answers of one
probe are never visible to another (each probe starts from the same cache snapshot), and a
probe's tokens never contain its own answers ahead of where they are predicted.

Families (RULER-style needle in a haystack, and multi-hop):
  niah single      one needle; probe [K_a] -> V_b
  niah multikey    one needle per depth (the others are distractors); one probe per needle
  niah multivalue  one key with m values in order; probe [K_a V_1 .. V_{m-1}] -> V_1 .. V_m
  niah multiquery  m needles; one probe [K_1 .. K_m] -> V_1 .. V_m
  chain            chains a->b->c.. of `hops` needles [K_a V_b] [K_b V_c] ..; probe [HOP_k K_a] -> V_z:
                   only the start key is given and only the final value is scored, so the k
                   lookups must be composed inside the model (a model that does one exact lookup
                   answers V_b, which is wrong from 2 hops on). Diagnostic (Probe.lookups, scored
                   apart): the k single lookups with every intermediate key given,
                   [K_a K_b ..] -> [V_b V_c ..]; it needs no composition.
  vartrack         RULER variable tracking: x1 = v, x2 = x1, ..: needles [K_x1 V_v] [K_x2 V_x1] ..;
                   probe [HOP_k V_v] -> K_xk (k reverse lookups composed); diagnostic
                   [V_v K_x1 ..] -> [K_x1 K_x2 ..] (every intermediate variable given)

The training batches of the same formats are in attnbench/tasks/batches.py (mqar_batch on
mqar_arrays here, chain_batch); task_samples() is the one entry point the experiments and the
verdicts use (mqar_samples for exp=capacity's MQAR probes).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from attnbench.names import HOP_TASKS, NIAH_VARIANTS

from .stage import Stage
from .vocab import BOS, SEP, Vocab


@dataclass
class Probe:
    tokens: list[int]
    targets: list[int]  # same length; -1 where nothing is scored
    depth: float | None = None  # where its needle sits in the haystack (0 = start, 1 = end)
    hops: int | None = None
    # multi-hop only, a diagnostic scored apart: the same chain as k single lookups with every
    # intermediate key given (tokens, targets); it needs no composition
    lookups: tuple[list[int], list[int]] | None = None


@dataclass
class Sample:
    task: str
    context: np.ndarray  # int64 (L,), starts with BOS, ends with SEP
    probes: list[Probe] = field(default_factory=list)


def haystack(rng: np.random.Generator, n: int, vocab: Vocab, kind: str = "noise", value_noise: float = 0.0) -> np.ndarray:
    """n filler tokens. kind="noise": i.i.d. uniform; "markov": a fixed random bigram language
    (each filler token has 4 likely successors), so the haystack has structure a model can
    model. value_noise: this fraction of positions holds a random value token, so "the value
    token in the context" is not an answer by itself."""
    if kind == "noise":
        out = vocab.filler(rng.integers(0, vocab.n_filler, n))
    elif kind == "markov":
        table = np.random.default_rng(12345).integers(0, vocab.n_filler, (vocab.n_filler, 4))  # the language, fixed
        choice = rng.integers(0, 4, n)
        state = np.empty(n, dtype=np.int64)
        s = int(rng.integers(0, vocab.n_filler))
        for i in range(n):  # a Python loop, but only for the (opt-in) markov haystack
            state[i] = s
            s = int(table[s, choice[i]])
        out = vocab.filler(state)
    else:
        raise ValueError(f"haystack kind must be 'noise' or 'markov'; got {kind!r}")
    out = np.asarray(out, dtype=np.int64)
    if value_noise > 0:
        hit = rng.random(n) < value_noise
        out[hit] = vocab.value(rng.integers(0, vocab.n_values, int(hit.sum())))
    return out


def _place(rng, n_slots: int, count: int, depths: list[float] | None = None) -> np.ndarray:
    """Start indices (in units of 2-token slots) for `count` needles, distinct.

    With depths, needle i sits at round(depth_i * (n_slots - 1)), nudged to the nearest free
    slot; the rest are spread at random over the free slots.
    """
    if count > n_slots:
        raise ValueError(f"{count} needles do not fit in a haystack of {n_slots} two-token slots")
    taken: set[int] = set()
    out = []
    for d in depths or []:
        want = int(round(d * (n_slots - 1)))
        for delta in range(n_slots):
            for s in (want - delta, want + delta):
                if 0 <= s < n_slots and s not in taken:
                    taken.add(s)
                    out.append(s)
                    break
            else:
                continue
            break
    rest = count - len(out)
    if rest:
        free = np.setdiff1d(np.arange(n_slots), np.fromiter(taken, dtype=np.int64, count=len(taken)))
        out.extend(rng.choice(free, size=rest, replace=False).tolist())
    return np.asarray(out, dtype=np.int64)


def _context(
    rng, vocab: Vocab, context_len: int, needles: list[tuple[int, int]], depths: list[float] | None, kind: str, value_noise: float
) -> tuple[np.ndarray, np.ndarray]:
    """BOS + haystack with the needles written in + SEP, exactly context_len tokens.

    Returns the context and each needle's depth (its relative position in the haystack)."""
    body = context_len - 2
    if body < 2 * len(needles):
        raise ValueError(f"context_len={context_len} cannot hold {len(needles)} needles")
    hay = haystack(rng, body, vocab, kind, value_noise)
    n_slots = body // 2
    slots = _place(rng, n_slots, len(needles), depths)
    for (k, v), s in zip(needles, slots):
        hay[2 * s], hay[2 * s + 1] = k, v
    context = np.concatenate([[BOS], hay, [SEP]]).astype(np.int64)
    return context, slots / max(n_slots - 1, 1)


def niah(
    rng,
    vocab: Vocab,
    context_len: int,
    variant: str,
    depths: list[float],
    *,
    distractors: int = 0,
    m: int = 4,
    kind: str = "noise",
    value_noise: float = 0.0,
) -> list[Sample]:
    """Needle-in-a-haystack samples for one context length (one per depth for `single`)."""
    if variant not in NIAH_VARIANTS:
        raise ValueError(f"niah variant must be one of {NIAH_VARIANTS}; got {variant!r}")
    samples = []
    if variant == "single":
        for d in depths:
            k, v = rng.integers(0, vocab.n_keys), rng.integers(0, vocab.n_values)
            ctx, placed = _context(rng, vocab, context_len, [(vocab.key(k), vocab.value(v))], [d], kind, value_noise)
            samples.append(Sample(f"niah_{variant}", ctx, [Probe([int(vocab.key(k))], [int(vocab.value(v))], float(placed[0]))]))
        return samples
    n_needles = {"multikey": len(depths) + distractors, "multivalue": m + distractors, "multiquery": m + distractors}[variant]
    n_keys = n_needles if variant != "multivalue" else 1 + distractors
    keys = rng.permutation(vocab.n_keys)[:n_keys]
    values = rng.integers(0, vocab.n_values, n_needles)
    if variant == "multivalue":  # distinct values, so "the value after V_i" is well defined
        values[:m] = rng.permutation(vocab.n_values)[:m]
    if variant == "multikey":
        pairs = [(vocab.key(k), vocab.value(v)) for k, v in zip(keys, values)]
        ctx, placed = _context(rng, vocab, context_len, pairs, depths, kind, value_noise)
        probes = [
            Probe([int(vocab.key(k))], [int(vocab.value(v))], float(p))
            for k, v, p in zip(keys[: len(depths)], values[: len(depths)], placed[: len(depths)])
        ]
    elif variant == "multiquery":
        pairs = [(vocab.key(k), vocab.value(v)) for k, v in zip(keys, values)]
        ctx, placed = _context(rng, vocab, context_len, pairs, None, kind, value_noise)
        probes = [Probe([int(vocab.key(k)) for k in keys[:m]], [int(vocab.value(v)) for v in values[:m]])]
    else:  # multivalue: key 0 carries m values, in position order
        pairs = [(vocab.key(keys[0]), vocab.value(v)) for v in values[:m]]
        pairs += [(vocab.key(k), vocab.value(v)) for k, v in zip(keys[1:], values[m:])]
        ctx, placed = _context(rng, vocab, context_len, pairs, None, kind, value_noise)
        order = np.argsort(placed[:m])
        vals = [int(vocab.value(values[i])) for i in order]
        probes = [Probe([int(vocab.key(keys[0]))] + vals[:-1], vals, float(placed[order[0]]))]
    samples.append(Sample(f"niah_{variant}", ctx, probes))
    return samples


def multihop(
    rng, vocab: Vocab, context_len: int, task: str, hops: int, *, n_chains: int = 2, kind: str = "noise", value_noise: float = 0.0
) -> Sample:
    """Chains of `hops` lookups scattered in a haystack, one compositional probe per chain."""
    if task not in HOP_TASKS:
        raise ValueError(f"multi-hop task must be one of {HOP_TASKS}; got {task!r}")
    n_symbols = min(vocab.n_keys, vocab.n_values)
    if n_chains * (hops + 1) > n_symbols:
        raise ValueError(f"{n_chains} chains of {hops} hops need {n_chains * (hops + 1)} distinct symbols; the vocabulary has {n_symbols}")
    hop = vocab.hop(hops)
    symbols = rng.permutation(n_symbols)[: n_chains * (hops + 1)].reshape(n_chains, hops + 1)
    pairs, probes = [], []
    for chain in symbols:
        if task == "vartrack":  # x1 = v (a value), x_{i+1} = x_i; the query names v
            v, xs = chain[0], chain[1:]
            pairs.append((vocab.key(xs[0]), vocab.value(v)))
            pairs += [(vocab.key(xs[i + 1]), vocab.value(xs[i])) for i in range(hops - 1)]
            lookups = ([int(vocab.value(v))] + [int(vocab.key(x)) for x in xs[:-1]], [int(vocab.key(x)) for x in xs])
            probes.append(Probe([hop, int(vocab.value(v))], [-1, int(vocab.key(xs[-1]))], hops=hops, lookups=lookups))
        else:  # a -> b -> c ...: needle [K_a V_b], [K_b V_c], ...
            pairs += [(vocab.key(chain[i]), vocab.value(chain[i + 1])) for i in range(hops)]
            lookups = ([int(vocab.key(s)) for s in chain[:-1]], [int(vocab.value(s)) for s in chain[1:]])
            probes.append(Probe([hop, int(vocab.key(chain[0]))], [-1, int(vocab.value(chain[-1]))], hops=hops, lookups=lookups))
    order = rng.permutation(len(pairs))  # scatter the hops of every chain
    ctx, _ = _context(rng, vocab, context_len, [pairs[i] for i in order], None, kind, value_noise)
    return Sample(task, ctx, probes)


def task_samples(
    rng,
    vocab: Vocab,
    context_len: int,
    task: str,
    *,
    depths=(0.0, 0.25, 0.5, 0.75, 1.0),
    hops: int = 1,
    chains: int = 2,
    kind: str = "noise",
    value_noise: float = 0.0,
) -> list[Sample]:
    """The samples of one haystack of ``task``: ``niah_<variant>`` (one sample per depth for
    ``single``) or a multi-hop task (``chain`` | ``vartrack``, ``hops`` and ``chains``)."""
    if task.startswith("niah_"):
        return niah(rng, vocab, context_len, task[len("niah_") :], [float(d) for d in depths], kind=kind, value_noise=value_noise)
    return [multihop(rng, vocab, context_len, task, hops, n_chains=chains, kind=kind, value_noise=value_noise)]


def mqar_arrays(rng: np.random.Generator, vocab: Vocab, stage: Stage, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The MQAR training format (tasks/batches.mqar_batch) as numpy arrays: inputs (batch,
    stage.seq_len) and the answer of each query (batch, stage.n_queries), the value of the key
    asked; the answers never enter the input."""
    B, N, M = batch, stage.n_pairs, stage.n_queries
    body = stage.context_len - 2
    n_slots = body // 2
    if N > n_slots or N > stage.n_keys or M > N:
        raise ValueError(f"stage {stage}: needs n_queries <= n_pairs <= min(n_keys, haystack slots={n_slots})")
    rows = np.arange(B)[:, None]
    hay = vocab.filler(rng.integers(0, stage.n_filler, (B, body)))
    if stage.value_noise > 0:
        noisy = rng.random((B, body)) < stage.value_noise
        hay = np.where(noisy, vocab.value(rng.integers(0, stage.n_values, (B, body))), hay)
    keys = np.argsort(rng.random((B, stage.n_keys)), axis=1)[:, :N]  # distinct keys per row
    values = rng.integers(0, stage.n_values, (B, N))
    slots = np.argsort(rng.random((B, n_slots)), axis=1)[:, :N]  # distinct 2-token slots
    hay[rows, 2 * slots] = vocab.key(keys)
    hay[rows, 2 * slots + 1] = vocab.value(values)
    asked = np.argsort(rng.random((B, N)), axis=1)[:, :M]
    queries = vocab.key(keys[rows, asked])
    answers = vocab.value(values[rows, asked])
    inputs = np.concatenate([np.full((B, 1), BOS), hay, np.full((B, 1), SEP), queries], axis=1)
    return inputs, answers


def mqar_samples(rng: np.random.Generator, vocab: Vocab, stage: Stage, n: int) -> list[Sample]:
    """``n`` MQAR contexts of ``stage`` with one query each, as evaluation samples: the training
    format at its own length, one probe a context so that probes are independent (exp=capacity
    scores a model on them by key-value pairs)."""
    x, answers = mqar_arrays(rng, vocab, replace(stage, n_queries=1, max_context_len=0), n)
    x = x.astype(np.int64)
    L = stage.context_len
    return [Sample("mqar", row[:L].copy(), [Probe([int(row[L])], [int(a[0])])]) for row, a in zip(x, answers)]
