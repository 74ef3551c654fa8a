"""What the lines of a results file hold (attnbench/records/read.py describes the file): the statuses
a record may have, the shared metric names (stable: the report, W&B and dashboards key on them),
the fields every record carries, and a header's provenance: the git commit (and, for a dirty
checkout, the file beside the records that holds its diff), the library versions and the hardware
of a (re)start; ``stable_hash`` (config hashes, checkpoint keys) and ``now`` (every timestamp).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

# measured: timed or counted here; projected: the cost model's prediction of a time; analytic:
# computed from a formula (bytes, crossover lengths), shown like projected; skipped; failed.
STATUSES = ("measured", "projected", "analytic", "skipped", "failed")

# Metric names shared by the experiments, the report and W&B (stable: dashboards key on them).
# Extra fields a record of that metric carries are listed after the unit.
METRICS = {
    "params/total": "count",  # also params/attention, params/experts, params/active, params/embedding
    "train/loss": "nats; step, tokens",  # training curve points
    "train/steps_to_floor": "steps (None if the floor was not reached); steps, tokens, wall_s, floor, reached (bool), "
    "rule {name, token_budget, patience, floor, advance_at}, train_len (longest stage passed), stop_reason, source, copied_at",
    "train/stage_rate": "tokens/s of a curriculum stage's steps; stage, lengths, steps, tokens, seconds, flops_per_token (cost model, "
    "forward + backward), gflops, fraction_of_peak (of the fp32 matmul peak calibrated at the training's start; null if none), "
    "peak_gflops, threads, cpu, shares {data, forward, backward, optimizer}, compile_s",
    "train/acc": "fraction; task, context_len (the training length), n, ci_low, ci_high (also per hops for multihop)",
    "niah/acc": "fraction; task (niah_single|_multikey|_multivalue|_multiquery), context_len, depth, n, ci_low, ci_high, train_len",
    "multihop/acc": "fraction; hop_task (chain|vartrack), hops, scoring (final value), context_len, n, ci_low, ci_high, train_len",
    "multihop/lookup_acc": "fraction; the diagnostic: the same chains as k single lookups, every key given, all k scored",
    "eval/prefill_s": "s; context_len (wall time of one haystack's prefill)",
    "eval/peak_rss_increase_bytes": "bytes; context_len (peak resident memory during the cell minus at its start)",
    "eval/peak_rss_bytes": "bytes; context_len (older runs: the process's high-water mark, not per cell)",
    "latency/prefill_ms": "ms; context_len, scope (op|layer), op, backend, p25_ms, p75_ms, n",
    "latency/decode_ms": "ms; context_len (cache length), scope, op, backend, p25_ms, p75_ms, n",
    "latency/fwd_bwd_ms": "ms; context_len, scope (op), op, backend, dtype, p25_ms, p75_ms, n (forward + backward)",
    "kernels/speedup": "x (baseline_ms / op_ms, same process); context_len, op, backend, baseline, phase (fwd|fwd_bwd)",
    "kernels/compile_s": "s; op, backend, context_len (first call of a compiled baseline: compile + one run)",
    "kernels/check_err": "max abs error vs the truth; op, backend, dtype, context_len, tensor (o|dq|...), bound, torch_err",
    "memory/cache_bytes_per_token": "bytes; dtype, preset (production presets) or design",
    "memory/fixed_state_bytes": "bytes; dtype",
    "memory/total_bytes": "bytes; dtype, context_len",
    "costmodel/rel_error": "ratio predicted/measured; op, phase (prefill|decode), context_len, scope, within, bound",
    "crossover/prefill_len": "tokens (None when out of range); vs (the baseline design), method (analytic|measured), "
    "bracket [lo, hi], relation (= | < min | > max), crossings, scope (op|layer|model), hardware, shape",
    "crossover/decode_len": "tokens; same fields as crossover/prefill_len",
    "crossover/memory_len": "tokens; same fields as crossover/prefill_len",
    "msa_speedup/prefill": "x; context_len, hardware, method (analytic|measured)",
    "msa_speedup/decode": "x; context_len, hardware, method (analytic|measured)",
    # added by the costs issue (#3):
    "msa_speedup/compute_per_token": "x (baseline / M3 attention FLOPs of one decoded token); context_len, vs",
    "msa_speedup/verdict": "text; claim, published, predicted_attention, predicted_model, ratio, hardware, source",
    "calibration/<name>": "the cpu roofline measured at run start (matmul_flops, copy_bandwidth, ...)",
    "gate/rel_error": "relative; op, backend (the correctness check an op passes before it is timed)",
}
REQUIRED = ("exp", "design", "layout", "metric", "value", "unit", "status")
OPTIONAL = ("context_len", "depth", "seed", "backend", "device", "dtype")
PACKAGES = ("torch", "triton", "hydra-core", "omegaconf", "numpy", "pandas", "matplotlib", "wandb", "datasets", "attnbench")


# the checkout whose commit a header names (a module global so a test can point it at a scratch repository)
CHECKOUT = Path(__file__).resolve().parent
# What a run writes, not code: a rerun of a recorded run replaces its records, its console log, its
# summary and Hydra's copy of its config (run.sh scripts remove and rewrite their tracked run folder,
# the report is regenerated), so a change there leaves the code that made the numbers as the commit
# says. Root-relative pathspecs: everything (":/") but these.
CODE = (
    ":/",
    *(f":(top,exclude,glob)**/{name}" for name in ("results.jsonl", "run.log", "git-*.diff", "cli.log", "summary.md", ".hydra/**")),
    ":(top,exclude)reports",
)


def imported_elsewhere() -> list[str]:
    """The parts of the package (its kernels and configs, which the editable install maps from the
    repository's top level) that this process imports from a different checkout than attnbench's
    own: a second worktree run with the first one's editable install takes kernels/ and conf/
    from the first, whatever its own commit says."""
    import importlib.util

    root = CHECKOUT.parents[1]
    out = []
    for name in ("attnbench.kernels", "attnbench.conf"):
        spec = importlib.util.find_spec(name)
        where = [Path(p).resolve() for p in (spec.submodule_search_locations or [])] if spec else []
        if where and not any(root == w or root in w.parents for w in where):
            out.append(f"{name} from {where[0]}")
    return out


def git_commit() -> dict[str, Any]:
    """The commit of the attnbench checkout (``unknown`` for an installed wheel); ``dirty`` also
    when part of the package is imported from another checkout (``elsewhere`` names it)."""
    here = CHECKOUT
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return {"commit": "unknown", "dirty": None}
        status = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--", *CODE],
            capture_output=True,
            text=True,
            timeout=10,
        )
        elsewhere = imported_elsewhere()
        if elsewhere:
            return {"commit": commit.stdout.strip(), "dirty": True, "elsewhere": elsewhere}
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}


def with_diff(git: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """``git`` with ``diff`` naming the file, beside the records, that holds ``git diff HEAD`` of a
    dirty checkout (secrets masked): a commit alone cannot say which code made a dirty run's
    numbers, the commit and its diff can. A clean or unknown tree: ``git`` unchanged, no file."""
    if not git.get("dirty"):
        return git
    try:
        out = subprocess.run(
            ["git", "-C", str(CHECKOUT), "diff", "--no-color", "--no-ext-diff", "HEAD", "--", *CODE],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return git
    if out.returncode != 0:
        return git
    from attnbench.records.redact import redact

    text = redact(out.stdout)
    name = f"git-{git['commit'][:12]}.diff"
    path = Path(run_dir) / name
    if path.exists() and path.read_text() != text:  # a restart on the same commit with other edits keeps both diffs
        name = f"git-{git['commit'][:12]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}.diff"
        path = Path(run_dir) / name
    if not path.exists():
        path.write_text(text)
    return {**git, "diff": name}


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def hardware() -> dict[str, Any]:
    import psutil
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "machine": platform.machine(),
        "system": platform.system(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_bytes": psutil.virtual_memory().total,
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
    return info


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
