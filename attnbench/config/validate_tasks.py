"""Start-of-run validation of the task vocabulary, the curriculum and the evaluation grid
(called by validate.validate)."""

from __future__ import annotations

from typing import cast

from .errors import ConfigError, duration, positive
from .schema import StageConfig


def validate_tasks(cfg) -> None:
    """Task vocabulary, curriculum and evaluation grid (checked in that order; the first problem raises)."""
    _validate_task_and_train(cfg)
    _validate_stages(cfg)
    _validate_eval(cfg)


def _validate_task_and_train(cfg) -> None:
    """The task vocabulary and the training loop's numbers (train.*, the stages' own fields aside)."""
    from attnbench.tasks.vocab import Vocab

    t = cfg.task
    for key in ("n_keys", "n_values", "n_filler"):
        positive(f"task.{key}", getattr(t, key))
    if not 0.0 <= t.value_noise < 1.0:
        raise ConfigError("task.value_noise", t.value_noise, "a fraction in [0, 1)")
    size = Vocab(t.n_keys, t.n_values, t.n_filler).size
    if size > cfg.model.vocab_size:
        raise ConfigError("model.vocab_size", cfg.model.vocab_size, f"must be >= the task vocabulary ({size} tokens)")
    tr = cfg.train
    for key in ("max_steps", "batch", "tokens_per_step", "window", "patience", "token_budget", "checkpoint_every", "log_every"):
        positive(f"train.{key}", getattr(tr, key))
    if not tr.lr > 0:
        raise ConfigError("train.lr", tr.lr, "must be > 0")
    for key in ("advance_at", "floor"):
        if not 0.0 < getattr(tr, key) <= 1.0:
            raise ConfigError(f"train.{key}", getattr(tr, key), "a fraction in (0, 1]")
    duration("train.budget", tr.budget)
    duration("train.collective_timeout", tr.collective_timeout)
    if not isinstance(tr.micro_batch, int) or tr.micro_batch < 0:
        raise ConfigError("train.micro_batch", tr.micro_batch, "rows per forward pass, >= 0 (0: a process's rows at once)")
    if not tr.stages:
        raise ConfigError("train.stages", [], "at least one curriculum stage")
    if tr.max_len:
        last = tr.stages[-1]
        if tr.max_len < 2 * last.context_len:
            raise ConfigError(
                "train.max_len", tr.max_len, f"0 (the stages' own) or at least 2 x the last stage's context_len = {2 * last.context_len}"
            )
        if tr.max_len + last.n_queries > tr.tokens_per_step:
            raise ConfigError(
                "train.tokens_per_step",
                tr.tokens_per_step,
                f"must hold one sequence of train.max_len ({tr.max_len + last.n_queries} tokens)",
            )


def _validate_stages(cfg) -> None:
    """Each curriculum stage: positive sizes within the task vocabulary, a sequence that fits a step."""
    from omegaconf import OmegaConf

    t, tr = cfg.task, cfg.train
    for i, st in enumerate(tr.stages):
        where = f"train.stages[{i}]"
        for key in ("n_keys", "n_values", "n_filler", "n_pairs", "context_len", "n_queries"):
            positive(f"{where}.{key}", getattr(st, key))
        if st.n_keys > t.n_keys or st.n_values > t.n_values or st.n_filler > t.n_filler:
            raise ConfigError(
                where,
                f"keys={st.n_keys} values={st.n_values} filler={st.n_filler}",
                f"at most the task vocabulary ({t.n_keys} keys, {t.n_values} values, {t.n_filler} filler)",
            )
        if st.max_context_len and st.max_context_len < 2 * st.context_len:
            raise ConfigError(
                f"{where}.max_context_len", st.max_context_len, f"0 (one length) or at least 2 x context_len = {2 * st.context_len}"
            )
        longest = StageConfig(**cast(dict, OmegaConf.to_container(st, resolve=True))).longest
        if longest + st.n_queries > tr.tokens_per_step:
            raise ConfigError(
                "train.tokens_per_step", tr.tokens_per_step, f"must hold one sequence of {where} ({longest + st.n_queries} tokens)"
            )
        if not st.n_queries <= st.n_pairs <= min(st.n_keys, (st.context_len - 2) // 2):
            raise ConfigError(f"{where}.n_pairs", st.n_pairs, "need n_queries <= n_pairs <= min(n_keys, (context_len - 2) // 2)")


def _validate_eval(cfg) -> None:
    """The evaluation grid: context lengths, depths, haystacks, hops and chains."""
    from attnbench.tasks.vocab import MAX_HOPS

    t, e = cfg.task, cfg.eval
    if not e.context_lens:
        raise ConfigError("eval.context_lens", [], "at least one context length in tokens (>= 16)")
    for i, n in enumerate(e.context_lens):
        if not isinstance(n, int) or n < 16:
            raise ConfigError(f"eval.context_lens[{i}]", n, "a context length in tokens, >= 16")
    for i, d in enumerate(e.depths):
        if not 0.0 <= d <= 1.0:
            raise ConfigError(f"eval.depths[{i}]", d, "a depth in [0, 1]")
    for key in ("haystacks", "chains", "chunk", "train_len_samples"):
        positive(f"eval.{key}", getattr(e, key))
    if e.haystacks_short < 0:
        raise ConfigError("eval.haystacks_short", e.haystacks_short, "must be >= 0 (0: eval.haystacks)")
    for i, h in enumerate(e.hops):
        if not 1 <= h <= MAX_HOPS:
            raise ConfigError(f"eval.hops[{i}]", h, f"1 .. {MAX_HOPS}")
    need = e.chains * (max(e.hops, default=0) + 1)
    if need > min(t.n_keys, t.n_values):
        raise ConfigError(
            "eval.chains",
            e.chains,
            f"chains x (max hops + 1) = {need} must be <= min(task.n_keys, task.n_values) = {min(t.n_keys, t.n_values)}",
        )
    if not 0.0 < e.memory_fraction <= 1.0:
        raise ConfigError("eval.memory_fraction", e.memory_fraction, "a fraction in (0, 1]")
