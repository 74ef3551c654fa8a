"""The MoE backbone and the four attention designs (one file each)."""

from .backbone import Model, ModelCache, Output, layout_for, n_layers_for, resolve_layout

__all__ = ["Model", "ModelCache", "Output", "layout_for", "n_layers_for", "resolve_layout"]
