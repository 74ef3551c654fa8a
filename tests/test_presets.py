"""GPU-sized model presets (conf/model/small, base, base24): compose, validate, their sizes, and a step of small on CPU."""

from __future__ import annotations

import pytest
import torch

from attnbench.config import validate
from attnbench.model import Model, layout_for
from attnbench.training.trainer import stages_of, task_loss

from helpers import compose_cfg

# (preset, fewest, most parameters of a design at the model's own depth; lightning_hybrid16 sets its own)
SIZES = [("small", 20e6, 30e6), ("base", 120e6, 160e6), ("base24", 120e6, 160e6)]


@pytest.mark.parametrize("preset, lo, hi", SIZES)
def test_preset_composes_validates_and_has_its_size(preset, lo, hi):
    cfg = compose_cfg(["+exp=train", f"model={preset}"])
    validate(cfg)
    assert cfg.model.name == preset and cfg.model.n_layers % 8 == 0  # the 7:1 hybrid tiles it
    assert cfg.train.max_len == 2048 and stages_of(cfg.train)[-1].longest == 2048  # longer training context
    assert cfg.train.lr < 1e-3 and cfg.train.tokens_per_step > 16384  # training scales with the model
    for name, design in cfg.attention.items():
        with torch.device("meta"):  # shapes only: no memory at any size
            counts = Model(cfg.model, design).param_counts()
        if not design.n_layers:
            assert lo <= counts["total"] <= hi, (name, counts)
        assert counts["active"] < counts["total"] / 2  # top-2 of 8 experts
    hybrid = layout_for(cfg.model, cfg.attention["lightning_hybrid"])
    assert hybrid.count("S") == cfg.model.n_layers // 8 and len(hybrid) == cfg.model.n_layers


def test_experiment_settings_still_win_over_a_preset():
    cfg = compose_cfg(["+exp=plateau_probe", "model=small"])
    assert cfg.model.n_layers == 4 and cfg.model.d_model == 384  # plateau_probe sets the depth, small the width


def test_tiny_stays_the_default_and_unchanged():
    cfg = compose_cfg(["+exp=train"])
    assert cfg.model.name == "tiny" and cfg.train.max_len == 0 and stages_of(cfg.train)[-1].longest == 1024


@pytest.mark.parametrize("design", ["lightning_hybrid", "msa"])
def test_small_trains_a_step_on_cpu(design):
    """A forward and backward pass of the small preset on CPU (one short sequence)."""
    cfg = compose_cfg(["+exp=train", "model=small"])
    torch.manual_seed(0)
    model = Model(cfg.model, cfg.attention[design])
    x = torch.randint(0, 40, (1, 64))
    y = torch.full_like(x, -100)
    y[0, -4:] = x[0, :4]
    loss, ce, acc, out = task_loss(model, cfg.attention[design], cfg, x, y)
    assert out.logits.shape == (1, 4, cfg.model.vocab_size) and torch.isfinite(loss)  # the head runs at the 4 answer positions only
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(g.abs().sum() for g in grads) > 0


def test_cuda_training_uses_the_kernels_that_pass_their_gate(monkeypatch):
    """device=cuda: the Triton kernels train only after the correctness gate passes there; one
    failure and the whole training falls back to the reference backend; the record says which."""
    import attnbench.bench.gate as gate
    from attnbench.kernels.backend import has_triton_kernel
    from attnbench.training.trainer import kernel_backends

    cfg = compose_cfg(["+exp=train"])
    cuda = torch.device("cuda")  # only named: nothing runs on it (the gate is replaced)
    monkeypatch.setattr(gate, "check", lambda letter, device: (letter != "L", 0.0))
    assert kernel_backends(cfg, "lightning_hybrid", cuda) == ({"lightning": "reference", "softmax": "reference"}, True)
    monkeypatch.setattr(gate, "check", lambda letter, device: (True, 0.0))
    backends, fallback = kernel_backends(cfg, "lightning_hybrid", cuda)
    assert not fallback and backends == {
        "lightning": "triton" if has_triton_kernel("lightning") else "reference",
        "softmax": "reference",
    }  # softmax: SDPA (FlashAttention on CUDA)
    monkeypatch.setattr(gate, "check", lambda letter, device: pytest.fail("no gate on CPU"))
    assert kernel_backends(cfg, "msa", torch.device("cpu")) == ({"msa": "reference"}, False)
