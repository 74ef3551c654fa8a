"""Training learns (a few seconds on a tiny model), checkpoints resume, evaluation streams."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from attnbench.training import checkpoints
from attnbench.evaluation.streaming import run_sample
from attnbench.records.stats import wilson
from attnbench.model import Model
from attnbench.tasks.batches import IGNORE, mqar_batch
from attnbench.tasks.stage import Stage
from attnbench.tasks.generate import niah
from attnbench.tasks.levels import batch_levels
from attnbench.training.start import checkpoint_key
from attnbench.training.trainer import get_model, rows_of, train, vocab_of
from attnbench.training.state import rule_of

from helpers import TINY_BACKBONE, TINY_STAGE, TINY_TASK, compose_cfg

TINY = [
    *TINY_BACKBONE,
    "model.n_layers=2",
    *TINY_TASK,
    "train.batch=32",
    "train.lr=3e-3",
    "train.warmup=10",
    "train.window=10",
    "train.log_every=5",
    "train.checkpoint_every=20",
    "train.patience=100000",
    TINY_STAGE,
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(checkpoints, "SHIPPED", tmp_path / "shipped")
    return tmp_path / "cache"


def test_tiny_training_loss_falls_to_the_values_in_context_floor(cache):
    """250 steps of a tiny model reach the plateau (a guess among the context's needle values),
    not retrieval: its accuracy climbs from chance to the floor computed from the batches."""
    cfg = compose_cfg(["+exp=train", *TINY, "train.max_steps=250", "train.floor=0.99"])
    torch.set_num_threads(1)
    out = train(cfg, "softmax", torch.device("cpu"))
    curve = out.record["curve"]
    first, last = curve[0], curve[-5:]
    assert np.mean([c["loss"] for c in last]) < first["loss"] - 0.5, "loss did not fall"
    stage = Stage(**OmegaConf.to_container(cfg.train.stages[0]))
    x, y = mqar_batch(np.random.default_rng(0), vocab_of(cfg), stage, 256)
    lv = batch_levels(x, y, vocab_of(cfg), stage.context_len)  # 2 needles of 8 values: floor 0.56, chance 0.125
    acc = np.mean([c["acc"] for c in last])
    assert acc > lv.floor - 0.1, f"accuracy {acc:.2f} did not reach the values-in-context floor {lv.floor:.2f}"


def test_a_learned_model_beats_the_values_in_context_floor():
    """The shipped softmax model (it passed the whole curriculum) against its last stage's
    batches: the 95% lower bound of its accuracy is above the values-in-context floor; an
    untrained model of the same design is not."""
    from attnbench.records.stats import wilson

    cfg = compose_cfg(["+exp=needle_4m"])
    torch.set_num_threads(1)
    trained = get_model(cfg, "softmax", torch.device("cpu"))
    stage = Stage(**trained.record["config"]["train"]["stages"][-1])
    x, y = mqar_batch(np.random.default_rng(123), vocab_of(cfg), stage, 32)
    lv = batch_levels(x, y, vocab_of(cfg), stage.context_len)
    mask = y != -100
    torch.manual_seed(0)
    untrained = Model(cfg.model, cfg.attention["softmax"]).eval()
    for model, learned in ((trained.model, True), (untrained, False)):
        with torch.no_grad():
            pred = model(x).logits.argmax(-1)
        k, n = int((pred[mask] == y[mask]).sum()), int(mask.sum())
        lo, hi = wilson(k, n)
        assert (lo > lv.floor) == learned, (learned, k, n, lo, lv)


def test_checkpoint_cache_and_resume(cache):
    cfg = compose_cfg(["+exp=train", *TINY, "train.max_steps=40"])
    key = checkpoint_key(cfg, "lightning")
    first = get_model(cfg, "lightning", torch.device("cpu"))
    assert first.source == "trained" and checkpoints.find("lightning", key) is not None
    again = get_model(cfg, "lightning", torch.device("cpu"))
    assert again.source == "cache"
    for a, b in zip(first.model.state_dict().values(), again.model.state_dict().values()):
        assert torch.equal(a, b)
    # a changed training config is a different key
    assert checkpoint_key(compose_cfg(["+exp=train", *TINY, "train.max_steps=41"]), "lightning") != key


def test_killed_training_resumes_to_the_same_weights(cache, monkeypatch):
    import attnbench.training.trainer as T

    cfg = compose_cfg(["+exp=train", *TINY, "train.max_steps=40"])
    real, calls = T.task_loss, {"n": 0}

    def dies_at(n, error):
        def loss(*a, **k):
            calls["n"] += 1
            if calls["n"] == n:
                raise error
            return real(*a, **k)

        return loss

    folder = checkpoints.work_dir("softmax", checkpoint_key(cfg, "softmax"))
    monkeypatch.setattr(T, "task_loss", dies_at(25, MemoryError("stands in for a kill after the step-20 checkpoint")))
    with pytest.raises(MemoryError):
        train(cfg, "softmax", torch.device("cpu"))
    assert torch.load(folder / "partial.pt", weights_only=False)["state"]["step"] == 20
    calls["n"] = 0  # Ctrl-C / SIGTERM: every finished step is kept
    monkeypatch.setattr(T, "task_loss", dies_at(8, KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        train(cfg, "softmax", torch.device("cpu"))
    assert torch.load(folder / "partial.pt", weights_only=False)["state"]["step"] == 27
    monkeypatch.setattr(T, "task_loss", real)
    resumed = train(cfg, "softmax", torch.device("cpu"))
    fresh = train(compose_cfg(["+exp=train", *TINY, "train.max_steps=40", "train.force=true"]), "softmax", torch.device("cpu"))
    assert resumed.record["steps"] == fresh.record["steps"] == 40
    for a, b in zip(resumed.model.state_dict().values(), fresh.model.state_dict().values()):
        assert torch.equal(a, b)
    assert json.loads((folder / "record.json").read_text())["steps"] == 40


def test_nan_loss_stops_training_and_keeps_last_good_checkpoint(cache, monkeypatch):
    cfg = compose_cfg(["+exp=train", *TINY, "train.max_steps=60"])
    import attnbench.training.trainer as T

    real = T.task_loss
    calls = {"n": 0}

    def poisoned(*a, **k):
        calls["n"] += 1
        loss, ce, acc, out = real(*a, **k)
        return (loss * float("nan") if calls["n"] > 30 else loss), ce, acc, out

    monkeypatch.setattr(T, "task_loss", poisoned)
    out = train(cfg, "softmax", torch.device("cpu"))
    assert out.record["status"] == "failed" and "step 30" in out.record["failure"]
    folder = checkpoints.work_dir("softmax", checkpoint_key(cfg, "softmax"))
    assert not (folder / "final.pt").exists()
    saved = torch.load(folder / "partial.pt", weights_only=False)
    assert saved["state"]["step"] == 20  # the last checkpoint before the NaN
    assert all(torch.isfinite(v).all() for v in saved["model"].values())


@pytest.mark.parametrize("design", ["softmax", "lightning_hybrid", "sliding_window", "msa"])
def test_streaming_eval_matches_full_forward(design):
    """Every probe's predictions from the prefilled cache snapshot equal the full forward's
    argmax at the same positions (a random model: its predictions are arbitrary but exact)."""
    cfg = compose_cfg(["+exp=needle_4m", "model.n_layers=8"])
    torch.manual_seed(0)
    model = Model(cfg.model, cfg.attention[design]).eval()
    (sample,) = niah(np.random.default_rng(0), vocab_of(cfg), 300, "multikey", [0.0, 0.5, 1.0])
    results, costs = run_sample(model, sample, torch.device("cpu"), chunk=64)
    cache = model.new_cache()  # the same streaming path by hand, to compare logits, not only argmaxes
    with torch.no_grad():
        for s in range(0, len(sample.context), 64):
            model.prefill(torch.from_numpy(sample.context[s : s + 64])[None], cache)
        snap = cache.snapshot()
        for probe, r in zip(sample.probes, results):
            seq = torch.from_numpy(np.concatenate([sample.context, probe.tokens]))[None]
            full = model(seq).logits[0, -len(probe.tokens) :]
            streamed = model(torch.tensor(probe.tokens)[None], cache).logits[0]
            cache.restore(snap)
            torch.testing.assert_close(streamed, full, rtol=1e-4, atol=1e-4)
            scored = torch.tensor(probe.targets) >= 0
            assert r.pred == full.argmax(-1)[scored].tolist()
            assert r.hits == int((full.argmax(-1)[scored] == torch.tensor(probe.targets)[scored]).sum())
            assert r.correct == (r.hits == r.targets)
    assert costs["cache_bytes"] > 0 and costs["prefill_s"] > 0


def test_wilson_interval():
    lo, hi = wilson(10, 10)
    assert 0.69 < lo < 0.73 and hi == 1.0
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and 0.27 < hi < 0.31
    lo, hi = wilson(50, 100)
    assert lo == pytest.approx(0.404, abs=0.002) and hi == pytest.approx(0.596, abs=0.002)


def test_needle_run_with_the_shipped_softmax_model_resumes_without_repeating_cells(tmp_path):
    """The needle_4m flow end to end (shipped checkpoint, planner, streaming eval, aggregation),
    then the same command again: every evaluated cell is recorded earlier, no record doubles."""
    import os

    cmd = [
        sys.executable,
        "-m",
        "attnbench",
        "+exp=needle_4m",
        "eval.context_lens=[1024,2048]",
        "exp.designs=[softmax]",
        "eval.train_len_samples=10",
        "exp.budget=5m",
        "wandb.mode=disabled",
        "report.enabled=false",
        f"hydra.run.dir={tmp_path}/run",
    ]
    env = {**os.environ, "ATTNBENCH_CACHE": str(tmp_path / "cache")}
    first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "using shipped checkpoint" in first.stdout + first.stderr

    def records():
        return [
            json.loads(l) for l in (tmp_path / "run" / "results.jsonl").read_text().splitlines() if json.loads(l).get("type") == "record"
        ]

    before = records()
    acc = [r for r in before if r["metric"] == "niah/acc" and r.get("depth") is None]
    assert sorted(r["context_len"] for r in acc) == [1024, 2048] and all(r["n"] == 30 for r in acc)  # 6 short haystacks
    prefill = [r for r in before if r["metric"] == "eval/prefill_s"]
    assert prefill and all(
        r["gflop_per_s"] > 0 and 0 < r["peak_fraction"] and r["roofline_s"] > 0 and isinstance(r["noisy"], bool) and r["planned"] == "short"
        for r in prefill
    )
    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    out = second.stdout + second.stderr
    cell_lines = [l for l in out.splitlines() if l.lstrip().startswith("[")]  # one a finished cell (no terminal)
    assert len(cell_lines) == 12 and all(l.endswith("recorded earlier") for l in cell_lines), cell_lines

    # no record doubles: the calibration is a cell too, read back by the rerun (it plans with the same one)
    after = records()
    assert len(after) == len(before)
    assert any(r["metric"].startswith("calibration/") for r in after)


def test_mixed_length_stage_draws_lengths_and_holds_tokens_per_step():
    from attnbench.tasks.stage import Stage
    from attnbench.training.trainer import stages_of, step_batch

    cfg = compose_cfg(["+exp=train", "train.tokens_per_step=4096", "train.batch=64"])
    stages = stages_of(cfg.train)
    last = stages[-1]
    assert last.lengths() == [128, 256, 512, 1024] and last.longest == 1024
    shapes = {tuple(step_batch(cfg, stages, len(stages) - 1, step, vocab_of(cfg))[0].shape) for step in range(40)}
    assert {s[1] - last.n_queries for s in shapes} == set(last.lengths())  # every length drawn
    assert all(rows == min(64, 4096 // seq) for rows, seq in shapes)  # fewer rows for longer sequences
    assert Stage(context_len=24).lengths() == [24]


def test_record_carries_the_rule_and_the_true_training_length(cache):
    """A model that passes no stage has train_len 0; a token budget stops it as 'tokens'."""
    stages = (
        "train.stages=[{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2},"
        "{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 24, n_queries: 2, max_context_len: 48}]"
    )
    cfg = compose_cfg(["+exp=train", *TINY, stages, "train.token_budget=3000", "train.checkpoint_every=2"])
    out = train(cfg, "softmax", torch.device("cpu"))
    r = out.record
    assert r["status"] == r["stop_reason"] == "tokens" and r["tokens"] >= 3000
    assert r["rule"]["token_budget"] == 3000 and r["rule"]["patience"] == cfg.train.patience
    assert r["train_len"] == 0 and r["stages_passed"] == 0
    log = (out.folder / "train.log").read_text().splitlines()
    assert len(log) >= 2 and all(line[:4].isdigit() and line[10] == " " for line in log)  # "YYYY-MM-DD HH:MM:SS ..."
    assert "stopped: tokens" in log[-1]
    # passing the first stage (advance at an accuracy every step reaches) gives its length
    easy = compose_cfg(["+exp=train", *TINY, stages, "train.advance_at=0.01", "train.floor=1.0", "train.max_steps=30", "train.window=2"])
    passed = train(easy, "softmax", torch.device("cpu")).record
    assert passed["stages_passed"] == 1 and passed["train_len"] == 12 and passed["status"] == "max_steps"


def test_a_longer_curriculum_continues_from_the_model_of_its_prefix(cache):
    """multihop's curriculum extends needle_4m's: it starts from that model, not from scratch."""
    a = "{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2}"
    b = "{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 24, n_queries: 2}"
    easy = ["train.floor=0.01", "train.advance_at=0.01", "train.window=2", "train.max_steps=60"]
    short = train(compose_cfg(["+exp=train", *TINY, *easy, f"train.stages=[{a}]"]), "softmax", torch.device("cpu")).record
    assert short["reached_floor"] and short["train_len"] == 12
    longer = compose_cfg(["+exp=train", *TINY, *easy, f"train.stages=[{a},{b}]"])
    out = train(longer, "softmax", torch.device("cpu")).record
    assert out["continued_from"] == short["key"] and out["stage_starts"][: len(short["stage_starts"])] == short["stage_starts"]
    assert out["steps"] > short["steps"] and out["curve"][: len(short["curve"])] == short["curve"]
    assert out["reached_floor"] and out["train_len"] == 24
    # a prefix model that did not pass its stages is where the longer curriculum stops too
    stuck = ["train.floor=1.0", "train.advance_at=1.0", "train.patience=5", "train.window=2"]
    s1 = train(compose_cfg(["+exp=train", *TINY, *stuck, f"train.stages=[{a}]"]), "lightning", torch.device("cpu")).record
    s2 = train(compose_cfg(["+exp=train", *TINY, *stuck, f"train.stages=[{a},{b}]"]), "lightning", torch.device("cpu")).record
    assert s1["status"] == s2["status"] == "stalled" and s2["steps"] == s1["steps"] and s2["continued_from"] == s1["key"]
    # ... at the stage it was stuck at, not at its own curriculum's last one (exp=scale's width-16
    # hybrid, stuck at stage 1 of 6, was recorded at stage 6 with stage 5's length)
    s3 = train(
        compose_cfg(["+exp=train", *TINY, *stuck, f"train.stages=[{a},{b}]", "train.patience=6"]), "lightning", torch.device("cpu")
    ).record
    s4 = train(
        compose_cfg(["+exp=train", *TINY, *stuck, f"train.stages=[{a},{b},{b}]", "train.patience=6"]), "lightning", torch.device("cpu")
    ).record
    assert s3["final_stage"] == 1 and s3["train_len"] == 0 and s4["continued_from"] == s3["key"]
    assert (s4["final_stage"], s4["stages_passed"], s4["train_len"], s4["steps"]) == (1, 0, 0, s3["steps"])


def test_the_chain_curriculum_extends_the_needle_curriculum_with_composition_steps():
    """conf/curriculum/chain.yaml: needle_4m's stages unchanged (so multihop continues from the
    needle models), then chain stages whose steps are compositional probes of 1..hops hops."""
    from attnbench.config import default_stages
    from attnbench.tasks.vocab import HOP_BASE
    from attnbench.training.start import prefix_model
    from attnbench.training.trainer import stages_of, step_batch

    needle, chain = compose_cfg(["+exp=needle_4m"]), compose_cfg(["+exp=multihop"])
    n = len(needle.train.stages)
    assert stages_of(chain.train)[:n] == stages_of(needle.train) == [Stage(**vars(s)) for s in default_stages()]
    assert checkpoint_key(compose_cfg(["+exp=train", "+curriculum=chain"]), "softmax") == checkpoint_key(chain, "softmax")
    assert checkpoint_key(needle, "softmax") != checkpoint_key(chain, "softmax")
    stages, vocab = stages_of(chain.train), vocab_of(chain)
    assert all(s.hops == 0 for s in stages[:n]) and [s.hops for s in stages[n:]] == [2, 4]
    seen = set()
    for step in range(30):
        x, y = step_batch(chain, stages, len(stages) - 1, step, vocab)
        hop_tokens = x[(x >= HOP_BASE) & (x < HOP_BASE + 4)]
        assert hop_tokens.numel() > 0 and (y != IGNORE).any(1).all()  # probes ask, and only at their start keys
        assert ((y != IGNORE) == (torch.roll(x, 1, 1) >= HOP_BASE) & (torch.roll(x, 1, 1) < HOP_BASE + 4)).all()
        seen |= set((hop_tokens - HOP_BASE + 1).unique().tolist())
    assert seen == {1, 2, 3, 4}  # every hop count is drawn
    # the multihop models continue from the needle models (shipped ones included)
    assert prefix_model(chain, "softmax") is None or prefix_model(chain, "softmax")[2] == n


def test_a_shipped_partial_checkpoint_resumes_on_a_fresh_machine_and_is_never_evaluated(cache, tmp_path, monkeypatch):
    """checkpoints.ship of a partial training: its partial.pt and a record marked partial go into
    attnbench/trained/; with an empty cache, the next training resumes from it (the same weights as
    an uninterrupted run), while checkpoints.find (what evaluation loads) ignores it."""
    import shutil

    import attnbench.training.trainer as T

    cfg = compose_cfg(["+exp=train", *TINY, "train.max_steps=40"])
    key = checkpoint_key(cfg, "softmax")
    real, calls = T.task_loss, {"n": 0}

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] == 25:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(T, "task_loss", dies)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, "softmax", torch.device("cpu"))
    monkeypatch.setattr(T, "task_loss", real)
    shipped = checkpoints.ship(checkpoints.work_dir("softmax", key))
    assert shipped.parent == checkpoints.SHIPPED and (shipped / "partial.pt").exists()
    assert json.loads((shipped / "record.json").read_text())["status"] == "partial"
    assert checkpoints.find("softmax", key) is None  # nothing evaluates a partial model
    shutil.rmtree(cache)  # a fresh machine: only what the repository ships
    resumed = train(cfg, "softmax", torch.device("cpu"))
    fresh = train(compose_cfg(["+exp=train", *TINY, "train.max_steps=40", "train.force=true"]), "softmax", torch.device("cpu"))
    assert resumed.record["steps"] == fresh.record["steps"] == 40
    assert resumed.record["curve"][0]["step"] == 0  # the shipped partial's curve carried on
    for a, b in zip(resumed.model.state_dict().values(), fresh.model.state_dict().values()):
        assert torch.equal(a, b)
    assert checkpoints.ship(checkpoints.work_dir("softmax", key)) == shipped  # finished now: final.pt replaces partial.pt
    assert (shipped / "final.pt").exists() and not (shipped / "partial.pt").exists()
    assert checkpoints.find("softmax", key) == shipped


def test_the_chain_stages_have_their_own_token_budget_counted_from_the_first_chain_stage(cache):
    """train.chain_token_budget stops training once the tokens spent since the first chain stage
    (hops > 0) reach it, whatever the needle stages before it cost; the record's rule carries it."""
    easy = ["train.advance_at=0.0", "train.window=1", "train.floor=1.0", "train.max_steps=200", "train.checkpoint_every=5"]
    a = "{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2}"
    b = "{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 16, n_queries: 1, hops: 2}"
    cfg = compose_cfg(
        ["+exp=train", *TINY, *easy, f"train.stages=[{a},{b}]", "train.chain_token_budget=5000", "train.token_budget=10000000"]
    )
    r = train(cfg, "softmax", torch.device("cpu")).record
    assert r["status"] == "chain_tokens" and r["rule"]["chain_token_budget"] == 5000
    sa, sb = (Stage(**OmegaConf.to_container(s)) for s in cfg.train.stages)
    per_step = [rows_of(cfg.train, s.seq_len) * s.seq_len for s in (sa, sb)]  # tokens of a needle step, a chain step
    needle_tokens = r["stage_starts"][1] * per_step[0]
    assert r["stage_starts"][1] > 0 and 5000 <= r["tokens"] - needle_tokens < 5000 + per_step[1]
    unset = compose_cfg(["+exp=train", *TINY])
    assert "chain_token_budget" not in rule_of(unset.train)  # the rule of models trained before it reads the same
    assert checkpoint_key(cfg, "softmax") == checkpoint_key(compose_cfg(["+exp=train", *TINY, *easy, f"train.stages=[{a},{b}]"]), "softmax")


