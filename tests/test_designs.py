"""The design registry (attnbench/designs.py) and the backend switch that reads it once."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from hydra.core.config_store import ConfigStore
from torch import nn

from attnbench.cli import main as cli, preflight
from attnbench import designs
from attnbench.bench import costmodel
from attnbench.bench.cost_terms import Cost
from attnbench.kernels import backend
from attnbench.report.style import FIXED
from attnbench.specs import Spec

from helpers import compose_cfg

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
    copies = [str(p.relative_to(ROOT)) for folder in CODE for p in (ROOT / folder).rglob("*.py") if pattern.search(p.read_text())]
    assert copies == []


# The code the guards below read: the package, its kernels and the experiments' scripts.
CODE = ("attnbench", "kernels", "experiments")
# Where a design's behaviour may be written: the registry and the specs (attnbench/specs).
BEHAVIOUR_HOMES = ("attnbench/designs.py", "attnbench/specs/", "attnbench/verdicts/claims/")  # claims name designs by right


def branch_patterns() -> list[re.Pattern]:
    """Code that decides by a design's letter or op: a comparison of a letter or an op with a
    literal, a membership test of a letter in a literal string of letters (or of a letter
    literal in a layout), or of an op in a literal tuple of op names; and outside the claims, a
    comparison with a design's name or a look-up of one (`d == "softmax"`, `cfg.attention["msa"]`)."""
    letters = "".join(designs.DESIGNS)
    names = "|".join(sorted({d.name for d in designs.DESIGNS.values()} | set(designs.kernel_ops()), key=len, reverse=True))
    # every design a config names (conf/attention/), the registry's and the ops' names
    named = {p.stem for p in (ROOT / "conf" / "attention").glob("*.yaml")}
    designs_ = "|".join(sorted(named | {d.name for d in designs.DESIGNS.values()} | set(designs.kernel_ops()), key=len, reverse=True))
    return [
        re.compile(r"""\b\w*(letter|op)\s*[!=]=\s*["']"""),  # letter == "L", op != "msa", last_letter == ...
        re.compile(rf"""\b(c|ch|l|last)\s*[!=]=\s*["'][{letters}]["']"""),  # c == "W"
        re.compile(rf"""\b\w*(letter|c|ch|last)\s+(not\s+)?in\s+["'][{letters}]+["']"""),  # letter in "SM"
        re.compile(rf"""["'][{letters}]["']\s+(not\s+)?in\s+[\w.]*layout"""),  # "L" in model.layout
        re.compile(rf"""(?<!for )\bop\s+(not\s+)?in\s+\(\s*["']({names})["']"""),  # op in ("softmax", ...), not a loop
        re.compile(rf"""\bop\.startswith\(\s*["']({names})"""),  # op.startswith("msa")
        re.compile(rf"""[!=]=\s*["']({designs_})["']|["']({designs_})["']\s*[!=]="""),  # d == "softmax"
        re.compile(rf"""(?<!for )\b\w+\s+(not\s+)?in\s*[(\[{{]\s*["']({designs_})["']"""),  # d in ("softmax", ...), not a loop
        re.compile(rf"""\[\s*["']({designs_})["']\s*\]"""),  # cfg.attention["sliding_window"]
    ]


def behaviour_branches(root: Path = ROOT) -> list[str]:
    """'path:line: code' of every letter or op branch in CODE outside the registry, the specs and the claims."""
    patterns = branch_patterns()
    found = []
    for folder in CODE:
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


def test_the_kernel_experiments_time_every_registered_op_by_default():
    from attnbench.config.schema import KernelsConfig

    assert [op.value for op in KernelsConfig().ops] == list(designs.kernel_ops())


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
        '        if d == "softmax":',
        'if name in ("lightning_hybrid", "swa_hybrid"):',
        'w = cfg.attention["sliding_window"].window',
    ],
)
def test_a_branch_outside_the_registry_is_found(tmp_path, line):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "attnbench" / "specs").mkdir(parents=True)
    (tmp_path / "attnbench" / "verdicts" / "claims").mkdir(parents=True)
    (tmp_path / "experiments" / "probe").mkdir(parents=True)
    (tmp_path / "attnbench" / "bench.py").write_text(f"x = 1\n{line}\n")
    (tmp_path / "experiments" / "probe" / "run.py").write_text(f"{line}\n")  # a script is code too
    (tmp_path / "attnbench" / "specs" / "toy.py").write_text(f"{line}\n")  # a spec may
    (tmp_path / "attnbench" / "verdicts" / "claims" / "c9.py").write_text(f"{line}\n")  # a claim may
    assert behaviour_branches(tmp_path) == [f"attnbench/bench.py:2: {line.strip()}", f"experiments/probe/run.py:1: {line.strip()}"]


