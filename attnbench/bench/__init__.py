"""Costs: timing, memory, cost model, crossover lengths, production presets."""
