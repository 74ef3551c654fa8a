"""Decision reports: records -> figures (matplotlib) -> report.html (Jinja2) -> report.pdf (Chromium).

``build_report(run_dirs)`` writes both into a run directory; ``figures.figure`` registers a
figure of an experiment's own.
"""

from .build import ReportResult, all_experiments, build_report
from .figures import figure

__all__ = ["ReportResult", "all_experiments", "build_report", "figure"]
