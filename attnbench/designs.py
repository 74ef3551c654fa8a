"""The one registry of attention designs: layout letter -> layer, kernel op, cost model, colour.

Every part that needs to know which letters exist or what a letter means reads this table:
config validation (attnbench.config), the backbone (attnbench.model.backbone), the kernel
backend switch (kernels/backend.py), the cost model and workloads (attnbench.bench), the
presets, the smoke experiment and the report. Adding a design is one entry here, one layer
module, and a conf/attention/<name>.yaml (README "Add a design").

This module imports nothing from attnbench (layers are named by import path and loaded on
demand), so kernels/ can read it without importing the model.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Design:
    letter: str  # one letter a layer in a layout string (DesignConfig.layout)
    name: str  # the design a one-letter layout is (conf/attention/<name>.yaml), also its records' name
    layer: str | None  # "module:Class" of its attention layer; None: preset-only (costed, never built)
    op: str | None  # its op in attnbench.kernels (backend.choose names); None: no kernel here
    cost: str  # its entry in attnbench.bench.costmodel.COSTS
    glue_ops: int  # reference layer: torch ops besides the attention op and the MoE (costmodel, counted)
    colour: str | None = None  # figures: its colour in every report (Okabe-Ito); None: presets' palette
    marker: str = "o"  # figures: its marker
    triton_on_auto: bool = False  # backend "auto" prefers its Triton kernel on CUDA (softmax: SDPA is faster)

    def layer_class(self) -> type:
        """The attention layer (imported here, on first use: the registry itself stays import-free)."""
        if self.layer is None:
            raise ValueError(f"design {self.name!r} ({self.letter}) is costed only: it has no layer to build")
        module, cls = self.layer.split(":")
        return getattr(importlib.import_module(module), cls)


DESIGNS: dict[str, Design] = {
    d.letter: d
    for d in (
        Design("S", "softmax", "attnbench.model.softmax:SoftmaxAttention", "softmax", "softmax", 100, colour="#0072B2", marker="o"),
        Design(
            "L",
            "lightning",
            "attnbench.model.lightning:LightningAttention",
            "lightning",
            "lightning",
            70,
            colour="#E69F00",
            marker="s",
            triton_on_auto=True,
        ),
        Design(
            "W",
            "sliding_window",
            "attnbench.model.sliding_window:SlidingWindowAttention",
            "sliding_window",
            "sliding_window",
            110,
            colour="#CC79A7",
            marker="D",
            triton_on_auto=True,
        ),
        Design("M", "msa", "attnbench.model.msa:MSAAttention", "msa", "msa", 150, colour="#D55E00", marker="P", triton_on_auto=True),
        # DeepSeek sparse attention over MLA: production presets only (attnbench.bench.presets)
        Design("D", "dsa", None, None, "dsa", 100),
    )
}

LAYOUT_LETTERS = "".join(d.letter for d in DESIGNS.values() if d.layer is not None)  # letters a model can be built from
PRESET_LETTERS = "".join(DESIGNS)  # letters a preset (a costed architecture) may use
KERNEL_OPS = tuple(d.op for d in DESIGNS.values() if d.op is not None)  # the ops of attnbench.kernels


def of(letter: str) -> Design:
    """The design of a layout letter; a clear error naming the known letters."""
    try:
        return DESIGNS[letter]
    except KeyError:
        raise ValueError(f"layout letter {letter!r}: one of {describe_letters(PRESET_LETTERS)}") from None


def op_of(letter: str) -> str:
    """The kernel op a layer of this letter calls."""
    op = of(letter).op
    if op is None:
        raise ValueError(f"layout letter {letter!r} ({of(letter).name}) has no kernel op")
    return op


def describe_letters(letters: str = LAYOUT_LETTERS) -> str:
    """'S softmax, L lightning, ...' for error messages."""
    return ", ".join(f"{c} {DESIGNS[c].name}" for c in letters)
