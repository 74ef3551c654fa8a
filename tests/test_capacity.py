"""exp=capacity at a tiny size: what it records and that C6's rule reads it (the real trainings
are the lead's to run; experiments/capacity/README.md)."""

from __future__ import annotations

import json

import torch

from attnbench.cli import main as cli, preflight
from attnbench.experiments.capacity import pair_counts, state_floats
from attnbench.verdicts import rules as R
from attnbench.verdicts.claims import judge as C
from attnbench.report.frame import load
from attnbench.report.figures.accuracy import capacity as capacity_figure

from helpers import TINY_BACKBONE, compose_cfg

TINY = [
    *TINY_BACKBONE,
    "model.n_layers=2",
    "task.n_keys=16",
    "task.n_values=16",
    "task.n_filler=8",
    "train.batch=8",
    "train.max_steps=3",
    "train.warmup=1",
    "train.window=2",
    "train.log_every=1",
    "train.stages=[{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2}]",
    "eval.train_len_samples=6",
]


def test_capacity_config_state_sizes_and_pairs():
    cfg = compose_cfg(["+exp=capacity"])
    # five lightning state sizes at the tiny model's width 64: H x (64 / H)^2, and the delta rule at three of them
    assert {n: state_floats(cfg, n) for n in cfg.exp.designs if n != "softmax"} == {
        "lightning_h1": 4096.0,
        "lightning_h2": 2048.0,
        "lightning_h4": 1024.0,
        "lightning_h8": 512.0,
        "lightning_h16": 256.0,
        "gdn_h4": 1024.0,
        "gdn_h8": 512.0,
        "gdn_h16": 256.0,
    }
    assert state_floats(cfg, "softmax") != state_floats(cfg, "softmax")  # NaN: no fixed state
    assert pair_counts(cfg) == [4, 8, 16, 32, 64, 128, 255]  # the ladder at 512 tokens, and all 255 slots filled


def test_capacity_records_and_the_c6_rule(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    cfg = compose_cfg(["+exp=capacity", "exp.designs=[softmax,lightning_h1,lightning_h2]", *TINY, "threads=1", "wandb.mode=disabled"])
    cfg.report.enabled = False
    threads = torch.get_num_threads()
    try:
        preflight.prepare(cfg, run)
        cli.run(cfg, run)
    finally:
        torch.set_num_threads(threads)
    lines = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    acc = [r for r in lines if r.get("metric") == "capacity/acc"]
    assert {(r["design"], r["n_pairs"]) for r in acc} == {(d, p) for d in ("softmax", "lightning_h1", "lightning_h2") for p in (2, 5)}
    assert all(r["n"] == 6 and r["haystacks"] == 6 and r["context_len"] == 12 and r["status"] == "measured" for r in acc)
    # width 32 (2 heads of 16): 1 head of 32 holds 1,024 floats a layer, 2 heads of 16 hold 512
    assert {r["design"]: r["state_size"] for r in acc if r["design"] != "softmax"} == {"lightning_h1": 1024.0, "lightning_h2": 512.0}
    trained = [r for r in lines if r.get("metric") == "train/acc"]
    assert sorted(r["design"] for r in trained) == ["lightning_h1", "lightning_h2", "softmax"] and all(r["n_pairs"] == 2 for r in trained)
    data = load([run])
    d = data.records[data.records["metric"] == "capacity/acc"]
    assert d["chance"].notna().all() and d["floor"].notna().all()  # levels from the generator's own samples
    v = next(c for c in C.CLAIMS if c.id == "C6")(data.records, data.train)
    assert v.verdict != R.NOT_MEASURED_YET and any("softmax" in e for e in v.evidence)
    # the README table: a row per design, a column per pair count
    from attnbench.report.readme.task_models import capacity_accuracy

    table = capacity_accuracy(data)
    assert set(table["design"]) == {"softmax", "lightning_h1", "lightning_h2"}
    assert {"2 pairs", "5 pairs"} <= set(table.columns) and table["2 pairs"].str.endswith("/6").all()
    # the figure: one panel against pairs (every design), one against pairs per state float (lightning only)
    fig = capacity_figure(data.records)
    assert fig is not None and len([a for a in fig.axes if a.get_visible() and a.get_xlabel()]) == 2
    right = next(a for a in fig.axes if a.get_xlabel().startswith("pairs per state"))
    labels = [t.get_label() for t in right.get_lines() if not t.get_label().startswith("_")]
    drawn = {x.split(" (")[0].split(", seed ")[0] for x in labels}  # a line a model: "design, seed s"
    assert "softmax" not in drawn and {"lightning_h1", "lightning_h2"} <= drawn and all(", seed " in x for x in labels), labels
