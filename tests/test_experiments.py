"""Every experiment in conf/exp runs end to end, for real, at a tiny size.

One case per conf/exp/*.yaml (a new experiment without an entry in TINY fails here). Each
composes its config as the CLI does and runs it in this process (the CLI's own checks, run
directory claim, records, footer; a subprocess would spend most of a tiny run importing
torch), in a temporary run directory with W&B off and its own ATTNBENCH_CACHE, so nothing is
read from or trained into the real cache; the checkpoints shipped in attnbench/trained/ are
read where an experiment's config matches one (needle_4m, multihop). The report is left to the
report's tests (test_cli.py's smoke run builds one): here each run's records are checked.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest
import torch

from attnbench.cli import main as cli, preflight
from attnbench.experiments import EXPERIMENTS, NEEDS_CUDA
from attnbench.training.checkpoints import SHIPPED

from helpers import TINY_BACKBONE, compose_cfg

EXPS = sorted(p.stem for p in resources.files("attnbench.conf").joinpath("exp").iterdir() if p.name.endswith(".yaml"))
STATUSES = {"measured", "projected", "analytic", "skipped", "failed"}

# A training run of a few steps on a tiny backbone and a one-stage curriculum.
TINY_MODEL = TINY_BACKBONE
TINY_TRAIN = [
    "task.n_keys=16",
    "task.n_values=16",
    "task.n_filler=8",
    "train.batch=8",
    "train.max_steps=3",
    "train.warmup=1",
    "train.window=2",
    "train.log_every=1",
    "train.checkpoint_every=2",
    "train.stages=[{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2}]",
]
TINY_BENCH = [
    "bench.min_run_time=0.01",
    "bench.repeats=1",
    "bench.profiles=[h200]",
    "model.d_model=64",
    "model.n_heads=2",
    "model.n_kv_heads=1",
    "model.head_dim=32",
    "model.d_expert=64",
    "model.n_experts=2",
    "model.top_k_experts=1",
]
TINY_KERNELS = [
    "kernels.min_run_time=0.01",
    "kernels.baselines=[sdpa]",
    "kernels.shapes.lengths=[128]",
    "kernels.shapes.check_lengths=[100]",
    "kernels.shapes.window=32",
    "kernels.shapes.block_size=16",
    "kernels.shapes.top_k=2",
]
# The overrides that make each experiment tiny; the exp's own budget is cut so a slow cell is
# recorded skipped rather than run.
TINY: dict[str, list[str]] = {
    "smoke": ["exp.designs=[softmax,lightning_hybrid,msa]"],
    "presets": ["model=tiny"],
    "kv_memory": ["exp.designs=[softmax,lightning_hybrid]", "bench.memory_lens=[131072]"],
    "train": ["exp.designs=[softmax]", *TINY_MODEL, "model.n_layers=2", *TINY_TRAIN],
    "plateau_probe": ["exp.designs=[lightning_hybrid]", *TINY_MODEL, *TINY_TRAIN],
    "train_gpu": [],  # records every design skipped where torch sees no CUDA device
    "position_probe": [
        *TINY_MODEL,
        *TINY_TRAIN,
        "eval.context_lens=[64]",
        "eval.depths=[0.5]",
        "eval.haystacks=1",
        "eval.train_len_samples=2",
    ],
    "needle_4m": [
        "exp.designs=[softmax]",
        "eval.context_lens=[1024]",
        "eval.depths=[0.5]",
        "eval.haystacks=1",
        "eval.haystacks_short=1",
        "eval.train_len_samples=2",
    ],
    "multihop": [
        "exp.designs=[softmax]",
        "eval.context_lens=[1024]",
        "eval.hops=[1]",
        "eval.chains=1",
        "eval.haystacks=1",
        "eval.haystacks_short=1",
        "eval.train_len_samples=2",
    ],
    # two designs (softmax and one lightning state size), a few steps, two pair counts (2 and 5) of 4 probes each
    "capacity": ["exp.designs=[softmax,lightning_h2]", *TINY_MODEL, "model.n_layers=2", *TINY_TRAIN, "eval.train_len_samples=4"],
    # one design, one width (the base), one seed, a needle stage and a chain stage (tests/test_scale.py has the full check)
    "scale": [
        "exp.designs=[softmax]",
        *TINY_MODEL,
        "model.n_layers=2",
        *TINY_TRAIN,
        "train.stages=[{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2},"
        " {n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2, hops: 2}]",
        "scale.widths=[32]",
        "scale.seeds=[0]",
        "scale.needle_probes=2",
        "scale.multikey_haystacks=1",
        "scale.chain_haystacks=1",
        "scale.factors=[1]",
        "eval.depths=[0.5]",
        "eval.hops=[1]",
        "eval.chains=1",
    ],
    "crossover": [
        "exp.designs=[softmax,lightning]",
        "bench.prefill_lens=[256]",
        "bench.decode_lens=[256]",
        "bench.validate_from=256",
        "bench.scopes=[op]",
        *TINY_BENCH,
    ],
    "msa_speedup": ["bench.prefill_lens=[256]", "bench.decode_lens=[512]", "bench.memory_lens=[131072]", *TINY_BENCH],
    "kernels_cpu": ["kernels.ops=[lightning,sliding_window,msa]", *TINY_KERNELS],
    # two designs (the one hybrid letter pair L S), one length, 4 probes a cell; verify-k and costs (tests/test_serving.py has the full check)
    "serving": [
        "exp.designs=[softmax,lightning_hybrid]",
        *TINY_MODEL,
        "model.n_layers=2",
        "attention.lightning_hybrid.layout=LS",
        *TINY_TRAIN,
        "task.n_keys=8",
        "task.n_values=8",
        "eval.context_lens=[40]",
        "eval.depths=[0.0,1.0]",
        "eval.haystacks=2",
        "eval.hops=[1]",
        "eval.chains=2",
        "eval.train_len_samples=4",
        "bench.repeats=1",
        "bench.profiles=[h200]",
    ],
    # a shipped needle model in-process (tests/test_external.py runs it through transformers and a server too)
    "needle_external": [f"external.model=attnbench:{SHIPPED / 'softmax-e088d84f15ecfe2d'}", "eval.context_lens=[64]", "eval.haystacks=1"],
    "multihop_external": [
        f"external.model=attnbench:{SHIPPED / 'softmax-57e409a14dfceff8'}",
        "eval.context_lens=[64]",
        "eval.hops=[2]",
        "eval.chains=1",
        "eval.haystacks=1",
    ],
    # on CPU, kernels_gpu is its dry run (Triton interpreter, tiny shapes): one op, one dtype
    "kernels_gpu": ["kernels.ops=[softmax]", "kernels.dtypes=[float16]", "kernels.baselines=[sdpa]"],
}
SLOW = {"position_probe", "multihop", "needle_4m", "crossover", "serving"}  # over ~30 s each on 2 busy cores


def test_every_experiment_has_a_tiny_case():
    assert set(TINY) == set(EXPS) == set(EXPERIMENTS), (sorted(set(EXPS) ^ set(TINY)), sorted(set(EXPS) ^ set(EXPERIMENTS)))


@pytest.mark.parametrize("exp", [pytest.param(e, marks=pytest.mark.slow) if e in SLOW else e for e in EXPS])
def test_experiment_runs_end_to_end(exp, tmp_path, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    cfg = compose_cfg([f"+exp={exp}", *TINY[exp], "threads=1", "wandb.mode=disabled", "report.enabled=false"])
    threads = torch.get_num_threads()
    try:
        preflight.prepare(cfg, run)  # what the CLI checks and claims before a run
        cli.run(cfg, run)
    finally:
        torch.set_num_threads(threads)  # run() sets the exp's threads for the whole process
    lines = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    header, footer, records = lines[0], lines[-1], [l for l in lines if l["type"] == "record"]
    assert header["type"] == "header" and header["exp"] == exp
    assert footer["type"] == "footer" and footer["status"] == "completed", footer
    assert records and {r["status"] for r in records} <= STATUSES
    assert all(r["exp"] == exp for r in records)
    failed = [r for r in records if r["status"] == "failed"]
    assert not failed, failed[:3]
    if exp in NEEDS_CUDA and not torch.cuda.is_available():
        assert all(r["status"] == "skipped" and "CUDA" in r["note"] for r in records), records[:3]
    else:
        assert any(r["status"] in ("measured", "analytic", "projected") for r in records), records[:5]
    # only the experiments that train or evaluate task models (checkpoints, generated samples) write a cache
    assert not (tmp_path / "cache").exists() or exp in (
        "train",
        "plateau_probe",
        "position_probe",
        "needle_4m",
        "multihop",
        "capacity",
        "serving",
        "scale",
    )


def test_a_script_experiment_ends_its_results_with_how_it_ended(tmp_path):
    """attnbench.scripts.run_script (experiments/*/*.py): completed, failed (with the error) or
    interrupted, appended once the script named its file; the exception still propagates."""
    import json

    import pytest

    from attnbench.scripts import run_script

    out = [""]

    def works():
        out[0] = str(tmp_path / "a.jsonl")

    def fails():
        out[0] = str(tmp_path / "b.jsonl")
        raise ValueError("no such width")

    def stopped():
        out[0] = str(tmp_path / "c.jsonl")
        raise KeyboardInterrupt

    run_script(works, "x", out)
    with pytest.raises(ValueError):
        run_script(fails, "x", out)
    with pytest.raises(KeyboardInterrupt):
        run_script(stopped, "x", out)
    ends = [json.loads((tmp_path / f"{n}.jsonl").read_text()) for n in "abc"]
    assert [e["status"] for e in ends] == ["completed", "failed", "interrupted"]
    assert ends[1]["error"] == "ValueError: no such width" and all(e["type"] == "footer" and e["exp"] == "x" for e in ends)
    run_script(lambda: None, "x", [""])  # a script that never named its file writes nothing
