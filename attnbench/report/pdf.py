"""report.html -> report.pdf by printing it with headless Chromium.

Why Chromium and not matplotlib's PdfPages: the PDF must hold the same content as the HTML
(tables, claims, config, environment, not only the figures), and printing the one HTML keeps
a single template; the print stylesheet in the template lays out the pages. Where Chromium is
missing the PDF is skipped with a message saying so (the HTML is complete on its own).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from attnbench.redact import scrubbed_env

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
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
)


def find_chromium() -> str | None:
    """ATTNBENCH_CHROMIUM, else the first Chromium/Chrome on PATH."""
    env = os.environ.get("ATTNBENCH_CHROMIUM")
    if env:
        return env if Path(env).exists() or shutil.which(env) else None
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


class PdfError(RuntimeError):
    pass


def html_to_pdf(html: Path, pdf: Path, timeout_s: float = 60.0) -> Path:
    """Print ``html`` to ``pdf``; raise PdfError saying why when it cannot."""
    exe = find_chromium()
    if exe is None:
        raise PdfError("no Chromium found (install Debian's `chromium`, or set ATTNBENCH_CHROMIUM); report.html is complete without it")
    html, pdf = Path(html).resolve(), Path(pdf).resolve()
    tmp_pdf = pdf.with_name(pdf.name + ".part")
    with tempfile.TemporaryDirectory(prefix="attnbench-chromium-") as profile:
        cmd = [exe, *FLAGS, f"--user-data-dir={profile}", "--no-pdf-header-footer", f"--print-to-pdf={tmp_pdf}", html.as_uri()]
        try:
            res = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, env={**scrubbed_env(), "HOME": profile}
            )
        except subprocess.TimeoutExpired:
            tmp_pdf.unlink(missing_ok=True)
            raise PdfError(f"Chromium did not finish printing within {timeout_s:g} s") from None
        except OSError as ex:
            raise PdfError(f"could not start {exe}: {ex}") from None
    if res.returncode != 0 or not tmp_pdf.exists() or tmp_pdf.stat().st_size == 0:
        tmp_pdf.unlink(missing_ok=True)
        tail = " ".join(res.stderr.strip().splitlines()[-2:])[:300]
        raise PdfError(f"Chromium exited {res.returncode} without a PDF: {tail}")
    tmp_pdf.replace(pdf)
    return pdf
