"""Training batches: MQAR-style (many pairs, every key queried), vectorised, deterministic.

    [BOS] haystack with N needles [K_a V_b] [SEP] K_q1 K_q2 ... K_qM
    target at the position of K_qi: its value; no target anywhere else.

The answers never enter the input, so a model cannot score by elimination (DESIGN.md). One
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

    @property
    def seq_len(self) -> int:
        return self.context_len + self.n_queries

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
