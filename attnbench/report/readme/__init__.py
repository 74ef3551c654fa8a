"""README tables generated from the records (``python -m attnbench.report.readme``), one module per family of experiments."""
