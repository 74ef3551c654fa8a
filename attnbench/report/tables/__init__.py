"""The report's tables: the decision table and its cells, the tables beside it, serving's table."""
