"""One model trained by several processes (attnbench/training/distributed.py) is the model one process trains.

The torchrun tests start real jobs: `torchrun --standalone --nproc_per_node=2 -m attnbench
+exp=train ... train.parallel=ddp|fsdp` on CPU (gloo, one thread a process), kill rank 1 once a
checkpoint is on disk, rerun the same command, and compare the loss curve, step by step, with
one process training the same global batches in this process.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnbench.training import checkpoints, distributed, parallel as train_parallel
from attnbench.config import ConfigError
from attnbench.training.trainer import train

from helpers import TINY_BACKBONE, TINY_STAGE, TINY_TASK, compose_cfg

# A tiny model whose steps take milliseconds. balance_coef=1 makes the MoE balance loss count
# (a balance loss of per-process batches instead of the global batch moves the curve by ~1e-3),
# and 11 rows split 6 + 5 (a mean of per-process means is not the global mean).
TINY = [
    "exp.designs=[softmax]",
    "design=softmax",
    *TINY_BACKBONE,
    "model.n_layers=2",
    "model.balance_coef=1.0",
    *TINY_TASK,
    "eval.chains=1",
    "train.batch=11",
    "train.lr=3e-3",
    "train.warmup=3",
    "train.window=10",
    "train.log_every=1",
    "train.checkpoint_every=4",
    "train.patience=100000",
    "train.max_steps=200",
    TINY_STAGE,
]
TOKENS_PER_STEP = 11 * 14  # rows x (context 12 + 2 queries)
TOL = 1e-5  # nats; fp32 rounding of a different summation order is ~1e-6 here


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(checkpoints, "SHIPPED", tmp_path / "shipped")
    return tmp_path / "cache"


def one_process_curve(overrides: list[str]) -> list[dict]:
    torch.set_num_threads(1)
    return train(compose_cfg(["+exp=train", *TINY, *overrides]), "softmax", torch.device("cpu")).record["curve"]


def assert_same_curve(got: list[dict], want: list[dict]) -> None:
    assert [c["step"] for c in got] == [c["step"] for c in want] == list(range(len(want)))  # none lost, none twice
    for g, w in zip(got, want):
        assert abs(g["loss"] - w["loss"]) < TOL and abs(g["acc"] - w["acc"]) < 1e-6, (g, w)


def test_micro_batches_take_the_whole_batch_step(cache):
    """Gradient accumulation in one process (micro-batches of 4, 4, 3 rows) = the whole batch."""
    whole = one_process_curve(["train.max_steps=8"])
    micro = one_process_curve(["train.max_steps=8", "train.micro_batch=4", "train.force=true"])
    assert len(whole) == 8
    assert_same_curve(micro, whole)


@pytest.mark.parametrize("world, micro", [(1, 0), (2, 0), (2, 2), (3, 1), (4, 3)])
def test_rows_of_a_global_batch_are_split_once(world, micro):
    """Every row of a step goes to exactly one micro-batch of one process; same count on every process."""

    class Tc:
        parallel, micro_batch, tokens_per_step = "none", micro, 1024

    parts = []
    for r in range(world):
        p = train_parallel.Parallel(Tc, torch.device("cpu"))
        p.rank, p.world = r, world
        parts.append(p.slices(11))
        if micro:
            assert all(s.stop - s.start <= micro for s in parts[-1])
    assert len({len(p) for p in parts}) == 1
    rows = [i for p in parts for s in p for i in range(s.start, s.stop)]
    assert rows == list(range(11))


def test_too_few_rows_for_the_processes_is_a_config_error():
    class Tc:
        parallel, micro_batch, tokens_per_step = "none", 1, 1024

    p = train_parallel.Parallel(Tc, torch.device("cpu"))
    p.world = 4
    with pytest.raises(ConfigError, match="train.micro_batch"):
        p.check([3])


def test_parallel_needs_torchrun_and_torchrun_needs_parallel(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="torchrun"):
        distributed.check_launch(compose_cfg(["+exp=train", "train.parallel=ddp"]))
    with pytest.raises(ConfigError, match="trains one model across processes"):
        distributed.check_launch(compose_cfg(["+exp=needle_4m", "train.parallel=ddp"]))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="train.parallel=ddp or fsdp"):
        distributed.check_launch(compose_cfg(["+exp=train"]))
    distributed.check_launch(compose_cfg(["+exp=train", "train.parallel=fsdp"]))


def test_parallel_settings_do_not_change_keys_or_run_hashes():
    """A run resumes on any number of processes: its checkpoint key and run hash are the same."""
    from attnbench.runner import config_hash
    from attnbench.training.start import checkpoint_key

    base = compose_cfg(["+exp=train"])
    other = compose_cfg(["+exp=train", "train.parallel=fsdp", "train.micro_batch=8", "train.collective_timeout=1m"])
    assert checkpoint_key(base, "softmax") == checkpoint_key(other, "softmax")
    assert config_hash(base) == config_hash(other)
    assert checkpoint_key(compose_cfg(["+exp=train", "train.max_len=2048"]), "softmax") != checkpoint_key(base, "softmax")


def torchrun(parallel: str, cache: Path, run_dir: Path, *overrides: str) -> subprocess.Popen:
    cmd = [
        str(Path(sys.executable).with_name("torchrun")),
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "attnbench",
        "+exp=train",
        *TINY,
        f"train.parallel={parallel}",
        "threads=1",
        "wandb.mode=disabled",
        "report.enabled=false",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]
    env = {**os.environ, "ATTNBENCH_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, cwd=run_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def rank_pid(job: subprocess.Popen, rank: int) -> int | None:
    import psutil

    for child in psutil.Process(job.pid).children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank):
                return child.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def partial_step(cache: Path) -> int:
    found = glob.glob(str(cache / "checkpoints" / "softmax-*" / "partial.pt"))
    if not found:
        return -1
    try:
        return torch.load(found[0], weights_only=False)["state"]["step"]
    except Exception:  # replaced while reading
        return -1


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_torchrun_two_processes_train_like_one_and_resume_after_rank_1_is_killed(tmp_path, parallel, monkeypatch):
    if parallel == "fsdp":
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
        except ImportError as ex:
            pytest.skip(f"this torch has no FSDP2 fully_shard ({ex})")
    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    run_dir.mkdir()
    job = torchrun(parallel, cache, run_dir)
    deadline = time.monotonic() + 400
    while partial_step(cache) < 4:  # the first checkpoint
        assert job.poll() is None, job.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.1)
    pid = rank_pid(job, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    out, err = job.communicate(timeout=300)  # no hang: torchrun ends the job
    assert job.returncode != 0, "the job finished before rank 1 was killed"
    assert any(l.startswith("attnbench: rank 0/2") for l in err.splitlines()), err[-3000:]
    killed_at = partial_step(cache)
    assert 4 <= killed_at < 200 and killed_at % 4 == 0

    steps = killed_at + 4
    budget = f"train.token_budget={steps * TOKENS_PER_STEP}"  # not part of the key: the same run, stopped at `steps`
    if parallel == "fsdp":  # the checkpoint of 2 FSDP processes also resumes in one process
        one = tmp_path / "one"
        shutil.copytree(cache, one / "cache")
        monkeypatch.setenv("ATTNBENCH_CACHE", str(one / "cache"))
        monkeypatch.setattr(checkpoints, "SHIPPED", tmp_path / "shipped")
        resumed_alone = one_process_curve([budget])
    rerun_dir = tmp_path / "rerun"  # another token budget is another run config (rundir identity): its own directory
    rerun_dir.mkdir()
    rerun = torchrun(parallel, cache, rerun_dir, budget)
    out, err = rerun.communicate(timeout=400)
    assert rerun.returncode == 0, err[-3000:]
    (folder,) = glob.glob(str(cache / "checkpoints" / "softmax-*"))
    import json

    record = json.loads((Path(folder) / "record.json").read_text())
    assert record["processes"] == 2 and record["steps"] == steps and record["status"] == "tokens"
    assert f"resume at step {killed_at}" in (Path(folder) / "train.log").read_text()

    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "reference"))
    monkeypatch.setattr(checkpoints, "SHIPPED", tmp_path / "shipped")
    reference = one_process_curve([budget])
    assert len(reference) == steps
    assert_same_curve(record["curve"], reference)
    if parallel == "fsdp":
        assert_same_curve(resumed_alone, reference)
    # rank 0 alone wrote each run's records
    for d in (run_dir, rerun_dir):
        assert (d / "results.jsonl").read_text().count('"type": "header"') == 1


@pytest.mark.slow
def test_a_process_that_fails_ends_the_job_with_one_line(tmp_path):
    """Rank 0 cannot write its checkpoints (the cache directory is fine, but its checkpoints/
    is a file, which the up-front checks do not look into): it says so in one line and exits 1;
    torchrun stops rank 1, which says why; the job ends, exit code != 0."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "checkpoints").write_text("not a directory")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job = torchrun("ddp", cache, run_dir, "train.max_steps=20")
    out, err = job.communicate(timeout=400)
    assert job.returncode != 0
    ours = [l for l in err.splitlines() if l.startswith("attnbench: rank")]
    failed = [l for l in ours if l.startswith("attnbench: rank 0/2 failed: NotADirectoryError")]
    assert len(failed) == 1, err[-3000:]
    assert all(l.startswith(("attnbench: rank 0/2 failed", "attnbench: rank 1/2: stopped")) for l in ours), ours


def test_a_lost_process_is_named_as_the_cause():
    lost = distributed.describe(torch.distributed.DistBackendError("Connection closed by peer [127.0.0.1]:1234"), "rank 1/2")
    assert lost.startswith("attnbench: rank 1/2: stopped: another process of the job failed") and "\n" not in lost
    own = distributed.describe(ValueError("bad\nthing"), "rank 0/2")
    assert own == "attnbench: rank 0/2 failed: ValueError: bad thing"
