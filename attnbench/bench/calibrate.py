"""Measure this machine's roofline (the `cpu` hardware profile) at the start of a run.

    flops                   fp32 FLOP/s of a 2048^3 matmul (output preallocated)
    small_matmul_efficiency FLOP/s of 512 batched 64x64x64 matmuls, over the above
    mem_bandwidth           bytes/s of copying 256 MiB into an existing tensor (read + write)
    exp_rate                exponentials/s on a cache-resident 64 x 1024 tensor
    alloc_bandwidth         bytes/s of first-touching a fresh 64 MiB tensor (page faults), the
                            fill time of an existing tensor taken off
    launch_s                seconds of one tiny torch op (dispatch overhead)

Each is a median of torch.utils.benchmark runs (attnbench.bench.timing), so under a loaded CPU
the profile is measured under the same load as the timings it predicts.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnbench.config import HardwareConfig

from .timing import time_fn

MiB = 1 << 20


def calibrate(base: HardwareConfig, *, min_run_time: float = 0.3) -> tuple[HardwareConfig, dict]:
    """A copy of `base` with the measured fields filled in, and the raw measurements."""
    cpu = torch.device("cpu")
    t = lambda fn: time_fn(fn, cpu, min_run_time=min_run_time).median_ms / 1e3  # seconds

    n = 2048
    a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    mm = 2 * n**3 / t(lambda: torch.mm(a, b, out=out))

    x, y, o = torch.randn(512, 64, 64), torch.randn(512, 64, 64), torch.empty(512, 64, 64)
    small = 2 * 512 * 64**3 / t(lambda: torch.bmm(x, y, out=o))

    src, dst = torch.empty(256 * MiB // 4).fill_(1.0), torch.empty(256 * MiB // 4)
    bandwidth = 2 * src.numel() * 4 / t(lambda: dst.copy_(src))

    fresh_n = 64 * MiB // 4
    reused = torch.empty(fresh_n)
    fill = t(lambda: reused.fill_(1.0))
    fresh = t(lambda: torch.empty(fresh_n).fill_(1.0))
    alloc = fresh_n * 4 / max(fresh - fill, 1e-9)

    logits, exps = torch.randn(64, 1024), torch.empty(64, 1024)  # cache-resident: the exp units, not memory
    exp_rate = logits.numel() / t(lambda: torch.exp(logits, out=exps))

    tiny = torch.zeros(1)
    launch = t(lambda: tiny.add_(1.0))

    hw = replace(
        base,
        flops={"float32": mm},
        small_matmul_efficiency=min(1.0, small / mm),
        mem_bandwidth=bandwidth,
        exp_rate=exp_rate,
        alloc_bandwidth=alloc,
        launch_s=launch,
        calibrate=False,
        source=f"measured at run start on {torch.get_num_threads()} torch threads",
    )
    raw = {"matmul_flops": mm, "small_matmul_flops": small, "copy_bandwidth": bandwidth,
           "fresh_fill_s": fresh, "reused_fill_s": fill, "alloc_bandwidth": alloc, "exp_rate": exp_rate, "tiny_op_s": launch}
    return hw, raw


def profile(cfg_hw) -> HardwareConfig:
    """A HardwareConfig dataclass from a config node (or a dataclass)."""
    from omegaconf import OmegaConf

    if isinstance(cfg_hw, HardwareConfig):
        return cfg_hw
    node = OmegaConf.merge(OmegaConf.structured(HardwareConfig), cfg_hw)
    return OmegaConf.to_object(node)


def load_profile(name: str) -> HardwareConfig:
    """conf/hardware/<name>.yaml as a HardwareConfig."""
    from importlib import resources

    from omegaconf import OmegaConf

    text = resources.files("attnbench.conf").joinpath("hardware", f"{name}.yaml").read_text()
    return profile(OmegaConf.create(text))
