"""longctx.plan_grid: which evaluation cells fit a budget, and in which order they run (synthetic
estimates: no timing)."""

from __future__ import annotations

from attnbench.experiments.longctx.plan import plan_grid
from attnbench.names import SkipReason
from attnbench.evaluation.fit import Estimate

K = 1024
LENGTHS = [K, 4 * K, 16 * K, 64 * K, 256 * K, 1024 * K, 4096 * K]
SECONDS_PER_TOKEN = {"hybrid": 1e-5, "softmax": 1e-5, "lightning": 1e-5}


def estimate(name, L, g_i, group):
    quadratic = 1e-9 * L * L if name == "softmax" else 0.0
    return Estimate(SECONDS_PER_TOKEN[name] * L + quadratic, 1e6, "synthetic")


def haystacks(L):
    return 6 if L <= 16 * K else 2


def run(budget_s, names=("hybrid", "softmax", "lightning"), mem_cap=1e12, unlearned=frozenset()):
    return plan_grid(list(names), LENGTHS, [{}], estimate, haystacks, budget_s, mem_cap, 16 * K, "test", unlearned)


def cells(planned):
    out = {}
    for h in planned:
        out.setdefault((h.coords["design"], h.coords["context_len"]), []).append(h.phase)
    return out


def test_short_lengths_first_for_every_design_with_more_haystacks():
    planned, skipped = run(600.0)
    got = cells(planned)
    for name in SECONDS_PER_TOKEN:
        for L in LENGTHS[:3]:
            assert got[(name, L)] == ["short"] * 6
    phases = [h.phase for h in planned]
    assert phases == sorted(phases, key=["short", "fair", "leftover"].index)  # no long cell before a short one
    assert all(len(v) == 2 for (n, L), v in got.items() if L > 16 * K)


def test_fair_split_keeps_one_design_from_starving_the_others():
    # softmax's quadratic 256K cell (~2 x 71 s) does not fit its share of what is left after the
    # short cells, so the linear designs get their long cells, then softmax the leftovers
    planned, skipped = run(420.0)
    got = cells(planned)
    short = sum(estimate(n, L, 0, {}).seconds * 6 for n in SECONDS_PER_TOKEN for L in LENGTHS[:3])
    share = (420.0 - short) / 3
    for name in ("hybrid", "lightning"):
        spent = sum(estimate(name, L, 0, {}).seconds * 2 for (n, L) in got if n == name and L > 16 * K)
        assert spent <= share + 1e-9
        assert (name, 64 * K) in got and got[(name, 64 * K)] == ["fair"] * 2
    assert (("softmax", 4096 * K) not in got) and any("fair share" in s.why for s in skipped)
    # every planned cell fits the budget
    assert sum(h.est.seconds for h in planned) <= 420.0


def test_leftovers_go_to_the_cells_still_waiting():
    # shares of ~148 s: the hybrid's long cells take 110 s of its share; softmax's 256K cell
    # (~142 s) does not fit softmax's share after its 64K cell, but fits what the hybrid left
    planned, skipped = run(300.0, names=("softmax", "hybrid"))
    got = cells(planned)
    assert got[("hybrid", 4096 * K)] == ["fair"] * 2 and got[("softmax", 64 * K)] == ["fair"] * 2
    assert got[("softmax", 256 * K)] == ["leftover"] * 2
    assert ("softmax", 1024 * K) not in got


def test_a_design_that_did_not_learn_gets_its_short_cells_and_only_what_is_left_at_the_end():
    # a three-way split leaves the hybrid's 4M cell (84 s) to the leftovers; without "lightning"
    # in the split, the hybrid's share covers it, and lightning's long cells come after every
    # learned design's cell in the leftover pass
    assert cells(run(300.0)[0])[("hybrid", 4096 * K)] == ["leftover"] * 2
    planned, skipped = run(300.0, unlearned=frozenset({"lightning"}))
    got = cells(planned)
    assert all(got[("lightning", L)] == ["short"] * 6 for L in LENGTHS[:3])
    assert got[("hybrid", 4096 * K)] == ["fair"] * 2
    assert not any(h.phase == "fair" for h in planned if h.coords["design"] == "lightning")
    leftover = [(h.coords["design"] == "lightning", h.coords["context_len"]) for h in planned if h.phase == "leftover"]
    assert leftover == sorted(leftover) and leftover[0][0] is False and leftover[-1][0] is True
    assert any(s.reason is SkipReason.UNLEARNED and "no curriculum stage" in s.why for s in skipped if s.coords["design"] == "lightning")


