"""The command line: ``python -m attnbench`` (main), running an experiment (run) and the checks before it (checks)."""
