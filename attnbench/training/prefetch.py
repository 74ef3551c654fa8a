"""The next steps' batches made in a background thread while the device trains (issue 42, item 4).

A step's batch is a pure function of (seed, step, stage) (trainer.step_batch), made by numpy on
the host: 2-4 ms for a 64K-token step on one core (experiments/host_data), against a step of
2-29 ms on an H100 at 40% of its bf16 peak (widths 128-512, the cost model). Made in line, the
GPU would wait for it every step. Here a thread makes the batches of the next ``ahead`` steps
while the training thread waits for the device (the step's one read, which releases the GIL);
the loop waits only when the thread falls behind (the wait is what the step records as
``data``). A thread, not DataLoader's worker processes: handing a 64K-token batch across
processes cost ~2 ms a step here, more than making it (experiments/host_data, ``process``).

The stage is known only when a step ends (a passed stage changes the next batch), so the thread
makes the steps ahead at the stage of the last request; a request for another stage or a step
out of order (a stage passed, a resume) drops them and starts there. The batches are the ones
step_batch makes in line, bit for bit (tests/test_prefetch.py). Used where the device is not
the CPU (trainer._Loop); on the CPU the cores are the training's.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import torch

from attnbench.tasks.batches import answer_columns


class Prefetcher:
    """``get(stage_i, step)`` -> (x, y, cols): the batch step_batch makes (and its answer
    columns), made ahead by one background thread; ``wait_s`` the seconds the last get waited."""

    def __init__(self, make: Callable[[int, int], tuple[torch.Tensor, torch.Tensor]], *, max_steps: int, pin: bool, ahead: int = 2):
        """make(stage_i, step) -> (x, y): the in-line batch (trainer.step_batch with its config)."""
        self.make, self.max_steps, self.pin, self.ahead = make, int(max_steps), pin, int(ahead)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnbench-batches")
        self._ahead: dict[tuple[int, int], Future] = {}
        self.restarts = 0  # requests that found no batch made ahead (the first, a stage change, a jump)
        self.wait_s = 0.0

    def _make(self, stage_i: int, step: int):
        x, y = self.make(stage_i, step)
        if self.pin:  # page-locked: the copy to the GPU runs asynchronously
            x, y = x.pin_memory(), y.pin_memory()
        return x, y, answer_columns(y)

    def get(self, stage_i: int, step: int):
        t0 = time.perf_counter()
        fut = self._ahead.pop((stage_i, step), None)
        if fut is None:  # nothing made ahead for this request: drop the rest, start here
            for f in self._ahead.values():
                f.cancel()
            self._ahead.clear()
            self.restarts += 1
            fut = self._pool.submit(self._make, stage_i, step)
        for s in range(step + 1, min(step + 1 + self.ahead, self.max_steps)):
            if (stage_i, s) not in self._ahead:
                self._ahead[(stage_i, s)] = self._pool.submit(self._make, stage_i, s)
        batch = fut.result()
        self.wait_s = time.perf_counter() - t0
        return batch

    def close(self) -> None:
        for f in self._ahead.values():
            f.cancel()
        self._ahead.clear()
        self._pool.shutdown(wait=True)


def workers_for(device: torch.device) -> int:
    """Background threads for the batches: none on the CPU (its cores train), one elsewhere."""
    return 0 if device.type == "cpu" else 1
