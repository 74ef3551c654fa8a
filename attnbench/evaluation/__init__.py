"""Streaming evaluation of a trained model (streaming) and whether a (design, context length) cell fits its budget (fit)."""
