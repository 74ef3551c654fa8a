"""Every number in experiments/*/README.md comes from the records beside it.

Generated tables must equal what attnbench/report/readme/task_models.py makes from the records now,
and every other number must be one a generated table shows, a header value, or be listed with
its reason as not from the records (attnbench/report/readme/regenerate.py).
"""

from __future__ import annotations

import json
import re

from pathlib import Path

import pandas as pd
import pytest

from attnbench.report.readme.regenerate import check, experiment_readmes
from attnbench.report.readme.registry import BLOCK

ROOT = Path(__file__).resolve().parents[1]
READMES = experiment_readmes(ROOT)


@pytest.mark.parametrize("readme, data", READMES, ids=[r.parent.name for r, _ in READMES])
def test_readme_numbers_are_the_records(readme, data):
    problems = check(readme, data)
    assert not problems, "\n".join(map(str, problems))


def test_the_check_catches_a_typed_number_and_a_stale_table(tmp_path):
    readme, data = next((r, d) for r, d in READMES if r.parent.name == "needle_4m")
    text = readme.read_text()
    typed = tmp_path / "typed.md"
    # numbers no record holds (an old README typed "6.1 GB" from /usr/bin/time; 6.1 has since turned up in the
    # records, so a number far from any measurement stands in for it); "225 s" was one sample, not the mean
    typed.write_text(text + "\nPeak resident memory 987.6 GB; the hybrid's prefill at 4M took 225 s.\n")
    found = {p.what.split(" ")[0] for p in check(typed, data)}
    assert {"987.6", "225"} <= found
    stale = tmp_path / "stale.md"
    # one count inside a generated table changed by hand: the table no longer matches its records
    count = next(
        m for b in BLOCK.finditer(text) for m in re.finditer(r"(\d+)/(\d+)", text[: b.end("body")]) if m.start() >= b.start("body")
    )
    changed = f"{int(count.group(1)) + 1}/{count.group(2)}"
    stale.write_text(text[: count.start()] + changed + text[count.end() :])
    assert any("out of date" in p.what for p in check(stale, data))


def test_every_readme_table_can_be_made_from_a_run_that_has_just_started(tmp_path):
    """`readme --check` during a run: a results file with a header and no records yet gives every
    registered table (empty), never an exception."""
    from attnbench.report.readme import task_models as readme_tables, costs as readme_tables_costs  # noqa: F401  (registers the tables)
    from attnbench.report.frame import load
    from attnbench.report.readme.regenerate import TABLES

    head = {
        "type": "header",
        "exp": "needle_4m",
        "config_hash": "h",
        "started": "2026-01-01T00:00:00+00:00",
        "hardware": {"cpu": "x"},
        "config": {},
    }
    (tmp_path / "results.jsonl").write_text(json.dumps(head) + "\n")
    data = load([tmp_path])
    for name, make in TABLES.items():
        assert isinstance(make(data), pd.DataFrame), name


def test_recorded_run_folders_have_short_names():
    """A run's folder says what it varies in a few characters (plateau_probe's sweeps name theirs
    by hydra.sweep.subdir, e.g. heads/h8_conv0_lr0.001), never Hydra's override string."""
    long = [p.relative_to(ROOT).as_posix() for p in (ROOT / "experiments").rglob("*") if p.is_dir() and len(p.name) > 40]
    assert not long, f"folder names over 40 characters: {long}"


def test_the_by_seed_table_has_no_row_for_a_length_no_seed_measured(tmp_path):
    """needle_4x/by_seed: a length every seed skipped (msa at 2K, the hybrid's whole 4K in the
    fixture) gets no row of dashes; a measured one keeps its row."""
    from report_fixtures import write_run

    from attnbench.report.frame import load
    from attnbench.report.readme.task_models import needle_by_seed

    t = needle_by_seed(load([write_run(tmp_path / "r")]))
    rows = set(zip(t["design"], t["length"]))
    assert ("msa", "1K") in rows and ("msa", "2K") not in rows and ("lightning_hybrid", "4K") not in rows


@pytest.fixture(scope="module")
def verdicts():
    """judge_all's verdicts on the repository's records, read once (the decision report's reading)."""
    from attnbench.report.readme.verdict_words import judged

    return judged(ROOT)


