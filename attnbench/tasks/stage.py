"""One curriculum stage, and what passing stages proves: plain data and arithmetic, no torch.

The schema of ``train.stages`` (attnbench.config) is this dataclass, and the verdicts compute a
model's true training length from its recorded stages with ``passed_len``: both read it here
without importing the training batches (tasks/batches.py) or a trainer. ``rows_of`` is the
batch rule the trainer and its rate estimate share.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


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


def passed_len(stages: list[dict], final_stage: int, status: str) -> int:
    """The longest context of a curriculum stage passed: stages 1 .. final_stage - 1, and the
    last one too when training reached the floor there (status done). 0 if none."""
    passed = int(final_stage) - 1 + (status == "done")
    return max((int(s["context_len"]) for s in stages[:passed]), default=0)


def rows_of(tc, seq_len: int) -> int:
    """Rows of a step's (global) batch: longer sequences get fewer, min(batch, tokens_per_step // seq_len)."""
    return max(1, min(tc.batch, tc.tokens_per_step // seq_len))
