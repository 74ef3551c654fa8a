"""Measure this machine's roofline (the `cpu` hardware profile) at the start of a run.

    flops                   fp32 FLOP/s of a 2048^3 matmul (output preallocated)
    small_matmul_efficiency FLOP/s of 512 batched 64x64x64 matmuls, over the above
    matvec_efficiency       FLOP/s of one 64-d row times 1024 keys (a decode step's q . K^T), over the above
    mem_bandwidth           bytes/s of copying 256 MiB into an existing tensor (read + write)
    exp_rate                exponentials/s on a cache-resident 64 x 1024 tensor
    alloc_bandwidth         bytes/s of first-touching a fresh 64 MiB tensor (page faults), the
                            fill time of an existing tensor taken off; 0 (free) when a new tensor
                            fills within 5% of an existing one's time (attnbench.heap keeps pages)
    launch_s                seconds per torch op of a short functional sequence (views, small ops)
    cache_bytes             the largest per-core cache (sysfs): re-reads of data that fits there are free
    module_op_s             seconds per torch op of a tiny nn.Module MLP (module call overhead included)

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

    def t(fn):
        return time_fn(fn, cpu, min_run_time=min_run_time).median_ms / 1e3  # seconds

    n = 2048
    a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    mm = 2 * n**3 / t(lambda: torch.mm(a, b, out=out))

    x, y, o = torch.randn(512, 64, 64), torch.randn(512, 64, 64), torch.empty(512, 64, 64)
    small = 2 * 512 * 64**3 / t(lambda: torch.bmm(x, y, out=o))

    row, keys, dots = torch.randn(1, 64), torch.randn(64, 1024), torch.empty(1, 1024)  # one query against keys
    matvec = 2 * 64 * 1024 / t(lambda: torch.mm(row, keys, out=dots))

    src, dst = torch.empty(256 * MiB // 4).fill_(1.0), torch.empty(256 * MiB // 4)
    bandwidth = 2 * src.numel() * 4 / t(lambda: dst.copy_(src))

    fresh_n = 64 * MiB // 4
    reused = torch.empty(fresh_n)
    fill = t(lambda: reused.fill_(1.0))
    fresh = t(lambda: torch.empty(fresh_n).fill_(1.0))
    # 0 = free: where the heap keeps freed memory (attnbench.heap) a new 64 MiB tensor can reuse pages
    alloc = fresh_n * 4 / (fresh - fill) if fresh > 1.05 * fill else 0.0

    logits, exps = torch.randn(64, 1024), torch.empty(64, 1024)  # cache-resident: the exp units, not memory
    exp_rate = logits.numel() / t(lambda: torch.exp(logits, out=exps))

    tiny = torch.zeros(8, 8)  # what the references issue: views and small ops on small tensors

    def mix():
        return torch.exp(tiny[:, 1:].unsqueeze(0).transpose(1, 2).reshape(-1, 8)).mul(2.0).sum()

    launch = t(mix) / dispatches(mix)

    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8))
    x8 = torch.randn(1, 8)
    with torch.no_grad():
        module_op = t(lambda: mlp(x8)) / dispatches(lambda: mlp(x8))

    raw = {
        "matmul_flops": mm,
        "small_matmul_flops": small,
        "matvec_flops": matvec,
        "copy_bandwidth": bandwidth,
        "fresh_fill_s": fresh,
        "reused_fill_s": fill,
        "alloc_bandwidth": alloc,
        "exp_rate": exp_rate,
        "torch_op_s": launch,
        "module_op_s": module_op,
    }
    return from_raw(base, raw), raw


def from_raw(base: HardwareConfig, raw: dict, threads: int | None = None) -> HardwareConfig:
    """The profile the raw measurements of ``calibrate`` give (also read back from a run's records)."""
    mm = raw["matmul_flops"]
    return replace(
        base,
        flops={"float32": mm},
        small_matmul_efficiency=min(1.0, raw["small_matmul_flops"] / mm),
        matvec_efficiency=min(1.0, raw["matvec_flops"] / mm),
        mem_bandwidth=raw["copy_bandwidth"],
        exp_rate=raw["exp_rate"],
        alloc_bandwidth=raw["alloc_bandwidth"],
        launch_s=raw["torch_op_s"],
        module_op_s=raw["module_op_s"],
        cache_bytes=core_cache_bytes(),
        calibrate=False,
        source=f"measured at run start on {threads or torch.get_num_threads()} torch threads",
    )


def core_cache_bytes() -> float:
    """The largest cache private to one CPU core (L2 on most x86), from sysfs; 1 MiB if unknown."""
    from pathlib import Path

    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            shared = (index / "shared_cpu_list").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if ("," in shared or "-" in shared) or not size.endswith("K"):
            continue  # shared between cores
        best = max(best, int(size[:-1]) * 1024)
    return float(best or MiB)


def dispatches(fn) -> int:
    """Torch ops (aten calls, views included) that one call of fn issues."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.n


def profile(cfg_hw) -> HardwareConfig:
    """A HardwareConfig dataclass from a config node (or a dataclass)."""
    from omegaconf import OmegaConf

    if isinstance(cfg_hw, HardwareConfig):
        return cfg_hw
    node = OmegaConf.merge(OmegaConf.structured(HardwareConfig), cfg_hw)
    out = OmegaConf.to_object(node)
    assert isinstance(out, HardwareConfig), type(out)  # a structured node becomes its dataclass
    return out


def load_profile(name: str) -> HardwareConfig:
    """conf/hardware/<name>.yaml as a HardwareConfig."""
    from importlib import resources

    from omegaconf import OmegaConf

    text = resources.files("attnbench.conf").joinpath("hardware", f"{name}.yaml").read_text()
    return profile(OmegaConf.create(text))


def hardware_for_run(ctx) -> HardwareConfig:
    """The run's profile (cfg.hardware); a `calibrate: true` profile is measured now on the CPU
    and each measurement recorded (calibration/<name>)."""
    hw = profile(ctx.cfg.hardware)
    if not hw.calibrate:
        return hw
    if ctx.device.type != "cpu":
        raise RuntimeError(
            f"hardware={hw.name} calibrates the CPU, but the run's device is {ctx.device}: pass hardware=<gpu profile> (conf/hardware/)"
        )
    cell = ctx.cell(part="calibration", hardware=hw.name)
    if cell.done:  # a rerun predicts with the profile its first run measured (and measures nothing again)
        hw = from_raw(hw, {r["metric"].removeprefix("calibration/"): r["value"] for r in cell.recorded}, threads=ctx.cfg.threads)
    else:
        hw, raw = calibrate(hw, min_run_time=ctx.cfg.bench.min_run_time)
        for key, value in raw.items():
            unit = "s" if key.endswith("_s") else ("FLOP/s" if "flops" in key else ("1/s" if key == "exp_rate" else "bytes/s"))
            cell.record("-", f"calibration/{key}", value, unit, "measured", layout="", hardware=hw.name)
        cell.commit()
    ctx.console.print(
        f"  calibrated {hw.name}: matmul {hw.flops['float32'] / 1e9:.0f} GFLOP/s, small x{hw.small_matmul_efficiency:.2f}, "
        f"copy {hw.mem_bandwidth / 1e9:.1f} GB/s, page faults "
        + (f"{hw.alloc_bandwidth / 1e9:.2f} GB/s, " if hw.alloc_bandwidth else "none (freed pages reused), ")
        + f"exp {hw.exp_rate / 1e9:.2f} G/s, op {hw.launch_s * 1e6:.1f} us, module op {hw.module_op_s * 1e6:.1f} us"
    )
    return hw