def test_a_model_stopped_by_its_wall_clock_budget_is_evaluated_as_it_stands_and_resumes_on_a_fresh_machine(cache):
    """status `budget` (train.budget, outside the rule): ship keeps its partial.pt beside final.pt;
    on a fresh machine find returns it (it is evaluated as it stands) and a run with a larger
    budget resumes it from the shipped partial to the same weights as an uninterrupted run."""
    import shutil

    from attnbench.training.trainer import get_model

    cfg = compose_cfg(["+exp=train", *TINY, "train.max_steps=12", "train.budget=0s"])
    key = checkpoint_key(cfg, "softmax")
    stopped = train(cfg, "softmax", torch.device("cpu")).record
    assert stopped["status"] == "budget" and stopped["steps"] == 0
    shipped = checkpoints.ship(checkpoints.work_dir("softmax", key))
    try:
        assert {p.name for p in shipped.iterdir()} >= {"final.pt", "record.json", "partial.pt"}
        shutil.rmtree(cache)  # a fresh machine: only what the repository ships
        assert checkpoints.find("softmax", key) == shipped
        resumed = get_model(compose_cfg(["+exp=train", *TINY, "train.max_steps=12"]), "softmax", torch.device("cpu"))
        assert resumed.source == "trained" and resumed.record["steps"] == 12 and resumed.record["status"] != "budget"
        fresh = train(compose_cfg(["+exp=train", *TINY, "train.max_steps=12", "train.force=true"]), "softmax", torch.device("cpu"))
        for a, b in zip(resumed.model.state_dict().values(), fresh.model.state_dict().values()):
            assert torch.equal(a, b)
    finally:
        shutil.rmtree(shipped, ignore_errors=True)