def test_every_named_design_has_its_own_fixed_style():
    assert set(NAMED) <= set(FIXED)
    styles = [FIXED[n] for n in NAMED]
    assert len(set(styles)) == len(styles)  # no two named designs look alike
    assert all(colour.upper() != "#F0E442" for colour, _ in styles)  # yellow does not read on white
    colours = [c.upper() for c, _ in FIXED.values()]
    assert len(set(colours)) == len(colours)  # one colour per design, not only per (colour, marker)
    for name, family in designs.VARIANTS.items():  # one marker per family
        assert FIXED[name][1] == FIXED[family][1], name


def test_the_palette_has_room_for_twenty_designs_more_than_named():
    from attnbench.report.style import style

    palette = [c.upper() for c in designs.PALETTE]
    assert len(set(palette)) == len(palette) >= 20
    extra = [f"new_design_{i}" for i in range(len(palette) - len(FIXED))]  # designs a config names, none registered
    colours = [style(n, extra)[0].upper() for n in extra] + [c.upper() for c, _ in FIXED.values()]
    assert len(set(colours)) == len(colours)


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
# The toy design (letter T): its op, its layer with its cache, and its spec, all in this module;
# registered by one Design entry (the fixture), its attention config a Hydra option (no YAML file).
# Nothing else in attnbench knows it, yet smoke, kv_memory and the kernel gate run on it.


