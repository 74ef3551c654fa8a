"""Scale-out uses Hydra's own launchers: joblib on one machine, submitit for SLURM."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_module

from attnbench import config as config_mod
from attnbench.cli import config_error

config_mod.register()


def test_slurm_launcher_config_composes():
    with initialize_config_module(config_module="attnbench.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+exp=multihop", "hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher._target_.startswith("hydra_plugins.hydra_submitit_launcher")
    assert launcher.partition == "gpu" and launcher.gpus_per_node == 1 and launcher.timeout_min > 0


def test_configs_cannot_smuggle_targets():
    for override in ["+_target_=os.system", "+model._target_=os.system", "+attention.msa._target_=builtins.eval"]:
        message = config_error(["+exp=smoke", override])
        assert message is not None and "_target_" in message, (override, message)


@pytest.mark.slow
def test_submitit_local_executor_runs_one_job(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "attnbench", "-m", "+exp=smoke", "design=softmax", "threads=1",
         "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={tmp_path}/sweep"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (results,) = (tmp_path / "sweep").rglob("results.jsonl")
    text = results.read_text()
    assert '"design": "softmax"' in text and '"status": "measured"' in text


@pytest.mark.slow
def test_joblib_sweep_runs_each_seed_in_its_own_directory(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "attnbench", "-m", "+exp=smoke", "design=softmax", "seed=0,1,2", "threads=1",
         "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={tmp_path}/sweep"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    dirs = sorted(p.parent.name for p in (tmp_path / "sweep").rglob("results.jsonl"))
    assert dirs == ["design=softmax,seed=0", "design=softmax,seed=1", "design=softmax,seed=2"]
    # the three runs merge into one report whose records carry every seed
    from attnbench.report.data import load

    rep = subprocess.run([sys.executable, "-m", "attnbench", "report", str(tmp_path / "sweep"), "--no-pdf"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert (tmp_path / "sweep" / "report.html").is_file()
    assert sorted(load([tmp_path / "sweep"]).records["seed"].dropna().unique().tolist()) == [0, 1, 2]
