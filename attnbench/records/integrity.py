"""A results file's integrity (the rules are in attnbench/records/read.py's docstring): one line
encoded with its CRC-32 and decoded back naming any damage (``encode_line``, ``decode_line``),
and a whole file read line by line into a ``Scan``: which cells are whole, which lines are
damaged or duplicated, and ``Scan.repair``, the atomic rewrite without them.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from attnbench.records.redact import redact, redact_obj

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
    from attnbench.basics import atomic_write

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
