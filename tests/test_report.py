"""Reports from records: sections, claims, figures' status marks, escaping, merging, the CLI.

The records here are SYNTHETIC TEST FIXTURES (tests/report_fixtures.py), never results.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

from attnbench.report import all_experiments, build_report
from attnbench.verdicts import rules
from attnbench.verdicts.claims import judge as claims_mod
from attnbench.report import style
from attnbench.report.figures import cost_figures as F
from attnbench.report.figures import accuracy as figures_quality
from attnbench.basics import fmt_len
from attnbench.report.frame import load
from attnbench.report.tables.decision import decision_table, summarize

from report_fixtures import XSS, write_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fixture_report(tmp_path_factory):
    """One report from a CPU and a GPU fixture run, built once for the tests that read it."""
    base = tmp_path_factory.mktemp("fixture")
    write_run(base / "cpu", description=XSS)
    write_run(base / "gpu", device="cuda", seed=1)
    res = build_report([base / "cpu", base / "gpu"], pdf=False)
    return res, res.html.read_text()


def draw(fn, df):
    with matplotlib.rc_context(style.STYLE):
        return fn(df)


def test_report_has_every_section_in_order(fixture_report):
    res, html = fixture_report
    ids = [m for m in re.findall(r'<section id="([a-z]+)"', html)]
    # the brief, the body, then the appendix (run status only where several runs' budget lines are)
    assert ids == [
        "brief",
        "summary",
        "claims",
        "questions",
        "figures",
        "appendix",
        "training",
        "other",
        "caveats",
        "config",
        "environment",
    ]
    # the questions beside the claims: a line each in the brief, a row each with its rule below the claims
    assert re.findall(r'<tr id="question-(Q-[a-z]+)">', html) == ["Q-delta", "Q-tokens"]
    brief_html = html[html.index('<section id="brief">') : html.index('<section id="summary">')]
    assert "<h3>Questions beside the claims</h3>" in brief_html and "Q-tokens not yet measured" in brief_html
    assert '<table id="decision"' in html and html.index('id="decision"') < html.index('id="claims"')
    # a claim with records has its detail row; the others are named once, under the claims table
    assert re.findall(r'<tr id="claim-(C\d[ab]?)">', html) == ["C1", "C2", "C3", "C5a"]
    assert "Not yet measured here (no records of their experiment): C4 (crossover), C5b (msa_speedup)" in html
    # the figures drawn from the fixture's records, in the registry's order; one without records is left out
    assert re.findall(r'<figure id="fig-([a-z_0-9]+)">', html) == [f.id for f in style.FIGURES if f.id in res.figures]
    assert html.count('<img src="data:image/png;base64,') == len(res.figures) >= 10
    assert '<p class="empty">' not in html and "No records for this yet" not in html
    assert "http://" not in html and "https://" not in html and "<script" not in html  # self-contained, no JS
    assert "smoke/custom_metric" in html  # a metric no figure knows lands in "other measurements"
    assert "Projected or analytic, not measured" in html
    assert "How the models were trained" in html and "fixture rule" in html
    assert "did not learn" in html  # the fixture's lightning passed no stage


def test_noisy_timings_are_said_in_the_caveats(fixture_report):
    _, html = fixture_report
    assert "Noisy timings: 2 were taken while the load average exceeded the core count" in html  # cpu and gpu runs


def test_config_strings_are_escaped(fixture_report):
    _, html = fixture_report
    assert XSS not in html
    assert "&lt;script&gt;alert(" in html


def test_merged_runs_keep_devices_apart(fixture_report, tmp_path):
    res, html = fixture_report
    assert "results files:</b> 2" in html and html.count("<h3>environment ") == 2
    df = load([res.html.parent / "cpu", res.html.parent / "gpu"]).records
    fig = draw(F.latency, df)
    titles = {ax.get_title() for ax in fig.axes}
    assert {"prefill (cpu)", "prefill (cuda)", "decode (cpu)", "decode (cuda)"} <= titles


def test_projected_points_are_drawn_hollow_and_dashed(tmp_path):
    df = load([write_run(tmp_path / "r")]).records
    fig = draw(F.latency, df)
    ax = fig.axes[0]
    dashed = [l for l in ax.lines if l.get_linestyle() == "--" and len(l.get_xdata()) > 1]
    hollow = [l for l in ax.lines if l.get_marker() not in ("None", "", None) and l.get_markerfacecolor() in ("white", (1, 1, 1, 1))]
    solid = [l for l in ax.lines if l.get_linestyle() == "-" and l.get_label() == "softmax"]
    assert dashed and hollow and solid
    legend_texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]  # the figure's one legend
    assert "projected (cost model)" in legend_texts and "skipped" in legend_texts


def test_heatmap_marks_skipped_and_failed_cells(tmp_path):
    df = load([write_run(tmp_path / "r")]).records
    fig = draw(figures_quality.niah_heatmap, df)
    hatched = [p for ax in fig.axes for p in ax.patches if p.get_hatch() == "///"]
    red = [p for p in hatched if matplotlib.colors.to_hex(p.get_edgecolor()) == "#ff0000"]
    # msa at 2K (5 depths), lightning_hybrid at 4K (one depth-less record: the whole column), swa_hybrid one cell
    assert len(hatched) - len(red) == 10 and len(red) == 1
    assert not [t for ax in fig.axes for t in ax.texts if t.get_text() in ("skipped", "failed")]  # hatched, no words in the cells


def test_partial_cells_are_marked_in_figures_and_tables(tmp_path):
    """A cell that ran fewer haystacks than planned (the fixture's msa at 16K: 2 of 6) is
    half-filled in the accuracy figure, dotted in the heatmap and says 2/6 in the tables."""
    from attnbench.report.frame import haystack_counts

    from report_fixtures import needle_run

    data = load([needle_run(tmp_path / "n")])
    counts = haystack_counts(data.records)
    part = counts[counts["partial"]]
    assert [(r.design, r.context_len, r.ran, r.planned) for r in part.itertuples()] == [("msa", 16384, 2, 6)]
    fig = draw(figures_quality.niah_vs_length, data.records)
    halves = [l for l in fig.axes[0].lines if l.get_fillstyle() == "left" and len(l.get_xdata())]
    assert [list(l.get_xdata()) for l in halves] == [[16384]]
    heat = draw(figures_quality.niah_heatmap, data.records)
    assert sum(p.get_hatch() == ".." for ax in heat.axes for p in ax.patches) == 5  # msa 16K at its 5 depths
    row = cells(decision_table(data.records, data.train))["msa"]
    assert "2 of 6 haystacks" in " ".join(c.title + c.text + c.sub for c in row.values())


def test_every_count_in_the_caveats_adds_up(tmp_path):
    """ "Skipped: N records (" lists reasons whose counts sum to N, however many distinct notes
    (each cell's estimate differs) there are."""
    from attnbench.report.build import caveats

    from report_fixtures import needle_run

    data = load([needle_run(tmp_path / "n")])
    df = data.records
    late = df["note"].astype(str).str.contains("budget ran out")
    df.loc[late, "note"] = [f"budget ran out: ~{90 + i} s a haystack needed, {i} s left" for i in range(late.sum())]
    extra = df[df["status"] == "skipped"].head(8).assign(note=[f"reason {k}" for k in "abcdefgh"])
    data.records = pd.concat([df, extra], ignore_index=True)
    line = next(c for c in caveats(data) if c.startswith("Skipped: "))
    total = int(re.match(r"Skipped: (\d+) records \(", line).group(1))
    assert total == (data.records["status"] == "skipped").sum()
    assert sum(int(n) for n in re.findall(r"(?:\(|; )(\d+) x ", line)) == total, line
    assert f"{late.sum()} x budget ran out: N a haystack needed, N left" in line
    assert "Partial cells: 1 accuracy cells ran fewer haystacks than planned (msa 16K: 2 of 6)" in " ".join(caveats(data))


def test_every_section_degrades_without_records(tmp_path):
    run = tmp_path / "empty"
    run.mkdir()
    (run / "results.jsonl").write_text(json.dumps({"type": "header", "exp": "x", "config_hash": "h", "config": {}}) + "\n")
    res = build_report([run], pdf=False)
    html = res.html.read_text()
    assert "No records for this yet" not in html and 'id="figures"' not in html  # left out, not printed empty
    # each claim twice: the first screen's glance table and the claims table
    # each claim once, in the glance table; the claims section (details) is left out: no claim has records
    assert html.count('class="verdict v-not-measured">not yet measured<') == len(claims_mod.CLAIMS) == 8
    assert 'id="claims"' not in html
    assert "No design records yet" in html and not res.figures


def cells(table):
    labels = [f"{g}|{l}" if g else l for g, l in table.columns]
    return {r[0].text: dict(zip(labels, r)) for r in table.rows}


def column(row, group_start, label):
    return next(c for k, c in row.items() if k.startswith(group_start) and k.endswith("|" + label))


def test_pooled_accuracy_is_preferred_over_the_mean_of_depths(tmp_path):
    data = load([write_run(tmp_path / "r")])
    df = data.records
    extra = df[(df["metric"] == "niah/acc") & (df["design"] == "lightning") & (df["context_len"] == 256)].iloc[:1].copy()
    extra["depth"], extra["v"], extra["n"] = float("nan"), 0.55, 20  # what an experiment writes pooled over all depths
    row = cells(decision_table(pd.concat([df, extra], ignore_index=True), data.train))["lightning"]
    cell = column(row, "NIAH accuracy", "256")  # 11/20; the per-depth mean would be 0.20
    assert (cell.text, cell.sub) == ("0.55", "[0.34–0.74]") and "11/20 probes" in cell.title


def test_two_runs_of_one_cell_share_their_first_haystacks_and_count_them_once():
    """A haystack is seeded by (seed, index): a run of 40 haystacks holds a run of 6's probes at the
    same seed (needle_4m's 4K cell and needle_4x's), so pooling them counts 200 probes, not 230;
    another seed's run is other haystacks and adds its own."""
    from attnbench.verdicts.quality import pooled_acc

    base = {
        "design": "h",
        "metric": "niah/acc",
        "task": "niah_multikey",
        "context_len": 4096.0,
        "depth": float("nan"),
        "status": "measured",
    }
    rows = [
        {**base, "run_dir": "needle_4m/run", "seed": 0, "n": 30.0, "v": 27 / 30},
        {**base, "run_dir": "needle_4x/run_seed0", "seed": 0, "n": 200.0, "v": 170 / 200},
        {**base, "run_dir": "position_probe/run", "seed": 0, "n": 30.0, "v": 27 / 30},
    ]
    assert pooled_acc(pd.DataFrame(rows)).fraction == "170/200"
    other = {**base, "run_dir": "needle_4x/run_seed1", "seed": 1, "n": 200.0, "v": 158 / 200}
    assert pooled_acc(pd.DataFrame([*rows, other])).fraction == "328/400"


def test_a_cell_pooled_over_seeds_shows_each_seed_and_the_spread(tmp_path):
    """The decision table's accuracy: the pooled value, then each seed's own and max minus min."""
    data = load([write_run(tmp_path / "r")])
    df = data.records
    one = df[(df["metric"] == "niah/acc") & (df["design"] == "lightning") & (df["context_len"] == 256)].iloc[:1].copy()
    one["depth"], one["v"], one["n"], one["seed"] = float("nan"), 0.5, 20, 0
    two = one.assign(v=0.8, seed=1, run_dir="other")
    cell = column(cells(decision_table(pd.concat([df, one, two], ignore_index=True), data.train))["lightning"], "NIAH accuracy", "256")
    assert cell.text == "0.65" and cell.sub.endswith("s0 0.50 · s1 0.80 (spread 0.30)")
    assert "per seed seed 0 10/20, seed 1 16/20" in cell.title
    alone = column(cells(decision_table(pd.concat([df, one], ignore_index=True), data.train))["lightning"], "NIAH accuracy", "256")
    assert "spread" not in alone.sub and "per seed" not in alone.title


def test_summary_never_averages_measured_with_projected():
    df = pd.DataFrame({"status": ["measured", "projected"], "v": [2.0, 100.0], "note": [None, None]})
    cell = summarize(df)
    assert cell.text == "2" and cell.kind == "" and "projected values exist too" in cell.title
    assert summarize(df[df["status"] == "projected"]).kind == "projected"


def test_decision_table_rows_say_how_each_model_was_trained_and_whether_it_learned(tmp_path):
    data = load([write_run(tmp_path / "r")])
    rows = cells(decision_table(data.records, data.train))
    light, soft = rows["lightning"], rows["softmax"]
    # fixture: softmax 2e-7 L^2 ms, lightning 4e-3 L ms, measured up to 64K (projections are not used)
    assert column(light, "speed vs softmax", "prefill").text == f"{2e-7 * 65536 / 4e-3:.2f}x at 64K"
    cell = column(light, "NIAH accuracy", "2K")  # 50/500 pooled over 5 depths
    assert (cell.text, cell.sub) == ("0.10", "[0.08–0.13]") and "chance 0.0625" in cell.title
    assert column(light, "training", "trained to").text == "0 (no stage passed)"
    assert column(light, "learned the task", "at its training length").text == "no"
    learned = column(soft, "learned the task", "at its training length")
    assert learned.text == "yes" and learned.sub.startswith("0.99 [0.97")
    assert column(soft, "training", "trained to").text == "512" and column(soft, "training", "steps / tokens").text == "900 / 4.0M"
    assert column(soft, "NIAH", "effective length").text == "2K"  # lower bound > 0.5 at every length
    group = next(g for g, _ in decision_table(data.records, data.train).columns if g.startswith("NIAH accuracy"))
    assert "chance 0.06" in group and "floor 0.2" in group


def test_claim_verdicts_follow_the_records(tmp_path):
    """The full fixture through judge_all (every verdict of every claim: tests/test_claims.py)."""
    data = load([write_run(tmp_path / "r")])
    verdicts = {c.id: v for c, v in claims_mod.judge_all(data.records, data.train)}
    assert verdicts["C1"].verdict == "supported" and verdicts["C1"].projected_only
    # the fixture hybrid learned its multi-key needles, but C2 reads single needles (exp=scale's cells),
    # which the fixture does not have: judged, and inconclusive for want of the claim's own test
    assert verdicts["C2"].verdict == "inconclusive"
    assert any("no single-needle cell at 4x" in e for e in verdicts["C2"].evidence), verdicts["C2"].evidence
    assert verdicts["C6"].verdict == "not yet measured"  # C6 rests on exp=capacity; the fixture has needle records only
    assert any("exp=capacity" in e for e in verdicts["C6"].evidence)
    assert all(v.verdict in rules.VERDICTS for v in verdicts.values())
    assert all(v.verdict == "not yet measured" for _, v in claims_mod.judge_all(data.records.iloc[0:0]))


def test_claim_quotes_are_verbatim_from_the_seeds():
    """The claims' quotations against the seed write-ups the repository ships (docs/sources/)."""
    text = " ".join(p.read_text() for p in sorted((ROOT / "docs" / "sources").glob("*.txt")))
    assert text, "docs/sources/ holds no write-up"
    for claim in claims_mod.CLAIMS:
        for quote, _ in claim.quotes:
            assert quote in text, (claim.id, quote)


@pytest.mark.parametrize("n, text", [(131072, "128K"), (1048576, "1M"), (4194304, "4M"), (1536, "1.5K"), (1000, "1000")])
def test_fmt_len(n, text):
    assert fmt_len(n) == text


def test_report_cli(tmp_path):
    run = write_run(tmp_path / "run")
    res = subprocess.run(
        [sys.executable, "-m", "attnbench", "report", str(run), "--no-pdf"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert (run / "report.html").exists() and not (run / "report.pdf").exists()
    bad = subprocess.run(
        [sys.executable, "-m", "attnbench", "report", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "no results.jsonl" in bad.stderr


def test_all_experiments_writes_one_report_each(tmp_path):
    write_run(tmp_path / "experiments" / "alpha" / "cpu", exp="alpha")
    write_run(tmp_path / "experiments" / "alpha" / "gpu", exp="alpha", device="cuda")
    (tmp_path / "experiments" / "notes").mkdir()  # no results: no report
    results = all_experiments(tmp_path, pdf=False)
    assert [r.html for r in results] == [tmp_path / "reports" / "alpha" / "report.html"]
    assert "results files:</b> 2" in results[0].html.read_text()


def test_every_recorded_experiment_has_its_report_in_the_repo():
    recorded = sorted(p.name for p in (ROOT / "experiments").iterdir() if any(p.rglob("results.jsonl")))
    assert "smoke" in recorded
    for name in recorded:
        assert (ROOT / "reports" / name / "report.html").is_file(), (
            f"reports/{name}/ is missing: run `python -m attnbench report --all-experiments`"
        )


def test_readme_links_the_decision_report():
    text = (ROOT / "README.md").read_text()
    assert "(reports/decision/report.html)" in text and "(reports/decision/report.pdf)" in text
    assert "report --decision" in text


def test_report_cli_decision(tmp_path):
    write_run(tmp_path / "experiments" / "alpha" / "run", exp="alpha")
    res = subprocess.run(
        [sys.executable, "-m", "attnbench", "report", "--decision", "--no-pdf", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "reports" / "decision" / "report.html").is_file()
    elsewhere = subprocess.run(  # --out moves it
        [sys.executable, "-m", "attnbench", "report", "--decision", "--no-pdf", "--root", str(tmp_path), "--out", str(tmp_path / "mine")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert (tmp_path / "mine" / "report.html").is_file()
    empty = tmp_path / "nothing"
    (empty / "experiments").mkdir(parents=True)
    bad = subprocess.run(
        [sys.executable, "-m", "attnbench", "report", "--decision", "--no-pdf", "--root", str(empty)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "no results.jsonl" in bad.stderr


def test_records_carry_the_cpu_of_the_restart_that_wrote_them_and_kernel_tables_keep_cpus_apart(tmp_path):
    """One results file may hold runs of several machines (a rerun appends): each record takes the
    CPU of the header before it, and the kernels tables give each CPU its own rows."""
    from attnbench.report.readme import costs as readme_tables_costs  # noqa: F401  (registers the kernels tables)
    from attnbench.report.readme.regenerate import TABLES

    def run(cpu: str, started: str, sdpa_ms: float) -> list[dict]:
        head = {"type": "header", "exp": "kernels_cpu", "config_hash": "h", "started": started, "hardware": {"cpu": cpu}}
        recs = [
            {
                "type": "record",
                "exp": "kernels_cpu",
                "design": d,
                "layout": "",
                "metric": "latency/prefill_ms",
                "value": ms,
                "unit": "ms",
                "status": "measured",
                "op": op,
                "backend": b,
                "context_len": 4096,
                "device": "cpu",
                "loadavg": [0.5, 0.5, 0.5],
                "note": "synthetic test fixture",
            }
            for d, op, b, ms in (("softmax", "softmax", "sdpa", sdpa_ms), ("lightning", "lightning", "reference", 10.0))
        ]
        calibration = {**recs[0], "design": "-", "metric": "calibration/matmul_flops", "value": 1e9 * sdpa_ms, "unit": "FLOP/s"}
        return [head, calibration, *recs]

    lines = run("CPU A", "2026-01-02T00:00:00+00:00", 40.0) + run("CPU B", "2026-01-01T00:00:00+00:00", 20.0)
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    data = load([tmp_path])
    assert list(data.records["cpu"]) == ["CPU A"] * 3 + ["CPU B"] * 3
    table = TABLES["kernels/cpu"](data)
    assert list(table["CPU"]) == ["CPU B", "CPU A"]  # in the order the runs started
    assert list(table["lightning (reference) ms"]) == ["10.0 (2.0x)", "10.0 (4.0x)"]  # each against its own machine's SDPA
    assert list(TABLES["kernels/efficiency"](data)["CPU"]) == ["CPU B (peak 20.0 GFLOP/s)", "CPU A (peak 40.0 GFLOP/s)"]
    fig = F.latency(data.records)  # a row of panels (prefill, decode) per CPU, never one line across both
    assert sorted(ax.get_title() for ax in fig.axes) == [
        "decode (cpu), CPU A",
        "decode (cpu), CPU B",
        "prefill (cpu), CPU A",
        "prefill (cpu), CPU B",
    ]


def test_relative_effective_length_keeps_a_share_of_the_models_own_score():
    """After NoLiMa: a longer length counts while its lower bound keeps 85% of the accuracy at home."""
    from attnbench.verdicts.quality import relative_effective_length

    def rec(L, k, n=200):
        return {
            "metric": "niah/acc",
            "design": "d",
            "status": "measured",
            "context_len": L,
            "v": k / n,
            "n": n,
            "task": "t",
            "hops": float("nan"),
            "run_dir": "r",
            "seed": 0,
            "depth": float("nan"),
        }

    # 0.90 at home (bar 0.765); 2K: 172/200, lower bound 0.81 keeps; 4K: 150/200 (0.69) does not; 8K is past the break
    df = pd.DataFrame([rec(1024, 180), rec(2048, 172), rec(4096, 150), rec(8192, 180)])
    assert relative_effective_length(df, "d", 1024) == (2048, "2K")
    assert relative_effective_length(df[df["context_len"] != 2048], "d", 1024)[1] == "1K"  # home keeps its own by definition
    length, text = relative_effective_length(df, "d", 512)  # never evaluated at its training length
    assert length != length and "no accuracy at its training length" in text


def test_budget_lines_name_their_run_when_several_are_merged(tmp_path):
    """The decision report merges many runs: a budget line that does not say whose it is reads as
    the same run skipping cells again and again."""
    from attnbench.report.build import budget_lines

    from report_fixtures import header

    def run(folder: str, note: str) -> Path:
        d = tmp_path / folder
        d.mkdir(parents=True)
        rec = {"type": "record", "exp": "needle_4m", "design": "softmax", "layout": "S", "metric": "eval/budget_summary", "value": 1}
        rec |= {"unit": "cells", "status": "measured", "seed": 0, "device": "cpu", "note": note}
        (d / "results.jsonl").write_text(json.dumps(header("needle_4m", "cpu")) + "\n" + json.dumps(rec) + "\n")
        return d

    one = run("needle_4m/run", "1 of 2 cells skipped for the budget at load 1.0 on 2 cores")
    assert budget_lines(load([one])) == ["1 of 2 cells skipped for the budget at load 1.0 on 2 cores"]
    two = run("needle_4m_loaded/run", "0 of 2 cells skipped for the budget at load 9.0 on 2 cores")
    assert budget_lines(load([one, two])) == [
        "needle_4m/run: 1 of 2 cells skipped for the budget at load 1.0 on 2 cores",
        "needle_4m_loaded/run: 0 of 2 cells skipped for the budget at load 9.0 on 2 cores",
    ]


def test_decision_table_training_cells_come_from_the_main_job_and_name_each_seed():
    """A design trained by several experiments (multihop's chains, capacity's ladder, a probe's
    variant) shows the main job's training; several seeds show each seed's facts."""
    from attnbench.report.tables.training_cells import primary_training, training_cells

    def row(exp, seed, steps, status="done", train_len=1024.0):
        return {"design": "x", "exp": exp, "seed": seed, "steps": steps, "tokens": steps * 1e4, "status": status}, {
            "train_len": train_len,
            "stage": "6/6",
            "stop_reason": status,
            "source": "f",
        }

    rows = [a | b for a, b in (row("needle_4m", 0, 100), row("multihop", 0, 300), row("plateau_probe", 0, 50, "stalled", 0.0))]
    tr = primary_training(pd.DataFrame(rows))
    assert list(tr["exp"]) == ["needle_4m"]
    assert [c[0] for c in training_cells(tr)] == ["1,024", "100 / 1.0M", "done"]
    rows.append(row("needle_4m", 1, 200)[0] | row("needle_4m", 1, 200)[1])
    cells = [c[0] for c in training_cells(primary_training(pd.DataFrame(rows)))]
    assert cells == ["1,024", "s0 100 / 1.0M; s1 200 / 2.0M", "done"]
    alone = pd.DataFrame([row("plateau_probe", 0, 50, "stalled", 0.0)[0] | row("plateau_probe", 0, 50, "stalled", 0.0)[1]])
    assert [c[0] for c in training_cells(primary_training(alone))][0] == "0 (no stage passed)"


def test_the_summary_names_the_model_size_range(tmp_path):
    """A verdict holds only at the sizes the models had: the facts line gives the range of the
    trained models' active parameters (presets left out) and their widths."""
    from attnbench.report.build import facts

    data = load([write_run(tmp_path / "run")])
    sizes = dict(facts(data))["model sizes"]
    assert sizes.startswith("100,000-100,000 active parameters, width 64"), sizes
    # a run that trained no model (a kernel or preset run at a production width) adds no width
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    head = json.loads((tmp_path / "run" / "results.jsonl").read_text().splitlines()[0])
    head["config"]["model"] = {**head["config"]["model"], "d_model": 384}
    (kernels / "results.jsonl").write_text(json.dumps(head) + "\n")
    sizes = dict(facts(load([tmp_path / "run", kernels])))["model sizes"]
    assert sizes.startswith("100,000-100,000 active parameters, width 64:"), sizes


def test_building_a_report_registers_every_figure():
    """report.build alone (as the CLI imports it) sees every built-in figure, in report order."""
    import subprocess
    import sys

    code = "import attnbench.report.build\nfrom attnbench.report.style import FIGURES\nprint(' '.join(f.id for f in FIGURES))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    ids = out.stdout.split()
    assert ids[:3] == ["niah_heatmap", "niah_vs_length", "multihop"] and "serving_frontier" in ids and ids[-1] == "params", ids
    assert ids.index("scale_gap") < ids.index("serving_frontier") < ids.index("latency")


def test_the_readme_bottom_line_is_the_decision_brief():
    """README's first screen carries the decision brief's bottom line, written by report --decision
    (with_bottom_line), never typed: the block is replaced whole and the rest of the text kept."""
    from pathlib import Path

    from attnbench.report.build import BOTTOM_LINE, with_bottom_line

    text = "intro\n<!-- bottom-line: generated by python -m attnbench report --decision -->\nold line\n<!-- /bottom-line -->\nrest\n"
    new = with_bottom_line(text, ["first finding", "second finding"])
    assert new.startswith("intro\n") and new.endswith("rest\n") and "old line" not in new
    assert "- first finding\n- second finding\n" in new
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = BOTTOM_LINE.search(readme)
    assert block is not None and block.group(2).strip(), "README's bottom line is empty: run python -m attnbench report --decision"


def test_the_brief_picks_the_cheapest_design_that_holds_the_best_accuracy():
    """A design holds when the best's lower bound does not exceed its upper bound; among those, the
    fewest cache bytes per token wins, and a design with no cache figure is never picked over one with."""
    from attnbench.report.brief import _cheapest
    from attnbench.verdicts.quality import Acc

    best = Acc(198, 200, 0.99, 0.97, 1.0)
    holds = Acc(190, 200, 0.95, 0.91, 0.98)
    falls = Acc(100, 200, 0.50, 0.43, 0.57)
    cost = {"softmax": 2048.0, "hybrid": 256.0, "window": 0.0, "unknown": float("nan")}
    assert _cheapest({"softmax": best, "hybrid": holds, "window": falls}, cost) == "hybrid"
    assert _cheapest({"softmax": best, "window": falls}, cost) == "softmax"
    assert _cheapest({"softmax": best, "unknown": best}, cost) == "softmax"
    assert _cheapest({}, cost) is None


def test_the_brief_says_which_seeds_a_pick_rests_on():
    """A pick from one seed's model reads "seed 0", one pooled over three "seeds 0, 1, 2"."""
    import pandas as pd

    from attnbench.report.brief import _seeds

    rows = [
        {"metric": "niah/acc", "design": d, "context_len": 1024.0, "seed": s, "v": 1.0, "status": "measured"}
        for d, s in [("gdn", 0), ("softmax", 0), ("softmax", 1), ("softmax", 2)]
    ]
    df = pd.DataFrame(rows)
    assert _seeds(df, "gdn", 1024.0) == "seed 0" and _seeds(df, "softmax", 1024.0) == "seeds 0, 1, 2"
    assert _seeds(df, "msa", 1024.0) == "seeds —"


def test_a_band_compares_its_designs_at_one_length(tmp_path):
    """The brief's band 4K-16K: gdn and softmax were measured at 4K and 16K, a third design at 4K only.
    Compared each at its own longest length, the third (at 4K) would beat the others (at 16K) by the
    length alone; compared at the length the most designs share (4K), the cheapest that holds wins."""
    from test_claims import acc, frame, rec, trained

    from attnbench.report.brief import brief_table

    records = trained("softmax") + trained("gdn") + trained("nope")
    records += [acc("softmax", 190, 200, 4096), acc("softmax", 60, 200, 16384), acc("gdn", 188, 200, 4096), acc("gdn", 50, 200, 16384)]
    records += [acc("nope", 192, 200, 4096)]
    records += [rec(n, "memory/cache_bytes_per_token", b, "bytes") for n, b in (("softmax", 2048.0), ("gdn", 0.0), ("nope", 256.0))]
    data = frame(tmp_path, records)
    table, picks = brief_table(data.records, data.train)
    name, length, a = picks["4K-16K"]
    assert (name, length) == ("gdn", 4096.0) and a is not None and a.fraction == "188/200"
    cells = {row[0].text: row[1 + 3 + 1].text for row in table.rows}  # design -> its 4K-16K cell
    assert cells["gdn"].startswith("0.94") and "at 4K" in cells["gdn"] and "★" in cells["gdn"]
    assert "at 4K" in cells["softmax"]  # shown at the compared length, not at its longer 16K cell


def test_a_claim_line_names_one_seed_in_the_singular():
    from types import SimpleNamespace

    from attnbench.report.brief import _claim_line
    from attnbench.verdicts.rules import Verdict

    q = SimpleNamespace(id="Q-tokens")
    assert "(seed 0);" in _claim_line(q, Verdict("no difference shown", seeds=[0], headline="h"))
    assert "(seeds 0, 1);" in _claim_line(q, Verdict("no difference shown", seeds=[0, 1], headline="h"))
