"""Provenance: a verdict reads only models shipped in attnbench/trained/, and no record's source leaves the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from attnbench.basics import SHIPPED
from attnbench.verdicts import shipped
from attnbench.verdicts.claims import judge
from attnbench.verdicts.rules import Verdict

ROOT = Path(__file__).resolve().parents[1]
KEY_A, KEY_B, KEY_C = "a" * 16, "b" * 16, "c" * 16


def _records(run_dir: str, source: str, n_acc: int, design: str) -> list[dict]:
    """A run's parameter record naming its model (as runs write it) and n accuracy records that do not."""
    base = {"exp": "multihop", "design": design, "seed": 0, "run_dir": run_dir}
    return [{**base, "metric": "params/total", "source": source}] + [{**base, "metric": "multihop/acc", "v": 1.0} for _ in range(n_acc)]


@pytest.fixture
def trained(tmp_path):
    """A shipped folder: softmax-aaaa… finished, softmax-cccc… a partial."""
    (tmp_path / f"softmax-{KEY_A}").mkdir()
    (tmp_path / f"softmax-{KEY_A}" / "final.pt").write_bytes(b"")
    (tmp_path / f"softmax-{KEY_C}").mkdir()
    (tmp_path / f"softmax-{KEY_C}" / "partial.pt").write_bytes(b"")
    return tmp_path


def test_unshipped_models_are_set_aside_and_named(trained):
    df = pd.DataFrame(
        _records("r1", f"attnbench/trained/softmax-{KEY_A}/record.json", 3, "softmax")
        + _records("r2", f"cache: lightning_hybrid-{KEY_B}/record.json", 2, "lightning_hybrid")
        + _records("r3", f"attnbench/trained/softmax-{KEY_C}/record.json", 1, "softmax")
        + [{"exp": "scale", "design": "msa", "key": KEY_B, "metric": "scale/acc", "seed": 0, "run_dir": "r4"}]
        + [{"exp": "crossover", "design": "softmax", "metric": "op/ms", "seed": 0, "run_dir": "r5"}]  # no trained model
    )
    kept, aside = shipped.split(df, root=trained)
    assert aside == {f"lightning_hybrid-{KEY_B}": 3, f"softmax-{KEY_C}": 2, f"msa-{KEY_B}": 1}
    assert list(kept["run_dir"]) == ["r1"] * 4 + ["r5"]
    assert f"lightning_hybrid-{KEY_B} (3 records)" in shipped.describe(aside)


def test_a_verdict_changed_by_unshipped_models_names_them(monkeypatch):
    """judge_all judges without them, and where they would change the verdict, says so in its evidence."""
    aside = {f"softmax-{KEY_B}": 5}
    df = pd.DataFrame([{"exp": "x", "design": "softmax", "metric": "m", "seed": 0, "run_dir": "r", "v": 1.0}])
    monkeypatch.setattr(shipped, "split", lambda d: (d.iloc[:0], aside))
    claim = judge.Claim("CX", "a claim", [], "x", {}, "rule", lambda d, t, tr: Verdict("supported" if len(d) else "not yet measured"))
    monkeypatch.setattr(judge, "CLAIMS", [claim])
    [(_, verdict)] = judge.judge_all(df)
    assert verdict.verdict == "not yet measured"
    assert any(f"softmax-{KEY_B} (5 records)" in e and "would read supported" in e for e in verdict.evidence)
    same = judge.Claim("CY", "a claim", [], "x", {}, "rule", lambda d, t, tr: Verdict("supported"))
    monkeypatch.setattr(judge, "CLAIMS", [same])
    [(_, verdict)] = judge.judge_all(df)
    assert not any("set aside" in e for e in verdict.evidence)  # named only where they change the verdict


def test_a_machine_path_source_is_caught():
    df = pd.DataFrame({"source": ["/root/.cache/attnbench/checkpoints/x/record.json", "cache: /tmp/x", "attnbench/trained/x"]})
    assert len(shipped.leaving(df)) == 2


def test_the_shipped_folder_loads_without_torch():
    code = "import sys, attnbench.verdicts.shipped, attnbench.verdicts.claims.judge; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.fixture(scope="module")
def real():
    from attnbench.report.build import experiment_dirs
    from attnbench.report.frame import load

    dirs = experiment_dirs(ROOT)
    if not dirs:
        pytest.skip("no recorded experiments")
    return load(dirs).records


