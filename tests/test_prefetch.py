"""The batches made ahead in a background thread are the batches step_batch makes in line
(attnbench/training/prefetch.py): the same tensors at every step, across a stage change, a
jump (a resume) and a restart, and the answer columns read with them."""

from __future__ import annotations

import torch

from attnbench.tasks.batches import answer_columns
from attnbench.training.prefetch import Prefetcher, workers_for
from attnbench.training.trainer import stages_of, step_batch, vocab_of
from helpers import TINY_BACKBONE, TINY_TASK, compose_cfg


def test_prefetched_batches_are_the_inline_ones():
    cfg = compose_cfg(["+exp=train", "design=softmax", *TINY_BACKBONE, *TINY_TASK, "train.max_steps=40"])
    stages, vocab = stages_of(cfg.train), vocab_of(cfg)
    pre = Prefetcher(lambda i, s: step_batch(cfg, stages, i, s, vocab), max_steps=40, pin=False, ahead=2)
    # steps 0-5 at stage 0, the stage passed at step 6, a jump to step 20 (a resume elsewhere)
    asks = [(0, s) for s in range(6)] + [(1, s) for s in range(6, 10)] + [(1, 20), (1, 21), (0, 3)]
    try:
        for stage_i, step in asks:
            x, y, cols = pre.get(stage_i, step)
            want_x, want_y = step_batch(cfg, stages, stage_i, step, vocab)
            assert torch.equal(x, want_x) and torch.equal(y, want_y), (stage_i, step)
            want_cols = answer_columns(want_y)
            assert (cols is None) == (want_cols is None) and (cols is None or torch.equal(cols, want_cols))
    finally:
        pre.close()
    assert pre.restarts == 4  # stage 0, stage 1, the jump, the step out of order


def test_no_background_thread_on_the_cpu():
    assert workers_for(torch.device("cpu")) == 0
    assert workers_for(torch.device("cuda")) == 1


def test_a_training_with_prefetched_batches_ends_with_the_same_weights(tmp_path, monkeypatch):
    """The loop with the prefetcher (as on a GPU; forced here on the CPU) and without it: the
    same steps, the same weights, bit for bit."""
    import attnbench.training.trainer as T
    from attnbench.training import checkpoints

    monkeypatch.setattr(checkpoints, "SHIPPED", tmp_path / "shipped")
    two_stages = "train.stages=[{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2},{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 16, n_queries: 2}]"
    over = ["+exp=train", *TINY_BACKBONE, "model.n_layers=2", *TINY_TASK, "train.batch=8", "train.max_steps=12", "train.window=2"]
    over += ["train.advance_at=0.0", "train.floor=1.01", "train.patience=100000", "train.compile=false", two_stages]
    models = []
    for workers in (0, 1):
        monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / f"cache{workers}"))
        monkeypatch.setattr(T, "workers_for", lambda device, n=workers: n)
        out = T.train(compose_cfg(over), "softmax", torch.device("cpu"))
        assert out.record["steps"] == 12 and len(out.record["stage_starts"]) == 2  # the stage changed mid-way
        models.append(out.model.state_dict())
    for name, w in models[0].items():
        assert torch.equal(w, models[1][name]), name
