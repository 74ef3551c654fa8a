"""W&B dashboards as code (wandb-workspaces): nobody clicks a dashboard together by hand.

    python -m attnbench dashboard entity=E project=P [exp=NAME] [name=TITLE] [--dry-run]

builds the workspace for an experiment (or all): runs grouped by design; needle heatmaps and
accuracy against context length; multi-hop; latency and memory against context length; MSA
speedup; training curves; the report's figures. Panels read the stable names that
attnbench.tracking.wandb_runs logs. ``--dry-run`` prints the panels and saves nothing (no network needed);
without it the workspace is saved to W&B (needs WANDB_API_KEY and the network).
"""

from __future__ import annotations

import sys

from wandb_workspaces import expr
from wandb_workspaces import workspaces as ws
from wandb_workspaces.reports import v2 as wr

BY_DESIGN = wr.Config("design")
X_LEN = "context_len"


def _line(title: str, y: list, *, x: str = X_LEN, log_x: bool = True, log_y: bool = False, **kw) -> wr.LinePlot:
    return wr.LinePlot(
        title=title,
        x=x,
        y=y,
        groupby=BY_DESIGN,
        log_x=log_x,
        log_y=log_y,
        title_x=x,
        groupby_aggfunc="mean",
        groupby_rangefunc="minmax",
        **kw,
    )


def sections() -> list[ws.Section]:
    return [
        ws.Section(
            name="Needle in a haystack",
            is_open=True,
            panels=[
                _line("NIAH accuracy against context length (mean over depths)", ["niah/acc"], range_y=(0, 1)),
                wr.WeavePanelSummaryTable(table_name="niah/heatmap"),
                wr.MediaBrowser(title="NIAH figures", media_keys=["figures/niah_heatmap", "figures/niah_vs_length"]),
                wr.BarPlot(title="Parameters", metrics=["params/total", "params/active"], groupby=BY_DESIGN),
            ],
        ),
        ws.Section(
            name="Multi-hop",
            is_open=True,
            panels=[
                _line("Multi-hop accuracy against context length (mean over hops)", ["multihop/acc"], range_y=(0, 1)),
                wr.MediaBrowser(title="Multi-hop by hops", media_keys=["figures/multihop"]),
            ],
        ),
        ws.Section(
            name="Latency",
            is_open=True,
            panels=[
                _line("Prefill latency (ms)", ["latency/prefill_ms", "latency/prefill_ms_projected"], log_y=True),
                _line("Decode latency (ms per token)", ["latency/decode_ms", "latency/decode_ms_projected"], log_y=True),
                wr.MediaBrowser(title="Latency with crossovers", media_keys=["figures/latency"]),
            ],
        ),
        ws.Section(
            name="Memory",
            is_open=True,
            panels=[
                wr.BarPlot(
                    title="Cache bytes per token",
                    metrics=["memory/cache_bytes_per_token", "memory/cache_bytes_per_token_projected"],
                    groupby=BY_DESIGN,
                ),
                _line("Total cache bytes", ["memory/total_bytes", "memory/total_bytes_projected"], log_y=True),
                wr.MediaBrowser(title="Memory and Pareto", media_keys=["figures/memory", "figures/pareto"]),
            ],
        ),
        ws.Section(
            name="MSA speedup",
            is_open=True,
            panels=[
                _line(
                    "M3/M2 speedup",
                    ["msa_speedup/prefill", "msa_speedup/decode", "msa_speedup/prefill_projected", "msa_speedup/decode_projected"],
                    log_y=True,
                ),
                wr.MediaBrowser(title="MSA speedup", media_keys=["figures/msa_speedup"]),
            ],
        ),
        ws.Section(
            name="Training",
            is_open=False,
            panels=[
                _line("Training loss", ["train/loss"], x="train/step", log_x=False),
                wr.MediaBrowser(title="Training loss", media_keys=["figures/train_loss"]),
            ],
        ),
    ]


def build_workspace(entity: str, project: str, exp: str | None = None, name: str | None = None) -> ws.Workspace:
    filters = expr.And(expr.Config("experiment") == exp) if exp else ""
    return ws.Workspace(
        entity=entity,
        project=project,
        name=name or f"attnbench: {exp or 'all experiments'}",
        sections=sections(),
        settings=ws.WorkspaceSettings(x_axis=X_LEN, max_runs=50),
        runset_settings=ws.RunsetSettings(filters=filters, groupby=[expr.Config("design")]),
    )


def describe(w: ws.Workspace) -> str:
    lines = [f"workspace {w.name!r} for {w.entity}/{w.project}"]
    for s in w.sections:
        lines.append(f"  [{s.name}]")
        for p in s.panels:
            keys = getattr(p, "y", None) or getattr(p, "metrics", None) or getattr(p, "media_keys", None) or [getattr(p, "table_name", "")]
            lines.append(f"    {type(p).__name__}: {getattr(p, 'title', None) or ''} {list(keys)}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = dict(a.split("=", 1) for a in argv if "=" in a)
    flags = {a for a in argv if "=" not in a}
    unknown = (set(args) - {"entity", "project", "exp", "name"}) | (flags - {"--dry-run"})
    if unknown or not args.get("entity") or not args.get("project"):
        print(
            "attnbench: dashboard: usage: python -m attnbench dashboard entity=E project=P [exp=NAME] "
            "[name=TITLE] [--dry-run]" + (f" (unknown: {', '.join(sorted(unknown))})" if unknown else ""),
            file=sys.stderr,
        )
        return 2
    w = build_workspace(args["entity"], args["project"], args.get("exp"), args.get("name"))
    print(describe(w))
    if "--dry-run" in flags:
        return 0
    try:
        w.save()
    except Exception as ex:  # no key, no network, no such project
        print(f"attnbench: dashboard: could not save to W&B: {type(ex).__name__}: {ex}", file=sys.stderr)
        return 1
    print(f"saved: {w.url}")
    return 0
