"""The correctness gate passes the references and catches a wrong op."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnbench.kernels as K  # the specs call the ops through it (attnbench/specs)
from attnbench.bench import gate
from attnbench.kernels import msa_select
from attnbench.specs.msa import selection_ok


@pytest.mark.parametrize("letter", "SLWM")
def test_references_pass(letter):
    ok, err = gate.check(letter, device=torch.device("cpu"), backend="reference")
    assert ok and err < 1e-5


def test_a_wrong_op_fails(monkeypatch):
    # the gate calls each op through its spec, which looks it up in attnbench.kernels on every call
    # non-causal attention where causal is required
    monkeypatch.setattr(K, "softmax_attn", lambda q, k, v, backend: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    ok, err = gate.check("S", device=torch.device("cpu"))
    assert not ok and err > 1e-2
    # a sliding window one token too wide
    from attnbench.kernels import sliding_window_attn

    monkeypatch.setattr(K, "sliding_window_attn", lambda q, k, v, w, backend: sliding_window_attn(q, k, v, w + 1))
    assert not gate.check("W", device=torch.device("cpu"))[0]


def test_a_wrong_block_choice_fails(monkeypatch):
    def worst_blocks(iq, ik, bs, k, backend):  # selects the lowest-scoring blocks instead
        return msa_select(-iq, ik, bs, k)

    monkeypatch.setattr(K, "msa_select", worst_blocks)
    assert not gate.check("M", device=torch.device("cpu"))[0]


def test_a_selection_may_differ_only_between_tied_blocks():
    bs, T = 4, 40
    iq, ik = torch.ones(1, 1, T, 8), torch.ones(1, T, 8)  # every block scores the same
    want = msa_select(iq, ik, bs, 4)  # the last query: [9, 0, 1, 2]
    assert selection_ok(want, iq, ik, bs)
    other = want.clone()
    other[0, 0, -1, 1:] = torch.tensor([7, 3, 5])  # other blocks of the same score
    assert selection_ok(other, iq, ik, bs)
    other[0, 0, -1, 3] = -1  # padding where a block exists
    assert not selection_ok(other, iq, ik, bs)
    other[0, 0, -1, 1:] = torch.tensor([9, 3, 5])  # the local block again, as an "earlier" block
    assert not selection_ok(other, iq, ik, bs)
    ik[:, 20:24] = 2.0  # block 5 now scores highest: leaving it out is a wrong choice
    assert selection_ok(msa_select(iq, ik, bs, 4), iq, ik, bs)
    other[0, 0, -1, 1:] = torch.tensor([0, 1, 2])
    assert not selection_ok(other, iq, ik, bs)
