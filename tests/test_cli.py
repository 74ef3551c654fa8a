"""The Hydra app: every experiment composes, bad configs stop at start, smoke runs end to end."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest

from attnbench.config import validate
from attnbench.report.pdf import find_chromium

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
        ("wandb.mode=sometimes", "wandb.mode"),
        ("wandb.timeout_s=0", "wandb.timeout_s"),
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
    stages = [l for l in res.stderr.splitlines() if l.startswith(("completed in", "report:", "W&B:"))]
    assert elapsed < 60, f"smoke took {elapsed:.1f} s: " + " | ".join(stages)
    lines = [json.loads(l) for l in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    header, records = lines[0], [l for l in lines[1:] if l["type"] == "record"]
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
    # The sinks: a footer, the report (PDF where Chromium is), offline W&B runs by default.
    footer = json.loads((tmp_path / "run" / "results.jsonl").read_text().splitlines()[-1])
    assert footer["type"] == "footer" and footer["status"] == "completed"
    html = (tmp_path / "run" / "report.html").read_text()
    assert '<table id="decision"' in html and "lightning_hybrid" in html
    if find_chromium():
        assert (tmp_path / "run" / "report.pdf").stat().st_size > 10_000
    else:
        assert "no PDF: no Chromium found" in res.stderr
    assert len(list((tmp_path / "run" / "wandb").glob("offline-run-*"))) == 7  # 6 designs + the report


@pytest.mark.slow
def test_ctrl_c_leaves_a_partial_report_and_disabled_wandb_writes_nothing(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "attnbench", "+exp=smoke", "report.pdf=false", "wandb.mode=disabled",
                             f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, stdout=subprocess.PIPE,
                            # a shell's background job (nohup ... &) ignores SIGINT, and so would the child
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            stderr=subprocess.PIPE, text=True)
    results = tmp_path / "run" / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait for the first design's records, then press Ctrl-C
        if results.exists() and '"type": "record"' in results.read_text():
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    lines = [json.loads(l) for l in results.read_text().splitlines()]
    assert lines[-1]["type"] == "footer" and lines[-1]["status"] == "interrupted"
    html = (tmp_path / "run" / "report.html").read_text()
    assert "(interrupted, partial)" in html and "1 run interrupted" in html
    assert "softmax" in html
    assert not (tmp_path / "run" / "wandb").exists() and "W&B: disabled" in err
