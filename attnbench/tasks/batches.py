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


import numpy as np
import torch

from .generate import mqar_arrays
from .stage import Stage
from .vocab import BOS, SEP, Vocab

IGNORE = -100


def mqar_batch(rng: np.random.Generator, vocab: Vocab, stage: Stage, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """inputs, targets: (batch, stage.seq_len) int64; targets are IGNORE except at the queries
    (the arrays of tasks/generate.mqar_arrays)."""
    inputs, answers = mqar_arrays(rng, vocab, stage, batch)
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


def answer_columns(y: torch.Tensor) -> torch.Tensor | None:
    """(P,) the columns of y that hold every row's answers, or None where the answers do not sit
    in shared columns (none of attnbench's tasks). Reads y's values: call it on the host's y,
    before the batch moves to a device (Local.step), so the step itself reads nothing back."""
    mask = y != IGNORE
    cols = mask.any(0).nonzero().squeeze(1)  # (P,)
    if bool(mask[:, cols].all()) and int(mask.sum()) == mask.shape[0] * cols.numel():
        return cols
    return None
