"""The one registry of attention designs: layout letter -> layer, kernel op, cost model, colour.

Every part that needs to know which letters exist or what a letter means reads this table:
config validation (attnbench.config), the backbone (attnbench.model.backbone), the kernel
backend switch (kernels/backend.py), the cost model and workloads (attnbench.bench), the
presets, the smoke experiment and the report. The letters a model is built from and the ops
the backend knows are read from it when asked (layout_letters(), kernel_ops()), not copied at
import, so an entry added at run time builds, runs and is gated like the others
(tests/test_designs.py's toy); only the config's KernelOp enum, kernels_cpu's timed ops and
the report's styles are taken at import. Adding a design is one entry here, one layer module,
a spec in attnbench/specs/ (with its settings and cost), an op folder in kernels/ and a
conf/attention/<name>.yaml (docs/adding-a-design.md).

This module imports nothing from attnbench (layers are named by import path and loaded on
demand), so kernels/ can read it without importing the model.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import Any


@cache
def _load(path: str) -> Any:
    """The object a "module:NAME" path names (imported once)."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Design:
    letter: str  # one letter a layer in a layout string (DesignConfig.layout)
    name: str  # the design a one-letter layout is (conf/attention/<name>.yaml), also its records' name
    layer: str | None  # "module:Class" of its attention layer; None: preset-only (costed, never built)
    op: str | None  # its op in attnbench.kernels (backend.choose names); None: no kernel here
    cost: str  # its entry among its spec's cost-model entries (Spec.costs, attnbench.bench.costmodel.costs)
    glue_ops: int  # reference layer: torch ops besides the attention op and the MoE (costmodel, counted)
    spec: str  # "module:NAME" of its spec (attnbench/specs): inputs, calls, naive truth, cache, projections
    # "module:NAME" of the dataclass of its settings (attnbench/specs/settings.py): the fields of
    # attention.<design> its layers read, their ranges, checks and Arch fields; None: none of its own
    settings: str | None = None
    colour: str | None = None  # figures: its colour in every report (Okabe-Ito); None: presets' palette
    marker: str = "o"  # figures: its marker
    triton_on_auto: bool = False  # backend "auto" prefers its Triton kernel on CUDA (softmax: SDPA is faster)

    def layer_class(self) -> type:
        """The attention layer (imported here, on first use: the registry itself stays import-free)."""
        if self.layer is None:
            raise ValueError(f"design {self.name!r} ({self.letter}) is costed only: it has no layer to build")
        module, cls = self.layer.split(":")
        return getattr(importlib.import_module(module), cls)

    def behaviour(self) -> Any:
        """Its spec object (attnbench.specs.Spec), imported on first use like the layer."""
        return _load(self.spec)


# The order is data: the kernel experiments' default ops follow it (config.KernelsConfig.ops), and
# so does every composed config's hash (tests/test_identity.py).
DESIGNS: dict[str, Design] = {
    d.letter: d
    for d in (
        Design(
            letter="S",
            name="softmax",
            layer="attnbench.model.softmax:SoftmaxAttention",
            op="softmax",
            cost="softmax",
            glue_ops=100,
            spec="attnbench.specs.softmax:SPEC",
            settings="attnbench.specs.softmax:SoftmaxSettings",
            colour="#0072B2",
            marker="o",
        ),
        Design(
            letter="W",
            name="sliding_window",
            layer="attnbench.model.sliding_window:SlidingWindowAttention",
            op="sliding_window",
            cost="sliding_window",
            glue_ops=110,
            spec="attnbench.specs.sliding_window:SPEC",
            settings="attnbench.specs.sliding_window:SlidingWindowSettings",
            colour="#CC79A7",
            marker="D",
            triton_on_auto=True,
        ),
        Design(
            letter="L",
            name="lightning",
            layer="attnbench.model.lightning:LightningAttention",
            op="lightning",
            cost="lightning",
            glue_ops=70,
            spec="attnbench.specs.lightning:SPEC",
            settings="attnbench.specs.lightning:LightningSettings",
            colour="#E69F00",
            marker="s",
            triton_on_auto=True,
        ),
        Design(
            letter="M",
            name="msa",
            layer="attnbench.model.msa:MSAAttention",
            op="msa",
            cost="msa",
            glue_ops=150,
            spec="attnbench.specs.msa:SPEC",
            settings="attnbench.specs.msa:MSASettings",
            colour="#D55E00",
            marker="P",
            triton_on_auto=True,
        ),
        Design(
            letter="G",
            name="gdn",
            layer="attnbench.model.gated_delta:GatedDeltaAttention",
            op="gated_delta",
            cost="gated_delta",
            glue_ops=90,
            spec="attnbench.specs.gated_delta:SPEC",
            settings="attnbench.specs.lightning:LightningSettings",
            colour="#CC6677",
            marker="p",
        ),
        # DeepSeek sparse attention: built here over GQA; over MLA in the production presets (attnbench.bench.presets)
        Design(
            letter="D",
            name="dsa",
            layer="attnbench.model.dsa:DSAAttention",
            op="dsa",
            cost="dsa",
            glue_ops=150,
            spec="attnbench.specs.dsa:SPEC",
            settings="attnbench.specs.msa:MSASettings",
            colour="#663333",
            marker="d",
        ),
    )
}

