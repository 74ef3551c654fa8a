"""exp=train: train (or find) the task model of each design and record how training went.

needle_4m and multihop call the same get_model(), so this experiment only exists to train
ahead of time (e.g. one design per process: ``design=softmax threads=1``) and to ship
checkpoints; its records are the training outcome per design.
"""

from __future__ import annotations

from attnbench.train import get_model


def backend_label(record: dict, device) -> str:
    """Which kernels trained the model: "reference", "triton", or per op ("lightning:triton,softmax:reference")."""
    ran = record.get("backends") or {}
    if not ran:  # trained before the record said (the shipped CPU models: reference)
        return "reference" if device.type == "cpu" else "auto"
    kinds = set(ran.values())
    return kinds.pop() if len(kinds) == 1 else ",".join(f"{op}:{b}" for op, b in sorted(ran.items()))


def record_training(ctx, cell, name: str, trained) -> None:
    """The training outcome of one design as records (shared with needle_4m and multihop)."""
    r = trained.record
    status = "failed" if r["status"] == "failed" else "measured"
    common = dict(backend=backend_label(r, ctx.device), dtype=r.get("dtype", "float32"), note=f"checkpoint: {trained.source}")
    cell.record(name, "train/steps_to_floor", r["steps"] if r["reached_floor"] else None, "steps", status,
                tokens=r["tokens"], wall_s=r["wall_s"], reached=r["reached_floor"], floor=ctx.cfg.train.floor,
                train_status=r["status"], final_stage=r["final_stage"], n_stages=r["n_stages"],
                train_device=r["device"], processes=r.get("processes", 1), failure=r["failure"], **common)
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
