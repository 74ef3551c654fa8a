"""A design with a setting of its own is a spec (its settings and its cost), a layer and a config:
the fixture registers a throwaway one (letter Z) from this module alone, its setting ``gain``
declared here, and smoke runs on it with the setting set, while no file of attnbench changes."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pytest
import torch
from hydra.core.config_store import ConfigStore
from torch import nn

from attnbench import designs
from attnbench.bench.cost_terms import Cost
from attnbench.cli import main as cli, preflight
from attnbench.config import ConfigError, schema, validate
from attnbench.specs import Spec
from attnbench.specs.settings import setting
from attnbench.training.start import checkpoint_key

from helpers import compose_cfg


@dataclass
class GainSettings:
    gain: float = setting(1.0, min=0, help="factor on the layer's output")


class GainCache:
    """Nothing to keep: each token's output reads that token only."""

    def reserve(self, n: int) -> None:
        pass

    def snapshot(self):
        return None

    def restore(self, snap) -> None:
        pass

    def nbytes(self) -> int:
        return 0


class GainAttention(nn.Module):
    """Each position's values, projected back and scaled by the design's own setting."""

    def __init__(self, cfg, design, layer: int):
        super().__init__()
        self.gain = float(design.gain)
        self.v = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def new_cache(self) -> GainCache:
        return GainCache()

    def forward(self, x: torch.Tensor, cache: GainCache | None = None):
        return self.gain * self.v(x), x.new_zeros(())

    def fill_cache(self, x: torch.Tensor, cache: GainCache) -> None:
        pass


class GainSpec(Spec):
    name, op = "throwaway", None
    grows = False

    def token_elements(self, arch):
        return 0

    def layer_bytes(self, arch, n, e, state_e):
        return 0

    def costs(self):
        return {"throwaway": lambda phase, n, a, B, e, impl: Cost().add("throwaway", 2 * B * a.d_model**2, 0, 1)}

    def projection_params(self, arch):
        return arch.d_model**2

    def fill_width(self, arch):
        return 0


GAIN_SPEC = GainSpec()


@pytest.fixture
def throwaway(monkeypatch):
    """The design registered for one test: its entry (naming its layer, spec and settings here), the
    schema rebuilt with its setting, its attention config the option `throwaway` (no YAML file)."""
    entry = designs.Design(
        letter="Z",
        name="throwaway",
        layer=f"{__name__}:GainAttention",
        op=None,
        cost="throwaway",
        glue_ops=0,
        spec=f"{__name__}:GAIN_SPEC",
        settings=f"{__name__}:GainSettings",
    )
    store = ConfigStore.instance()
    monkeypatch.setitem(store.repo, "attention", dict(store.repo.get("attention", {})))
    store.store(group="attention", name="throwaway", node={"throwaway": {"name": "throwaway", "layout": "Z"}})
    designs.DESIGNS["Z"] = entry
    try:
        schema.register()
        yield entry
    finally:
        del designs.DESIGNS["Z"]
        schema.register()


def test_a_throwaway_design_with_its_own_setting_runs_smoke(throwaway, tmp_path):
    base = compose_cfg(["+exp=smoke"])
    cfg = compose_cfg(["+exp=smoke", "+attention=throwaway", "design=throwaway", "attention.throwaway.gain=2.5", "threads=1"])
    cfg.wandb.mode, cfg.report.enabled = "disabled", False
    assert cfg.attention.throwaway.gain == 2.5 and cfg.attention.softmax.gain == 1.0  # every design holds every setting
    # its setting, at its default, is in no other design's checkpoint key
    assert checkpoint_key(cfg, "softmax") == checkpoint_key(base, "softmax")
    with pytest.raises(ConfigError, match=r"attention\.throwaway\.gain"):  # the range its declaration gives
        validate(compose_cfg(["+exp=smoke", "+attention=throwaway", "attention.throwaway.gain=-1"]))

    threads = torch.get_num_threads()
    try:
        preflight.prepare(cfg, tmp_path / "run")
        cli.run(cfg, tmp_path / "run")
    finally:
        torch.set_num_threads(threads)
    lines = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert lines[-1]["type"] == "footer" and lines[-1]["status"] == "completed", lines[-1]
    smoke = {r["metric"]: r for r in lines if r["type"] == "record" and r["design"] == "throwaway"}
    assert smoke["smoke/train_loss"]["status"] == "measured" and smoke["smoke/grad_norm"]["value"] > 0
    for path in ("prefill", "decode"):
        assert smoke[f"smoke/{path}_vs_full_rel_err"]["status"] == "measured", smoke[f"smoke/{path}_vs_full_rel_err"]


def test_the_schema_forgets_a_design_once_it_is_gone():
    """After the fixture, the composed designs hold only the registered designs' settings."""
    assert "gain" not in {f.name for f in dataclasses.fields(schema.DesignConfig)}
    assert "gain" not in compose_cfg(["+exp=smoke"]).attention.softmax
