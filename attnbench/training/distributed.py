"""One model trained by many processes: torchrun (or a SLURM job through submitit), DDP or FSDP2.

    torchrun --nproc_per_node=N -m attnbench +exp=train model=small device=cuda train.parallel=ddp
    python -m attnbench -m +exp=train model=base device=cuda train.parallel=fsdp \\
        hydra/launcher=slurm hydra.launcher.nodes=2 hydra.launcher.tasks_per_node=8

PyTorch's own engine does the work: torch.distributed (the process group from torchrun's
environment, or from SLURM's through ``submitit.helpers.TorchDistributedEnvironment``),
DistributedDataParallel or FSDP2's ``fully_shard``, and ``torch.distributed.checkpoint.state_dict``
to gather checkpoints into the format one process writes, so a run resumes on any number of
processes (one included). What this module adds around it:

- The global batch of a step is the batch one process trains on (``train.step_batch``: a pure
  function of seed and step). Its R rows are cut into N x M contiguous slices, N processes, M
  micro-batches of at most ``train.micro_batch`` rows each (M = 1 when it is 0); process r
  forwards slices r*M .. r*M + M - 1. Any N gives the same global batches.
- The loss of a slice is its share of the global batch's loss (``train.task_loss_share``; the
  MoE balance term through ``moe.GlobalRouting``), and gradients are summed over slices and
  processes: N processes compute one process's step within fp32 rounding. With M > 1 a
  no-grad counting pass first finds the global batch's expert routing (one more forward).
- Rank 0 alone writes (checkpoints, train.log, records, report, W&B). Whatever steers training
  (the stage, a stop) is computed from values every process shares.
- A failing process ends the job: it prints one line (``attnbench: rank R/N failed: ...``),
  its traceback goes to torchrun's error file, and it exits 1; torchrun then stops the others
  (each says so in one line). A collective waits at most ``train.collective_timeout``.

Without ``train.parallel`` and ``train.micro_batch``, training runs through ``Local``: the
one-process path, exactly as before this module existed.

This module holds the processes: how they are launched and checked, the session, one-line
failures, rank 0's reads shared with every process. How a step runs on them (``Local``,
``Parallel``, ``for_training``: the split of the global batch, DDP / FSDP2 wrapping,
checkpoints gathered and resumed) is in attnbench/training/parallel.py.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import sys
from typing import Any, Callable

import torch
import torch.distributed as dist

from attnbench.config import ConfigError, parse_duration
from attnbench.names import EXPERIMENTS, TRAINER


def starter() -> str | None:
    """What started this process as one of a job's: torchrun (its RANK), submitit (a SLURM or
    submitit-local job), or None (a plain process)."""
    if "RANK" in os.environ:
        return "torchrun"
    if os.environ.get("SUBMITIT_EXECUTOR"):
        return "submitit"
    return None


def n_processes() -> int:
    """Processes of this job, from the starter's environment (before any process group exists)."""
    for var in ("WORLD_SIZE", "SLURM_NTASKS", "SUBMITIT_LOCAL_NTASKS"):
        if starter() and os.environ.get(var):
            return int(os.environ[var])
    return 1


def launch_rank() -> int:
    """This process's rank as its starter set it (before any process group exists); 0 alone."""
    if starter() == "submitit":  # SLURM or submitit's local executor: its JobEnvironment knows which
        from submitit import JobEnvironment

        return int(JobEnvironment().global_rank)
    if starter() and os.environ.get("RANK"):
        return int(os.environ["RANK"])
    return 0


def active() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if active() else 0


def world() -> int:
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    return rank() == 0


