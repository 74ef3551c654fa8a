"""Scale-out uses Hydra's own launchers: joblib on one machine, submitit for SLURM."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_module

from attnbench import config as config_mod
from attnbench.cli.preflight import config_error

config_mod.register()


def test_slurm_launcher_config_composes():
    with initialize_config_module(config_module="attnbench.conf", version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=["+exp=multihop", "hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher._target_.startswith("hydra_plugins.hydra_submitit_launcher")
    assert launcher.partition == "gpu" and launcher.gpus_per_node == 1 and launcher.timeout_min > 0

    # one model across 2 nodes x 8 GPUs: a task (a process of the training) per GPU
    with initialize_config_module(config_module="attnbench.conf", version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "+exp=train",
                "model=base",
                "train.parallel=fsdp",
                "hydra/launcher=slurm",
                "hydra.launcher.nodes=2",
                "hydra.launcher.tasks_per_node=8",
            ],
            return_hydra_config=True,
        )
    assert (cfg.hydra.launcher.nodes, cfg.hydra.launcher.tasks_per_node, cfg.hydra.launcher.gpus_per_node) == (2, 8, 8)


def test_configs_cannot_smuggle_targets():
    for override in ["+_target_=os.system", "+model._target_=os.system", "+attention.msa._target_=builtins.eval"]:
        message = config_error(["+exp=smoke", override])
        assert message is not None and "_target_" in message, (override, message)


@pytest.mark.slow
def test_submitit_local_executor_runs_one_job(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnbench",
            "-m",
            "+exp=smoke",
            "design=softmax",
            "threads=1",
            "hydra/launcher=submitit_local",
            "hydra.launcher.timeout_min=10",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (results,) = (tmp_path / "sweep").rglob("results.jsonl")
    text = results.read_text()
    assert '"design": "softmax"' in text and '"status": "measured"' in text


@pytest.mark.slow
def test_submitit_job_with_two_tasks_trains_one_model(tmp_path):
    """The SLURM path on CPU: submitit's local executor starts 2 tasks of one job (as srun does);
    they become one DDP training through submitit's TorchDistributedEnvironment."""
    import json
    import os

    from test_distributed import TINY

    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnbench",
            "-m",
            "+exp=train",
            *TINY,
            "train.parallel=ddp",
            "train.max_steps=6",
            "threads=1",
            "wandb.mode=disabled",
            "report.enabled=false",
            "hydra/launcher=submitit_local",
            "hydra.launcher.tasks_per_node=2",
            "hydra.launcher.timeout_min=10",
            f"hydra.sweep.dir={tmp_path}/sweep",
            "hydra.sweep.subdir=job",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ATTNBENCH_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (record,) = (tmp_path / "cache" / "checkpoints").glob("softmax-*/record.json")
    record = json.loads(record.read_text())
    assert record["processes"] == 2 and record["steps"] == 6
    (results,) = (tmp_path / "sweep").rglob("results.jsonl")
    assert results.read_text().count('"type": "header"') == 1  # rank 0 alone writes


@pytest.mark.slow
def test_joblib_sweep_runs_each_seed_in_its_own_directory(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnbench",
            "-m",
            "+exp=smoke",
            "design=softmax",
            "seed=0,1,2",
            "threads=1",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    dirs = sorted(p.parent.name for p in (tmp_path / "sweep").rglob("results.jsonl"))
    assert dirs == ["design=softmax,seed=0", "design=softmax,seed=1", "design=softmax,seed=2"]
    # the three runs merge into one report whose records carry every seed
    from attnbench.report.frame import load

    rep = subprocess.run(
        [sys.executable, "-m", "attnbench", "report", str(tmp_path / "sweep"), "--no-pdf"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert (tmp_path / "sweep" / "report.html").is_file()
    assert sorted(load([tmp_path / "sweep"]).records["seed"].dropna().unique().tolist()) == [0, 1, 2]
