"""The fast training step changes nothing but speed (issue 24).

The fast path (MoE's grouped GEMM, the head only at the answer positions, the loss compiled
per batch shape: attnbench/training/step.py, as train.loss_for picks it) against the eager
reference (the MoE's loop over experts, logits at every position: tests/naive.py's
task_loss_naive, no compile), in lockstep: at each of the first 50 steps both compute the loss
and the gradients from the same weights and batch, the fast path's update (foreach AdamW and
clipping, as train.py) moves the weights on. The losses and the gradients agree within fp32
tolerance at every step, for every layout letter: the losses to 1e-5, the gradient of all
parameters to 1e-3 in relative norm (typically 1e-6; now and then a 1e-7 difference in the
forward flips one of msa's top-k blocks or a token's expert, which moves it by up to ~1e-3 and
a router's own small gradient by more; a wrong formula moves it by O(1)). Two free-running
trainings would part for the same reason, so the paths are held in lockstep.
"""

from __future__ import annotations

import pytest
import torch

import attnbench.kernels.backend as backend
import attnbench.model.moe as moe
import attnbench.kernels.msa.reference as msa_reference
from attnbench.designs import layout_letters
from attnbench.training.parallel import Local
from attnbench.model import Model
from attnbench.training.trainer import loss_for, stages_of, step_batch, vocab_of
from attnbench.training.step import Aux, CompiledLoss
from helpers import TINY_BACKBONE, TINY_TASK, compose_cfg
from naive import task_loss_naive

STEPS = 50
LETTER_DESIGN = {
    "S": "softmax",
    "L": "lightning",
    "W": "sliding_window",
    "M": "msa",
    "G": "gdn",
    "D": "dsa",
}  # one design per layout letter
# A stage with one length (one compiled shape), longer than sliding window's window and msa's
# blocks so that both do their sparse work; two experts of which each token takes one.
STAGE = "train.stages=[{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 4, context_len: 64, n_queries: 4}]"


def test_every_layout_letter_has_a_design_here():
    assert set(LETTER_DESIGN) == set(layout_letters())


def _grads(model, loss) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
@pytest.mark.parametrize("letter", [*sorted(LETTER_DESIGN), "M-gathered"])
def test_fast_training_step_keeps_the_eager_losses(monkeypatch, letter):
    """M-gathered: msa through its training path (the row-gathered autograd.Function with its own
    compiled tiles), which real trainings take from T * S > DENSE_LIMIT (1K rows); at this
    test's 64 tokens msa would otherwise take the dense masked SDPA and never reach it (the
    compiled step once failed there, and trainings fell back to eager without a test noticing)."""
    torch.set_num_threads(1)
    monkeypatch.setattr(backend, "COMPILE", True)
    if letter == "M-gathered":
        monkeypatch.setattr(msa_reference, "DENSE_LIMIT", 0)
        monkeypatch.setattr(msa_reference, "COMPILE", True)  # its tiles compiled, as outside the tests
        letter = "M"
    design_name = LETTER_DESIGN[letter]
    overrides = ["attention.sliding_window.window=16", "attention.msa.block_size=8", "attention.msa.top_k=2", "train.warmup=10"]
    cfg = compose_cfg(["+exp=train", *TINY_BACKBONE, *TINY_TASK, STAGE, *overrides])
    design, stages, vocab = cfg.attention[design_name], stages_of(cfg.train), vocab_of(cfg)
    torch.manual_seed(0)
    model = Model(cfg.model, design).train()
    fast_loss = loss_for(cfg, model, design, Local(torch.device("cpu")), torch.device("cpu"))
    assert isinstance(fast_loss, CompiledLoss)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, betas=(0.9, cfg.train.beta2), foreach=True)
    first = last = None
    for step in range(STEPS):
        x, y = step_batch(cfg, stages, 0, step, vocab)
        monkeypatch.setattr(moe, "GROUPED_MM", False)
        ref, ref_ce, _, _ = task_loss_naive(model, design, cfg, x, y)
        ref_grads = _grads(model, ref)
        monkeypatch.setattr(moe, "GROUPED_MM", True)
        loss, ce, _, aux = fast_loss(model, design, cfg, x, y)
        assert step == 0 or isinstance(aux, Aux), "the fast path ran eagerly after its first step"
        grads = _grads(model, loss)
        assert abs(float(loss) - float(ref)) <= 1e-5 * max(1.0, abs(float(ref))), (
            f"{design_name} step {step}: loss {float(loss)} != {float(ref)}"
        )
        assert grads.keys() == ref_grads.keys()
        diff = torch.cat([(grads[n] - ref_grads[n]).flatten() for n in grads]).norm()
        err = float(diff / torch.cat([g.flatten() for g in ref_grads.values()]).norm())
        assert err <= 1e-3, f"{design_name} step {step}: the gradient differs by {err:.2e} (relative norm over all parameters)"
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip, foreach=True)
        opt.step()
        first = float(ref_ce) if first is None else first
        last = float(ref_ce)
    assert fast_loss.failed is None
    assert last < first, "the tiny model did not train at all: the comparison would say little"
