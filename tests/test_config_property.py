"""Property test: random invalid configs all stop with one line naming the field (no traceback)."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnbench.cli import config_error

DESIGNS = ["softmax", "lightning", "lightning_hybrid", "sliding_window", "swa_hybrid", "msa"]
EXPS = ["smoke", "needle_4m", "multihop", "train", "kv_memory", "crossover", "msa_speedup", "kernels_cpu", "kernels_gpu"]
names = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=12)


@st.composite
def invalid(draw):
    """(overrides, the field the error must name) for one invalid config."""
    exp = draw(st.sampled_from(EXPS))
    design = draw(st.sampled_from(DESIGNS))
    kind = draw(st.integers(0, 13))
    if kind == 0:
        bad = draw(names.filter(lambda s: s not in DESIGNS + ["lightning_hybrid16"]))
        return [f"+exp={exp}", f"design={bad}"], "design"
    if kind == 1:
        good = draw(st.text(alphabet="SLWM", min_size=0, max_size=3))
        bad = draw(st.sampled_from("ABXYZslwmQ0"))
        return [f"+exp={exp}", f"attention.{design}.layout={good}{bad}"], f"attention.{design}.layout"
    if kind == 2:
        return [f"+exp={exp}", f"attention.{design}.window={draw(st.integers(-1000, 0))}"], f"attention.{design}.window"
    if kind == 3:
        return [f"+exp={exp}", f"attention.{design}.top_k={draw(st.integers(-1000, 0))}"], f"attention.{design}.top_k"
    if kind == 4:
        bs = draw(st.integers(3, 4096).filter(lambda n: n & (n - 1)))
        return [f"+exp={exp}", "backend=triton", f"attention.{design}.block_size={bs}"], f"attention.{design}.block_size"
    if kind == 5:
        heads = draw(st.integers(2, 64))
        kv = draw(st.integers(2, 64).filter(lambda k: heads % k))
        return [f"+exp={exp}", f"model.n_heads={heads}", f"model.n_kv_heads={kv}"], "model.n_kv_heads"
    if kind == 6:
        n = draw(st.integers(-10**9, 15))
        return [f"+exp={exp}", f"eval.context_lens=[1024,{n}]"], "eval.context_lens[1]"
    if kind == 7:
        word = draw(st.text(alphabet=string.ascii_letters, min_size=1, max_size=8).filter(lambda s: s.lower() not in ("s", "m", "h")))
        return [f"+exp={exp}", f"exp.budget={word}"], "exp.budget"
    if kind == 8:
        key = draw(names.filter(lambda s: s not in ("name", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim",
                                                   "rotary_frac", "rope_base", "n_experts", "top_k_experts", "d_expert",
                                                   "balance_coef", "vocab_size", "tie_embeddings", "init_std")))
        return [f"+exp={exp}", f"model.{key}=1"], f"model.{key}"
    if kind == 9:
        word = draw(st.text(alphabet=string.ascii_letters, min_size=1, max_size=6))
        return [f"+exp={exp}", f"model.d_model={word}"], "model.d_model"
    if kind == 10:
        return [f"+exp={exp}", f"device={draw(names.filter(lambda s: s not in ('auto', 'cpu', 'cuda')))}"], "device"
    if kind == 11:
        experts = draw(st.integers(1, 16))  # set here: experiments choose their own expert counts
        top_k = draw(st.integers(experts + 1, 64))
        return [f"+exp={exp}", f"model.n_experts={experts}", f"model.top_k_experts={top_k}"], "model.top_k_experts"
    if kind == 12:
        return [f"+exp={exp}", f"train.lr={draw(st.floats(-1.0, 0.0))}"], "train.lr"
    bad = draw(names.filter(lambda s: s not in EXPS))
    return [f"+exp={bad}"], "exp"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invalid())
def test_every_invalid_config_gets_one_line_naming_the_field(case):
    overrides, field = case
    message = config_error(overrides)
    assert message is not None, f"{overrides} was accepted"
    assert "\n" not in message and "Traceback" not in message
    assert field in message, f"{overrides}: {message!r} does not name {field}"


def test_the_shipped_experiments_are_valid():
    for exp in EXPS:
        assert config_error([f"+exp={exp}"]) is None
