"""The report as a reader gets it: the HTML in headless Chromium, the PDF as page images.

Skips (saying why) where Debian's chromium or poppler-utils is missing; CI installs both.
The records are SYNTHETIC TEST FIXTURES (tests/report_fixtures.py).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from attnbench.report import build_report
from attnbench.report import pdf as pdf_mod
from attnbench.report.pdf import find_chromium

from report_fixtures import write_run

needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="no chromium: `apt-get install chromium` (CI installs it)")
needs_poppler = pytest.mark.skipif(shutil.which("pdftoppm") is None, reason="no pdftoppm: `apt-get install poppler-utils` (CI installs it)")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if find_chromium() is None:
        pytest.skip("no chromium: `apt-get install chromium` (CI installs it)")
    run = write_run(tmp_path_factory.mktemp("browser") / "run")
    res = build_report([run], pdf=True)
    assert res.pdf is not None, res.pdf_error
    return res


@needs_chromium
def test_html_renders_without_errors_and_every_figure_loads(report, tmp_path):
    from browser import Page

    with Page() as page:
        page.open(report.html)
        images = page.eval("[...document.images].map(i => ({ok: i.complete && i.naturalWidth > 0, alt: i.alt}))")
        assert len(images) == len(report.figures) and all(i["ok"] for i in images), images  # every drawn figure loads
        assert page.eval("document.querySelectorAll('table#decision tbody tr').length") == 5
        assert page.eval("document.querySelectorAll('#claims-table tbody tr').length") == 4  # the claims with records here
        brief_top = page.eval("document.querySelector('section#brief').getBoundingClientRect().top")
        assert brief_top < page.eval("window.innerHeight") / 2, "the decision brief does not open the first screen"
        # the brief's own table by context length opens with it (the full decision table follows the brief)
        brief_table = page.eval(
            "(document.querySelector('section#brief table') || {getBoundingClientRect: () => ({top: 1e9})}).getBoundingClientRect().top"
        )
        assert brief_table < page.eval("window.innerHeight"), "the brief's table is not on the first screen"
        assert page.errors() == []
        assert all(u.startswith(("file://", "data:")) for u in page.requests()), page.requests()

        # The same checks catch a broken page: a corrupt figure and a console error.
        broken = tmp_path / "broken.html"
        broken.write_text(
            report.html.read_text()
            .replace("data:image/png;base64,iVBOR", "data:image/png;base64,AAAA", 1)
            .replace("</body>", "<script>console.error('broken on purpose')</script></body>")
        )
        page.events.clear()
        page.open(broken)
        assert not all(page.eval("[...document.images].map(i => i.naturalWidth > 0)"))
        assert any("broken on purpose" in e for e in page.errors())


@needs_chromium
@needs_poppler
def test_pdf_pages_are_not_blank(report, tmp_path):
    subprocess.run(["pdftoppm", "-r", "30", "-png", str(report.pdf), str(tmp_path / "page")], check=True, timeout=120)
    pages = sorted(tmp_path.glob("page*.png"))
    assert len(pages) >= 4, pages  # summary, claims, figures, config/environment
    for p in pages:
        pixels = image.imread(p)[..., :3]
        ink = (pixels.mean(axis=2) < 0.9).mean()
        assert ink > 0.005, f"{p.name} is blank ({ink:.4f} of pixels inked)"
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", str(report.pdf), "-"], capture_output=True, text=True, timeout=60).stdout
        for needle in ("Summary", "Claims under test", "C6", "Exact config", "Environment", "Caveats"):
            assert needle in text, needle


def test_pdf_fails_soft_without_any_renderer(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_CHROMIUM", str(tmp_path / "no-such-chromium"))
    monkeypatch.setenv("ATTNBENCH_PDF", "chromium")  # WeasyPrint left out: no renderer at all
    res = build_report([write_run(tmp_path / "run")], pdf=True)
    assert res.pdf is None and "chromium: not found" in res.pdf_error and res.html.exists()
    assert not (tmp_path / "run" / "report.pdf").exists()
    assert np.isfinite(res.seconds["total"])


def weasyprint_or_skip() -> None:
    why = pdf_mod.weasyprint_error()
    if why:
        pytest.skip(why)


def test_without_chromium_weasyprint_prints_the_same_html(tmp_path, monkeypatch):
    weasyprint_or_skip()
    monkeypatch.setenv("ATTNBENCH_CHROMIUM", str(tmp_path / "no-such-chromium"))
    res = build_report([write_run(tmp_path / "run")], pdf=True)
    assert res.pdf == (tmp_path / "run" / "report.pdf").resolve(), res.pdf_error
    assert pdf_mod.pages(res.pdf) >= 4  # summary, claims, figures, config/environment
    from pypdf import PdfReader

    text = " ".join(p.extract_text() for p in PdfReader(res.pdf).pages)
    for needle in ("Summary", "Claims under test", "C6", "Exact config", "Environment", "Caveats"):
        assert needle in text, needle


@pytest.mark.parametrize(
    "written, why",
    [
        (lambda whole: whole[: len(whole) // 2], "no %%EOF"),  # what a full disk left (issue 30.E)
        (lambda whole: b"%PDF-1.7\n garbage \n%%EOF\n", "page count cannot be read"),
        (lambda whole: b"", "without a PDF"),
    ],
    ids=["truncated", "garbage", "empty"],
)
def test_a_pdf_counts_only_when_whole(tmp_path, monkeypatch, written, why):
    """A renderer that exits 0 but leaves a torn file: the run says the PDF failed, and no
    report.pdf (nor its .part) is left."""
    run = write_run(tmp_path / "run")
    whole = Path(__file__).with_name("report_fixtures.py").read_bytes()  # any bytes: only its length matters for 'truncated'
    if why == "no %%EOF":
        weasyprint_or_skip()
        good = tmp_path / "good.pdf"
        pdf_mod._weasyprint(build_report([run], pdf=False).html, good, 120)
        whole = good.read_bytes()
        assert pdf_mod.pages(good) >= 1

    def torn(html, out, timeout_s):
        Path(out).write_bytes(written(whole))
        if not written(whole):
            raise pdf_mod.PdfError("exited 0 without a PDF")

    monkeypatch.setattr(pdf_mod, "_chromium", torn)
    monkeypatch.setattr(pdf_mod, "_weasyprint", torn)
    res = build_report([run], pdf=True)
    assert res.pdf is None and why in res.pdf_error, res.pdf_error
    assert not list((tmp_path / "run").glob("report.pdf*"))


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
DECISION = ROOT / "reports" / "decision"


def test_decision_report_is_built_from_every_experiment(tmp_path):
    from attnbench.report import decision_report

    write_run(tmp_path / "experiments" / "alpha" / "run", exp="alpha")
    write_run(tmp_path / "experiments" / "beta" / "run", exp="beta", device="cuda")
    (tmp_path / "experiments" / "notes").mkdir()  # no results: not part of it
    res = decision_report(tmp_path, pdf=False)
    assert res.html == tmp_path / "reports" / "decision" / "report.html"
    html = res.html.read_text()
    assert "results files:</b> 2" in html and "alpha, beta" in html and 'id="decision"' in html


@needs_chromium
def test_the_decision_report_in_the_repo_renders(tmp_path):
    """reports/decision/ as a reader opens it: every figure loads, one row per design, eight claim rows (C5 as C5a and C5b)."""
    from browser import Page

    html, pdf = DECISION / "report.html", DECISION / "report.pdf"
    assert html.is_file() and pdf.is_file(), "run `python -m attnbench report --decision`"
    with Page() as page:
        page.open(html)
        images = page.eval("[...document.images].map(i => i.complete && i.naturalWidth > 0)")
        assert images and all(images)
        rows = page.eval("[...document.querySelectorAll('table#decision tbody tr')].map(r => r.cells[0].textContent)")
        assert {"softmax", "lightning", "lightning_hybrid", "msa"} <= set(rows), rows
        assert page.eval("document.querySelectorAll('#claims-table tbody tr').length") == 8  # C1-C7, C5 as C5a and C5b
        verdicts = page.eval("[...document.querySelectorAll('#claims-table td.verdict')].map(c => c.textContent)")
        assert all(v.strip() for v in verdicts)
        assert page.errors() == []
        assert all(u.startswith(("file://", "data:")) for u in page.requests()), page.requests()
    if shutil.which("pdftoppm"):
        subprocess.run(["pdftoppm", "-r", "20", "-f", "1", "-l", "2", "-png", str(pdf), str(tmp_path / "p")], check=True, timeout=120)
        for p in sorted(tmp_path.glob("p*.png")):
            assert (image.imread(p)[..., :3].mean(axis=2) < 0.9).mean() > 0.005, f"{p.name} is blank"
