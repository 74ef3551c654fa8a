"""The design registry (attnbench/designs.py) and the backend switch that reads it once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from attnbench import designs
from attnbench.bench import costmodel
from attnbench.bench.cost_terms import Cost
from attnbench.kernels import backend
from attnbench.report.style import FIXED
from attnbench.specs import Spec

ROOT = Path(__file__).resolve().parents[1]
NAMED = {p.stem: yaml.safe_load(p.read_text())[p.stem] for p in (ROOT / "conf" / "attention").glob("*.yaml")}


def test_every_registry_entry_is_complete():
    for letter, d in designs.DESIGNS.items():
        assert d.cost in costmodel.costs(), letter
        if d.layer is not None:  # buildable: a layer, a kernel op, a colour, and a single-letter conf design
            assert issubclass(d.layer_class(), nn.Module), d.layer
            assert (ROOT / "kernels" / d.op / "reference.py").exists(), d.op
            assert d.colour and NAMED[d.name]["layout"] == letter
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


# Where a design's behaviour may be written: the registry and the specs (attnbench/specs).
BEHAVIOUR_HOMES = ("attnbench/designs.py", "attnbench/specs/")


def branch_patterns() -> list[re.Pattern]:
    """Code that decides by a design's letter or op: a comparison of a letter or an op with a
    literal, a membership test of a letter in a literal string of letters (or of a letter
    literal in a layout), or of an op in a literal tuple of op names."""
    letters = "".join(designs.DESIGNS)
    names = "|".join(sorted({d.name for d in designs.DESIGNS.values()} | set(designs.kernel_ops()), key=len, reverse=True))
    return [
        re.compile(r"""\b\w*(letter|op)\s*[!=]=\s*["']"""),  # letter == "L", op != "msa", last_letter == ...
        re.compile(rf"""\b(c|ch|l|last)\s*[!=]=\s*["'][{letters}]["']"""),  # c == "W"
        re.compile(rf"""\b\w*(letter|c|ch|last)\s+(not\s+)?in\s+["'][{letters}]+["']"""),  # letter in "SM"
        re.compile(rf"""["'][{letters}]["']\s+(not\s+)?in\s+[\w.]*layout"""),  # "L" in model.layout
        re.compile(rf"""(?<!for )\bop\s+(not\s+)?in\s+\(\s*["']({names})["']"""),  # op in ("softmax", ...), not a loop
        re.compile(rf"""\bop\.startswith\(\s*["']({names})"""),  # op.startswith("msa")
    ]


def behaviour_branches(root: Path = ROOT) -> list[str]:
    """'path:line: code' of every letter or op branch in attnbench/ and kernels/ outside the registry and the specs."""
    patterns = branch_patterns()
    found = []
    for folder in ("attnbench", "kernels"):
        for p in sorted((root / folder).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            if rel.startswith(BEHAVIOUR_HOMES):
                continue
            for i, line in enumerate(p.read_text().splitlines(), 1):
                if any(pat.search(line) for pat in patterns):
                    found.append(f"{rel}:{i}: {line.strip()}")
    return found


def test_designs_are_decided_only_in_the_registry_and_the_specs():
    """A design's behaviour (its inputs, call, truth, cache, costs) is its spec's: no module
    branches on a letter or an op (README "Add a design")."""
    assert behaviour_branches() == []


@pytest.mark.parametrize(
    "line",
    [
        'if letter == "S":',
        '    elif op == "msa":',
        'w = sh.window if op == "sliding_window" else 0',
        'if c in "SMD":',
        'if "L" not in self.layout[:-1]:',
        'if op in ("softmax", "sliding_window"):',
        'return "msa" if op.startswith("msa") else op',
    ],
)
def test_a_branch_outside_the_registry_is_found(tmp_path, line):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "attnbench" / "specs").mkdir(parents=True)
    (tmp_path / "attnbench" / "bench.py").write_text(f"x = 1\n{line}\n")
    (tmp_path / "attnbench" / "specs" / "toy.py").write_text(f"{line}\n")  # a spec may
    assert behaviour_branches(tmp_path) == [f"attnbench/bench.py:2: {line.strip()}"]


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


# --- a design added in one place ----------------------------------------------------------


class ToySpec(Spec):
    """A toy design: full causal softmax written out (its call is its formula), one K and V per token."""

    name, op = "toy", "toy"

    def token_elements(self, arch):
        return 2 * arch.n_kv_heads * arch.head_dim

    def costs(self):
        return {"toy": lambda phase, n, a, B, e, impl: Cost().add("toy", 4 * B * a.n_heads * a.head_dim * n * n, e * B * n, 1)}

    def inputs(self, sh, rnd):
        return dict(q=rnd(sh.B, sh.H, sh.T, sh.D), k=rnd(sh.B, sh.Hkv, sh.keys, sh.D), v=rnd(sh.B, sh.Hkv, sh.keys, sh.D))

    def call(self, x, sh, backend, **kw):
        return self.naive(x, sh)

    def naive(self, x, sh):
        q, k, v = x["q"], x["k"], x["v"]
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))  # (B, H, S, D)
        s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5  # (B, H, T, S)
        T, S = s.shape[-2:]
        causal = torch.ones(T, S, dtype=torch.bool, device=s.device).tril(S - T)  # query t sees keys <= S - T + t
        return (s.masked_fill(~causal, float("-inf")).softmax(-1) @ v,)


TOY_SPEC = ToySpec()


def test_a_new_design_is_one_entry_and_one_spec(monkeypatch):
    """Registered at run time (one Design, one spec), the toy passes the kernel gate and is
    costed and sized by the cost model and the memory model, with no other module changed."""
    from attnbench.bench import gate, memory
    from attnbench.bench.presets import Arch

    toy = designs.Design(letter="T", name="toy", layer=None, op="toy", cost="toy", glue_ops=0, spec=f"{__name__}:TOY_SPEC")
    monkeypatch.setitem(designs.DESIGNS, "T", toy)
    assert designs.spec_of("T") is TOY_SPEC and designs.spec_of_op("toy") is TOY_SPEC
    passed, worst = gate.check("T", device=torch.device("cpu"))
    assert passed and worst < 1e-5
    arch = Arch(name="toy", layout="TT", d_model=64, n_heads=4, n_kv_heads=2, head_dim=16)
    assert memory.cache_bytes(arch, 100, "float32") == 2 * 100 * 2 * 2 * 16 * 4
    assert costmodel.op_cost("toy", "prefill", 8, arch).flops == 4 * 4 * 16 * 64