def test_a_record_names_its_checkpoint_by_a_path_a_reader_can_follow(tmp_path):
    """A shipped checkpoint's source is repository-relative; a cache's is named by its folder
    (design-key), never by a path of the machine that ran it (/root, /tmp, ...)."""
    from attnbench.experiments.train import source_of

    shipped = next(p for p in checkpoints.SHIPPED.iterdir() if (p / "record.json").exists())
    assert source_of(shipped) == f"attnbench/trained/{shipped.name}/record.json"
    cached = tmp_path / "checkpoints" / "softmax-0123456789abcdef"
    assert source_of(cached) == "cache: softmax-0123456789abcdef/record.json"
    assert str(tmp_path) not in source_of(cached)


def test_the_record_names_the_commit_the_training_started_from(cache, monkeypatch):
    """A training runs for hours while the checkout moves on: its record names the commit its code
    was loaded from at the (re)start, not the one the tree holds when the record is written."""
    from attnbench.training import state, trainer

    monkeypatch.setattr(trainer, "git_commit", lambda: {"commit": "start", "dirty": False})
    monkeypatch.setattr(state, "git_commit", lambda: {"commit": "later", "dirty": True})
    cfg = compose_cfg(["+exp=train", *TINY, "train.max_steps=4"])
    r = train(cfg, "softmax", torch.device("cpu")).record
    assert r["git"] == {"commit": "start", "dirty": False} and r["commits"] == [{"step": 0, "commit": "start", "dirty": False}]
    assert state.code_of([]) == {"commit": "later", "dirty": True}  # a state saved before commits were kept
