"""How a training step runs over processes and micro-batches (trainer.py's ``par``): ``Local``,
one process and whole batches, or ``Parallel``, a global batch split over torchrun's processes
(DDP or FSDP2's ``fully_shard``) and micro-batches, with checkpoints gathered into the
one-process format and resumed on any number of processes. The processes themselves (launch,
session, ranks) are attnbench/training/distributed.py's; its docstring describes the whole scheme.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from attnbench.training import checkpoints
from attnbench.config import ConfigError
from attnbench.training.distributed import active, rank, world
from attnbench.model.moe import GLOBAL_ROUTING, GlobalRouting
from attnbench.tasks.batches import answer_columns


@dataclass
class StepResult:
    """Means over the global batch of one step."""

    ce: float
    acc: float
    index_loss: float


def _result(loss, ce, acc, index_loss) -> StepResult | None:
    """The step's numbers in one read from the device (None: the loss is not finite)."""
    finite, ce_, acc_, index_ = torch.stack(
        [torch.isfinite(loss).to(ce.dtype), ce.detach(), acc.to(ce.dtype), index_loss.detach().to(ce.dtype)]
    ).tolist()
    return StepResult(ce_, acc_, index_) if finite else None


class Local:
    """One process, whole batches: training exactly as it was before distributed training."""

    rank, world, main = 0, 1, True
    kind = "none"
    whole_batches = True  # step() takes train.task_loss (else train.task_loss_share, per slice)

    def __init__(self, device: torch.device):
        self.device = device
        self.phase_s: dict[str, float] = {}  # seconds of the last step's forward and backward (whole batches only)
        # wraps the step's hot path (from the batch on the device to the end of the backward):
        # training.sync.SyncGuard there fails on any host read (tests/test_sync_free.py)
        self.hot_path: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

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

    def step(self, loss_fn, model, design, cfg, x, y, opt, *, cols=None) -> StepResult | None:
        """Forward + backward of the host's batch (x, y); None if its loss is not finite (the
        caller then skips the optimiser step: the weights stay as they were). cols: y's answer
        columns where the batch's maker read them (the prefetcher), else read here.

        Nothing between the batch's move to the device and the end of the backward reads a
        device value on the host (attnbench/training/sync.py; tests/test_sync_free.py): the
        answer columns are read from the host's y, and the step's four numbers (finite, CE,
        accuracy, index loss) come back in one read after the backward."""
        if cols is None:
            cols = answer_columns(y)  # on the host's y
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        if cols is not None:
            cols = cols.to(self.device, non_blocking=True)
        with self.hot_path():
            # bf16 autocast on GPUs; fp32 on CPU (bf16 matmuls are 100-500x slower there)
            t0 = time.perf_counter()
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
                loss, ce, acc, out = loss_fn(model, design, cfg, x, y, cols=cols)
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            self.phase_s = {"forward": t1 - t0, "backward": time.perf_counter() - t1}  # the last step's (train_rate)
        return _result(loss, ce, acc, out.index_loss)

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
    def step(self, loss_fn, model, design, cfg, x, y, opt, *, cols=None) -> StepResult | None:
        """Forward + backward of this process's slices of the global batch (x, y), gradients
        summed over every slice of every process. None if the global loss is not finite (every
        process then skips the optimiser step together)."""
        from attnbench.tasks.batches import IGNORE

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
                cols = answer_columns(y[s])  # on the host's rows
                xs, ys = x[s].to(self.device), y[s].to(self.device)
                with self._sync(model, last=i == len(mine) - 1):
                    with torch.autocast(**autocast):
                        loss, ce_sum, correct, out = loss_fn(
                            model, design, cfg, xs, ys, n_answers, R, cols=None if cols is None else cols.to(self.device)
                        )
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
