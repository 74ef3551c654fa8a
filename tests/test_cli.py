"""The Hydra app: every experiment composes, bad configs stop at start, smoke runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest

from attnbench.config import validate

from helpers import compose_cfg

EXPS = sorted(p.stem for p in resources.files("attnbench.conf").joinpath("exp").iterdir() if p.name.endswith(".yaml"))


def run_cli(*args, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "attnbench", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("exp", EXPS)
def test_every_experiment_composes_and_validates(exp):
    cfg = compose_cfg([f"+exp={exp}"])
    validate(cfg)
    assert cfg.exp.name == exp


@pytest.mark.parametrize(
    "override, field",
    [
        ("design=nope", "design"),
        ("attention.msa.layout=SXM", "attention.msa.layout"),
        ("model.n_kv_heads=3", "model.n_kv_heads"),
        ("model.d_modle=64", "model.d_modle"),
        ("attention.msa.top_k=0", "attention.msa.top_k"),
        ("exp.budget=soon", "exp.budget"),
    ],
)
def test_bad_config_stops_with_one_line(tmp_path, override, field):
    res = run_cli("+exp=smoke", override, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path, timeout=60)
    assert res.returncode == 2, res.stderr
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_missing_experiment_names_the_choices(tmp_path):
    res = run_cli(cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and "+exp=NAME" in res.stderr and "smoke" in res.stderr


def test_smoke_runs_end_to_end_under_a_minute(tmp_path):
    start = time.perf_counter()
    res = run_cli("+exp=smoke", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path, timeout=120)
    elapsed = time.perf_counter() - start
    assert res.returncode == 0, res.stderr[-3000:]
    assert elapsed < 60, f"smoke took {elapsed:.1f} s"
    lines = [json.loads(l) for l in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    header, records = lines[0], lines[1:]
    assert header["type"] == "header" and header["config_hash"] and header["git"] and header["hardware"]["cpu_count"]
    for r in records:
        for key in ("exp", "design", "layout", "metric", "value", "unit", "status"):
            assert key in r, (key, r)
    designs = {r["design"] for r in records if r["status"] == "measured"}
    assert {"softmax", "lightning", "lightning_hybrid", "sliding_window", "msa"} <= designs
    layouts = {r["design"]: r["layout"] for r in records}
    assert layouts["lightning_hybrid"] == "LLLLLLLS"
    errs = [r for r in records if r["metric"].endswith("_vs_full_rel_err")]
    assert errs and all(r["status"] == "measured" and r["value"] <= 1e-5 for r in errs)
