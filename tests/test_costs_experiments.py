"""The cost experiments: bad bench/hardware configs stop at start; each experiment runs end to end
on tiny settings and writes the records its README and the report rely on."""

from __future__ import annotations

import json

import pytest

from attnbench.config import hardware_profiles

from test_cli import run_cli


def records(run_dir):
    return [r for r in (json.loads(l) for l in (run_dir / "results.jsonl").read_text().splitlines()) if r["type"] == "record"]


@pytest.mark.parametrize(
    "override, field",
    [
        ("bench.profiles=[h200,nope]", "bench.profiles[1]"),
        ("bench.prefill_lens=[1024,0]", "bench.prefill_lens[1]"),
        ("bench.decode_lens=[4096,1024]", "bench.decode_lens"),
        ("bench.scopes=[kernel]", "bench.scopes[0]"),
        ("bench.presets=[gpt5]", "bench.presets[0]"),
        ("bench.max_rel_error=0.5", "bench.max_rel_error"),
        ("hardware=tpu", "hardware"),
        ("hardware.mem_bandwidth=-1", "hardware.mem_bandwidth"),
    ],
)
def test_bad_bench_config_stops_with_one_line(tmp_path, override, field):
    res = run_cli("+exp=crossover", override, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path, timeout=60)
    assert res.returncode == 2, res.stderr
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in res.stderr, res.stderr


def test_hardware_profiles_are_shipped():
    assert {"cpu", "h200", "h100", "h800", "a100"} <= set(hardware_profiles())


