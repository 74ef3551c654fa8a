"""What every experiment gets: the validated config, its run directory, a recorder, a device."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from .config import selected_designs
from .results import Recorder, stable_hash

# Keys that say where or how loudly a run happens, not what it computes.
NOT_IN_HASH = ("hydra", "wandb", "threads")


def config_dict(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


def config_hash(cfg: DictConfig) -> str:
    return stable_hash({k: v for k, v in config_dict(cfg).items() if k not in NOT_IN_HASH})


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda but torch sees no CUDA device")
    return torch.device(name)


def seed_everything(seed: int) -> dict[str, int]:
    """Seed every random source; return what was seeded (recorded in the header)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return {"python": seed, "numpy": seed, "torch": seed}


@dataclass
class RunContext:
    cfg: DictConfig
    run_dir: Path
    recorder: Recorder
    device: torch.device
    console: Console = field(default_factory=lambda: Console(stderr=True, soft_wrap=True))

    @property
    def design_names(self) -> list[str]:
        return selected_designs(self.cfg)

    def record(self, design: str, metric: str, value: Any, unit: str, status: str = "measured", **extra) -> dict:
        """One record for ``design`` (its layout filled in from the config)."""
        d = self.cfg.attention[design]
        from .model import resolve_layout

        layout = resolve_layout(d.layout, self.cfg.model.n_layers)
        extra.setdefault("seed", self.cfg.seed)
        extra.setdefault("device", self.device.type)
        return self.recorder.record(design=design, layout=layout, metric=metric, value=value, unit=unit,
                                    status=status, **extra)
