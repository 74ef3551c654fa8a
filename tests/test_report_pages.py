"""The report as pages a person reads: no table clipped at the margin (both PDF renderers), no
path of the machine that wrote it, figures that agree with the tables on skipped cells, and one
colour per design in every figure.

The records are SYNTHETIC TEST FIXTURES (tests/report_fixtures.py), never results.
"""

from __future__ import annotations

import html as html_mod
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib
import pytest

from attnbench.report import build_report
from attnbench.report.figures import accuracy as figures_quality
from attnbench.report.frame import load
from attnbench.report.style import FIGURES
from attnbench.report.pages import breakable, column_parts, repo_paths
from attnbench.report.pdf import find_chromium, weasyprint_error
from attnbench.report.style import STYLE, style
from attnbench.report.tables.decision import Cell, Table, decision_table

from report_fixtures import needle_run, write_run

needs_pdftotext = pytest.mark.skipif(
    shutil.which("pdftotext") is None, reason="no pdftotext: `apt-get install poppler-utils` (CI installs it)"
)


def draw(fn, df):
    with matplotlib.rc_context(STYLE):
        return fn(df)


def headers(html: str) -> set[str]:
    """Every table header's text in the HTML (tags stripped, entities read)."""
    return {" ".join(html_mod.unescape(re.sub(r"<[^>]+>", " ", h)).split()) for h in re.findall(r"<th[^>]*>(.*?)</th>", html, re.S)} - {""}


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("pages")
    return [write_run(base / "cpu"), needle_run(base / "needle")]


@needs_pdftotext
@pytest.mark.parametrize("renderer", ["chromium", "weasyprint"])
def test_every_table_header_of_the_html_is_in_the_pdf(runs, tmp_path, monkeypatch, renderer):
    """Decision-shaped (two runs merged) and a run report: a header clipped at the page's right
    edge is missing from the PDF's text. pdftotext may break a header across lines: compared
    with whitespace folded."""
    if renderer == "chromium" and find_chromium() is None:
        pytest.skip("no chromium: `apt-get install chromium` (CI installs it)")
    if renderer == "weasyprint" and weasyprint_error():
        pytest.skip(weasyprint_error() or "")
    monkeypatch.setenv("ATTNBENCH_PDF", renderer)
    for name, dirs in (("merged", runs), ("run", runs[1:])):
        res = build_report(dirs, tmp_path / name, pdf=True, pdf_timeout_s=180)
        assert res.pdf is not None, res.pdf_error
        text = subprocess.run(["pdftotext", "-raw", str(res.pdf), "-"], capture_output=True, text=True, check=True).stdout
        flat = words(text).replace("- ", "-")
        folded = re.sub(r"\s+", "", text)
        missing = [h for h in headers(res.html.read_text()) if words(h) not in flat and re.sub(r"\s+", "", h) not in folded]
        assert not missing, (name, renderer, missing)


def test_a_wide_table_is_split_into_column_groups_that_fit():
    cols = [("", "design")] + [(f"group {g}", f"column {g}.{i}") for g in range(6) for i in range(4)]
    t = Table("wide", cols, rows=[[Cell("softmax")] + [Cell(f"0.{i:02d} [0.1-0.9]") for i in range(24)]], note="the note")
    parts = column_parts(t)
    assert len(parts) > 1 and [p.id for p in parts][:2] == ["wide", "wide-2"]
    assert all(p.columns[0] == ("", "design") and p.rows[0][0].text == "softmax" for p in parts)  # the key column in each
    assert [c for p in parts for c in p.columns[1:]] == cols[1:]  # every column once, in order
    assert [p.note for p in parts] == [""] * (len(parts) - 1) + ["the note"]
    assert all(len({g for g, _ in p.columns[1:]}) <= 2 or len(p.columns) < 6 for p in parts)  # whole groups where they fit


