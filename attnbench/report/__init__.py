"""Decision reports: records -> figures (matplotlib) -> report.html (Jinja2) -> report.pdf (Chromium).

``build_report(run_dirs)`` writes both into a run directory; ``figure`` registers a figure of an
experiment's own (see report/figures/cost_figures.py). Names load lazily so that ``attnbench.report.frame``
(used by W&B tracking) does not import matplotlib.
"""

from __future__ import annotations

__all__ = ["ReportResult", "all_experiments", "build_report", "decision_report", "figure"]


def __getattr__(name: str):
    if name in ("ReportResult", "all_experiments", "build_report", "decision_report"):
        from . import build

        return getattr(build, name)
    if name == "figure":
        from attnbench.report.figures import cost_figures  # noqa: F401  the built-in figures registered first
        from attnbench.report.style import figure

        return figure
    raise AttributeError(name)
