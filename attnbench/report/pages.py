"""What keeps the printed report on its pages: a table wider than the page is printed as several
tables of column groups (its key columns repeated in each), never clipped at the margin, and no
path outside the repository is printed (a record's note may name a scratch file of the machine
that ran it).

Why split rather than shrink: Chromium scales a too-wide page down (tiny text) or clips it, and
WeasyPrint clips it; a table of column groups reads at the report's size on both, and the HTML
shows the same tables so the two never differ in content.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from attnbench.report.tables.decision import Cell, Table

PAGE_PT = 533.0  # an A4 page's text width (210 mm less the template's 11 mm margins), in points
CHAR_EM = 0.55  # DejaVu Sans' mean advance, in em
CELL_PT = 11.0  # a cell's padding and rules
WRAP_CHARS = 10  # a cell's text wraps at spaces: wider text takes this many characters a line
MAX_WORD = 24  # a longer word (a path) is given places to wrap (breakable)


def _chars(text: str) -> int:
    """The characters a column needs for ``text``: its longest word, at least WRAP_CHARS of a
    longer text (a path breaks anywhere, so no word counts beyond 24)."""
    words = text.split()
    longest = min(max((len(w) for w in words), default=0), MAX_WORD)
    return max(longest, min(len(text), WRAP_CHARS))


def column_width(table: Table, i: int, font_pt: float) -> float:
    """Points column ``i`` of ``table`` needs: its label's and its cells' widest text."""
    texts = [table.columns[i][1]] + [t for row in table.rows for t in (row[i].text, row[i].sub)]
    return max(_chars(t) for t in texts) * CHAR_EM * font_pt + CELL_PT


def column_parts(table: Table, font_pt: float | None = None, page_pt: float = PAGE_PT) -> list[Table]:
    """``table`` as tables that each fit ``page_pt``: its columns after the ``table.keys`` key
    columns in groups (whole column groups where one fits, else as many columns as fit), the key
    columns repeated in each; the note under the last."""
    font = font_pt or table.font_pt
    n = len(table.columns)
    widths = [column_width(table, i, font) for i in range(n)]
    keys = list(range(min(table.keys, n)))
    room = page_pt - sum(widths[i] for i in keys)
    groups: list[list[int]] = []  # consecutive columns of one group label
    for i in range(len(keys), n):
        if groups and table.columns[groups[-1][-1]][0] == table.columns[i][0] and table.columns[i][0]:
            groups[-1].append(i)
        else:
            groups.append([i])
    parts: list[list[int]] = [[]]
    for group in groups:
        if parts[-1] and sum(widths[i] for i in parts[-1] + group) > room:
            parts.append([])
        for i in group:  # a group wider than a page is split by its columns
            if parts[-1] and sum(widths[j] for j in parts[-1]) + widths[i] > room:
                parts.append([])
            parts[-1].append(i)
    if len(parts) == 1:
        return [table]
    out = []
    for k, cols in enumerate(parts):
        idx = keys + cols
        out.append(
            replace(
                table,
                id=table.id if k == 0 else f"{table.id}-{k + 1}",
                columns=[table.columns[i] for i in idx],
                rows=[[row[i] for i in idx] for row in table.rows],
                note=table.note if k == len(parts) - 1 else "",
            )
        )
    return out


def fewer_colours(png: bytes, colours: int = 128) -> bytes:
    """The PNG with a palette of ``colours`` (no dithering), as the report embeds it: a figure's
    flat colours survive, its file (and the printed PDF) shrinks by about three; figures/ keeps
    the full PNG."""
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    img.save(out, "PNG", optimize=True)
    return out.getvalue() if out.tell() < len(png) else png


def breakable(text: object) -> str:
    """``text`` with a place to wrap (a zero-width space) after each / and , of a word longer than
    a column needs (pages._chars): a path or a list of runs wraps in a narrow cell instead of
    widening it past the page; shorter words are left as they are."""

    def wrap(m: re.Match) -> str:
        return re.sub(r"([/,])(?=\S)", "\\1\u200b", m.group(0))

    return re.sub(rf"\S{{{MAX_WORD + 1},}}", wrap, str(text))


# An absolute path: a slash not inside a word, a URL or a base64 run, then at least two parts.
# A slash may carry a zero-width space after it (breakable), which the path keeps out of its parts.
_PATH = re.compile(r"data:[\w/+.-]+;base64,[A-Za-z0-9+/=]+|(?<![\w/:.+=<~\u200b-])(/\u200b?(?:[\w.@+-]+/\u200b?)+[\w.@+-]*)")


def repo_paths(text: str, roots: list[Path]) -> str:
    """``text`` with every absolute path inside one of ``roots`` made relative to it and every
    other one cut to its last two parts after an ellipsis (``…/kernels_gpu/summary.md``): the
    report names files of the repository, never of the machine that wrote it."""
    prefixes = sorted({str(r.resolve()).rstrip("/") + "/" for r in roots}, key=len, reverse=True)

    def local(m: re.Match) -> str:
        if m.group(1) is None:  # a data URI: left as it is
            return m.group(0)
        path = m.group(1).replace("\u200b", "")
        for p in prefixes:
            if path.startswith(p):
                return path[len(p) :] or "."
        parts = [s for s in path.split("/") if s]
        return "…/" + "/".join(parts[-2:] if len(parts) > 2 else parts[-1:])

    return _PATH.sub(local, text)


def repository_root() -> Path:
    """The checkout attnbench runs from (where its pyproject.toml is), else the current directory."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


__all__ = ["Cell", "column_parts", "repo_paths", "repository_root"]
