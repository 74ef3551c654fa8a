"""exp=train: train (or find) the task model of each design and record how training went.

needle_4m and multihop call the same get_model(), so this experiment only exists to train
ahead of time (e.g. one design per process: ``design=softmax threads=1``) and to ship
checkpoints; its records are the training outcome per design.
"""

from __future__ import annotations

from attnbench.train import get_model


def record_training(ctx, cell, name: str, trained) -> None:
    """The training outcome of one design as records (shared with needle_4m and multihop)."""
    r = trained.record
    status = "failed" if r["status"] == "failed" else "measured"
    common = dict(backend="reference" if ctx.device.type == "cpu" else "auto", dtype="float32", note=f"checkpoint: {trained.source}")
    cell.record(name, "train/steps_to_floor", r["steps"] if r["reached_floor"] else None, "steps", status,
                tokens=r["tokens"], wall_s=r["wall_s"], reached=r["reached_floor"], floor=ctx.cfg.train.floor,
                train_status=r["status"], final_stage=r["final_stage"], n_stages=r["n_stages"],
                train_device=r["device"], failure=r["failure"], **common)
    for part, n in r["params"].items():
        cell.record(name, f"params/{part}", n, "count", "measured", **common)
    for point in r["curve"]:
        cell.record(name, "train/loss", point["loss"], "nats", "measured", step=point["step"], tokens=point["tokens"],
                    acc=point["acc"], stage=point["stage"] + 1, **common)


def run(ctx) -> None:
    for name in ctx.design_names:
        cell = ctx.cell(design=name, part="train")
        if cell.done:
            ctx.console.print(f"  {name}: training already recorded here; skipped")
            continue
        trained = get_model(ctx.cfg, name, ctx.device, console=ctx.console)
        record_training(ctx, cell, name, trained)
        cell.commit()
        r = trained.record
        ctx.console.print(f"  {name}: {r['status']} after {r['steps']} steps, {r['tokens']:,} tokens, {r['wall_s']:.0f} s "
                          f"(stage {r['final_stage']}/{r['n_stages']}, floor reached: {r['reached_floor']})")
