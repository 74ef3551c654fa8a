"""The report's figures, one module per family; catalog registers them in report order."""
