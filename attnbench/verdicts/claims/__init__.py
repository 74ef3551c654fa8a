"""The published claims C1-C7, one module per claim (or pair of claims), and their catalog (catalog.CLAIMS, judge_all)."""
