"""Host synchronisation on a training step's hot path (issue 42, item 4): what counts as one,
a guard that fails on it, and the switch that makes the code take its accelerator branches.

On a GPU the host queues kernels ahead of the device; any op whose result the host must read
(``.item()``, ``bool(t)``, ``.tolist()``, ``nonzero()``, an output whose shape depends on the
data) stalls it until the queue drains, and a step full of them runs at the host's pace
(experiments/train_gpu: 0.3-0.45% of an H200's peak). On the CPU such a read costs nothing:
the value is in memory already, so a few reference ops keep a cheaper data-dependent branch
there (msa's top-k tie repair) and take a read-free branch where ``sync_free`` holds
(kernels/backend.py, beside the backend switch).

``device_paths()`` makes ``sync_free`` hold on the CPU too, so that a CPU test runs the branches
a GPU takes, under ``SyncGuard``, and compares them with the CPU's (tests/test_sync_free.py).
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator

from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from attnbench.kernels.backend import device_paths, sync_free

__all__ = ["SYNC_ATEN", "SYNC_METHODS", "HostSync", "SyncGuard", "device_paths", "sync_free"]

# aten ops that read a device value on the host or give an output sized by the data.
SYNC_ATEN = frozenset(
    {
        "_local_scalar_dense",  # .item(), bool(t), int(t), float(t)
        "nonzero",
        "masked_select",
        "masked_scatter",
        "unique",
        "_unique",
        "_unique2",
        "unique_consecutive",
        "unique_dim",
        "bincount",  # sized by the largest value
        "repeat_interleave",  # sized by the repeats (without output_size)
        "_assert_async",
    }
)
# Python-level reads (a CPU tensor's .tolist() reads memory without an aten call).
SYNC_METHODS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "numpy"})


class HostSync(RuntimeError):
    """An op on the guarded path would make the host wait for the device."""


class _Dispatch(TorchDispatchMode):
    def __init__(self, hits: list[str]):
        super().__init__()
        self.hits = hits

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if name in SYNC_ATEN:
            self.hits.append(f"aten.{name}\n{''.join(traceback.format_stack(limit=10)[:-1])}")
        return func(*args, **(kwargs or {}))


class _Function(TorchFunctionMode):
    def __init__(self, hits: list[str]):
        super().__init__()
        self.hits = hits

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in SYNC_METHODS:
            self.hits.append(f"Tensor.{func.__name__}\n{''.join(traceback.format_stack(limit=10)[:-1])}")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def SyncGuard(*, strict: bool = True) -> Iterator[list[str]]:
    """Record every host read inside the block (forward and, through the dispatcher, backward);
    with ``strict`` raise HostSync at the end naming the first, with where it was called.
    Yields the list of hits (op and stack) for a caller that wants to look at them."""
    hits: list[str] = []
    with _Function(hits), _Dispatch(hits):
        yield hits
    if strict and hits:
        raise HostSync(f"{len(hits)} host read(s) on a sync-free path; the first: {hits[0]}")