def test_memory_cap_skips_with_a_reason():
    planned, skipped = run(1e9, mem_cap=1e5)
    assert not planned and all(s.reason is SkipReason.MEMORY and "GiB" in s.why for s in skipped)


def test_a_measured_prefill_refits_the_estimates_of_longer_cells():
    """Calibration.with_measurement: a prefill 8x past the calibration that ran slower than its
    fit pulls the estimate of the next length up; a length measured again keeps its latest time."""
    from attnbench.evaluation.fit import Calibration

    ns = (4096, 16384, 32768)
    cal = Calibration(
        a=1e-5, b=1e-10, c=0.0, d=8.0, work_bytes=0.0, lengths=ns, times=tuple(1e-5 * n + 1e-10 * n * n for n in ns), quadratic=True
    )
    before = cal.estimate(1 << 20).seconds
    slow = 2 * cal.estimate(262144).seconds  # the cell took twice its estimate
    refit = cal.with_measurement(262144, slow)
    assert refit.estimate(1 << 20).seconds > 1.5 * before
    assert abs(refit.estimate(262144).seconds - slow) / slow < 0.05  # the fit now passes near the measured point
    assert "in this run's cells at n = 262144" in refit.estimate(1 << 20).how
    again = refit.with_measurement(262144, slow / 2)
    assert again.measured == ((262144, slow / 2),) and again.estimate(1 << 20).seconds < refit.estimate(1 << 20).seconds
    linear = Calibration(a=1e-5, b=0.0, c=0.0, d=8.0, work_bytes=0.0, lengths=(2048, 8192), times=(2048e-5, 8192e-5))
    assert linear.with_measurement(1 << 20, 2 * (1 << 20) * 1e-5).b == 0.0  # a linear design stays linear


def test_a_cell_runs_whole_or_not_at_all():
    """runs_now: at its first haystack a cell needs all its haystacks to fit the budget left;
    a cell given up stays given up; a later haystack that no longer fits is skipped alone."""
    from attnbench.experiments.longctx.plan import runs_now

    given_up: set[tuple] = set()
    assert not runs_now(300.0, 0, [0, 1], 500.0, ("softmax", 262144), given_up)  # 2 x 300 s > 500 s: none runs
    assert not runs_now(300.0, 1, [1], 500.0, ("softmax", 262144), given_up)  # not its second haystack either
    assert runs_now(100.0, 0, [0, 1], 500.0, ("h8", 4194304), given_up)  # 2 x 100 s fit
    assert not runs_now(100.0, 1, [1], 50.0, ("h8", 4194304), given_up)  # the time ran out after the first
    assert runs_now(200.0, 1, [1], 300.0, ("msa", 65536), set())  # resumed at haystack 1: only what is left counts


def short_total(*names):
    return sum(estimate(n, L, 0, {}).seconds * 6 for n in names for L in LENGTHS[:3])


def test_a_compile_is_charged_once_to_the_first_cell_that_needs_it():
    def setup(name, L):
        return 50.0 if name == "hybrid" and L >= 16 * K else 0.0

    def plan(budget):
        return cells(plan_grid(["hybrid", "softmax"], LENGTHS, [{}], estimate, haystacks, budget, 1e12, 16 * K, "test", setup=setup)[0])

    short = [c for c in plan(short_total("hybrid", "softmax") + 49.0) if c[1] <= 16 * K]
    assert len(short) == 5  # hybrid's first compiled cell carries the 50 s: one short cell lost
    at_64k = estimate("hybrid", 64 * K, 0, {}).seconds * 2
    got = plan(short_total("hybrid", "softmax") + 50.0 + at_64k + 0.01)
    assert got[("hybrid", 16 * K)] == ["short"] * 6 and ("hybrid", 64 * K) in got  # charged once, not again at 64K


