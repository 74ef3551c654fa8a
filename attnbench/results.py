"""Results records: one ``results.jsonl`` per run directory, each line verifiable on its own.

The first line of every (re)start is a header (config hash, git commit, library versions,
hardware); then one JSON object per measurement; a run that ends through attnbench.cli
appends a footer (status completed | interrupted | failed, wall_s, and the error of a failed
run). Secret-looking values from the environment are masked before anything is written
(attnbench.redact).

Integrity (read back by ``scan``, line by line, each line decoded as UTF-8 text, never by
``json.loads`` guessing an encoding from bytes):
- every line ends in a CRC-32 of the rest of the line (``"crc32": "89abcdef"``), so a line
  garbled on disk is told apart from a good one even when it is still valid JSON;
- the records of one experiment cell are written in one ``write`` together with a commit line
  (``{"type": "commit", "cell": KEY, "coords": {...}, "records": N}``) that follows its N
  record lines: a cell is done only when its commit line and all N records are whole;
- a damaged line (cut short, garbled, not UTF-8, NUL bytes, not a JSON object) and the records
  of a cell that is not whole are named (line number, what is wrong, the cell); ``Scan.repair``
  rewrites the file atomically without them (they go to ``results.jsonl.damaged``, nothing is
  thrown away). A cell that loses any line to a repair loses all of them and runs again, so a
  rerun redoes exactly those cells and never appends to a torn line. A second copy of a whole
  cell or of one of its records is removed and the cell stays recorded once.
- every line, the header included, is appended with one ``write``; a write the disk cannot take
  (ENOSPC) is cut back off the file (``DiskFull``), so no line is ever left torn by it.
Lines written before this format (no checksum) are read as they are.
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import json
import os
import platform
import re
import subprocess
import zlib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from .redact import redact, redact_obj

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


def git_commit() -> dict[str, Any]:
    """The commit of the attnbench checkout (``unknown`` for an installed wheel)."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return {"commit": "unknown", "dirty": None}
        status = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}


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


def stable_hash(obj: Any, n: int = 16) -> str:
    """Hex digest of a JSON-able object, independent of dict order."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- one line

CHECKSUM = "crc32"
_CHECKED = re.compile(r'^(\{.*), "crc32": "([0-9a-f]{8})"\}$', re.DOTALL)
DAMAGED_SUFFIX = ".damaged"  # results.jsonl.damaged: the lines a repair took out, as they were


def encode_line(obj: dict) -> bytes:
    """One JSON line (secrets masked) ending in the CRC-32 of everything before it.

    Secrets are masked in the object's strings before serialising (a secret holding a quote, a
    backslash or a non-ASCII character is escaped by JSON, and the escaped form would no longer
    match) and in the text after it. The checksum covers the exact bytes of the line, so checking
    it needs no re-serialization. zlib.crc32 is the stdlib's corruption check; the framing around
    it (a last key) is ours because JSON Lines has none and readers of results.jsonl must still
    see plain JSON.
    """
    body = redact(json.dumps(redact_obj(obj), default=str, allow_nan=True)).encode()  # ASCII: any other byte is damage
    return body[:-1] + b', "%s": "%08x"}\n' % (CHECKSUM.encode(), zlib.crc32(body))


def decode_line(raw: bytes) -> tuple[dict | None, str | None, bool]:
    """(object, None, checked) of a good line; (None, what is wrong, False) of a damaged one.

    The line is decoded as UTF-8 text first and parsed as text: ``json.loads`` on bytes guesses
    UTF-16/32 from leading NUL bytes and raises a UnicodeDecodeError instead of naming the damage.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as ex:
        return None, f"not UTF-8 (byte {ex.start + 1} is 0x{raw[ex.start]:02x})", False
    if "\x00" in text:  # what a power loss leaves: the file's length was written, its data was not
        n = text.count("\x00")
        return None, f"{n} NUL byte{'s' if n > 1 else ''} (lost in a crash or power loss)", False
    m = _CHECKED.match(text)
    body = m[1] + "}" if m else text
    if m and zlib.crc32(body.encode()) != int(m[2], 16):
        return None, "checksum mismatch (garbled)", False
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None, "not valid JSON" + (" (cut short)" if text.startswith("{") and not text.rstrip().endswith("}") else ""), False
    if not isinstance(obj, dict):
        return None, f"not a JSON object ({type(obj).__name__})", False
    if not m and CHECKSUM in obj:
        return None, "checksum field garbled", False
    return obj, None, bool(m)


# ---------------------------------------------------------------- a whole file


@dataclass
class Line:
    no: int  # 1-based line number in the file
    raw: bytes  # without the newline
    obj: dict | None  # None when damaged
    problem: str | None = None  # why it is damaged, or why it leaves the file
    checked: bool = False
    keep: bool = True  # stays in the file on repair
    cell: str | None = None  # the cell it belongs to, where that is known (a damaged line inside a commit's block)


