"""exp=presets: the parameter counts of every design at a model preset (model=tiny|small|base|base24).

    python -m attnbench -m +exp=presets model=tiny,small,base,base24

Each model is built on the meta device (shapes, no memory, no weights): seconds at any size.
The records are the params/* metrics a training run records (experiments/train.py): total,
attention, experts, active for one token (top-k of E experts), embedding; plus the layout.
"""

from __future__ import annotations

import torch

from attnbench.model import Model, layout_for


def run(ctx) -> None:
    cfg = ctx.cfg
    for name in ctx.design_names:
        cell = ctx.cell(design=name, part="params", preset=cfg.model.name)
        if cell.done:
            continue
        with torch.device("meta"):
            counts = Model(cfg.model, cfg.attention[name]).param_counts()
        layout = layout_for(cfg.model, cfg.attention[name])
        for part, n in counts.items():
            cell.record(
                name,
                f"params/{part}",
                n,
                "count",
                "measured",
                preset=cfg.model.name,
                n_layers=len(layout),
                d_model=cfg.model.d_model,
                note="counted on the meta device",
            )
        cell.commit()
        ctx.console.print(
            f"  {cfg.model.name:7s} {name:18s} {layout:24s} {counts['total'] / 1e6:7.1f}M parameters, "
            f"{counts['active'] / 1e6:6.1f}M active per token"
        )