# Figure styles (report/style.py FIXED): every named design has a colour of its own, every
# family (a letter's design or a mixture) one marker that its variants share, so a variant reads
# as its family's and is still told apart from it. Colours come from PALETTE, Okabe-Ito then
# Paul Tol's muted and dark sets (told apart in colour-blind vision; yellow left out: it does not
# read on white); a named design without a colour here takes the first PALETTE colour no other
# design holds, so a new design never shares one (20 and more fit).
PALETTE = (
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000",
    "#332288", "#117733", "#44AA99", "#88CCEE", "#999933", "#CC6677", "#882255", "#AA4499",
    "#DDCC77", "#4477AA", "#225555", "#666633", "#663333", "#EE7733", "#0077BB", "#EE3377", "#33BBEE",
)  # fmt: skip
MIXTURE_STYLES: dict[str, tuple[str, str]] = {
    "lightning_hybrid": ("#009E73", "^"),
    "swa_hybrid": ("#56B4E9", "v"),
    "gdn_hybrid": ("#225555", "H"),
}
VARIANTS: dict[str, str] = {  # name -> its family (a DESIGNS name or a MIXTURE_STYLES name)
    "lightning_hybrid16": "lightning_hybrid",
    "lightning_hybrid31": "lightning_hybrid",
    "lightning_hybrid_h8": "lightning_hybrid",
    "lightning_hybrid_nope": "lightning_hybrid",
    "lightning_conv_nope": "lightning_hybrid",
    "softmax_logn": "softmax",
    "gdn_hybrid31": "gdn_hybrid",
}
VARIANT_COLOURS: dict[str, str] = {  # a variant's own colour (one not given takes a free PALETTE colour)
    "lightning_hybrid16": "#117733",
    "lightning_hybrid31": "#999933",
    "lightning_hybrid_h8": "#882255",
    "lightning_hybrid_nope": "#44AA99",
    "lightning_conv_nope": "#AA4499",
    "softmax_logn": "#000000",
}
# The op every kernel speedup is over: timed as causal SDPA, its fastest form (bench/ops.sdpa_causal).
BASELINE_OP = "softmax"
# The designs in the order tables and legends list them (report/frame.py); unknown names follow alphabetically.
DESIGN_ORDER = ("softmax", "lightning", "lightning_hybrid", "gdn", "gdn_hybrid", "sliding_window", "swa_hybrid", "msa", "dsa")


# What the registry holds, read from it when asked (not copied at import), so a design
# registered later (tests/test_designs.py's toy design) is known wherever these are called.
def layout_letters() -> str:
    """The letters a model can be built from (those with a layer)."""
    return "".join(d.letter for d in DESIGNS.values() if d.layer is not None)


def preset_letters() -> str:
    """The letters a preset (a costed architecture) may use."""
    return "".join(DESIGNS)


def kernel_ops() -> tuple[str, ...]:
    """The designs' kernel ops (backend.choose names)."""
    return tuple(op for op in (d.op for d in DESIGNS.values()) if op is not None)


def of(letter: str) -> Design:
    """The design of a layout letter; a clear error naming the known letters."""
    try:
        return DESIGNS[letter]
    except KeyError:
        raise ValueError(f"layout letter {letter!r}: one of {describe_letters(preset_letters())}") from None


def op_of(letter: str) -> str:
    """The kernel op a layer of this letter calls."""
    op = of(letter).op
    if op is None:
        raise ValueError(f"layout letter {letter!r} ({of(letter).name}) has no kernel op")
    return op


def describe_letters(letters: str | None = None) -> str:
    """'S softmax, L lightning, ...' (the layout letters, unless given) for error messages."""
    return ", ".join(f"{c} {DESIGNS[c].name}" for c in (layout_letters() if letters is None else letters))


def settings_classes() -> tuple[type, ...]:
    """Every design's settings dataclass, each once (designs may share one: gdn reads lightning's), in registry order."""
    found = (_load(d.settings) for d in DESIGNS.values() if d.settings is not None)
    return tuple(dict.fromkeys(found))


def spec_of(letter: str) -> Any:
    """The spec (attnbench.specs.Spec) of a layout letter."""
    return of(letter).behaviour()


def spec_of_op(op: str) -> Any:
    """The spec of the design whose kernel op is ``op``."""
    for d in DESIGNS.values():
        if d.op == op:
            return d.behaviour()
    raise ValueError(f"op {op!r}: one of {', '.join(kernel_ops())}")
