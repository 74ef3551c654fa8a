"""How each model was trained, read from the records (quality.py reads what the accuracies mean):
one row per (experiment, design, seed) with its true training length (the longest curriculum
stage passed), the rule it trained under, steps, tokens, why it stopped, the tokens it spent on
chain stages (``chain_tokens``) and its last stage's rate; older records, written before the
fair rule, are read for what they imply.
"""

from __future__ import annotations

import pandas as pd

from attnbench.tasks.stage import passed_len

from .quality import config_value, run_configs


def training(df: pd.DataFrame, headers: list[dict]) -> pd.DataFrame:
    """How each model was trained, one row per (experiment, design, seed) (its latest record):
    train_len (the longest stage passed), rule, steps, tokens, stop_reason, status, stage, source."""
    configs = run_configs(headers)
    rows = []
    # one row per (experiment, design, seed): multihop's models continue needle_4m's under the
    # same design name but are other models (other stages, another true training length), and
    # each seed is a model of its own
    for (exp, name, seed), g in df[df["metric"] == "train/steps_to_floor"].groupby(["exp", "design", "seed"], sort=False, dropna=False):
        r = g.iloc[-1]
        df_seed = df if pd.isna(seed) else df[df["seed"] == seed]
        if isinstance(r.get("rule"), dict):  # written by this version: the facts are in the record
            rule, train_len, stop, steps = r["rule"], r["train_len"], r.get("stop_reason"), r.get("steps")
        else:  # older records: what they imply, with the run's curriculum
            stages = config_value(configs.get(r["run_dir"], {}), "train.stages", []) or []
            rule = {"name": "none recorded (before the fair rule: each design ran under its own limits)"}
            train_len = passed_len(stages, int(r.get("final_stage") or 1), str(r.get("train_status") or ""))
            stop, steps = _old_stop(r), (r["v"] if pd.notna(r["v"]) else None)
            if steps is None:  # older records said steps only when the floor was reached
                steps = _old_steps(df, name, r.get("tokens"))
        stage = f"{int(r['final_stage'])}/{int(r['n_stages'])}" if pd.notna(r.get("final_stage")) and pd.notna(r.get("n_stages")) else ""
        chain = chain_tokens(df_seed, exp, name, config_value(configs.get(r["run_dir"], {}), "train.stages", []) or [], r.get("tokens"))
        rates = df_seed[(df_seed["metric"] == "train/stage_rate") & (df_seed["exp"] == exp) & (df_seed["design"] == name)]
        last = rates.sort_values("stage").iloc[-1] if not rates.empty else None  # the last stage it trained on
        rows.append(
            {
                "exp": exp,
                "design": name,
                "seed": seed,
                "rule": rule,
                "train_len": train_len,
                "stop_reason": stop,
                "steps": steps,
                "steps_exact": steps is not None,
                "tokens": r.get("tokens"),
                "status": r.get("train_status"),
                "stage": stage,
                "source": r.get("source") if isinstance(r.get("source"), str) else str(r.get("note") or ""),
                "chain_tokens": chain,
                "rate": None if last is None else {k: last.get(k) for k in ("stage", "v", "gflops", "fraction_of_peak", "threads")},
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "exp",
            "design",
            "seed",
            "rule",
            "train_len",
            "stop_reason",
            "steps",
            "steps_exact",
            "tokens",
            "status",
            "stage",
            "source",
            "chain_tokens",
            "rate",
        ],
    )


def chain_tokens(df: pd.DataFrame, exp, design: str, stages: list, total) -> float:
    """Training tokens a model spent from its first chain stage (``hops`` > 0) to its end: the
    budget counted apart (the same for every design, from the first chain
    stage). From the loss curve's records (``stage`` is 1-based there): the tokens at the first
    logged step of that stage (logged every ``train.log_every`` steps, so it undercounts by at
    most that many steps). NaN without chain stages or curve records."""
    first = next((i + 1 for i, st in enumerate(stages) if isinstance(st, dict) and int(st.get("hops") or 0) > 0), None)
    if first is None or total is None or pd.isna(total):
        return float("nan")
    c = df[(df["metric"] == "train/loss") & (df["design"] == design) & (df["exp"] == exp)]
    c = c[pd.to_numeric(c.get("stage"), errors="coerce") >= first] if "stage" in c.columns else c.iloc[0:0]
    if c.empty or c["tokens"].isna().all():
        return float("nan")
    return float(total) - float(c["tokens"].min())


def _old_stop(r) -> str:
    status = r.get("train_status")
    return {
        "done": "reached the floor at the last stage",
        "stalled": "passed no stage within its patience",
        "budget": "hit its wall-clock budget",
        "max_steps": "hit train.max_steps",
        "failed": f"failed: {r.get('failure')}",
    }.get(status, str(status))


def _old_steps(df: pd.DataFrame, name: str, tokens) -> float | None:
    """Steps of an older record that did not reach the floor (it did not say): the last logged
    loss-curve step, plus the tokens spent after it over the tokens a step took there."""
    c = df[(df["metric"] == "train/loss") & (df["design"] == name)].dropna(subset=["step", "tokens"])
    c = c.drop_duplicates("step").sort_values("step")
    if len(c) < 2 or tokens is None or pd.isna(tokens):
        return None
    (s0, t0), (s1, t1) = c[["step", "tokens"]].iloc[-2], c[["step", "tokens"]].iloc[-1]
    per_step = (t1 - t0) / (s1 - s0)  # logged tokens count the step logged (step s: s + 1 steps done)
    return float(s1 + 1 + round((tokens - t1) / per_step)) if per_step > 0 else None
