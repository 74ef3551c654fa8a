"""Results records: one ``results.jsonl`` per run directory.

The first line of every (re)start is a header (config hash, git commit, library versions,
hardware); then one JSON object per measurement; a run that ends through attnbench.cli
appends a footer (status completed | interrupted | failed, wall_s). Secret-looking values
from the environment are masked before anything is written (attnbench.redact). A line is written with one ``write`` of the
whole line, flushed and fsync'ed, so a killed run leaves whole records (a reader skips a
torn last line rather than failing).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from .redact import redact

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


def git_commit() -> dict[str, Any]:
    """The commit of the attnbench checkout (``unknown`` for an installed wheel)."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return {"commit": "unknown", "dirty": None}
        status = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}


def versions() -> dict[str, str | None]:
    found = {"python": platform.python_version()}
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


def stable_hash(obj: Any, n: int = 16) -> str:
    """Hex digest of a JSON-able object, independent of dict order."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class Recorder:
    """Appends records to ``path``; every record carries the run's exp and config hash."""

    def __init__(self, path: Path, exp: str, config: dict, config_hash: str):
        self.path, self.exp, self.config_hash = Path(path), exp, config_hash
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Cells already recorded by an earlier (possibly killed) run in this directory.
        self.done_cells = {r["cell"] for r in read_jsonl(self.path) if r.get("cell")} if self.path.exists() else set()
        self._append({"type": "header", "exp": exp, "config_hash": config_hash, "started": now(),
                      "git": git_commit(), "versions": versions(), "hardware": hardware(), "config": config})

    def _append(self, *objs: dict) -> None:
        """Append whole lines with one write, flushed and fsync'ed (secrets masked)."""
        text = redact("".join(json.dumps(o, sort_keys=False, default=str, allow_nan=True) + "\n" for o in objs))
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def close(self, status: str, wall_s: float) -> None:
        """A footer line: how this (re)start ended (completed | interrupted | failed)."""
        self._append({"type": "footer", "exp": self.exp, "config_hash": self.config_hash, "ended": now(),
                      "status": status, "wall_s": round(wall_s, 3)})

    def make(self, **fields: Any) -> dict:
        """A checked record (not yet written)."""
        fields.setdefault("exp", self.exp)
        missing = [k for k in REQUIRED if k not in fields]
        if missing:
            raise ValueError(f"record is missing {missing}: {fields}")
        if fields["status"] not in STATUSES:
            raise ValueError(f"status {fields['status']!r}: allowed {STATUSES}")
        # a record copied from elsewhere (a checkpoint's training curve) keeps its own time
        return {"type": "record", **fields, "config_hash": self.config_hash, "time": fields.get("time", now())}

    def record(self, **fields: Any) -> dict:
        rec = self.make(**fields)
        self._append(rec)
        return rec

    def write_cell(self, cell: str, records: list[dict]) -> None:
        """All records of one cell in one write: after a kill a cell is either whole or absent."""
        self._append(*({**r, "cell": cell} for r in records))
        self.done_cells.add(cell)


def read_jsonl(path: Path) -> list[dict]:
    """All whole JSON lines of a results file (a torn last line is skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def load_records(paths: Iterable[Path]) -> list[dict]:
    """The measurement records of one or more results files (headers dropped)."""
    return [r for p in paths for r in read_jsonl(Path(p)) if r.get("type") == "record"]
