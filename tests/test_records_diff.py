"""A run recorded from a dirty checkout stores its diff beside its records (issue 47, item 3): the
header names the file (``git.diff``), secrets in the diff are masked; a clean checkout writes none."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from attnbench.records import lines
from attnbench.records.write import Recorder

SECRET = "hf_abcdefghijklmnopqrstuvwx"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A scratch repository with one commit, standing in for the attnbench checkout."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    git(r, "config", "user.email", "t@example.com")
    git(r, "config", "user.name", "t")
    (r / "model.py").write_text("width = 64\n")
    git(r, "add", "model.py")
    git(r, "commit", "-q", "-m", "first")
    monkeypatch.setattr(lines, "CHECKOUT", r)
    monkeypatch.setattr(lines, "imported_elsewhere", lambda: [])  # (the package itself is not in the scratch repo)
    return r


def header(path: Path) -> dict:
    return json.loads(path.read_text().splitlines()[0])


def test_a_dirty_checkout_stores_its_diff_beside_the_records(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    (repo / "model.py").write_text(f"width = 128\ntoken = '{SECRET}'\n")
    run = tmp_path / "run"
    Recorder(run / "results.jsonl", "smoke", {}, "h0")
    g = header(run / "results.jsonl")["git"]
    commit = git(repo, "rev-parse", "HEAD").strip()
    assert g["commit"] == commit and g["dirty"] is True
    assert g["diff"] == f"git-{commit[:12]}.diff"
    diff = (run / g["diff"]).read_text()
    assert "+width = 128" in diff and "-width = 64" in diff
    assert SECRET not in diff and "***redacted***" in diff


def test_a_restart_with_other_edits_keeps_the_first_diff(repo, tmp_path):
    run = tmp_path / "run"
    (repo / "model.py").write_text("width = 128\n")
    Recorder(run / "results.jsonl", "smoke", {}, "h0")
    (repo / "model.py").write_text("width = 256\n")
    Recorder(run / "results.jsonl", "smoke", {}, "h0")
    heads = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines() if '"header"' in x]
    names = [h["git"]["diff"] for h in heads]
    assert len(set(names)) == 2
    assert "+width = 128" in (run / names[0]).read_text() and "+width = 256" in (run / names[1]).read_text()


def test_a_clean_checkout_writes_no_diff(repo, tmp_path):
    run = tmp_path / "run"
    Recorder(run / "results.jsonl", "smoke", {}, "h0")
    g = header(run / "results.jsonl")["git"]
    assert g["dirty"] is False and "diff" not in g
    assert not list(run.glob("git-*.diff"))


def test_rewritten_records_leave_a_checkout_clean_and_code_does_not(repo, tmp_path):
    """A rerun replaces its tracked records (run.sh removes and rewrites its run folder) and the report:
    outputs, not code, so the header still says clean; an edit to code under experiments/ is dirty."""
    sub = repo / "attnbench" / "records"
    sub.mkdir(parents=True)
    run = repo / "experiments" / "x" / "run"
    run.mkdir(parents=True)
    (run / "results.jsonl").write_text("{}\n")
    (run / "run.log").write_text("old\n")
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run / "summary.md").write_text("old\n")
    (repo / "reports").mkdir()
    (repo / "reports" / "report.html").write_text("old")
    (repo / "experiments" / "x" / "probe.py").write_text("n = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "records")
    lines.CHECKOUT = sub  # the package's own folder, as in the real checkout (monkeypatch restores it)
    (run / "results.jsonl").unlink()
    (run / "run.log").write_text("new\n")
    (run / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (run / "summary.md").write_text("new\n")
    (repo / "reports" / "report.html").write_text("new")
    assert lines.git_commit()["dirty"] is False
    (repo / "experiments" / "x" / "probe.py").write_text("n = 2\n")
    assert lines.git_commit()["dirty"] is True
    out = tmp_path / "out"
    out.mkdir()
    diff = (out / lines.with_diff(lines.git_commit(), out)["diff"]).read_text()
    assert "+n = 2" in diff and "report.html" not in diff and "results.jsonl" not in diff


def test_a_package_part_imported_from_another_checkout_makes_the_run_dirty(tmp_path, monkeypatch):
    """A second worktree run with the first one's editable install imports kernels/ and conf/ from
    the first: its own commit does not say which code ran, so the header says dirty and names it."""
    assert lines.imported_elsewhere() == []  # this checkout: everything from here
    monkeypatch.setattr(lines, "CHECKOUT", tmp_path / "other" / "attnbench" / "records")
    found = lines.imported_elsewhere()
    assert [f.split(" from ")[0] for f in found] == ["attnbench.kernels", "attnbench.conf"]
    monkeypatch.setattr(lines, "CHECKOUT", lines.Path(lines.__file__).resolve().parent)
    g = lines.git_commit()
    assert "elsewhere" not in g
