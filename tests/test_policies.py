"""The floors: simple policies run on the generator's samples (tasks/policies.py, tasks/levels.py)."""

from __future__ import annotations

import numpy as np
import pytest

from attnbench.tasks.generate import mqar_samples

from attnbench.tasks.stage import Stage
from attnbench.tasks.generate import Probe, Sample
from attnbench.tasks.levels import task_levels
from attnbench.tasks.policies import POLICIES, policy_accuracies, probe_accuracy
from attnbench.tasks.vocab import BOS, SEP, Vocab

V = Vocab(n_keys=16, n_values=16, n_filler=16)


def test_each_policy_on_a_hand_made_chain():
    """a -> b -> c in the context: the probe [HOP_2 K_a] -> V_c. Uniform: 1/16; a value in the
    context: V_b or V_c, 1/2; a value whose key never appears: V_c alone (K_c is absent), 1; the
    first hop: V_b, 0."""
    a, b, c = 0, 1, 2
    ctx = np.array([BOS, V.key(a), V.value(b), int(V.filler(0)), V.key(b), V.value(c), SEP])
    probe = Probe([V.hop(2), int(V.key(a))], [-1, int(V.value(c))], hops=2)
    got = {name: probe_accuracy(pol, ctx, probe.tokens, probe.targets, V) for name, pol in POLICIES.items()}
    assert got == {"uniform guess": 1 / 16, "a value in the context": 0.5, "a value whose key never appears": 1.0, "the first hop": 0.0}
    # the diagnostic probe (every intermediate key given) is answered by the first hop at each step
    assert probe_accuracy(POLICIES["the first hop"], ctx, [int(V.key(a)), int(V.key(b))], [int(V.value(b)), int(V.value(c))], V) == 1.0


@pytest.mark.parametrize("hops", [1, 2, 3, 4])
def test_the_unseen_key_shortcut_scores_one_in_chains(hops):
    """With 3 chains a haystack the chain ends are the only values whose key never appears: 1/3 at
    every hop count (the report's old floors, values in context, were 1/(3k))."""
    lv = dict(task_levels(Vocab(n_values=16), "chain", hops=hops, chains=3).policies)
    assert lv["a value whose key never appears"] == pytest.approx(1 / 3)
    assert lv["a value in the context"] == pytest.approx(1 / (3 * hops))
    assert lv["the first hop"] == (1.0 if hops == 1 else 0.0)


def test_mqar_samples_floor_and_shape():
    st = Stage(n_keys=16, n_values=16, n_filler=16, n_pairs=8, context_len=40, n_queries=4)
    samples = mqar_samples(np.random.default_rng(1), V, st, 50)
    assert len(samples) == 50 and all(len(s.context) == 40 and len(s.probes) == 1 for s in samples)
    for s in samples:  # the query's needle holds the answer
        (q,), (t,) = s.probes[0].tokens, s.probes[0].targets
        (i,) = np.flatnonzero(s.context == q)
        assert s.context[i + 1] == t
    acc = policy_accuracies(samples, V)
    assert acc["the first hop"] == 1.0  # one lookup is the task here
    assert acc["uniform guess"] == pytest.approx(1 / 16) and 1 / 8 <= acc["a value in the context"] <= 1.0
    assert isinstance(samples[0], Sample)
