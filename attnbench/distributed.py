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
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

from . import checkpoints
from .config import ConfigError, parse_duration
from .model.moe import GLOBAL_ROUTING, GlobalRouting
from .names import EXPERIMENTS, TRAINER


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


@dataclass
class StepResult:
    """Means over the global batch of one step."""

    ce: float
    acc: float
    index_loss: float


class Local:
    """One process, whole batches: training exactly as it was before distributed training."""

    rank, world, main = 0, 1, True
    kind = "none"
    whole_batches = True  # step() takes train.task_loss (else train.task_loss_share, per slice)

    def __init__(self, device: torch.device):
        self.device = device
        self.phase_s: dict[str, float] = {}  # seconds of the last step's forward and backward (whole batches only)

    def check(self, rows: list[int]) -> None:
        pass

    def wrap(self, model):
        return model

    def unwrap(self, model, build: Callable[[], Any]):
        """The trained model as a plain Model with its full weights (``build()`` makes an empty one)."""
        return model

    def resume(self, read: Callable[[], tuple], model, opt):
        """read() -> (train state, weights or None, optimiser state or None); load them."""
        st, weights, opt_state = read()
        if weights is not None:
            model.load_state_dict(weights)
        if opt_state is not None:
            opt.load_state_dict(opt_state)
        return st

    def step(self, loss_fn, model, design, cfg, x, y, opt) -> StepResult | None:
        """Forward + backward of the batch (x, y); None (and no backward) if its loss is not finite."""
        x, y = x.to(self.device), y.to(self.device)
        # bf16 autocast on GPUs; fp32 on CPU (bf16 matmuls are 100-500x slower there)
        t0 = time.perf_counter()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            loss, ce, acc, out = loss_fn(model, design, cfg, x, y)
        if not torch.isfinite(loss):
            return None
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        self.phase_s = {"forward": t1 - t0, "backward": time.perf_counter() - t1}  # the last step's (train_rate)
        return StepResult(float(ce.detach()), float(acc), float(out.index_loss.detach()))

    def agree(self, seconds: float) -> float:
        return seconds

    def save(self, path: Path, model, opt, state: dict) -> None:
        checkpoints.save_torch(path, {"model": model.state_dict(), "opt": opt.state_dict(), "state": state})


