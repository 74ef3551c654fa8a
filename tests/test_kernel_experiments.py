"""exp kernels_cpu and kernels_gpu end to end, at tiny shapes (kernels_gpu: its CPU dry run,
the Triton interpreter), through the CLI as a user runs them."""

from __future__ import annotations

import json

import pytest

from test_cli import run_cli

OPS = {"softmax", "sliding_window", "lightning", "msa"}


def records(run_dir):
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert lines[0]["type"] == "header"
    return [r for r in lines if r.get("type") == "record"]


def test_kernels_cpu_times_every_reference_against_sdpa(tmp_path):
    run = tmp_path / "run"
    res = run_cli(
        "+exp=kernels_cpu",
        "kernels.shapes.lengths=[256,512]",
        "kernels.shapes.check_lengths=[300]",
        "kernels.shapes.window=64",
        "kernels.shapes.block_size=16",
        "kernels.min_run_time=0.05",
        "kernels.baselines=[sdpa]",  # FlexAttention's compile (~15 s) is left to the recorded runs
        f"hydra.run.dir={run}",
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    recs = records(run)
    from attnbench.kernels import native_build as build
    from attnbench.kernels.backend import has_native_kernel

    natives = {
        (op, "native") for op in OPS if has_native_kernel(op) and not isinstance(build.load(op), str)
    }  # timed beside their references
    checks = [r for r in recs if r["metric"] == "kernels/check_err"]
    assert {(r["op"], r["backend"]) for r in checks} == {
        ("lightning", "reference"),
        ("sliding_window", "reference"),
        ("msa", "reference"),
    } | natives
    assert all(r["status"] == "measured" and r["value"] <= r["bound"] for r in checks)
    times = [r for r in recs if r["metric"] == "latency/prefill_ms"]
    for T in (256, 512):
        got = {(r["op"], r["backend"]) for r in times if r["context_len"] == T and r["status"] == "measured"}
        assert (
            got
            == {
                ("softmax", "sdpa"),
                ("lightning", "reference"),
                ("sliding_window", "reference"),
                ("msa", "reference"),
                ("msa_select", "reference"),
                ("msa_attn", "reference"),
            }
            | natives
            | ({("msa_select", "native"), ("msa_attn", "native")} if ("msa", "native") in natives else set())  # msa's parts too
        )
    for r in times:  # medians of 3+ calls with their spread and load; achieved GFLOP/s against the calibrated peak
        assert r["p25_ms"] <= r["value"] <= r["p75_ms"] and r["n"] >= 3 and len(r["loadavg"]) == 3, r
        assert isinstance(r["noisy"], bool) and r["load_before"] >= 0 and r["gflop_per_s"] > 0 and 0 < r["peak_fraction"], r
    assert any(r["metric"] == "calibration/matmul_flops" for r in recs)
    speed = [r for r in recs if r["metric"] == "kernels/speedup"]
    assert len(speed) == 6 + 2 * len(natives) and all(r["value"] > 0 and r["baseline"] == "sdpa" for r in speed)
    # SDPA and the ops alternate call by call; a speedup is the median of round-by-round ratios; a timing
    # says its roofline (the cost model's FLOPs at the calibrated peak)
    assert all(r["method"] == "alternating" and r["roofline_s"] > 0 for r in times if r["backend"] != "flex"), times
    # and its two-term roofline: minimal FLOPs and bytes, which term bounds it, its fraction of that limit
    for r in (r for r in times if r["backend"] != "flex"):
        assert r["min_flops"] > 0 and r["min_bytes"] > 0 and r["bound"] in ("compute", "memory"), r
        assert r["limit_s"] == pytest.approx(r["value"] / 1e3 * r["limit_fraction"]) and r["intensity"] == pytest.approx(
            r["min_flops"] / r["min_bytes"]
        )
    assert all(r["method"].startswith("alternating") and r["ratio_p25"] <= r["value"] <= r["ratio_p75"] for r in speed), speed
    table = (run / "summary.md").read_text()
    assert "| 256 |" in table and "| 512 |" in table and "causal SDPA" in table and all(f"{op} (native)" in table for op, _ in natives)


@pytest.mark.slow
def test_kernels_gpu_dry_run_on_cpu(tmp_path):
    """The GPU script, complete, on the interpreter: every check passes, every op is timed."""
    run = tmp_path / "run"
    # FlexAttention compiles on CPU too, but takes ~10-20 s: the dry run leaves it out.
    res = run_cli(
        "+exp=kernels_gpu", "device=cpu", "kernels.baselines=[sdpa,flash_attn,fla]", f"hydra.run.dir={run}", cwd=tmp_path, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    recs = records(run)
    assert all(r.get("dry_run") for r in recs)
    checks = [r for r in recs if r["metric"] == "kernels/check_err"]
    assert {r["op"] for r in checks} == OPS | {"msa_select"}
    assert {r["dtype"] for r in checks} == {"bfloat16", "float16"}
    assert all(r["status"] == "measured" for r in checks), [r for r in checks if r["status"] != "measured"]
    assert {r["tensor"] for r in checks if r["op"] == "lightning"} == {"o", "dq", "dk", "dv", "final_state"}
    for metric in ("latency/prefill_ms", "latency/fwd_bwd_ms"):
        timed = {r["op"] for r in recs if r["metric"] == metric and r["backend"] == "triton" and r["status"] == "measured"}
        assert timed == OPS, (metric, timed)
    skipped = {(r["op"], r["backend"]) for r in recs if r["status"] == "skipped"}
    assert ("lightning", "flash_attn") in skipped  # no such kernel: said, not silently dropped
    assert "DRY RUN" in (run / "summary.md").read_text()


def test_time_alternating_takes_its_functions_in_turn():
    from attnbench.bench.timing import round_ratios, time_alternating

    order: list[str] = []
    got, rounds = time_alternating(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")}, min_run_time=0.0, repeats=4, block_s=0.0
    )
    assert order[:2] == ["a", "b"]  # the warm-up calls
    assert order[2:] == ["a", "b"] * (len(order[2:]) // 2)  # rounds of one block each, in turn (a block is 1 call here)
    assert len(rounds["a"]) == len(rounds["b"]) == got["a"].n >= 4 and got["b"].method == "alternating"
    med, lo, hi = round_ratios(rounds, "a", "b")
    assert lo <= med <= hi


def test_two_term_names_the_larger_term_and_the_fraction_of_it():
    from attnbench.bench.timing import two_term

    # 1 GFLOP and 1 GB at 100 GFLOP/s and 10 GB/s: memory takes 0.1 s, compute 0.01 s
    r = two_term(1e9, 1e9, 0.2, 100e9, 10e9)
    assert r["bound"] == "memory" and r["limit_s"] == pytest.approx(0.1) and r["limit_fraction"] == pytest.approx(0.5)
    assert r["intensity"] == pytest.approx(1.0)
    r = two_term(1e11, 1e9, 2.0, 100e9, 10e9)  # 1 s of compute, 0.1 s of memory
    assert r["bound"] == "compute" and r["limit_fraction"] == pytest.approx(0.5)
    assert two_term(1e9, 1e9, 0.2, None, 10e9) == {} and two_term(1e9, 1e9, 0.0, 100e9, 10e9) == {}
