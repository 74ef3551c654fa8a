"""exp=train: train (or find) the task model of each design and record how training went.

This is the experiment (what `+exp=train` runs and records); the training itself, the loop and
the checkpoints, is attnbench/training/trainer.py.

needle_4m and multihop call the same get_model(), so this experiment only exists to train
ahead of time (e.g. one design per process: ``design=softmax threads=1``) and to ship
checkpoints; its records are the training outcome per design.

A checkpoint's record.json says how it was trained. Records written under the fair training
rule carry ``rule``, ``train_len`` (the longest context of a curriculum stage the
model passed; 0 if none) and ``stop_reason``; older records do not, and their ``train_len``
is the config's last stage whether or not it was passed. ``training_facts`` reads both.
"""

from __future__ import annotations

from pathlib import Path

from attnbench.records.lines import now
from attnbench.tasks.stage import passed_len

STOP_REASONS = {  # what a record's status means, for records that do not say why they stopped
    "done": "reached the floor at the last stage",
    "stalled": "passed no stage for {patience} steps (patience)",
    "budget": "hit its wall-clock budget ({budget})",
    "tokens": "spent its token budget",
    "chain_tokens": "spent its chain stages' token budget (counted from the first chain stage)",
    "max_steps": "hit train.max_steps",
    "failed": "failed: {failure}",
}


def training_facts(record: dict) -> dict:
    """How a checkpoint was trained, from its record.json (old and new)."""
    train = (record.get("config") or {}).get("train") or {}
    rule = record.get("rule")
    if rule is None:  # before the fair rule: each design ran under its own limits
        rule = {
            "name": "none (per-design limits, before the fair rule)",
            "token_budget": None,
            "patience": train.get("patience"),
            "floor": train.get("floor"),
            "advance_at": train.get("advance_at"),
            "budget": train.get("budget"),
        }
    if "rule" in record and record.get("train_len") is not None:
        train_len = int(record["train_len"])
    else:
        train_len = passed_len(train.get("stages") or [], record.get("final_stage", 1), record.get("status", ""))
    status = str(record.get("status", "unknown"))
    stop = record.get("stop_reason") or STOP_REASONS.get(status, status).format(
        patience=train.get("patience"), budget=train.get("budget"), failure=record.get("failure")
    )
    return {
        "rule": rule,
        "train_len": train_len,
        "stop_reason": stop,
        "steps": record.get("steps"),
        "tokens": record.get("tokens"),
        "status": record.get("status"),
        "time": record.get("finished") or record.get("time"),
    }


def source_of(folder: Path) -> str:
    """The checkpoint's record.json: relative to the repository for shipped ones, else named by its
    cache folder (``cache: <design>-<key>/record.json``), never by a path of this machine."""
    path = Path(folder) / "record.json"
    root = Path(__file__).resolve().parents[2]
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return f"cache: {Path(folder).name}/record.json"


def backend_label(record: dict) -> str:
    """Which kernels trained the model: "reference", "triton", or per op ("lightning:triton,softmax:reference").

    Read from the record (the backend that ran), never from this run's settings. Records from
    before it was written down: a model trained on the CPU ran the reference (``auto`` never
    picks Triton there); one trained elsewhere says that it is not known."""
    from attnbench.kernels.backend import label

    ran = record.get("backends") or {}
    if ran:
        return label(ran)
    return "reference" if str(record.get("device", "cpu")).startswith("cpu") else "unrecorded"


