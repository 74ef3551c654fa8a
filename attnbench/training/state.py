"""What a training run keeps besides its weights: its state (resumed from partial.pt), the
rule that stops it, and the record saved beside its final checkpoint (record.json).

The training loop itself is attnbench/training/trainer.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnbench.model import Model, layout_for
from attnbench.records.lines import git_commit
from attnbench.runner import config_dict
from attnbench.tasks.stage import Stage
from attnbench.training.rate import stage_rates

RULE_NAME = "fair-v1"


def rule_of(tc) -> dict:
    """The fair training rule: what every compared design shares, recorded with each model."""
    return {
        "name": RULE_NAME,
        "token_budget": int(tc.token_budget),
        "patience": int(tc.patience),
        "advance_at": float(tc.advance_at),
        "floor": float(tc.floor),
        "max_steps": int(tc.max_steps),
        "tokens_per_step": int(tc.tokens_per_step),
        "lr": float(tc.lr),
        "batch": int(tc.batch),
        # only where set, so the rule of every model trained before it existed reads the same
        **({"chain_token_budget": int(tc.chain_token_budget)} if tc.get("chain_token_budget", 0) else {}),
    }


@dataclass
class TrainState:
    """Everything a resumed run needs besides the weights and the optimiser (saved in partial.pt)."""

    step: int = 0
    stage: int = 0  # index of the current curriculum stage
    tokens: int = 0
    wall_s: float = 0.0
    curve: list = field(default_factory=list)  # every log_every steps: step, loss, acc, stage, tokens, wall_s
    stage_starts: list = field(default_factory=lambda: [0])  # step at which each stage was entered
    status: str = "running"  # done | stalled | tokens | chain_tokens | budget | max_steps | failed
    reached_floor: bool = False
    warm_from: int = 0  # the lr warms up again from here (a run continued from a shorter curriculum)
    continued_from: str | None = None  # checkpoint key of that shorter curriculum's model
    failure: str | None = None
    rolling: list = field(default_factory=list)  # the last `window` step accuracies
    # how fast it ran (attnbench/training/rate.py): the matmul peak calibrated at each (re)start,
    # {"step", "flops", "threads", "cpu"}, and per stage the seconds spent on each step phase
    peaks: list = field(default_factory=list)
    phase_s: list = field(default_factory=list)
    chain_from_tokens: int | None = None  # tokens when the first chain stage (hops > 0) began (train.chain_token_budget)
    # the checkout each (re)start loaded its code from, {"step", "commit", "dirty"}: read when the
    # training starts, not when its record is written, since the tree may change while it runs
    commits: list = field(default_factory=list)

    @property
    def passed(self) -> int:
        """How many stages were passed (advanced from, or held the floor at the last one)."""
        return self.stage + int(self.reached_floor)

    def advance(self, roll: float, n_stages: int, tc) -> bool:
        """The curriculum rule after a full window of step accuracies (mean ``roll``): the next
        stage at ``advance_at``, done at ``floor`` on the last one. True when a stage was passed."""
        if self.stage < n_stages - 1 and roll >= tc.advance_at:
            self.stage += 1
            self.stage_starts.append(self.step)
            return True
        if self.stage == n_stages - 1 and roll >= tc.floor:
            self.reached_floor, self.status = True, "done"
        return False


def stop_reason(st: TrainState, tc, elapsed: float, budget: float) -> str | None:
    """Why training stops before this step, by the rule (None: go on)."""
    if st.tokens >= tc.token_budget:
        return "tokens"
    if tc.get("chain_token_budget", 0) and st.chain_from_tokens is not None and st.tokens - st.chain_from_tokens >= tc.chain_token_budget:
        return "chain_tokens"  # the chain stages' own budget, counted from the first of them
    if st.step - st.stage_starts[-1] >= tc.patience:
        return "stalled"  # no stage passed in `patience` steps: record it, stop spending CPU
    if elapsed > budget:
        return "budget"  # the wall-clock safety net (not part of the rule)
    return None


def code_of(commits: list) -> dict:
    """The record's ``git``: the commit of the last (re)start, dirty if any (re)start ran on a dirty
    tree; the checkout now for a state saved before (re)starts were kept."""
    if not commits:
        return git_commit()
    return {"commit": commits[-1]["commit"], "dirty": any(c["dirty"] for c in commits)}


def command_line(cfg, design_name: str) -> str:
    """The command that reproduces this training: the run's own experiment and overrides when
    Hydra ran it (an experiment may build the training's config itself: exp=scale's widths and
    budgets, exp=capacity's designs), with this design and seed."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith(("design=", "+exp=", "seed="))]
    except ValueError:  # not inside a Hydra run (tests, library use)
        overrides = []
    exp = cfg.get("exp", {}).get("name") or "train"
    return " ".join([f"python -m attnbench +exp={exp}", f"design={design_name}", f"seed={cfg.seed}", *overrides])


def training_record(
    cfg,
    design_name: str,
    key: str,
    model: Model,
    st: TrainState,
    stages: list[Stage],
    device,
    processes: int = 1,
    backends: dict[str, str] | None = None,
) -> dict:
    """How the model was trained: the rule, where it stopped and why, its curve, config and command."""
    design, tc = cfg.attention[design_name], cfg.train
    return {
        "design": design_name,
        "layout": layout_for(cfg.model, design),
        "key": key,
        "rule": rule_of(tc),
        "status": st.status,  # done (reached the floor) | stalled | tokens | budget | max_steps | failed
        "stop_reason": st.status,
        "failure": st.failure,
        "reached_floor": st.reached_floor,
        "continued_from": st.continued_from,  # key of the shorter curriculum's model this one started from
        "steps": st.step,
        "tokens": st.tokens,
        "wall_s": round(st.wall_s, 1),
        "final_stage": st.stage + 1,
        "n_stages": len(stages),
        "stages_passed": st.passed,
        "stage_starts": st.stage_starts,
        "device": str(device),
        "processes": processes,  # train.parallel: how many processes trained it (one global batch)
        "backends": backends or {},  # op -> kernel backend that ran (triton where it passed its gate on CUDA)
        "dtype": "bfloat16" if torch.device(device).type == "cuda" else "float32",  # autocast on CUDA
        "threads": torch.get_num_threads(),
        "params": model.param_counts(),
        # the TRUE training length: the longest context of a stage the model passed (0: none)
        "train_len": stages[st.passed - 1].longest if st.passed else 0,
        "curve": st.curve,
        # per stage: tokens/s, cost-model FLOPs per token, GFLOP/s, fraction of the calibrated peak, phase shares
        "stage_rates": stage_rates(cfg, design, stages, st.curve, st.peaks, st.phase_s),
        "peaks": st.peaks,
        "config": {
            "model": config_dict(cfg.model),
            "design": config_dict(design),
            "task": config_dict(cfg.task),
            "train": config_dict(tc),
            "seed": cfg.seed,
        },
        "git": code_of(st.commits),
        "commits": st.commits,  # one per (re)start
        "command": command_line(cfg, design_name),
    }