def test_kv_memory_records_published_figures_and_equal_bytes(tmp_path):
    res = run_cli(
        "+exp=kv_memory", "exp.designs=[softmax,lightning_hybrid,msa]", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    recs = records(tmp_path / "run")
    per_token = {(r["design"], r["dtype"]): r for r in recs if r["metric"] == "memory/cache_bytes_per_token"}
    assert per_token["minimax_text01", "bfloat16"]["value"] == 40_960
    assert per_token["minimax_m1", "bfloat16"]["value"] == 40_960
    assert per_token["minimax_m2", "bfloat16"]["value"] == 253_952
    assert per_token["minimax_m3", "bfloat16"]["source"] and per_token["deepseek_v32", "bfloat16"]["source"]
    fixed = {(r["design"], r["dtype"]): r["value"] for r in recs if r["metric"] == "memory/fixed_state_bytes"}
    assert fixed["minimax_text01", "bfloat16"] == 280 * 2**20
    checks = [r for r in recs if r["metric"] == "memory/total_bytes" and r["status"] in ("measured", "failed")]
    assert {r["design"] for r in checks} == {"softmax", "lightning_hybrid", "msa"}
    assert all(r["status"] == "measured" and r["value"] == r["analytic"] for r in checks)


@pytest.mark.slow
def test_crossover_end_to_end_on_tiny_lengths(tmp_path):
    res = run_cli(
        "+exp=crossover",
        "bench.prefill_lens=[256,512]",
        "bench.decode_lens=[256,2048]",
        "bench.validate_from=256",
        "bench.profiles=[h200]",
        "bench.min_run_time=0.05",
        "bench.repeats=2",
        "attention.sliding_window.window=512",
        "attention.swa_hybrid.window=512",
        f"hydra.run.dir={tmp_path}/run",
        cwd=tmp_path,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    recs = records(tmp_path / "run")
    lat = [r for r in recs if r["metric"].startswith("latency/")]
    ops = {"softmax", "lightning", "sliding_window", "msa", "gated_delta", "dsa"}  # the ops of conf/exp/crossover.yaml's designs
    assert {r["op"] for r in lat} == ops
    assert {r["scope"] for r in lat} == {"op", "layer"}
    for r in lat:
        assert r["status"] in ("measured", "skipped") and r["backend"] and r["predicted_ms"] > 0
        if r["status"] == "measured":
            assert r["p25_ms"] <= r["value"] <= r["p75_ms"] and r["load"] >= 0
    assert any(r["metric"] == "calibration/matmul_flops" for r in recs)
    assert {r["op"] for r in recs if r["metric"] == "gate/rel_error" and r["status"] == "measured"} == ops
    assert any(r["metric"] == "costmodel/rel_error" for r in recs)
    cross = [r for r in recs if r["metric"].startswith("crossover/")]
    for design in ("lightning", "lightning_hybrid", "sliding_window", "swa_hybrid", "msa", "gdn", "gdn_hybrid", "gdn_hybrid31", "dsa"):
        mine = [r for r in cross if r["design"] == design]
        assert {r["method"] for r in mine} == {"measured", "analytic"}
        assert {r["metric"] for r in mine} == {"crossover/prefill_len", "crossover/decode_len", "crossover/memory_len"}
        for r in mine:  # a number only inside its bracket; a bound otherwise
            lo, hi = r["bracket"]
            if r["relation"] == "=":
                assert (lo is None or lo <= r["value"]) and (hi is None or r["value"] <= hi)
            else:
                assert r["value"] is None
    # memory: a lightning state beats a growing KV cache from a fixed length on; msa never does
    mem = {(r["design"], r["method"], r.get("dtype")): r for r in cross if r["metric"] == "crossover/memory_len"}
    assert mem["lightning", "analytic", "float32"]["relation"] == "="
    assert mem["msa", "analytic", "float32"]["relation"] == ">"
    # a crossover from the formula says so: status analytic, never measured
    assert {r["status"] for r in cross if r["method"] == "analytic"} <= {"analytic", "projected"}
    assert (tmp_path / "run" / "summary.md").exists()


@pytest.mark.slow
def test_budget_skips_cells_instead_of_overrunning(tmp_path):
    res = run_cli(
        "+exp=crossover",
        "exp.designs=[softmax,lightning]",
        "exp.budget=1s",
        "bench.prefill_lens=[4096]",
        "bench.decode_lens=[4096]",
        "bench.profiles=[]",
        "bench.scopes=[op]",
        f"hydra.run.dir={tmp_path}/run",
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    lat = [r for r in records(tmp_path / "run") if r["metric"].startswith("latency/")]
    assert lat and all(r["status"] == "skipped" and "budget" in r["reason"] for r in lat)


@pytest.mark.slow
def test_msa_speedup_end_to_end(tmp_path):
    res = run_cli(
        "+exp=msa_speedup",
        "bench.prefill_lens=[256]",
        "bench.decode_lens=[1024]",
        "bench.min_run_time=0.05",
        "bench.repeats=2",
        "bench.profiles=[h200]",
        "bench.memory_lens=[131072,1048576]",
        f"hydra.run.dir={tmp_path}/run",
        cwd=tmp_path,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    recs = records(tmp_path / "run")
    pred = [r for r in recs if r["metric"] in ("msa_speedup/prefill", "msa_speedup/decode") and r["method"] == "analytic"]
    at_1m = [r for r in pred if r["context_len"] == 1 << 20 and r["hardware"] == "h200" and r["vs"] == "m2"]
    assert {r["metric"] for r in at_1m} == {"msa_speedup/prefill", "msa_speedup/decode"}
    for r in at_1m:
        assert r["status"] == "projected" and r["value"] > 1 and r["m3_terms_s"] and r["baseline_flops"] > r["m3_flops"]
    verdicts = {r["claim"]: r for r in recs if r["metric"] == "msa_speedup/verdict"}
    assert {"vendor prefill", "vendor decode", "paper prefill", "paper decode", "paper compute per token"} <= set(verdicts)
    assert all(r["published"] and r["predicted_attention"] for r in verdicts.values())
    measured = [r for r in recs if r["metric"].startswith("msa_speedup/") and r.get("method") == "measured"]
    assert {r["metric"] for r in measured} == {"msa_speedup/prefill", "msa_speedup/decode"}
