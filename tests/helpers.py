"""Compose configs the way the CLI does, for tests."""

from __future__ import annotations

from hydra import compose, initialize_config_module

from attnbench import config as config_mod

config_mod.register()


def compose_cfg(overrides: list[str]):
    with initialize_config_module(config_module="attnbench.conf", version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def run_in_process(cfg, run) -> list[dict]:
    """Run a composed config into the directory ``run`` as the CLI does (its checks first), restore
    torch's thread count after it (a run sets its own), and return the run's JSON lines."""
    import json

    import torch

    from attnbench.cli import main as cli, preflight

    threads = torch.get_num_threads()
    try:
        preflight.prepare(cfg, run)
        cli.run(cfg, run)
    finally:
        torch.set_num_threads(threads)
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


# The tiny backbone and task of the training tests (a few steps on 2 CPU cores).
TINY_BACKBONE = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_kv_heads=1",
    "model.head_dim=16",
    "model.d_expert=32",
    "model.n_experts=2",
    "model.top_k_experts=1",
]
TINY_TASK = ["task.n_keys=8", "task.n_values=8", "task.n_filler=8"]
TINY_STAGE = "train.stages=[{n_keys: 8, n_values: 8, n_filler: 8, n_pairs: 2, context_len: 12, n_queries: 2}]"