def test_a_compile_still_to_come_is_charged_the_longest_compile_this_run_measured():
    """compile_charge: COMPILE_ESTIMATE_S before any compile, then the longest one measured. In
    experiments/needle_4m_loaded/run-busy2, lightning_hybrid31's 64K cell (2 haystacks of ~12 s)
    began with ~107 s left after the hybrid's compile had taken 96.0 s; charged a minute, it ran,
    and its own compile (124.5 s) took the run past its budget."""
    from attnbench.experiments.longctx.plan import COMPILE_ESTIMATE_S, compile_charge, runs_now

    assert compile_charge([]) == COMPILE_ESTIMATE_S == 60.0 and compile_charge([47.3, 120.0]) == 120.0
    cell = ("lightning_hybrid31", 64 * K)
    assert runs_now(12.1, 0, [0, 1], 107.0, cell, set(), compile_charge([]))  # a minute's compile fits
    assert not runs_now(12.1, 0, [0, 1], 107.0, cell, set(), compile_charge([96.0]))  # run-busy2's: given up whole
    assert runs_now(12.1, 1, [1], 107.0, cell, set())  # its compile done: only the haystack counts

    def plan(measured):  # the hybrid compiles for 64K and up; its 64K cell fits only with a minute's charge
        def setup(name, L):
            return compile_charge(measured) if name == "hybrid" and L >= 64 * K else 0.0

        at_64k = estimate("hybrid", 64 * K, 0, {}).seconds * 2
        budget = short_total("hybrid") + COMPILE_ESTIMATE_S + at_64k + 1.0
        return cells(plan_grid(["hybrid"], LENGTHS, [{}], estimate, haystacks, budget, 1e12, 16 * K, "test", setup=setup)[0])

    assert ("hybrid", 64 * K) in plan([])
    assert ("hybrid", 64 * K) not in plan([120.0])


def test_learned_designs_get_their_short_cells_before_a_design_that_did_not_learn():
    budget = short_total("hybrid", "softmax") + estimate("lightning", K, 0, {}).seconds * 6 + 0.01
    planned, skipped = plan_grid(
        ["lightning", "hybrid", "softmax"], LENGTHS, [{}], estimate, haystacks, budget, 1e12, 16 * K, "test", frozenset({"lightning"})
    )
    got = cells(planned)
    assert all(got.get((n, L)) == ["short"] * 6 for n in ("hybrid", "softmax") for L in LENGTHS[:3])
    assert ("lightning", K) in got and ("lightning", 16 * K) not in got


def test_leftovers_go_cheapest_first_so_a_costly_short_cell_does_not_take_the_pool():
    # the quiet needle_4m run of issue 29: after the fair pass, one design's 256K cell (costly,
    # quadratic) and the headline hybrid's 4M cell (cheaper) both wait, and the pool covers
    # either but not both; in ascending length the 256K cell took it and the 4M cell was skipped.
    per = {"hybrid": 3e-5, "softmax": 1e-5, "lightning": 1e-5}

    def est(name, L, g_i, group):
        return Estimate(per[name] * L + (4e-9 * L * L if name == "softmax" else 0.0), 1e6, "synthetic")

    def cost(name, L):
        return est(name, L, 0, {}).seconds * haystacks(L)

    short = sum(cost(n, L) for n in per for L in LENGTHS[:3])
    fair = sum(cost("hybrid", L) for L in LENGTHS[3:6]) + cost("softmax", 64 * K) + sum(cost("lightning", L) for L in LENGTHS[3:])
    pool = cost("softmax", 256 * K) + cost("hybrid", 4096 * K) / 2
    budget = short + fair + pool
    share = (fair + pool) / 3
    assert sum(cost("hybrid", L) for L in LENGTHS[3:]) > share and cost("softmax", 64 * K) + cost("softmax", 256 * K) > share
    planned, skipped = plan_grid(["hybrid", "softmax", "lightning"], LENGTHS, [{}], est, haystacks, budget, 1e12, 16 * K, "test")
    got = cells(planned)
    assert got[("hybrid", 4096 * K)] == ["leftover"] * 2
    assert ("softmax", 256 * K) not in got and any(s.coords["design"] == "softmax" and s.coords["context_len"] == 256 * K for s in skipped)