def test_no_recorded_source_leaves_the_repository(real):
    out = shipped.leaving(real)
    assert out.empty, f"records naming a machine path: {sorted(set(out['run_dir']))}"


def test_every_trained_model_a_verdict_reads_is_shipped(real):
    """What judge_all judges (split's kept records) names only finished models in attnbench/trained/, and every
    accuracy record names its model (one without a name could hide an unshipped one)."""
    kept, aside = shipped.split(real)
    named = shipped.models(kept)
    assert all(shipped.is_shipped(m) for m in named.dropna().unique())
    acc = kept["metric"].isin(["multihop/acc", "niah/acc", "scale/acc"])
    assert named[acc].notna().all(), sorted(set(kept.loc[acc & named.isna(), "run_dir"]))
    assert SHIPPED == ROOT / "attnbench" / "trained"


def test_a_run_from_uncommitted_code_is_set_aside_and_named_where_it_changes_the_verdict(monkeypatch, trained):
    """COMMITTED_RULE: records whose header says dirty with no diff are not judged; a run that would change the
    reading is named, one that would not is not; a dirty run with its diff stored is judged."""
    base = {"exp": "x", "design": "softmax", "metric": "m", "seed": 0, "source": f"attnbench/trained/softmax-{KEY_A}/record.json"}
    df = pd.DataFrame(
        [{**base, "run_dir": "experiments/x/clean", "checkout": "committed", "v": 1.0}]
        + [{**base, "run_dir": "experiments/x/with_diff", "checkout": "diff", "v": 1.0}]
        + [{**base, "run_dir": "/abs/experiments/x/dirty", "checkout": "uncommitted", "v": 0.0} for _ in range(3)]
    )
    monkeypatch.setattr(shipped, "SHIPPED", trained)
    monkeypatch.setattr(shipped, "is_shipped", lambda f, root=trained: (trained / f / "final.pt").is_file())
    kept, aside, dirty = judge.readable(df)
    assert list(kept["run_dir"]) == ["experiments/x/clean", "experiments/x/with_diff"] and not aside and len(dirty) == 3
    assert shipped.runs(dirty) == {"x/dirty": 3}

    def mean_is_one(d, t, tr):
        return Verdict("supported" if len(d) and d["v"].mean() == 1.0 else "not supported")

    monkeypatch.setattr(judge, "CLAIMS", [judge.Claim("CX", "a claim", [], "x", {}, "rule", mean_is_one)])
    [(_, v)] = judge.judge_all(df)
    assert v.verdict == "supported"
    assert any("x/dirty (3 records)" in e and "would read not supported" in e for e in v.evidence)
    monkeypatch.setattr(judge, "CLAIMS", [judge.Claim("CY", "a claim", [], "x", {}, "rule", lambda d, t, tr: Verdict("supported"))])
    [(_, v)] = judge.judge_all(df)
    assert not any("uncommitted" in e for e in v.evidence)


def test_no_verdict_reads_a_run_made_from_uncommitted_code(real):
    """The recorded runs: what judge_all judges holds no run whose header says dirty without its diff (the frame's
    checkout column is there to be read)."""
    assert "checkout" in real.columns and real["checkout"].notna().any()
    kept, _, _ = judge.readable(real)
    assert not (kept["checkout"] == shipped.UNCOMMITTED).any()


def test_the_brief_reads_what_the_verdicts_read(monkeypatch):
    """The decision brief's table and bottom line come from judge.readable's records: a run from uncommitted code
    (or an unshipped model) the verdicts set aside is set aside there too, and the brief's note says so."""
    from attnbench.report import brief as brief_mod

    base = {"exp": "needle_4m", "design": "softmax", "seed": 0, "metric": "niah/acc", "v": 1.0}
    df = pd.DataFrame(
        [{**base, "run_dir": "experiments/x/clean", "checkout": "committed"}]
        + [{**base, "run_dir": "experiments/x/dirty", "checkout": "uncommitted"}]
    )
    seen: list[pd.DataFrame] = []
    monkeypatch.setattr(brief_mod, "brief_table", lambda d, train: (seen.append(d), (None, {}))[1])
    got = brief_mod.brief(df, pd.DataFrame(), [(SimpleNamespace(id="C1"), Verdict("supported"))])
    assert len(seen) == 1 and set(seen[0]["run_dir"]) == {"experiments/x/clean"}
    assert got is not None and "1 records of runs from uncommitted code" in got.note