def test_no_path_outside_the_repository_in_the_report(runs, tmp_path):
    root = Path(__file__).resolve().parents[1]
    text = (
        f"see /tmp/runs/kernels_gpu/summary.md; {root}/experiments/x/run; https://example.org/a/b; tokens/s; data:image/png;base64,ab/cd/ef"
    )
    assert (
        repo_paths(text, [root])
        == "see …/kernels_gpu/summary.md; experiments/x/run; https://example.org/a/b; tokens/s; data:image/png;base64,ab/cd/ef"
    )
    lines = (runs[0] / "results.jsonl").read_text().splitlines()
    rec = json.loads(lines[1]) | {"note": "see /tmp/runs/kernels_gpu/summary.md and /root/.cache/attnbench/checkpoints/x/record.json"}
    assert repo_paths(breakable("/root/.cache/attnbench/checkpoints/softmax-1e0d11d68c21845a/record.json"), [root]) == (
        "…/softmax-1e0d11d68c21845a/record.json"
    )  # a long path given places to wrap in a table cell is still cut
    (runs[0].parent / "paths").mkdir(exist_ok=True)
    (runs[0].parent / "paths" / "results.jsonl").write_text("\n".join([lines[0], json.dumps(rec), *lines[2:]]) + "\n")
    res = build_report([runs[0].parent / "paths", runs[1]], tmp_path / "out", pdf=False)
    html = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", res.html.read_text()).replace("\u200b", "")
    outside = re.findall(r"(?<![\w/:.+=<~-])/(?:tmp|root|home|work|var|mnt|opt|srv|usr)/[^\s<\"']*", html)
    assert not outside, outside[:5]


def _late_skipped(run: Path) -> Path:
    """The needle fixture with msa's 16K cell skipped haystack by haystack after the plan (no
    haystack ran): the case a figure used to paint as "not run"."""
    path = run / "results.jsonl"
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("design") == "msa" and r.get("context_len") == 16384 and r.get("metric") in ("niah/acc", "eval/prefill_s"):
            if r["metric"] == "eval/prefill_s" or r["status"] != "skipped":
                continue
        out.append(line)
        if r.get("design") == "msa" and r.get("context_len") == 16384 and r.get("sample") == 5:
            for i in range(2):  # the two haystacks that ran before, now skipped too
                out.append(json.dumps(r | {"sample": i}))
    path.write_text("\n".join(out) + "\n")
    return run


def test_a_skipped_cell_is_drawn_as_skipped_in_every_figure(tmp_path):
    """One state per cell (data.cell_state): every cell the table says skipped is hatched in the
    heatmap and has a skip mark in its design's colour in the line plot, also a cell whose
    haystacks were all skipped after the plan."""
    data = load([_late_skipped(needle_run(tmp_path / "n"))])
    df = data.records
    table = decision_table(df, data.train, drop_empty=False)
    labels = [label for _, label in table.columns]
    skipped = {(r[0].text, labels[i]) for r in table.rows for i, c in enumerate(r) if c.kind == "skipped" and labels[i][-1] in "KM"}
    assert ("msa", "16K") in skipped and len(skipped) >= 8
    heat = draw(figures_quality.niah_heatmap, df)
    names = sorted({n for n, _ in skipped})
    for ax in heat.axes:
        name = ax.get_title().split("\n")[0]
        if name not in names:
            continue
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        hatched_cols = {ticks[round(p.get_x() + 0.5)] for p in ax.patches if p.get_hatch() == "///"}
        assert {length for n, length in skipped if n == name} <= hatched_cols, (name, hatched_cols)
    line = draw(figures_quality.niah_vs_length, df)
    all_names = sorted(set(df["design"].dropna()))
    for name in names:
        colour = matplotlib.colors.to_hex(style(name, all_names)[0])
        marks = [
            x
            for ln in line.axes[0].lines
            if ln.get_marker() == "x" and matplotlib.colors.to_hex(ln.get_color()) == colour
            for x in ln.get_xdata()
        ]
        want = {length for n, length in skipped if n == name}
        got = {ticks for ticks in want if any(abs(math.log2(x / _tokens(ticks))) < 0.5 for x in marks)}  # nudged apart
        assert got == want, (name, want, marks)


def _tokens(label: str) -> float:
    return float(label[:-1]) * (1 << (20 if label.endswith("M") else 10))


def test_no_two_designs_in_one_figure_share_a_colour(runs):
    """Over the drawn figures' legends: a colour names one design."""
    df = load(runs).records
    names = set(df["design"].dropna().astype(str))
    drawn = 0
    for spec in FIGURES:
        fig = draw(spec.fn, df)
        if fig is None:
            continue
        drawn += 1
        seen: dict[str, str] = {}
        for leg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
            for handle, text in zip(leg.legend_handles, leg.get_texts()):
                label = text.get_text().split(" (")[0]
                if label not in names or handle is None:
                    continue
                get = getattr(handle, "get_color", None) or getattr(handle, "get_facecolor")
                colour = matplotlib.colors.to_hex(get())
                assert seen.setdefault(colour, label) == label, (spec.id, colour, label, seen[colour])
    assert drawn >= 8
