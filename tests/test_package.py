"""The built wheel ships the configs and the kernels inside the attnbench package."""

from __future__ import annotations

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
        capture_output=True, text=True, timeout=600,
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
    shipped = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "attnbench" / "trained").glob("*/*") if p.name in ("final.pt", "record.json"))
    for path in shipped:
        assert path in names, f"{path} missing from {wheel.name}"
