"""Task generators: deterministic, needles unique, depths where asked, probes well formed."""

from __future__ import annotations

import numpy as np
import pytest

from attnbench.tasks.batches import IGNORE, Stage, mqar_batch
from attnbench.tasks.generate import HOP_TASKS, NIAH_VARIANTS, multihop, niah
from attnbench.tasks.vocab import BOS, SEP, Vocab

V = Vocab()
DEPTHS = [0.0, 0.25, 0.5, 0.75, 1.0]


def gen(seed=0):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("variant", NIAH_VARIANTS)
def test_niah_is_deterministic_by_seed(variant):
    a = niah(gen(3), V, 500, variant, DEPTHS, value_noise=0.1)
    b = niah(gen(3), V, 500, variant, DEPTHS, value_noise=0.1)
    c = niah(gen(4), V, 500, variant, DEPTHS, value_noise=0.1)
    assert all(x.context.tobytes() == y.context.tobytes() for x, y in zip(a, b))
    assert [p.tokens for s in a for p in s.probes] == [p.tokens for s in b for p in s.probes]
    assert any(x.context.tobytes() != y.context.tobytes() for x, y in zip(a, c))


@pytest.mark.parametrize("variant", NIAH_VARIANTS)
@pytest.mark.parametrize("length", [40, 1000, 4097])
def test_niah_structure_and_unique_keys(variant, length):
    for s in niah(gen(1), V, length, variant, DEPTHS, value_noise=0.1, m=3):
        ctx = s.context
        assert len(ctx) == length and ctx[0] == BOS and ctx[-1] == SEP
        keys = ctx[V.is_key(ctx)]
        if variant != "multivalue":
            assert len(keys) == len(set(keys.tolist())), "a key appears twice"
        for p in s.probes:
            assert len(p.tokens) == len(p.targets)
            for tok, target in zip(p.tokens, p.targets):
                if target >= 0 and V.is_key([tok])[0]:
                    where = np.flatnonzero(ctx == tok)
                    assert len(where) >= 1
                    # the needle: the asked key is followed by a value, and for single-valued
                    # variants by exactly the target
                    if variant in ("single", "multikey", "multiquery"):
                        assert len(where) == 1 and ctx[where[0] + 1] == target


@pytest.mark.parametrize("length", [64, 1001, 65536])
def test_niah_depths_are_placed_where_asked(length):
    (s,) = niah(gen(2), V, length, "multikey", DEPTHS)
    assert [p.depth for p in s.probes] == pytest.approx(DEPTHS, abs=4 / length + 1e-6)
    for p, d in zip(s.probes, DEPTHS):
        pos = int(np.flatnonzero(s.context == p.tokens[0])[0])
        assert abs((pos - 1) / (length - 2) - d) <= 4 / length


def test_multivalue_answers_in_position_order():
    (s,) = niah(gen(5), V, 300, "multivalue", [0.1], m=4)
    (p,) = s.probes
    key = p.tokens[0]
    where = np.flatnonzero(s.context == key)
    assert [int(s.context[w + 1]) for w in where] == p.targets


@pytest.mark.parametrize("task", HOP_TASKS)
@pytest.mark.parametrize("hops", [1, 2, 4])
def test_multihop_chains_resolve_to_their_targets(task, hops):
    s = multihop(gen(6), V, 400, task, hops, n_chains=3)
    ctx = s.context
    needle = {int(ctx[i]): int(ctx[i + 1]) for i in range(1, len(ctx) - 2) if V.is_key([ctx[i]])[0]}
    back = {v: k for k, v in needle.items()}
    sym = lambda tok: int(tok) - (8 if V.is_key([tok])[0] else 8 + V.n_keys)
    for p in s.probes:
        assert p.hops == hops
        if task == "chain":  # each hop: the key form of the previous answer -> next value
            for tok, target in zip(p.tokens, p.targets):
                assert needle[tok] == target
        elif task == "latent":  # follow `hops` needles from the start key
            tok = p.tokens[1]
            for _ in range(hops):
                tok = int(V.key(sym(needle[tok])))
            assert int(V.value(sym(tok))) == p.targets[1]
        else:  # vartrack: x_{i+1} holds the value form of x_i; x1 holds v
            assert back[p.tokens[0]] == p.targets[0]
            for tok, target in zip(p.tokens[1:], p.targets[1:]):
                assert back[int(V.value(sym(tok)))] == target


def test_mqar_batches_hide_answers_and_are_deterministic():
    st = Stage(n_keys=16, n_values=16, n_filler=16, n_pairs=4, context_len=30, n_queries=4, value_noise=0.2)
    x, y = mqar_batch(gen(7), V, st, 8)
    x2, y2 = mqar_batch(gen(7), V, st, 8)
    assert (x == x2).all() and (y == y2).all()
    assert x.shape == (8, st.seq_len) and (x[:, 0] == BOS).all() and (x[:, st.context_len - 1] == SEP).all()
    assert (y[:, : st.context_len] == IGNORE).all() and (y[:, st.context_len :] != IGNORE).all()
    for row_x, row_y in zip(x.numpy(), y.numpy()):
        ctx = row_x[: st.context_len]
        for q, a in zip(row_x[st.context_len :], row_y[st.context_len :]):
            (i,) = np.flatnonzero(ctx == q)
            assert ctx[i + 1] == a  # the queried key's needle holds the answer
        assert not set(row_y[st.context_len :]) & set(row_x[st.context_len :])  # answers never fed
