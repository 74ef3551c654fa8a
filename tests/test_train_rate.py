"""Per-stage training rates (attnbench/training/rate.py): the window a stage's rate is taken over
holds the steps where its batch shapes compiled, so taking the compile seconds off leaves the
steps' own time."""

from __future__ import annotations

from types import SimpleNamespace

from attnbench.training.rate import stage_rates


def _curve(stage_steps: list[int], step_s: float, tokens_per_step: int, compile_at_start: float, log_every: int = 10):
    """A curve logged every log_every steps (after the step): a stage's first step compiles for
    compile_at_start seconds (the training's second: its first runs eagerly, as
    train_step.CompiledLoss does), every other step takes step_s; returns the curve and the
    per-stage compile seconds."""
    curve, wall, tokens, step = [], 0.0, 0, 0
    for i, n in enumerate(stage_steps):
        for j in range(n):
            wall += compile_at_start if j == (1 if i == 0 else 0) else step_s
            tokens += tokens_per_step
            if step % log_every == 0:
                curve.append({"step": step, "stage": i, "wall_s": wall, "tokens": tokens})
            step += 1
    return curve, [{"compile": compile_at_start} for _ in stage_steps]


class _Stage:
    def lengths(self):
        return [24]


def test_a_compile_before_the_stage_s_first_point_is_not_taken_off_twice(monkeypatch):
    import attnbench.training.rate as tr

    monkeypatch.setattr(tr, "stage_flops", lambda cfg, design, stage: 1.0)
    # stage 2 starts at step 105: its compile (step 105) falls before its first logged point (110)
    curve, phase_s = _curve([105, 130], step_s=0.1, tokens_per_step=1000, compile_at_start=50.0)
    rows = stage_rates(None, None, [_Stage(), _Stage()], curve, None, phase_s)
    assert [r["stage"] for r in rows] == [1, 2]
    for r in rows:  # every step runs at 10,000 tokens/s once its compile is taken off
        assert abs(r["tokens_s"] - 10_000) / 10_000 < 0.1, r


def test_rates_without_compiles_are_the_curve_s_slope(monkeypatch):
    import attnbench.training.rate as tr

    monkeypatch.setattr(tr, "stage_flops", lambda cfg, design, stage: 1e7)
    curve, _ = _curve([50, 50], step_s=0.5, tokens_per_step=100, compile_at_start=0.5)  # no compile: every step 0.5 s
    rows = stage_rates(SimpleNamespace(), None, [_Stage(), _Stage()], curve, [{"step": 0, "flops": 1e10, "threads": 1, "cpu": "x"}])
    for r in rows:
        assert abs(r["tokens_s"] - 200) < 1e-6
        assert abs(r["gflops"] - 2.0) < 1e-9
        assert abs(r["fraction_of_peak"] - 0.2) < 1e-4
