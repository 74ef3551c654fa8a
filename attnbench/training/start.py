"""Where a training starts (trainer.py's resume step): its own partial checkpoint (or one shipped
in attnbench/trained/ by an earlier sitting), a finished model of a shorter curriculum it
extends, or scratch."""

from __future__ import annotations

from pathlib import Path

import torch

from attnbench.training import checkpoints
from attnbench.config import execution_free
from attnbench.config.schema import design_fields
from attnbench.basics import stable_hash
from attnbench.runner import config_dict
from attnbench.training.state import TrainState

FORMAT = 2  # bump when the checkpoint contents or training semantics change (2: the fair rule, mixed lengths)


def keyed_off_default() -> dict:
    """Design settings a key reads only off their default, by name: those added after checkpoints
    were first keyed (their default reproduces the old behaviour), so checkpoints trained before
    they existed stay valid (attnbench/specs/settings.py). Read from the registry when asked."""
    return {name: f.default for name, (_, f) in design_fields().items() if not f.metadata["keyed_at_default"]}


def checkpoint_key(cfg, design: str) -> str:
    """Hash of everything that determines the trained weights."""
    # How a run is spread over processes is not part of the key (a run resumes on any number).
    train = execution_free(config_dict(cfg.train))
    later = keyed_off_default()
    # Limits that only decide when to stop (not what a step does) are not part of the key: a
    # run stopped by them resumes from its partial checkpoint when they are raised.
    for k in ("force", "budget", "patience", "token_budget", "chain_token_budget", "checkpoint_every", "log_every"):
        train.pop(k, None)
    return stable_hash(
        {
            "format": FORMAT,
            "model": config_dict(cfg.model),
            "design": {
                k: v for k, v in config_dict(cfg.attention[design]).items() if k != "description" and not (k in later and v == later[k])
            },
            "task": config_dict(cfg.task),
            "train": train,
            "seed": cfg.seed,
        }
    )


def prefix_model(cfg, design_name: str) -> tuple[Path, dict, int] | None:
    """A finished model of a shorter curriculum that this one extends, everything else equal.

    multihop's curriculum is needle_4m's plus chain stages: its models start from the needle
    models (shipped or cached) instead of training those stages again. Returns (folder,
    record, stages it covers) of the longest such prefix, or None.
    """
    import copy
    import json

    from omegaconf import open_dict

    for n in range(len(cfg.train.stages) - 1, 0, -1):
        short = copy.deepcopy(cfg)
        with open_dict(short):
            short.train.stages = cfg.train.stages[:n]
        found = checkpoints.find(design_name, checkpoint_key(short, design_name))
        if found is not None:
            return found, json.loads((found / "record.json").read_text()), n
    return None


def starting_point(cfg, design_name: str, partial: Path) -> tuple[TrainState, dict | None, dict | None]:
    """Where training starts: (state, weights, optimiser state) of its partial checkpoint, a
    shorter curriculum's finished model (prefix_model), or scratch (TrainState(), None, None)."""
    # the cache's own partial checkpoint, else one shipped in attnbench/trained/ by an earlier sitting
    source = partial if partial.exists() else checkpoints.shipped_partial(design_name, partial.parent.name.rpartition("-")[2])
    if source is not None and not cfg.train.force:
        saved = torch.load(source, map_location="cpu", weights_only=False)
        st = TrainState(**saved["state"])
        if st.status != "failed":
            st.status = "running"  # stopped by a limit that may have been raised since
        return st, saved["model"], saved["opt"]
    if (prefix := prefix_model(cfg, design_name)) is not None:
        base, base_record, n = prefix
        st = TrainState(
            step=base_record["steps"],
            stage=n,
            tokens=base_record["tokens"],
            wall_s=base_record["wall_s"],
            curve=list(base_record["curve"]),
            stage_starts=[*base_record["stage_starts"], base_record["steps"]],
            warm_from=base_record["steps"],
            continued_from=base_record["key"],
        )
        if not base_record["reached_floor"]:  # it did not pass its own stages: the longer curriculum stops there too
            # at the stage it had reached (not its curriculum's last: a model stuck at stage 1 of 6
            # must not be recorded as at stage 6, with stage 5's length as its training length)
            st.stage, st.stage_starts = int(base_record["final_stage"]) - 1, list(base_record["stage_starts"])
            st.status = base_record["status"]
        return st, torch.load(base / "final.pt", map_location="cpu", weights_only=True), None
    return TrainState(), None, None
