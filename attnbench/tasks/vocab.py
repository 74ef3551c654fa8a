"""The token vocabulary every task shares, so one model can be trained on a mix.

    0 PAD   1 BOS   2 SEP (end of the context, start of the probes)   3..6 HOP1..HOP4
    keys    K_0 .. K_{n_keys-1}       reserved: never in a haystack, each at most once a needle
    values  V_0 .. V_{n_values-1}     needle payloads (and, as noise, in haystacks)
    filler  F_0 .. F_{n_filler-1}     the haystack

Symbol i has a key form K_i and a value form V_i (multi-hop chains use both).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD, BOS, SEP = 0, 1, 2
HOP_BASE = 3  # HOP_k = HOP_BASE + k - 1, k = 1..4
MAX_HOPS = 4
N_SPECIAL = 8


@dataclass(frozen=True)
class Vocab:
    n_keys: int = 64
    n_values: int = 64
    n_filler: int = 64

    @property
    def size(self) -> int:
        return N_SPECIAL + self.n_keys + self.n_values + self.n_filler

    def key(self, i):
        return N_SPECIAL + np.asarray(i)

    def value(self, i):
        return N_SPECIAL + self.n_keys + np.asarray(i)

    def filler(self, i):
        return N_SPECIAL + self.n_keys + self.n_values + np.asarray(i)

    def hop(self, k: int) -> int:
        if not 1 <= k <= MAX_HOPS:
            raise ValueError(f"hops must be in 1..{MAX_HOPS}; got {k}")
        return HOP_BASE + k - 1

    def is_key(self, tokens) -> np.ndarray:
        t = np.asarray(tokens)
        return (t >= N_SPECIAL) & (t < N_SPECIAL + self.n_keys)
