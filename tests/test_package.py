"""The built wheel ships the configs and the kernels inside the attnbench package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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
        "attnbench/report/figures.py",
        "attnbench/tracking.py",
        "attnbench/dashboard.py",
    ]:
        assert needed in names, f"{needed} missing from {wheel.name}"
    assert not any(n.startswith(("kernels/", "conf/")) for n in names), "top-level kernels/ or conf/ leaked into the wheel"
    # every checkpoint shipped in the repo travels with its training record
    shipped = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "attnbench" / "trained").glob("*/*")
        if p.name in ("final.pt", "partial.pt", "record.json")
    )
    for path in shipped:
        assert path in names, f"{path} missing from {wheel.name}"


def readme_test_command() -> str:
    """The bash block after <!-- test-command --> in README.md, as .ci/run extracts it."""
    text = (ROOT / "README.md").read_text().split("<!-- test-command -->", 1)[1]
    return text.split("```bash\n", 1)[1].split("```", 1)[0]


def test_readme_test_command_lints_and_type_checks():
    """CI runs exactly this block: lint (ruff) and types (mypy) before the tests, with the test extra."""
    cmd = readme_test_command()
    steps = [s.strip() for s in cmd.split("&&")]
    assert 'pip install -e ".[test]"' in steps, cmd
    lint, fmt, types, tests = (
        steps.index("ruff check attnbench kernels tests"),
        steps.index("ruff format --check attnbench kernels tests"),
        steps.index("mypy attnbench kernels"),
        next(i for i, s in enumerate(steps) if s.startswith("python -m pytest")),
    )
    assert lint < tests and fmt < tests and types < tests, cmd  # a lint or type error stops CI before the (long) tests
    pyproject = (ROOT / "pyproject.toml").read_text()
    extra = next(line for line in pyproject.splitlines() if line.startswith("test = ["))
    assert '"ruff' in extra and '"mypy' in extra, extra
    hooks = (ROOT / ".pre-commit-config.yaml").read_text()
    assert "entry: ruff check" in hooks and "entry: ruff format --check" in hooks and "entry: mypy attnbench kernels" in hooks


def test_lint_config_catches_an_unused_import(tmp_path):
    """The project's ruff config fails on an unused import (F401), so the README command does too."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    bad = tmp_path / "unused.py"
    bad.write_text("import os\n")
    res = subprocess.run([ruff, "check", "--config", str(ROOT / "pyproject.toml"), str(bad)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "F401" in res.stdout, res.stdout + res.stderr
