"""The built wheel ships the configs and the kernels inside the attnbench package."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_configs_and_kernels(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (wheel,) = tmp_path.glob("attnbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in [
        "attnbench/conf/config.yaml",
        "attnbench/conf/exp/smoke.yaml",
        "attnbench/conf/attention/msa.yaml",
        "attnbench/conf/model/tiny.yaml",
        "attnbench/kernels/__init__.py",
        "attnbench/kernels/backend.py",
        "attnbench/kernels/lightning/reference.py",
        "attnbench/kernels/msa/reference.py",
        "attnbench/kernels/sliding_window/reference.py",
        "attnbench/kernels/softmax/reference.py",
        "attnbench/kernels/tolerance.py",  # the gate and the benchmarks import it and the naive truths
        "attnbench/kernels/lightning/naive.py",
        "attnbench/kernels/msa/naive.py",
        "attnbench/kernels/sliding_window/naive.py",
        "attnbench/kernels/softmax/naive.py",
        "attnbench/model/backbone.py",
        "attnbench/bench/costmodel.py",
        "attnbench/conf/hardware/h200.yaml",
        "attnbench/__main__.py",
        "attnbench/report/templates/report.html.j2",
        "attnbench/report/figures/cost_figures.py",
        "attnbench/tracking/wandb_runs.py",
        "attnbench/tracking/dashboard.py",
    ]:
        assert needed in names, f"{needed} missing from {wheel.name}"
    for op in sorted(p.parent.name for p in (ROOT / "kernels").glob("*/reference.py")):  # every op folder (pyproject's package list)
        for part in ("__init__.py", "naive.py", "reference.py"):
            assert f"attnbench/kernels/{op}/{part}" in names, f"kernels/{op}/{part} missing from {wheel.name}"
    assert not any(n.startswith(("kernels/", "conf/")) for n in names), "top-level kernels/ or conf/ leaked into the wheel"
    # every checkpoint shipped in the repo travels with its training record
    shipped = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "attnbench" / "trained").glob("*/*")
        if p.name in ("final.pt", "partial.pt", "record.json")
    )
    for path in shipped:
        assert path in names, f"{path} missing from {wheel.name}"


def ci_test_command() -> str:
    """The command CI runs: .ci/run's own awk program, run here on README.md."""
    run = (ROOT / ".ci" / "run").read_text()
    program = re.search(r"cmd=\$\(awk '(.*?)' README\.md\)", run, re.S)
    assert program, ".ci/run no longer extracts its command with awk from README.md"
    awk = shutil.which("awk")
    if awk is None:
        pytest.skip("awk is not installed (.ci/run needs it too)")
    out = subprocess.run([awk, program.group(1), "README.md"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout


def steps(cmd: str) -> list[list[str]]:
    """The programs a `a && b && c` line runs, each as its argument vector (quotes resolved)."""
    return [shlex.split(step) for step in cmd.split("&&")]


def test_ci_lints_and_type_checks_before_the_tests():
    """What CI runs (not how the README words it): the test extra installed, then ruff's lint and
    format check over attnbench, kernels, tests and the experiments' scripts, and mypy over attnbench, kernels and the experiments' scripts, all
    before pytest (a lint or type error stops CI before the long tests)."""
    cmd = ci_test_command()
    argvs = steps(cmd)
    assert argvs and all(argvs), cmd

    def first(what: str, test) -> int:
        found = [i for i, a in enumerate(argvs) if test(a)]
        assert found, f"CI's command runs no {what}: {cmd}"
        return found[0]

    code = {"attnbench", "kernels", "tests", "experiments"}
    install = first("pip install of the test extra", lambda a: a[:3] == ["pip", "install", "-e"] and a[3:] == [".[test]"])
    lint = first("ruff check", lambda a: a[:2] == ["ruff", "check"] and code <= set(a[2:]))
    fmt = first("ruff format --check", lambda a: a[:3] == ["ruff", "format", "--check"] and code <= set(a[3:]))
    types = first("mypy", lambda a: a[0] == "mypy" and {"attnbench", "kernels", "experiments"} <= set(a[1:]))
    tests = first("pytest", lambda a: a[:3] == ["python", "-m", "pytest"])
    assert install < min(lint, fmt, types) and max(lint, fmt, types) < tests, cmd
    pyproject = (ROOT / "pyproject.toml").read_text()
    extra = next(line for line in pyproject.splitlines() if line.startswith("test = ["))
    assert '"ruff' in extra and '"mypy' in extra, extra
    hooks = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    entries = [shlex.split(h["entry"]) for repo in hooks["repos"] for h in repo["hooks"]]
    for want in (["ruff", "check"], ["ruff", "format", "--check"], ["mypy", "attnbench", "kernels", "experiments"]):
        assert want in entries, (want, entries)


def test_lint_config_catches_an_unused_import(tmp_path):
    """The project's ruff config fails on an unused import (F401), so the README command does too."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    bad = tmp_path / "unused.py"
    bad.write_text("import os\n")
    res = subprocess.run([ruff, "check", "--config", str(ROOT / "pyproject.toml"), str(bad)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "F401" in res.stdout, res.stdout + res.stderr
