"""Training batches: MQAR-style (many pairs, every key queried), vectorised, deterministic.

    [BOS] haystack with N needles [K_a V_b] [SEP] K_q1 K_q2 ... K_qM
    target at the position of K_qi: its value; no target anywhere else.

Compositional chains (``chain_batch``), the format of the multi-hop probes (tasks/generate.py,
task ``chain``):

    [BOS] haystack with chains [K_a V_b] [K_b V_c] .. [SEP] HOP_k K_a1  HOP_k K_a2 ...
    target at the position of each start key K_ai: the chain's final value; nothing else scored.

The answers never enter the input, so a model cannot score by elimination (docs/DESIGN.md). One
stage of the curriculum fixes how many distinct keys / values / filler tokens are in play,
how many pairs, the context length and the value noise; this is the same format the NIAH
probes use at evaluation time, so the curriculum ends in the evaluation format.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from .vocab import BOS, SEP, Vocab

IGNORE = -100


@dataclass
class Stage:
    """One curriculum stage (also the schema of ``train.stages`` in the config)."""

    n_keys: int = 16
    n_values: int = 16
    n_filler: int = 16
    n_pairs: int = 4
    context_len: int = 24  # BOS + haystack + SEP
    n_queries: int = 4
    value_noise: float = 0.0
    max_context_len: int = 0  # > context_len: each step draws its length from the powers of two in between
    hops: int = 0  # 0: MQAR lookups; k >= 1: chain examples (chain_batch), each step's hop count drawn from 1..k

    @property
    def seq_len(self) -> int:
        """The longest sequence of a step: the context and its probes (a chain probe is [HOP_k K_start])."""
        return self.context_len + self.n_queries * (2 if self.hops else 1)

    def lengths(self) -> list[int]:
        """The context lengths this stage trains on: context_len, doubled up to max_context_len."""
        out = [self.context_len]
        while out[-1] * 2 <= self.max_context_len:
            out.append(out[-1] * 2)
        return out

    @property
    def longest(self) -> int:
        """The longest context of the stage: what passing it proves."""
        return self.lengths()[-1]

    def at(self, context_len: int) -> "Stage":
        """This stage at one fixed context length (a mixed stage's draw for one step)."""
        return replace(self, context_len=context_len, max_context_len=0)


def mqar_batch(rng: np.random.Generator, vocab: Vocab, stage: Stage, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """inputs, targets: (batch, stage.seq_len) int64; targets are IGNORE except at the queries."""
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
    targets = np.full_like(inputs, IGNORE)
    targets[:, stage.context_len :] = answers
    return torch.from_numpy(inputs.astype(np.int64)), torch.from_numpy(targets.astype(np.int64))


def chain_batch(rng: np.random.Generator, vocab: Vocab, stage: Stage, batch: int, hops: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Compositional chain examples in the multi-hop probe format (see the module docstring).

    Each row holds ``n_chains = stage.n_pairs // hops`` chains of ``hops`` needles over distinct
    symbols (symbol i: key form K_i, value form V_i, i < min(stage.n_keys, stage.n_values)), their
    needles scattered over random 2-token slots of the haystack (filler of ``stage.n_filler``
    tokens, ``stage.value_noise`` of it random values). ``min(stage.n_queries, n_chains)``
    chains are queried, each as ``[HOP_k K_start]``; the target sits at ``K_start`` and is the
    chain's final value (IGNORE elsewhere, the HOP tokens included). Answers never enter the
    input. Returns inputs, targets: (batch, stage.context_len + 2 * queries) int64.
    """
    B = batch
    hop = vocab.hop(hops)
    C = stage.n_pairs // hops
    M = min(stage.n_queries, C)
    body = stage.context_len - 2
    n_slots = body // 2
    n_sym = min(stage.n_keys, stage.n_values)
    if C < 1 or C * hops > n_slots or C * (hops + 1) > n_sym:
        raise ValueError(
            f"stage {stage}: {C} chains of {hops} hops need n_pairs >= hops, {C * hops} haystack slots "
            f"(have {n_slots}) and {C * (hops + 1)} distinct symbols (have {n_sym})"
        )
    rows = np.arange(B)[:, None]
    hay = vocab.filler(rng.integers(0, stage.n_filler, (B, body)))
    if stage.value_noise > 0:
        noisy = rng.random((B, body)) < stage.value_noise
        hay = np.where(noisy, vocab.value(rng.integers(0, stage.n_values, (B, body))), hay)
    sym = np.argsort(rng.random((B, n_sym)), axis=1)[:, : C * (hops + 1)].reshape(B, C, hops + 1)
    keys = vocab.key(sym[:, :, :-1]).reshape(B, C * hops)  # needle i of chain c: [K_{s_i} V_{s_(i+1)}]
    values = vocab.value(sym[:, :, 1:]).reshape(B, C * hops)
    slots = np.argsort(rng.random((B, n_slots)), axis=1)[:, : C * hops]
    hay[rows, 2 * slots] = keys
    hay[rows, 2 * slots + 1] = values
    asked = np.argsort(rng.random((B, C)), axis=1)[:, :M]
    starts = vocab.key(sym[rows, asked, 0])  # (B, M)
    finals = vocab.value(sym[rows, asked, hops])
    queries = np.stack([np.full((B, M), hop), starts], axis=2).reshape(B, 2 * M)
    inputs = np.concatenate([np.full((B, 1), BOS), hay, np.full((B, 1), SEP), queries], axis=1)
    targets = np.full_like(inputs, IGNORE)
    targets[:, stage.context_len + 1 :: 2] = finals
    return torch.from_numpy(inputs.astype(np.int64)), torch.from_numpy(targets.astype(np.int64))


def mqar_samples(rng: np.random.Generator, vocab: Vocab, stage: Stage, n: int) -> list:
    """``n`` MQAR contexts of ``stage`` with one query each, as evaluation samples (tasks/generate.Sample):
    the training format at its own length, one probe a context so that probes are independent
    (exp=capacity scores a model on them by key-value pairs)."""
    from .generate import Probe, Sample

    x, y = mqar_batch(rng, vocab, replace(stage, n_queries=1, max_context_len=0), n)
    L = stage.context_len
    return [Sample("mqar", row[:L].numpy().copy(), [Probe([int(row[L])], [int(t[L])])]) for row, t in zip(x, y)]