def causal_mean(v: torch.Tensor, state: torch.Tensor | None = None, seen: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The toy's op: each position's output is the mean of the values up to it (attention with
    equal weights). v (B, H, T, D) continues ``seen`` earlier tokens whose values sum to ``state``
    (B, H, D, fp32). Returns (y (B, H, T, D), the new state)."""
    c = v.float().cumsum(2)
    if state is not None:
        c = c + state[:, :, None]
    n = torch.arange(seen + 1, seen + v.shape[2] + 1, device=v.device)
    return (c / n[:, None]).to(v.dtype), c[:, :, -1]


class ToyCache:
    """The toy layer's cache: the running sum of its values, (B, H, D) in fp32, whatever the length."""

    def __init__(self):
        self.state: torch.Tensor | None = None
        self.length = 0

    def reserve(self, n: int) -> None:
        pass  # a fixed size

    def snapshot(self):
        return self.state, self.length  # the state is replaced, never written in place

    def restore(self, snap) -> None:
        self.state, self.length = snap

    def nbytes(self) -> int:
        return 0 if self.state is None else self.state.numel() * self.state.element_size()


class ToyAttention(nn.Module):
    """The toy layer: values projected per head, each position's output the mean of the values so far."""

    def __init__(self, cfg, design, layer: int):
        super().__init__()
        self.H, self.D = cfg.n_heads, cfg.head_dim
        self.v = nn.Linear(cfg.d_model, self.H * self.D, bias=False)
        self.o = nn.Linear(self.H * self.D, cfg.d_model, bias=False)

    def new_cache(self) -> ToyCache:
        return ToyCache()

    def forward(self, x: torch.Tensor, cache: ToyCache | None = None):
        B, T, _ = x.shape
        v = self.v(x).view(B, T, self.H, self.D).transpose(1, 2)  # (B, H, T, D)
        if cache is None:
            y, _ = causal_mean(v)
        else:
            y, cache.state = causal_mean(v, cache.state, cache.length)
            cache.length += T
        return self.o(y.transpose(1, 2).reshape(B, T, self.H * self.D)), x.new_zeros(())

    def fill_cache(self, x: torch.Tensor, cache: ToyCache) -> None:
        self(x, cache)  # the state needs every value: the same pass, its output unread


class ToySpec(Spec):
    """The toy's spec: its op and naive truth, its cache (a fixed fp32 state of H x D), its cost."""

    name, op = "toy", "toy"
    grows, state = False, True

    def token_elements(self, arch):
        return 0

    def layer_bytes(self, arch, n, e, state_e):
        return arch.n_heads * arch.head_dim * state_e if n else 0

    def costs(self):
        def cost(phase, n, a, B, e, impl):
            T = n if phase == "prefill" else 1
            return Cost().add("toy", 2 * B * a.n_heads * a.head_dim * T, 2 * e * B * a.n_heads * a.head_dim * T, 1)

        return {"toy": cost}

    def inputs(self, sh, rnd):
        return dict(v=rnd(sh.B, sh.H, sh.keys, sh.D))

    def call(self, x, sh, backend, **kw):
        """The T queries are the last of the S keys: the earlier keys enter as the state (as in decode)."""
        past, v = x["v"][:, :, : sh.keys - sh.T], x["v"][:, :, sh.keys - sh.T :]
        return (causal_mean(v, past.float().sum(2), past.shape[2])[0],)

    def naive(self, x, sh):
        """Equal attention weights over the keys each query sees, as a T x S matrix."""
        v = x["v"]
        S = v.shape[2]
        seen = torch.ones(sh.T, S, dtype=v.dtype, device=v.device).tril(S - sh.T)  # query t sees keys <= S - T + t
        return ((seen / seen.sum(-1, keepdim=True)) @ v,)


TOY_SPEC = ToySpec()


@pytest.fixture
def toy(monkeypatch):
    """The toy design registered for one test: one entry naming its layer and its spec, and its
    attention config as the option `toy` of the `attention` group (what conf/attention/toy.yaml
    would hold), which a run adds with the override +attention=toy."""
    design = designs.Design(
        letter="T", name="toy", layer=f"{__name__}:ToyAttention", op="toy", cost="toy", glue_ops=0, spec=f"{__name__}:TOY_SPEC"
    )
    monkeypatch.setitem(designs.DESIGNS, "T", design)
    store = ConfigStore.instance()
    monkeypatch.setitem(store.repo, "attention", dict(store.repo.get("attention", {})))  # the option is gone after the test
    store.store(group="attention", name="toy", node={"toy": {"name": "toy", "layout": "T", "description": "the toy design"}})
    return design


def run_toy(exp: str, tmp_path, *overrides: str) -> list[dict]:
    """``+exp=<exp> design=toy`` run as the CLI runs it (tests/test_experiments.py); its records."""
    run = tmp_path / exp
    cfg = compose_cfg(
        [f"+exp={exp}", "+attention=toy", "design=toy", *overrides, "threads=1", "wandb.mode=disabled", "report.enabled=false"]
    )
    threads = torch.get_num_threads()
    try:
        preflight.prepare(cfg, run)
        cli.run(cfg, run)
    finally:
        torch.set_num_threads(threads)  # run() sets the exp's threads for the whole process
    lines = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert lines[-1]["type"] == "footer" and lines[-1]["status"] == "completed", lines[-1]
    return [r for r in lines if r["type"] == "record"]


def test_a_new_design_is_one_entry_one_layer_and_one_spec(toy, tmp_path):
    """Registered at run time, the toy passes the kernel gate, trains a step and agrees with its
    own prefill and decode (+exp=smoke), its cache objects hold the bytes its formula says
    (+exp=kv_memory), and the cost model costs it, with no module of attnbench changed."""
    from attnbench.bench import gate, memory
    from attnbench.bench.presets import Arch

    assert designs.spec_of("T") is TOY_SPEC and designs.spec_of_op("toy") is TOY_SPEC
    passed, worst = gate.check("T", device=torch.device("cpu"))
    assert passed and worst < 1e-5

    smoke = {r["metric"]: r for r in run_toy("smoke", tmp_path) if r["design"] == "toy"}
    assert {r["layout"] for r in smoke.values()} == {"TTTTTTTT"}
    assert smoke["smoke/train_loss"]["status"] == "measured" and smoke["smoke/grad_norm"]["value"] > 0
    for path in ("prefill", "decode"):
        assert smoke[f"smoke/{path}_vs_full_rel_err"]["status"] == "measured", smoke[f"smoke/{path}_vs_full_rel_err"]
    assert smoke["cache/bytes_per_layer"]["value"] == [2 * 4 * 8 * 4] * 8  # B x H x D fp32 a layer (conf/exp/smoke.yaml)

    checks = [r for r in run_toy("kv_memory", tmp_path, "bench.presets=[minimax_text01]") if r["design"] == "toy"]
    assert {(r["dtype"], r["context_len"]) for r in checks} == {(dt, n) for dt in ("float32", "bfloat16") for n in (100, 164)}
    for r in checks:  # the bytes the caches hold after a chunked prefill, one sequence, equal to the formula
        assert r["status"] == "measured" and r["per_layer"] == r["per_layer_analytic"] == [4 * 8 * 4] * 8, r

    arch = Arch(name="toy", layout="TT", d_model=64, n_heads=4, n_kv_heads=2, head_dim=16)
    assert memory.cache_bytes(arch, 100, "bfloat16") == 2 * 4 * 16 * 4  # a fixed fp32 state, whatever the dtype and length
    assert costmodel.op_cost("toy", "prefill", 8, arch).flops == 2 * 4 * 16 * 8
