"""Task generators: deterministic, needles unique, depths where asked, probes well formed."""

from __future__ import annotations

import numpy as np
import pytest

from attnbench.tasks.batches import IGNORE, chain_batch, mqar_batch

from attnbench.tasks.stage import Stage
from attnbench.names import HOP_TASKS, NIAH_VARIANTS
from attnbench.tasks.generate import multihop, niah
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


def needles_of(ctx):
    """{key token: the value token after it} of a context (keys are unique)."""
    return {int(ctx[i]): int(ctx[i + 1]) for i in range(1, len(ctx) - 2) if V.is_key([ctx[i]])[0]}


def sym(tok):
    return int(tok) - (8 if V.is_key([tok])[0] else 8 + V.n_keys)


def one_lookup_oracle(ctx, tokens, reverse=False):
    """Answers every probe position with ONE exact lookup in the context, of the token just
    given: a key's needle value (``reverse``, vartrack: the key whose needle holds the token's
    value form). Perfect on single lookups; it composes nothing."""
    needle = needles_of(ctx)
    back = {v: k for k, v in needle.items()}
    if reverse:
        return [back.get(int(t) if not V.is_key([t])[0] else int(V.value(sym(t))), -2) for t in tokens]
    return [needle.get(int(t), -2) for t in tokens]


def composing_oracle(ctx, tokens, hops):
    """Follows `hops` lookups from the last token of the probe (key -> value -> its key form -> ..)."""
    needle = needles_of(ctx)
    back = {v: k for k, v in needle.items()}
    tok = int(tokens[-1])
    if V.is_key([tok])[0]:
        for i in range(hops):
            tok = needle[tok] if i == 0 else needle[int(V.key(sym(tok)))]
        return tok
    for i in range(hops):  # vartrack: value -> the key holding it -> its value form -> ..
        tok = back[tok] if i == 0 else back[int(V.value(sym(tok)))]
    return tok


def correct(pred, targets):
    return all(p == t for p, t in zip(pred, targets) if t >= 0)


@pytest.mark.parametrize("task", HOP_TASKS)
@pytest.mark.parametrize("hops", [1, 2, 4])
def test_multihop_probe_gives_only_the_start_and_scores_the_final_answer(task, hops):
    s = multihop(gen(6), V, 400, task, hops, n_chains=3)
    ctx = s.context
    for p in s.probes:
        assert p.hops == hops and p.tokens[0] == V.hop(hops) and len(p.tokens) == 2
        assert [t for t in p.targets if t >= 0] == [p.targets[-1]]  # one scored position: the final answer
        assert composing_oracle(ctx, p.tokens, hops) == p.targets[-1]
        # the diagnostic: k single lookups with every intermediate key given, scored on all k
        tokens, targets = p.lookups
        assert len(tokens) == len(targets) == hops and tokens[0] == p.tokens[1] and targets[-1] == p.targets[-1]
        assert one_lookup_oracle(ctx, tokens, reverse=task == "vartrack") == targets


@pytest.mark.parametrize("task", HOP_TASKS)
def test_a_model_that_only_looks_up_once_fails_two_hop_probes(task):
    """Composition is needed: exact one-hop lookups pass every 1-hop probe and every per-hop
    diagnostic, and no 2-hop probe."""
    for hops, expect in ((1, 1.0), (2, 0.0), (3, 0.0)):
        probes = [(s.context, p) for i in range(20) for s in [multihop(gen(100 + i), V, 300, task, hops, n_chains=3)] for p in s.probes]
        rev = task == "vartrack"
        acc = np.mean([correct(one_lookup_oracle(ctx, p.tokens, rev), p.targets) for ctx, p in probes])
        assert acc == expect, (hops, acc)
        assert all(correct(one_lookup_oracle(ctx, p.lookups[0], rev), p.lookups[1]) for ctx, p in probes)
        assert all(composing_oracle(ctx, p.tokens, hops) == p.targets[-1] for ctx, p in probes)


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_chain_batches_share_the_probe_format(hops):
    st = Stage(n_keys=16, n_values=16, n_filler=16, n_pairs=6, context_len=40, n_queries=3, value_noise=0.1)
    x, y = chain_batch(gen(8), V, st, 16, hops)
    x2, y2 = chain_batch(gen(8), V, st, 16, hops)
    assert (x == x2).all() and (y == y2).all()
    n_q = min(3, 6 // hops)
    assert x.shape == (16, 40 + 2 * n_q) and (x[:, 0] == BOS).all() and (x[:, 39] == SEP).all()
    assert (y != IGNORE).sum(1).tolist() == [n_q] * 16
    for row_x, row_y in zip(x.numpy(), y.numpy()):
        ctx = row_x[:40]
        assert len(needles_of(ctx)) == (6 // hops) * hops  # keys unique, every chain link placed
        for q in range(n_q):
            hop_tok, start = row_x[40 + 2 * q], row_x[41 + 2 * q]
            assert hop_tok == V.hop(hops) and row_y[40 + 2 * q] == IGNORE
            assert composing_oracle(ctx, [hop_tok, start], hops) == row_y[41 + 2 * q]
            if hops > 1:
                assert one_lookup_oracle(ctx, [start])[0] != row_y[41 + 2 * q]
        assert not set(row_y[row_y != IGNORE]) & set(row_x[40:])  # answers never fed
    with pytest.raises(ValueError):
        chain_batch(gen(8), V, Stage(n_keys=4, n_values=4, n_pairs=4, context_len=40), 2, 2)


def test_levels_follow_the_generator():
    from attnbench.tasks.levels import task_levels

    v16 = Vocab(n_values=16)
    single = task_levels(v16, "niah_single", value_noise=0.05)
    assert single.chance == pytest.approx(1 / 16) and single.floor == 1.0  # one needle: no lookup needed
    multikey = task_levels(v16, "niah_multikey", value_noise=0.05)
    # five needle values drawn uniformly from 16: E[1 / distinct values] = 0.2326 exactly
    assert multikey.chance == pytest.approx(1 / 16) and multikey.floor == pytest.approx(0.2326, abs=0.02)
    chain2 = task_levels(v16, "chain", hops=2, chains=3)
    assert chain2.floor == pytest.approx(1 / 6)  # 6 distinct needle values, one is the answer
    lookups = task_levels(v16, "chain", hops=2, chains=3, lookups=True)
    assert lookups.chance == pytest.approx(1 / 16**2) and lookups.floor == pytest.approx(1 / 36)


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
