"""A training step reads nothing back from the device on its hot path (issue 42, item 4).

From the batch on the device to the end of the backward, no op may make the host wait for the
device: no ``.item()``, ``bool(t)``, ``.tolist()``, ``nonzero()`` or output sized by the data,
the MoE dispatch and every design's attention included (attnbench/training/sync.py). On the
CPU such a read is free, so the check runs the accelerator's branches here
(``device_paths()``) under ``SyncGuard``, for one design per layout letter, and checks that
those branches compute what the CPU's branches compute. (Not covered: the optimiser step, whose
CPU step counter is a host value by design, and the per-step read of the step's four numbers,
which comes after the backward: Local.step.)
"""

from __future__ import annotations

import copy

import pytest
import torch

from attnbench.designs import layout_letters
from attnbench.kernels.msa.reference import top_blocks
from attnbench.model import Model
from attnbench.tasks.batches import answer_columns
from attnbench.training.parallel import Local
from attnbench.training.sync import HostSync, SyncGuard, device_paths
from attnbench.training.trainer import stages_of, step_batch, task_loss, vocab_of
from helpers import TINY_BACKBONE, TINY_TASK, compose_cfg

LETTER_DESIGN = {"S": "softmax", "L": "lightning", "W": "sliding_window", "M": "msa", "G": "gdn", "D": "dsa"}
# Longer than sliding window's window and msa's blocks, so that both do their sparse work.
STAGE = "train.stages=[{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 4, context_len: 64, n_queries: 4}]"


def test_every_layout_letter_has_a_design_here():
    assert set(LETTER_DESIGN) == set(layout_letters())


def _setup(design: str):
    cfg = compose_cfg(["+exp=train", f"design={design}", *TINY_BACKBONE, *TINY_TASK, STAGE])
    torch.manual_seed(0)
    model = Model(cfg.model, cfg.attention[design])
    x, y = step_batch(cfg, stages_of(cfg.train), 0, 0, vocab_of(cfg))
    task_loss(model, cfg.attention[design], cfg, x, y)  # resolves each op's backend (an import) once, unguarded
    return cfg, model, x, y


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("letter", sorted(LETTER_DESIGN))
def test_the_step_reads_nothing_back_and_computes_what_the_cpu_branches_compute(letter):
    design = LETTER_DESIGN[letter]
    cfg, model, x, y = _setup(design)
    twin = copy.deepcopy(model)
    par = Local(torch.device("cpu"))
    opt = torch.optim.AdamW(model.parameters())
    par.hot_path = SyncGuard  # raises HostSync naming the op and where it was called
    with device_paths():
        res = par.step(task_loss, model, cfg.attention[design], cfg, x, y, opt)
    assert res is not None
    # the CPU's own branches (msa's top-k tie repair, the answer columns read from y in the step)
    cpu = Local(torch.device("cpu"))
    ref = cpu.step(task_loss, twin, cfg.attention[design], cfg, x, y, torch.optim.AdamW(twin.parameters()))
    assert ref is not None
    assert res.ce == pytest.approx(ref.ce, rel=1e-6) and res.acc == ref.acc
    got, want = _grads(model), _grads(twin)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-7, msg=name)


def test_the_guard_catches_reads_in_the_forward_and_in_the_backward():
    class ReadsInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, g):
            if bool((g > 0).any()):  # a host read inside the backward
                return g * 2
            return g

    t = torch.randn(8, requires_grad=True)
    for read in (
        lambda: float(t.detach().sum()),
        lambda: t.nonzero(),
        lambda: torch.bincount(t.detach().long().abs()),
        lambda: (t > 0).tolist(),
    ):
        with pytest.raises(HostSync):
            with SyncGuard():
                read()
    with pytest.raises(HostSync, match="_local_scalar_dense"):
        with SyncGuard():
            ReadsInBackward.apply(t).sum().backward()
    with SyncGuard(strict=False) as hits:  # the index ops the step does use are no reads
        cols = torch.tensor([3, 5])
        (t[cols] * t.index_select(0, cols)).sum().backward()
    assert hits == []


def test_answer_columns_are_read_on_the_host():
    cfg = compose_cfg(["+exp=train", "design=softmax", *TINY_BACKBONE, *TINY_TASK, STAGE])
    x, y = step_batch(cfg, stages_of(cfg.train), 0, 0, vocab_of(cfg))
    cols = answer_columns(y)
    assert cols is not None and (y[:, cols] != -100).all() and int((y != -100).sum()) == y.shape[0] * cols.numel()
    ragged = y.clone()
    ragged[0, int(cols[0])] = -100  # one row without its first answer: no shared columns
    assert answer_columns(ragged) is None


@pytest.mark.parametrize("kk", [1, 3, 6, 9])
def test_top_blocks_reads_nothing_and_breaks_ties_as_a_stable_sort(kk):
    """fp32 scores take one topk over int64 keys (no tie repair, no host read): the same values and ids
    as a stable descending sort, ties (-0.0 and +0.0 among them) and -inf padding included."""
    g = torch.Generator().manual_seed(1)
    scores = torch.randint(-2, 3, (5, 7, 9), generator=g).float()  # many ties
    scores[1][scores[1] == 0] = -0.0
    scores[0, :, 4:] = float("-inf")  # padding
    want = tuple(t[..., :kk] for t in scores.double().sort(dim=-1, descending=True, stable=True))
    with SyncGuard():
        got = top_blocks(scores, kk)
    assert torch.equal(got[1], want[1]) and torch.equal(got[0].double(), want[0])
    assert all(torch.equal(a, b) for a, b in zip(top_blocks(scores.double(), kk), want))  # other dtypes: the stable sort
