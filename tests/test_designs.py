"""The design registry (attnbench/designs.py) and the backend switch that reads it once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml

from attnbench import designs
from attnbench.bench import costmodel
from attnbench.kernels import backend
from attnbench.model import ATTENTION
from attnbench.report.style import FIXED

ROOT = Path(__file__).resolve().parents[1]
NAMED = {p.stem: yaml.safe_load(p.read_text())[p.stem] for p in (ROOT / "conf" / "attention").glob("*.yaml")}


def test_every_registry_entry_is_complete():
    for letter, d in designs.DESIGNS.items():
        assert d.cost in costmodel.COSTS, letter
        if d.layer is not None:  # buildable: a layer, a kernel op, a colour, and a single-letter conf design
            assert ATTENTION[letter] is d.layer_class()
            assert (ROOT / "kernels" / d.op / "reference.py").exists(), d.op
            assert d.colour and NAMED[d.name]["layout"] == letter
    assert set(ATTENTION) == set(designs.LAYOUT_LETTERS)
    assert set(backend.OPS) == {d.op for d in designs.DESIGNS.values() if d.op}
    with pytest.raises(ValueError, match="one of"):
        designs.of("Q")


def test_the_letter_mapping_is_written_only_in_the_registry():
    """A dict from a letter to a design name ("S": "softmax") anywhere else is a second copy."""
    names = "|".join(d.name for d in designs.DESIGNS.values())
    pattern = re.compile(rf"""["'][A-Z]["']\s*:\s*["']({names})["']""")
    copies = [
        str(p.relative_to(ROOT))
        for folder in ("attnbench", "kernels")
        for p in (ROOT / folder).rglob("*.py")
        if pattern.search(p.read_text())
    ]
    assert copies == []


def test_every_named_design_has_its_own_fixed_style():
    assert set(NAMED) <= set(FIXED)
    styles = [FIXED[n] for n in NAMED]
    assert len(set(styles)) == len(styles)  # no two named designs look alike
    assert all(colour.upper() != "#F0E442" for colour, _ in styles)  # yellow does not read on white


def test_backend_env_is_read_once_until_reset(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setenv("ATTNBENCH_BACKEND", "triton")
    backend.reset()
    try:
        assert backend.choose("lightning", "auto", cpu) == "triton"
        monkeypatch.setenv("ATTNBENCH_BACKEND", "reference")
        assert backend.choose("lightning", "auto", cpu) == "triton"  # decided once, not per call
        with backend.force("reference"):
            assert backend.choose("lightning", "auto", cpu) == "reference"
        backend.reset()
        assert backend.choose("lightning", "auto", cpu) == "reference"
        monkeypatch.setenv("ATTNBENCH_BACKEND", "cuda-magic")
        backend.reset()
        with pytest.raises(ValueError, match="ATTNBENCH_BACKEND"):
            backend.choose("lightning", "auto", cpu)
    finally:
        monkeypatch.delenv("ATTNBENCH_BACKEND")
        backend.reset()


def test_backend_label_names_what_ran():
    assert backend.label({"softmax": "reference", "lightning": "reference"}) == "reference"
    assert backend.label({"softmax": "reference", "lightning": "triton"}) == "lightning:triton,softmax:reference"
    assert backend.for_layout("LLLS", "auto", torch.device("cpu")) == {"lightning": "reference", "softmax": "reference"}
