"""Crossover lengths: exact for power laws, bracketed, and never invented outside the range."""

from __future__ import annotations

import pytest

from attnbench.bench import crossing


def test_measured_power_laws_cross_exactly_between_the_bracket():
    lengths = [256, 1024, 4096, 16384]
    linear = [3e-3 * n for n in lengths]  # crosses n^2 * 1e-6 at n = 3000
    quadratic = [1e-6 * n * n for n in lengths]
    res = crossing.measured(lengths, linear, quadratic)
    assert res["relation"] == "=" and res["bracket"] == [1024, 4096]
    assert res["value"] == pytest.approx(3000, rel=1e-9)
    assert crossing.describe(res) == "3,000"


def test_measured_out_of_range_is_a_bound_not_a_number():
    lengths = [256, 1024]
    never = crossing.measured(lengths, [2.0, 3.0], [1.0, 2.0])
    assert never["value"] is None and never["relation"] == ">" and never["bracket"] == [1024, None]
    always = crossing.measured(lengths, [0.5, 1.0], [1.0, 2.0])
    assert always["value"] is None and always["relation"] == "<" and always["bracket"] == [None, 256]
    assert crossing.describe(never) == "> 1,024" and crossing.describe(always) == "< 256"


def test_measured_takes_the_last_crossing_and_counts_them():
    # cheaper at 512 (noise), not at 1024, cheaper from 2048 on
    res = crossing.measured([256, 512, 1024, 2048, 4096], [2, 0.9, 1.1, 0.5, 0.2], [1, 1, 1, 1, 1])
    assert res["bracket"] == [1024, 2048] and res["crossings"] == 3


def test_analytic_finds_the_integer_crossover():
    res = crossing.analytic(lambda n: 5000.0 * n + 1, lambda n: float(n * n), n_min=1, n_max=1 << 20)
    assert res["relation"] == "=" and res["value"] == 5001
    assert res["bracket"][0] <= 5001 <= res["bracket"][1]
    assert crossing.analytic(lambda n: 2.0 * n, lambda n: float(n), n_max=1 << 10)["relation"] == ">"
    assert crossing.analytic(lambda n: 0.5 * n, lambda n: float(n), n_max=1 << 10)["relation"] == "<"
