"""report.html -> report.pdf by printing it: headless Chromium where it is installed, else
WeasyPrint (a pip dependency), and a PDF counts only when it is whole.

Why print the HTML and not draw a PDF of its own (matplotlib's PdfPages): the PDF must hold
the same content as the HTML (tables, claims, config, environment, not only the figures), and
printing the one HTML keeps a single template; the print stylesheet in the template lays out
the pages. Chromium comes first (the browser a reader opens the HTML in); WeasyPrint, installed
with attnbench, prints the same HTML on a machine without a browser. WeasyPrint draws its text
with Pango, a system library (Debian: libpango-1.0-0 and libpangoft2-1.0-0, on most desktop and
server images); where neither renderer can run the PDF is skipped with a message saying why
(the HTML is complete on its own).

Whole means the file ends with ``%%EOF`` and pypdf reads its page count: a printer that exits 0
on a full disk leaves a truncated file, which is removed and reported as a failed PDF.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from attnbench.records.redact import scrubbed_env

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
RENDERERS = ("chromium", "weasyprint")  # tried in this order; ATTNBENCH_PDF=<one of them> forces one
# Headless on a machine without network: no sandbox (root in a container), no GPU, and none of
# the background connections (the closed network refuses them and Chromium would wait).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--hide-scrollbars",
    "--disable-pdf-tagging",  # the structure tree of every table cell doubles the decision report's PDF
)


def find_chromium() -> str | None:
    """ATTNBENCH_CHROMIUM, else the first Chromium/Chrome on PATH."""
    env = os.environ.get("ATTNBENCH_CHROMIUM")
    if env:
        return env if Path(env).exists() or shutil.which(env) else None
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


class PdfError(RuntimeError):
    pass


def pages(pdf: Path) -> int:
    """The page count of a whole PDF; PdfError when it is not whole (no %%EOF at its end, or a
    page count pypdf cannot read)."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        with open(pdf, "rb") as f:
            f.seek(max(0, os.path.getsize(pdf) - 1024))
            tail = f.read()
    except OSError as ex:
        raise PdfError(f"cannot read {pdf.name}: {ex}") from None
    if b"%%EOF" not in tail:
        raise PdfError(f"{pdf.name} is not whole ({os.path.getsize(pdf):,} bytes, no %%EOF at its end: a full disk?)")
    try:
        n = len(PdfReader(pdf, strict=True).pages)
    except (PyPdfError, OSError, ValueError, KeyError) as ex:
        raise PdfError(f"{pdf.name} is not whole (its page count cannot be read: {type(ex).__name__}: {ex})") from None
    if n < 1:
        raise PdfError(f"{pdf.name} has no pages")
    return n


def html_to_pdf(html: Path, pdf: Path, timeout_s: float = 60.0) -> Path:
    """Print ``html`` to ``pdf`` with the first renderer that writes a whole PDF (Chromium where
    found, then WeasyPrint); raise PdfError saying why each could not."""
    html, pdf = Path(html).resolve(), Path(pdf).resolve()
    forced = os.environ.get("ATTNBENCH_PDF", "")
    if forced and forced not in RENDERERS:
        raise PdfError(f"ATTNBENCH_PDF={forced!r}: one of {', '.join(RENDERERS)}")
    why = []
    for name in [forced] if forced else RENDERERS:
        tmp = pdf.with_name(pdf.name + ".part")
        try:
            (_chromium if name == "chromium" else _weasyprint)(html, tmp, timeout_s)
            pages(tmp)
        except PdfError as ex:
            tmp.unlink(missing_ok=True)
            why.append(f"{name}: {ex}")
            continue
        tmp.replace(pdf)
        return pdf
    raise PdfError("; ".join(why) + "; report.html is complete without it")


def _chromium(html: Path, out: Path, timeout_s: float) -> None:
    exe = find_chromium()
    if exe is None:
        raise PdfError("not found (install Debian's `chromium`, or set ATTNBENCH_CHROMIUM)")
    with tempfile.TemporaryDirectory(prefix="attnbench-chromium-") as profile:
        cmd = [exe, *FLAGS, f"--user-data-dir={profile}", "--no-pdf-header-footer", f"--print-to-pdf={out}", html.as_uri()]
        _run(cmd, timeout_s, {**scrubbed_env(), "HOME": profile}, "Chromium", out)


def _weasyprint(html: Path, out: Path, timeout_s: float) -> None:
    """WeasyPrint in a child process: a timeout that holds, and a missing Pango is one line."""
    _run([sys.executable, "-m", "attnbench.report.pdf", str(html), str(out)], timeout_s, scrubbed_env(), "WeasyPrint", out)


def _run(cmd: list[str], timeout_s: float, env: dict, who: str, out: Path) -> None:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        raise PdfError(f"{who} did not finish printing within {timeout_s:g} s") from None
    except OSError as ex:
        raise PdfError(f"could not start {cmd[0]}: {ex}") from None
    if res.returncode != 0 or not out.exists() or out.stat().st_size == 0:
        tail = " ".join(res.stderr.strip().splitlines()[-2:])[:300]
        raise PdfError(f"{who} exited {res.returncode} without a PDF: {tail}")


# Chromium shrinks a page whose tables are wider than A4 until they fit; WeasyPrint cuts them
# off at the margin. Landscape pages and a smaller decision table give them the room instead.
WEASYPRINT_CSS = """
@page { size: A4 landscape !important; margin: 10mm !important; }
table#decision { font-size: 6.5pt !important; }
table#decision th, table#decision td { padding: 1px 3px !important; }
figure img { max-width: 190mm !important; }
"""  # a user stylesheet: !important, or the template's own rules win


def weasyprint_error() -> str | None:
    """Why WeasyPrint cannot run in this process (None: it can)."""
    try:
        import weasyprint  # noqa: F401
    except ImportError as ex:
        return f"WeasyPrint is not installed (pip install weasyprint): {ex}"
    except OSError as ex:  # cffi could not open Pango
        return f"WeasyPrint cannot load Pango (apt-get install libpango-1.0-0 libpangoft2-1.0-0): {ex}"
    return None


def _print_with_weasyprint(html: str, out: str) -> int:
    why = weasyprint_error()
    if why:
        print(why, file=sys.stderr)
        return 3
    import weasyprint

    weasyprint.HTML(filename=html).write_pdf(out, stylesheets=[weasyprint.CSS(string=WEASYPRINT_CSS)])
    return 0


if __name__ == "__main__":  # python -m attnbench.report.pdf HTML OUT: the WeasyPrint child
    sys.exit(_print_with_weasyprint(sys.argv[1], sys.argv[2]))