class Parallel(Local):
    """Global batches split over processes (train.parallel=ddp|fsdp) and/or micro-batches (train.micro_batch)."""

    whole_batches = False

    def __init__(self, tc, device: torch.device):
        super().__init__(device)
        self.kind, self.micro, self.tokens_per_step = tc.parallel, int(tc.micro_batch), int(tc.tokens_per_step)
        self.rank, self.world = rank(), world()
        self.main = self.rank == 0
        self.distributed = self.kind != "none"
        if self.distributed and not active():
            raise RuntimeError(f"train.parallel={self.kind} without a process group (start with torchrun)")

    # -- the split of a global batch -------------------------------------------------------------
    def micro_steps(self, rows: int) -> int:
        return math.ceil(rows / (self.world * self.micro)) if self.micro else 1

    def slices(self, rows: int) -> list[slice]:
        """This process's micro-batches of a global batch of ``rows`` rows (contiguous row ranges)."""
        m = self.micro_steps(rows)
        n, extra = divmod(rows, self.world * m)  # the first `extra` slices get one row more
        bounds = [i * n + min(i, extra) for i in range(self.world * m + 1)]
        mine = range(self.rank * m, (self.rank + 1) * m)
        return [slice(bounds[i], bounds[i + 1]) for i in mine]

    def check(self, rows: list[int]) -> None:
        """Every process gets rows in every micro-batch, at every batch size the curriculum draws."""
        for r in sorted(set(rows)):
            if r < self.world * self.micro_steps(r):
                raise ConfigError(
                    "train.micro_batch" if self.micro else "train.tokens_per_step",
                    self.micro or self.tokens_per_step,
                    f"steps of {r} rows cannot give {self.world} processes x {self.micro_steps(r)} "
                    "micro-batches a row each: raise train.tokens_per_step or train.micro_batch, or use fewer processes",
                )

    # -- the model ------------------------------------------------------------------------------
    def wrap(self, model):
        if self.kind == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            # buffers (RoPE tables, decay rates) are constants: no broadcast per forward
            import inspect

            new = "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters  # torch >= 2.12
            return DistributedDataParallel(
                model,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                **{"forward_sync_buffers" if new else "broadcast_buffers": False},
            )
        if self.kind == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for block in model.blocks:  # one all-gather per layer; embedding, norm, head with the root
                fully_shard(block)
            fully_shard(model)
        return model

    def inner(self, model):
        return model.module if self.kind == "ddp" else model

    def unwrap(self, model, build):
        """A plain Model with the full weights on every process (FSDP2: gathered)."""
        if self.kind != "fsdp":
            return self.inner(model)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        plain = build().to(self.device)
        plain.load_state_dict(full)
        return plain

    # -- checkpoints: the one-process format, gathered on rank 0 ----------------------------------
    def resume(self, read, model, opt):
        if not self.distributed:
            return super().resume(read, model, opt)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

        st, weights, opt_state = read() if self.main else (None, None, None)
        box = [(st, weights is not None, opt_state is not None)]
        dist.broadcast_object_list(box, src=0)
        st, has_weights, has_opt = box[0]
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        if has_weights:
            set_model_state_dict(model, weights if self.main else {}, options=options)
        if has_opt:
            names = _param_names(self.inner(model))
            set_optimizer_state_dict(model, opt, _by_name(opt_state, names) if self.main else {}, options=options)
        return st

    def save(self, path: Path, model, opt, state: dict) -> None:
        if not self.distributed:
            return super().save(path, model, opt, state)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)  # full tensors on rank 0 only
        weights = get_model_state_dict(model, options=options)
        opt_state = get_optimizer_state_dict(model, opt, options=options)
        if self.main:
            names = _param_names(self.inner(model))
            checkpoints.save_torch(path, {"model": weights, "opt": _by_index(opt_state, names), "state": state})

    def agree(self, seconds: float) -> float:
        """The longest of the processes' clocks: every process stops on the same step."""
        if not self.distributed:
            return seconds
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t)

    # -- one step -------------------------------------------------------------------------------
    def step(self, loss_fn, model, design, cfg, x, y, opt) -> StepResult | None:
        """Forward + backward of this process's slices of the global batch (x, y), gradients
        summed over every slice of every process. None if the global loss is not finite (every
        process then skips the optimiser step together)."""
        from .tasks.batches import IGNORE

        R, T = x.shape  # x, y: (R, T) the whole global batch, the same on every process
        n_answers = int((y != IGNORE).sum())
        mine = self.slices(R)
        autocast: dict[str, Any] = dict(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda")
        one_slice = len(mine) == 1
        routing = GlobalRouting(R * T, reduce=self._sum if one_slice and self.distributed else None)
        if not one_slice:  # the global batch's routing first: a no-grad counting pass
            routing.counting = True
            token = GLOBAL_ROUTING.set(routing)
            try:
                model.eval()  # (msa: no index loss to compute)
                with torch.no_grad(), torch.autocast(**autocast):
                    for s in mine:
                        model(x[s].to(self.device))
            finally:
                model.train()
                GLOBAL_ROUTING.reset(token)
            layers = sorted(routing.counts)
            total = torch.stack([routing.counts[l] for l in layers])  # (layers, E) assignments of this process's rows
            if self.distributed:
                total = self._sum(total)
            routing.counts, routing.counting = dict(zip(layers, total)), False
        opt.zero_grad(set_to_none=True)
        sums = torch.zeros(4, dtype=torch.float64, device=self.device)  # loss, ce sum, correct, index loss
        token = GLOBAL_ROUTING.set(routing)
        try:
            for i, s in enumerate(mine):
                xs, ys = x[s].to(self.device), y[s].to(self.device)
                with self._sync(model, last=i == len(mine) - 1):
                    with torch.autocast(**autocast):
                        loss, ce_sum, correct, out = loss_fn(model, design, cfg, xs, ys, n_answers, R)
                    # DDP and FSDP average gradients over processes; the slices' losses add up
                    # to the global loss, so scale back to a sum.
                    (loss * self.world).backward()
                sums += torch.stack(
                    [loss.detach(), ce_sum.detach(), correct.to(loss.dtype), out.index_loss.detach() * (xs.shape[0] / R)]
                ).to(sums.dtype)
        finally:
            GLOBAL_ROUTING.reset(token)
        if self.distributed:
            dist.all_reduce(sums)
        loss_sum, ce_sum, correct, index_loss = sums.tolist()
        if not math.isfinite(loss_sum):
            return None
        return StepResult(ce_sum / n_answers, correct / n_answers, index_loss)

    def _sum(self, t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        dist.all_reduce(t)
        return t

    @contextlib.contextmanager
    def _sync(self, model, last: bool):
        """Gradients are reduced over processes after the last micro-batch only."""
        if self.kind == "ddp" and not last:
            with model.no_sync():
                yield
            return
        if self.kind == "fsdp":
            model.set_requires_gradient_sync(last)
        yield


def for_training(tc, device: torch.device) -> Local:
    """How train() runs its steps: Local (one process, whole batches) unless asked otherwise."""
    if tc.parallel == "none" and not tc.micro_batch:
        return Local(device)
    return Parallel(tc, device)


def _param_names(module) -> list[str]:
    """Parameter names in Optimizer order (module.parameters(): a tied weight once, first name)."""
    return [name for name, _ in module.named_parameters()]


def _by_index(opt_state: dict, names: list[str]) -> dict:
    """torch.distributed.checkpoint's optimiser state (keyed by parameter name) -> Optimizer.state_dict()'s (by index)."""
    index = {n: i for i, n in enumerate(names)}
    return {
        "state": {index[n]: v for n, v in opt_state["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in opt_state["param_groups"]],
    }


def _by_name(opt_state: dict, names: list[str]) -> dict:
    """Optimizer.state_dict()'s format -> torch.distributed.checkpoint's (keyed by parameter name)."""
    return {
        "state": {names[i]: v for i, v in opt_state["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in opt_state["param_groups"]],
    }