def test_readmes_and_docs_say_what_judge_all_says(verdicts):
    """Every "C<n> reads <verdict>" in experiments/*/README.md, attnbench/trained/README.md, docs/ and
    README.md is judge_all's verdict (issue 47, item 4)."""
    from attnbench.report.readme.verdict_words import check_verdict_words, doc_files

    assert verdicts, "no records judged"
    problems = check_verdict_words(ROOT, verdicts)
    assert not problems, "\n".join(map(str, problems))
    assert any(f.name == "README.md" and f.parent.name == "serving" for f in doc_files(ROOT))


def test_a_readme_with_another_verdict_word_fails(verdicts, tmp_path):
    from attnbench.report.readme.verdict_words import check_verdict_words, statements
    from attnbench.verdicts.rules import INCONCLUSIVE, NOT_SUPPORTED, PARTLY, SUPPORTED

    c7 = verdicts["C7"]
    wrong = next(w for w in (SUPPORTED, PARTLY, NOT_SUPPORTED, INCONCLUSIVE) if w != c7.verdict)
    prefix = next(label for label in c7.parts if label.startswith("prefix"))
    part_wrong = next(w for w in (SUPPORTED, NOT_SUPPORTED) if w != c7.parts[prefix])
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# serving\n\nC7 overall: **{c7.verdict}**, as judged.\n"
        f"C7 reads\n**{wrong}** at this scale.\n"  # the word on the next line of one sentence
        f"C7's prefix part is {part_wrong}.\n"
        f"C7 was {wrong} before the rule changed; `C7: {wrong}` in code; <!-- C7: {wrong} -->\n"
    )
    problems = check_verdict_words(ROOT, verdicts, files=[readme])
    assert [p.what.split(":")[0] for p in problems] == ["line 4", "line 6"], problems
    assert repr(wrong) in problems[0].what and repr(c7.verdict) in problems[0].what
    # the forms a statement takes: "C7: not supported", "partly" alone, two ids in one sentence
    got = statements("C7: not supported. C3 partly holds. C2 and C4 are inconclusive.", {"C2", "C3", "C4", "C7"})
    assert [(s.claim, s.word) for s in got] == [("C7", NOT_SUPPORTED), ("C3", PARTLY), ("C4", INCONCLUSIVE)]
    assert not statements("C2's rule: supported if the lower bound is high. C4 reads supported when both hold.", {"C2", "C4"})


def test_the_accuracy_table_reads_a_skip_from_its_reason_field_not_its_note():
    """skips.skip_text: a skip record's ``skip_reason`` says what its cell shows, whatever its
    note says (each note here names another reason)."""
    from attnbench.report.readme.skips import skip_text as _skip

    def shown(**fields):
        return _skip(pd.DataFrame([{"status": "skipped", "estimated_s": 600.0, "estimated_bytes": 12 * 2**30, **fields}]), [])

    assert shown(skip_reason="memory", note="budget ran out") == "skipped: needs ~12 GiB"
    assert shown(skip_reason="late", note="needs ~12.0 GiB, more than the 11.1 GiB allowed") == "skipped: budget ran out"
    assert shown(skip_reason="budget", note="needs ~12.0 GiB; budget ran out") == "skipped: ~10 min a haystack"
    assert shown(skip_reason="unlearned", estimated_s=7200.0, note="budget ran out") == "skipped: ~2 h a haystack"


def test_a_skip_recorded_before_its_reason_field_is_read_from_its_sample_and_its_runs_memory():
    """Records written before ``skip_reason`` (the committed ones are not rewritten): a skip with a
    haystack's ``sample`` is one the budget ran out for; one whose estimate is over
    eval.memory_fraction of its run's total memory (the run's header) did not fit in memory; the
    others show their estimate. None of these notes is read."""
    from attnbench.report.readme.skips import skip_text as _skip

    header = {"run_dir": "r", "started": "t0", "hardware": {"memory_bytes": 20 * 2**30}, "config": {"eval": {"memory_fraction": 0.5}}}

    def shown(**fields):
        rec = {"status": "skipped", "run_dir": "r", "run_start": "t0", "estimated_s": 600.0, "note": "", **fields}
        return _skip(pd.DataFrame([rec]), [header])

    assert shown(sample=1, estimated_bytes=2**30) == "skipped: budget ran out"
    assert shown(estimated_bytes=12 * 2**30) == "skipped: needs ~12 GiB"
    assert shown(estimated_bytes=8 * 2**30) == "skipped: ~10 min a haystack"
    assert shown(estimated_bytes=12 * 2**30, run_start="another start") == "skipped: ~10 min a haystack"  # no header: no limit known