@dataclass
class Scan:
    """What a results file holds: its lines, which cells are whole, what is damaged.

    ``bad_cells``: cells that lost a line (they run again); ``duplicates``: lines removed as a
    second copy of a whole cell or of one of its records (their cells stay recorded once).
    """

    path: Path
    lines: list[Line] = field(default_factory=list)
    done_cells: set[str] = field(default_factory=set)
    bad_cells: dict[str, str] = field(default_factory=dict)  # cell key -> its name (coordinates)
    names: dict[str, str] = field(default_factory=dict)  # cell key -> its name, for every cell seen
    ends_whole: bool = True  # the file ends with a newline

    @property
    def objects(self) -> list[dict]:
        """The good lines' objects (checksums dropped), without records of cells that are not whole."""
        return [l.obj for l in self.lines if l.keep and l.obj is not None]  # kept lines are whole

    @property
    def damaged(self) -> list[Line]:
        return [l for l in self.lines if l.obj is None]

    @property
    def dropped(self) -> list[Line]:
        return [l for l in self.lines if not l.keep]

    @property
    def duplicates(self) -> list[Line]:
        return [l for l in self.dropped if l.obj is not None and l.problem and l.problem.startswith("duplicate")]

    @property
    def needs_repair(self) -> bool:
        return bool(self.dropped) or not self.ends_whole

    def config_hashes(self) -> list[str]:
        """Config hashes of the runs that wrote this file, in order of appearance."""
        found = [o.get("config_hash") for o in self.objects if o.get("type") in ("header", "record")]
        return list(dict.fromkeys(h for h in found if h))

    def name(self, key: str | None) -> str:
        return self.names.get(key or "", cell_name(None, key or "?"))

    def summary(self) -> str:
        """One line naming every damaged line (number, what is wrong, its cell where known), the
        cells that run again and the duplicates removed ('' if nothing)."""
        if not self.dropped:
            return ""
        parts = []

        def listed(lines: list[Line], say) -> str:
            text = "; ".join(say(l) for l in lines[:8])
            return text + (f"; and {len(lines) - 8} more" if len(lines) > 8 else "")

        if self.damaged:
            n = len(self.damaged)
            parts.append(
                f"{n} damaged line{'s' if n > 1 else ''} ("
                + listed(self.damaged, lambda l: f"line {l.no}: {l.problem}" + (f", in cell {self.name(l.cell)}" if l.cell else ""))
                + ")"
            )
        lost = [l for l in self.dropped if l.obj is not None and l not in self.duplicates]
        if lost:
            parts.append("set aside with their cells: " + listed(lost, lambda l: f"line {l.no} ({l.problem})"))
        if self.bad_cells:
            n = len(self.bad_cells)
            names = "; ".join(list(self.bad_cells.values())[:8]) + ("; ..." if n > 8 else "")
            parts.append(f"{n} cell{'s' if n > 1 else ''} not whole, run again ({names})")
        if self.duplicates:
            n = len(self.duplicates)
            parts.append(
                f"{n} duplicate line{'s' if n > 1 else ''} removed, each cell kept once ("
                + listed(self.duplicates, lambda l: f"line {l.no}: {l.problem}")
                + ")"
            )
        return f"{self.path}: " + ", ".join(parts)

    def repair(self) -> None:
        """Rewrite the file atomically without the dropped lines; append those to results.jsonl.damaged."""
        if not self.needs_repair:
            return
        if self.dropped:
            with open(self.path.with_name(self.path.name + DAMAGED_SUFFIX), "ab") as f:
                f.write(b"".join(l.raw + b"\n" for l in self.dropped))
                f.flush()
                os.fsync(f.fileno())
        write_atomic(self.path, b"".join(l.raw + b"\n" for l in self.lines if l.keep))


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file beside it, fsync, rename, fsync the directory."""
    from .checkpoints import atomic_write

    atomic_write(path, lambda f: f.write(data))
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def scan(path: Path) -> Scan:
    """Read and check every line of a results file (see the module docstring for the rules)."""
    path = Path(path)
    out = Scan(path)
    if not path.exists():
        return out
    seen_checked, no, last = False, 0, b"\n"
    with open(path, "rb") as f:
        for chunk in f:  # line by line: one bad line (NULs, random bytes) is one damaged line
            no, last = no + 1, chunk
            raw = chunk[:-1] if chunk.endswith(b"\n") else chunk
            obj, problem, checked = decode_line(raw)
            if obj is not None and not checked and seen_checked:
                obj, problem = None, "no checksum"
            seen_checked |= checked
            out.lines.append(Line(no, raw, obj, problem, checked, keep=obj is not None))
    out.ends_whole = last.endswith(b"\n")
    _check_cells(out)
    return out


def _record_of(line: Line, key: str) -> bool:
    return line.obj is not None and line.obj.get("type") == "record" and line.obj.get("cell") == key


def _check_cells(out: Scan) -> None:
    """Decide which cells are whole; every line of a cell that is not whole leaves the file (so the
    cell runs again and is written whole); second copies of whole cells and records leave it too."""
    lines = out.lines
    owner: dict[int, str] = {}  # line index -> the cell whose whole block holds it
    block_of: dict[str, list[int]] = {}  # a done cell -> the indices of its records and commit
    bad: dict[str, str] = {}  # cell -> why it is not whole
    for j, line in enumerate(lines):
        obj = line.obj
        if obj is None or obj.get("type") != "commit":
            continue
        key, n = str(obj.get("cell", "")), obj.get("records")
        out.names.setdefault(key, cell_name(obj.get("coords"), key))
        span = list(range(j - n, j)) if isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= j else None
        whole = span is not None and all(_record_of(lines[i], key) and i not in owner for i in span)
        if whole and key not in block_of:
            block_of[key] = [*span, j]  # type: ignore[misc]
            owner.update((i, key) for i in block_of[key])
            continue
        if whole:  # the same cell committed again (a run that did not see the first)
            first = [lines[i].no for i in block_of[key]]
            for i in [*span, j]:  # type: ignore[misc]
                lines[i].keep, lines[i].problem = (
                    False,
                    f"duplicate: cell {out.names[key]} is already whole at lines {first[0]}-{first[-1]}",
                )
                owner[i] = key
            continue
        if span is None:
            bad.setdefault(key, f"line {line.no}: its commit counts {n!r} records")
        else:
            wrong = next(i for i in span if not (_record_of(lines[i], key) and i not in owner))
            bad.setdefault(key, f"line {line.no}: commit of {n} records, but line {lines[wrong].no} is not one of them")
            for i in span:  # damaged lines inside the block: most likely this cell's
                if lines[i].obj is None:
                    lines[i].cell = lines[i].cell or key
        line.keep, line.problem = False, f"commit line of cell {out.names[key]}, which is not whole"
    seen_raw = {lines[i].raw: i for i in owner if lines[i].keep}
    legacy_done, loose = set(), dict[str, int]()
    machine = None  # the CPU of the (re)start writing these lines: the same record from another machine is another measurement
    for i, line in enumerate(lines):
        obj = line.obj
        if obj is not None and obj.get("type") == "header":
            machine = (obj.get("hardware") or {}).get("cpu")
        if obj is not None and obj.get("type") == "record" and not obj.get("cell"):  # written outside any cell (older runs)
            same = json.dumps([machine, {k: v for k, v in obj.items() if k not in ("time", CHECKSUM)}], sort_keys=True, default=str)
            if same in loose:
                line.keep, line.problem = False, f"duplicate: the record of line {lines[loose[same]].no} recorded again (no cell)"
            loose.setdefault(same, i)
            continue
        if obj is None or obj.get("type") != "record" or not obj.get("cell") or i in owner:
            continue
        key = str(obj["cell"])
        out.names.setdefault(key, cell_name(None, key, obj))
        if not line.checked:  # written before commit lines existed: done when any of its records is there
            legacy_done.add(key)
            continue
        if line.raw in seen_raw:  # a second copy of a record of a whole cell: nothing is lost
            line.keep, line.problem = False, f"duplicate: a second copy of line {lines[seen_raw[line.raw]].no} (cell {out.names[key]})"
            continue
        bad.setdefault(key, f"line {line.no}: a record outside any commit")
    for key, why in bad.items():  # every line of a cell that is not whole goes, so it is redone whole
        for i in block_of.pop(key, []):
            lines[i].keep, lines[i].problem = False, f"of cell {out.names.get(key, key)}, which runs again"
        for line in lines:
            if line.keep and line.obj is not None and line.obj.get("cell") == key:
                line.keep, line.problem = False, f"record of cell {out.names.get(key, key)}, which is not whole"
        out.bad_cells[key] = f"{out.names.get(key, cell_name(None, key))}: {why}"
    out.done_cells = set(block_of) | (legacy_done - set(bad))


def cell_name(coords: dict | None, key: str, record: dict | None = None) -> str:
    """How a cell is named in messages: its coordinates, else what its record says, else its key."""
    if not coords and record:
        coords = {k: record[k] for k in ("design", "metric", "context_len") if record.get(k) is not None}
    text = " ".join(f"{k}={v}" for k, v in (coords or {}).items())
    return f"{text} [{str(key)[:8]}]" if text else f"cell {str(key)[:8]}"


# ---------------------------------------------------------------- writing


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(OSError):
    """A write the disk could not take; the message is the one line the CLI prints."""

    def __init__(self, path: Path):
        path = Path(path)
        super().__init__(errno.ENOSPC, f"disk full writing {path}: {free_bytes(path):,} bytes free", str(path))

    def __str__(self) -> str:
        return str(self.strerror)


def free_bytes(path: Path) -> int:
    """Bytes free on the filesystem holding ``path`` (or its nearest existing parent)."""
    import shutil

    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return 0


class Recorder:
    """Appends records to ``path``; every record carries the run's exp and config hash.

    Opening a Recorder checks the file (``scan``) and repairs it if needed, before appending
    the header: ``repaired`` says what was found (its ``summary()`` is '' when nothing was).
    ``write=False`` (the other processes of a distributed run, whose rank 0 writes): the same
    calls, nothing written or repaired.
    """

    def __init__(self, path: Path, exp: str, config: dict, config_hash: str, write: bool = True):
        self.path, self.exp, self.config_hash, self.write = Path(path), exp, config_hash, write
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired = scan(self.path)
        if write:
            self.repaired.repair()
        # Cells already recorded, whole, by an earlier (possibly killed) run in this directory.
        self.done_cells = set(self.repaired.done_cells)
        self._by_cell: dict[str, list[dict]] = {}
        self._written: dict[str, list[dict]] = {}  # cells this run has written (or found done and skipped)
        for obj in self.repaired.objects:
            if obj.get("type") == "record" and obj.get("cell") in self.done_cells:
                self._by_cell.setdefault(obj["cell"], []).append({k: v for k, v in obj.items() if k != CHECKSUM})
        self._append(
            {
                "type": "header",
                "exp": exp,
                "config_hash": config_hash,
                "started": now(),
                "git": git_commit(),
                "versions": versions(),
                "hardware": hardware(),
                "config": config,
            }
        )

    def _append(self, *objs: dict) -> None:
        """Append whole lines with one write(2), fsync'ed (secrets masked); nothing when ``write`` is off.

        A Python signal handler (Ctrl-C, SIGTERM) runs between statements, never inside the one
        os.write call, so a signal lands before or after a cell's lines, not between them. A write
        the disk cannot take whole (ENOSPC, a quota) is cut back off the file and raised as
        ``DiskFull``: the file never ends in a torn line, the header included.
        """
        if not self.write:
            return
        data = b"".join(encode_line(o) for o in objs)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:  # a regular file takes it all at once; a full disk may not
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError as ex:
                os.ftruncate(fd, size)  # this run holds the directory's lock: nobody else appends
                if ex.errno in DISK_FULL:
                    raise DiskFull(self.path) from None
                raise
        finally:
            os.close(fd)

    def close(self, status: str, wall_s: float, error: str | None = None) -> None:
        """A footer line: how this (re)start ended (completed | interrupted | failed) and why."""
        footer = {
            "type": "footer",
            "exp": self.exp,
            "config_hash": self.config_hash,
            "ended": now(),
            "status": status,
            "wall_s": round(wall_s, 3),
        }
        if error:
            footer["error"] = error
        self._append(footer)

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

    def records_of(self, cell: str) -> list[dict]:
        """The records of a cell an earlier run in this file committed whole (empty if none)."""
        return list(self._by_cell.get(cell, []))

    def write_cell(self, cell: str, records: list[dict], coords: dict | None = None) -> None:
        """All records of one cell and its commit line in one write: after a kill a cell is whole or absent.

        A cell already done in this file is not written again (each record exactly once): an
        experiment that recomputes a cell regardless (a cheap check) keeps the first records.
        Two different sets of records under one key in one run are a bug (the key misses a
        coordinate, and the second would be lost): that raises.
        """
        if cell in self._written:
            if _content(self._written[cell]) != _content(records):
                raise ValueError(f"cell {cell_name(coords, cell)} written twice in one run with other records: its key misses a coordinate")
            return
        self._written[cell] = records
        if cell in self.done_cells:
            return
        commit = {"type": "commit", "cell": cell, "coords": coords or {}, "records": len(records)}
        self._append(*({**r, "cell": cell} for r in records), commit)
        self.done_cells.add(cell)


def _content(records: list[dict]) -> list[str]:
    return [json.dumps({k: v for k, v in r.items() if k not in ("time", "cell")}, sort_keys=True, default=str) for r in records]


# ---------------------------------------------------------------- reading


def read_jsonl(path: Path) -> list[dict]:
    """The good objects of a results file (damaged lines and cells that are not whole left out)."""
    return scan(path).objects


def load_records(paths: Iterable[Path]) -> list[dict]:
    """The measurement records of one or more results files (headers dropped)."""
    return [r for p in paths for r in read_jsonl(Path(p)) if r.get("type") == "record"]
