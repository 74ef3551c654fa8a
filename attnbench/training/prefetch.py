"""The next steps' batches made in background processes while the device trains (issue 42, item 4).

A step's batch is a pure function of (seed, step, stage) (trainer.step_batch), made by numpy on
the host: 5-11 ms for a 64K-token step on one core (experiments/host_data), against a step of
2-29 ms on an H100 at 40% of its bf16 peak (widths 128-512, the cost model). Made in line, the
GPU would wait for it every step. torch's DataLoader makes the batches of the steps ahead in
``workers`` processes, in order, pinned for an asynchronous copy; the loop takes the next one
and waits only when the workers fall behind (the wait is what the step records as ``data``).

The stage is known only when a step ends (a passed stage changes the next batch), so the
loader runs through the steps of one stage; when the loop asks for another stage or a step out
of order (a stage passed, a resume), it starts a new loader there. The batches are the ones
step_batch makes in line, bit for bit (tests/test_prefetch.py). Used where the device is not
the CPU (trainer._Loop), where the host's cores would otherwise idle; on the CPU the cores are
the training's.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader, Dataset

from attnbench.tasks.batches import answer_columns


class _StageBatches(Dataset):
    """Item ``step``: the (x, y, answer columns or None) of that step at one stage."""

    def __init__(self, cfg, stages, stage_i: int, vocab):
        self.cfg, self.stages, self.stage_i, self.vocab = cfg, stages, stage_i, vocab

    def __len__(self) -> int:
        return int(self.cfg.train.max_steps)

    def __getitem__(self, step: int):
        from attnbench.training.trainer import step_batch  # (trainer imports this module)

        x, y = step_batch(self.cfg, self.stages, self.stage_i, step, self.vocab)
        return x, y, answer_columns(y)


class Prefetcher:
    """``get(stage_i, step)`` -> (x, y, cols): the batch step_batch makes, from ``workers``
    background processes; ``wait_s`` the seconds the last get waited for it."""

    def __init__(self, cfg, stages, vocab, *, workers: int, pin: bool, ahead: int = 4):
        self.cfg, self.stages, self.vocab = cfg, stages, vocab
        self.workers, self.pin, self.ahead = int(workers), pin, int(ahead)
        self._key: tuple[int, int] | None = None  # (stage, next step) the running loader gives next
        self._it: Iterator[Any] | None = None
        self.restarts = 0
        self.wait_s = 0.0

    def _start(self, stage_i: int, step: int) -> None:
        self.close()
        loader = DataLoader(
            _StageBatches(self.cfg, self.stages, stage_i, self.vocab),
            batch_size=None,  # items are whole batches
            sampler=range(step, int(self.cfg.train.max_steps)),
            num_workers=self.workers,
            prefetch_factor=self.ahead if self.workers else None,
            pin_memory=self.pin,
        )
        self._it, self._key = iter(loader), (stage_i, step)
        self.restarts += 1

    def get(self, stage_i: int, step: int):
        t0 = time.perf_counter()
        if self._key != (stage_i, step) or self._it is None:
            self._start(stage_i, step)
        assert self._it is not None
        x, y, cols = next(self._it)
        self._key = (stage_i, step + 1)
        self.wait_s = time.perf_counter() - t0
        return x, y, cols

    def close(self) -> None:
        """Stop the workers (a loader's iterator shuts them down when it is dropped)."""
        it, self._it, self._key = self._it, None, None
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def workers_for(device: torch.device) -> int:
    """Background processes for the batches: none on the CPU (its cores train), else up to 4,
    leaving one core to the training process."""
    if device.type == "cpu":
        return 0
    import os

    return max(1, min(4, (os.cpu_count() or 2) - 1))