def check_launch(cfg) -> None:
    """train.parallel and the way the run was started must agree (before any work)."""
    kind = cfg.train.parallel
    if kind != "none" and EXPERIMENTS.get(cfg.exp.name) != TRAINER:
        trainers = ", ".join(n for n, m in EXPERIMENTS.items() if m == TRAINER)
        raise ConfigError("train.parallel", kind, f"trains one model across processes: with +exp= one of {trainers}")
    if kind == "none" and n_processes() > 1:
        raise ConfigError(
            "train.parallel",
            kind,
            f"this is one of {n_processes()} processes (torchrun / SLURM tasks): set train.parallel=ddp or fsdp, or start one process",
        )
    if kind != "none" and starter() is None:
        raise ConfigError(
            "train.parallel",
            kind,
            "start the processes with torchrun --nproc_per_node=N -m attnbench ... "
            "(or a SLURM job: hydra/launcher=slurm hydra.launcher.tasks_per_node=N)",
        )


@contextlib.contextmanager
def session(cfg):
    """The process group of a distributed run, around the whole run (nothing when not distributed).

    Any exception on a process becomes one line on stderr and exit code 1 (its traceback goes
    to torchrun's error file, shown in torchrun's summary); SIGTERM (torchrun stopping the job
    because another process failed) becomes one line and exit code 143.
    """
    if cfg.train.parallel == "none":
        yield
        return
    if starter() == "submitit":
        # A SLURM (or submitit-local) job with one task per process: submitit's helper turns
        # the job's environment into torchrun's (MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK).
        from submitit.helpers import TorchDistributedEnvironment

        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    timeout = datetime.timedelta(seconds=parse_duration(cfg.train.collective_timeout))
    cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if cuda:
        torch.cuda.set_device(local_device_index())
    # gloo for CPU tensors (and CPU runs), NCCL for CUDA ones.
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if cuda else "gloo", timeout=timeout)
    who = f"rank {rank()}/{world()}"

    def on_sigterm(signum, frame):
        raise SystemExit(f"attnbench: {who}: stopped by SIGTERM (torchrun stops the job when another process fails)")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    except SystemExit as ex:
        if isinstance(ex.code, str):  # our SIGTERM line
            print(ex.code, file=sys.stderr, flush=True)
            os._exit(143)
        raise
    except (KeyboardInterrupt, ConfigError):
        raise  # Ctrl-C (exit 130) and config errors (one line, exit 2) as in one process
    except BaseException as ex:
        print(describe(ex, who), file=sys.stderr, flush=True)
        if os.environ.get("TORCHELASTIC_ERROR_FILE"):
            from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

            ErrorHandler().record_exception(ex)  # the traceback, for torchrun's summary
        os._exit(1)  # no teardown: a collective with a lost process could block it
    finally:
        signal.signal(signal.SIGTERM, previous)
    dist.destroy_process_group()


def describe(ex: BaseException, who: str) -> str:
    """The one line of a failed process; a lost peer is named as the cause, not this process."""
    import re

    text = " ".join(str(ex).split())
    if isinstance(ex, dist.DistError) or any(m in text for m in ("Connection closed by peer", "Connection reset by peer")):
        cause = re.sub(r"^\[[^\]]*\]\s*", "", text).split(". ")[0]  # without gloo's source location and advice
        return (
            f"attnbench: {who}: stopped: another process of the job failed or was killed (see its line or "
            f"torchrun's summary): {cause[:160]}"
        )
    return f"attnbench: {who} failed: {type(ex).__name__}: {text[:400]}"


def local_device_index() -> int:
    """This process's GPU: LOCAL_RANK, or 0 where each process sees one GPU (SLURM --gpus-per-task)."""
    n = max(1, torch.cuda.device_count())
    return int(os.environ.get("LOCAL_RANK", "0")) % n


def process_device(device: torch.device) -> torch.device:
    """The device of this process (cuda -> cuda:LOCAL_RANK in a distributed run)."""
    if device.type == "cuda" and active():
        return torch.device("cuda", local_device_index())
    return device


def from_main(fn: Callable[..., Any], *args) -> Any:
    """fn(*args) on rank 0 (it reads files), its (picklable) result on every process."""
    if not active():
        return fn(*args)
    box = [fn(*args) if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]