def record_training(ctx, cell, name: str, trained) -> None:
    """The training outcome of one design as records (shared with needle_4m and multihop).

    These rows are copied from the checkpoint's record.json: each names it (``source``) and
    keeps its original time where the record has one (``time``; null where it has none), and
    says when it was copied (``copied_at``)."""
    r = trained.record
    facts = training_facts(r)
    status = "failed" if r["status"] == "failed" else "measured"
    common = dict(
        backend=backend_label(r),
        dtype=r.get("dtype", "float32"),
        source=source_of(trained.folder),
        copied_at=now(),
        note=f"checkpoint: {trained.source}",
    )
    cell.record(
        name,
        "train/steps_to_floor",
        r["steps"] if r["reached_floor"] else None,
        "steps",
        status,
        steps=r["steps"],
        tokens=r["tokens"],
        wall_s=r["wall_s"],
        reached=r["reached_floor"],
        floor=facts["rule"].get("floor"),
        rule=facts["rule"],
        train_len=facts["train_len"],
        stop_reason=facts["stop_reason"],
        train_status=r["status"],
        final_stage=r["final_stage"],
        n_stages=r["n_stages"],
        train_device=r["device"],
        processes=r.get("processes", 1),
        failure=r["failure"],
        time=facts["time"],
        **common,
    )
    for rate in stage_rates_of(trained):
        cell.record(name, "train/stage_rate", rate["tokens_s"], "tokens/s", status, time=facts["time"], **rate, **common)
    for part, n in r["params"].items():
        cell.record(name, f"params/{part}", n, "count", "measured", time=facts["time"], **common)
    for point in r["curve"]:
        cell.record(
            name,
            "train/loss",
            point["loss"],
            "nats",
            "measured",
            step=point["step"],
            tokens=point["tokens"],
            acc=point["acc"],
            stage=point["stage"] + 1,
            time=point.get("time"),
            **common,
        )


def stage_rates_of(trained) -> list[dict]:
    """The record's per-stage rates (attnbench.training.rate); for a model trained before they were
    written, from its curve and config (no calibrated peak then: fraction_of_peak null), saying so."""
    from omegaconf import OmegaConf

    from attnbench.tasks.stage import Stage
    from attnbench.training.rate import stage_rates

    r = trained.record
    conf = OmegaConf.create(r["config"])
    stages = [Stage(**dict(s)) for s in r["config"]["train"]["stages"]]
    if "stage_rates" not in r:
        return [{**row, "rates_from": "curve (no calibration)"} for row in stage_rates(conf, conf.design, stages, r["curve"])]
    # Recomputed from the curve with the record's own compile seconds, calibrations and phase
    # shares: records written before train_rate's window held a stage's first steps carry rates
    # that miss a compile (train_rate.stage_rates), and the curve gives the same rates to the others.
    kept = {row["stage"]: row for row in r["stage_rates"]}
    phase_s = [{"compile": kept[i + 1]["compile_s"]} if "compile_s" in kept.get(i + 1, {}) else {} for i in range(len(stages))]
    rows = stage_rates(conf, conf.design, stages, r["curve"], r.get("peaks"), phase_s)
    # a stage the record has no row for lost its compile seconds with it (the old window gave
    # it no time left): its curve slope would count a compile as steps, so it stays out
    return [
        {**row, **({"shares": kept[row["stage"]]["shares"]} if "shares" in kept[row["stage"]] else {}), "rates_from": "record"}
        for row in rows
        if row["stage"] in kept
    ]


def run(ctx) -> None:
    from attnbench.experiments import NEEDS_CUDA
    from attnbench.training.trainer import get_model  # torch: importing this module for training_facts stays light

    if ctx.cfg.exp.name in NEEDS_CUDA and ctx.device.type != "cuda":
        for name in ctx.design_names:
            cell = ctx.cell(design=name, part="train")
            if cell.done:
                continue
            cell.record(name, "train/steps_to_floor", None, "steps", "skipped", note="needs a CUDA device; torch sees none here")
            cell.commit()
        ctx.console.print(f"  {ctx.cfg.exp.name} needs a CUDA device; every design recorded skipped")
        return
    for name in ctx.design_names:
        cell = ctx.cell(design=name, part="train")
        if cell.done:
            ctx.console.print(f"  {name}: training already recorded here; skipped")
            continue
        trained = get_model(ctx.cfg, name, ctx.device, console=ctx.console)
        record_training(ctx, cell, name, trained)
        cell.commit()
        r, facts = trained.record, training_facts(trained.record)
        ctx.console.print(
            f"  {name}: {r['status']} after {r['steps']} steps, {r['tokens']:,} tokens, {r['wall_s']:.0f} s "
            f"(stage {r['final_stage']}/{r['n_stages']}, trained to {facts['train_len']} tokens: "
            f"{facts['stop_reason']})"
        )
