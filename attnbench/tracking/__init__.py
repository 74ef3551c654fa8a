"""W&B: one run per (experiment, design, seed) from a run's records, and dashboards as code."""
