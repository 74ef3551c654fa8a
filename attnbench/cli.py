"""``python -m attnbench +exp=NAME [overrides]``: compose, validate, run one experiment.

Config errors (a mistyped key, an unknown option, a value out of range) stop before any work
with exit code 2 and one line on stderr naming the field, the value and what is allowed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from . import config as config_mod
from .config import ConfigError

config_mod.register()


def one_line(ex: BaseException) -> str:
    """Describe a config failure in one line: field, value, what is allowed."""
    if isinstance(ex, ConfigError):
        return str(ex)
    cause = ex.__cause__ if isinstance(ex.__cause__, OmegaConfBaseException) else ex
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and getattr(cause, "object_type", None) is not None:
        import dataclasses

        fields = [f.name for f in dataclasses.fields(cause.object_type)] if dataclasses.is_dataclass(cause.object_type) else []
        return f"{cause.full_key}: unknown key; allowed keys: {', '.join(fields)}"
    if isinstance(cause, ValidationError):
        return f"{cause.full_key}: {str(cause).splitlines()[0]}"
    if isinstance(ex, MissingConfigException) and ex.options:
        return f"{str(ex).splitlines()[0]}; available: {', '.join(ex.options)}"
    return " ".join(str(ex).split())


def config_error(overrides: list[str]) -> str | None:
    """Compose and validate ``overrides`` as the CLI does; the one-line error, or None if valid."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="attnbench.conf", version_base="1.3"):
        try:
            config_mod.validate(compose(config_name="config", overrides=overrides))
        except (ConfigError, HydraException, OmegaConfBaseException) as ex:
            return one_line(ex)
    return None


@hydra.main(version_base="1.3", config_path="pkg://attnbench.conf", config_name="config")
def hydra_entry(cfg: DictConfig) -> None:
    try:
        config_mod.validate(cfg)
    except ConfigError as ex:  # exit here: past this point Hydra would add its own report
        print(f"attnbench: config error: {ex}", file=sys.stderr)
        sys.exit(2)
    run(cfg, Path(HydraConfig.get().runtime.output_dir))


def run(cfg: DictConfig, run_dir: Path) -> None:
    import torch

    from .experiments import runner
    from .kernels import force
    from .results import Recorder
    from .runner import RunContext, config_dict, config_hash, resolve_device, seed_everything

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seeds = seed_everything(cfg.seed)
    device = resolve_device(cfg.device)
    recorder = Recorder(run_dir / "results.jsonl", cfg.exp.name, {**config_dict(cfg), "seeds": seeds}, config_hash(cfg))
    ctx = RunContext(cfg=cfg, run_dir=run_dir, recorder=recorder, device=device)
    ctx.console.print(f"[bold]attnbench[/] exp={cfg.exp.name} designs={','.join(ctx.design_names)} "
                      f"device={device} run_dir={run_dir}")
    start = time.perf_counter()
    try:
        with force(None if cfg.backend == "auto" else cfg.backend):
            runner(cfg.exp.name)(ctx)
    except KeyboardInterrupt:
        # Every finished cell is already on disk (cells commit atomically); say how to go on.
        ctx.console.print(f"interrupted after {time.perf_counter() - start:.1f} s: {len(recorder.done_cells)} cells "
                          f"recorded in {recorder.path}; rerun the same command to resume")
        finish(ctx, partial=True)
        sys.exit(130)
    ctx.console.print(f"done in {time.perf_counter() - start:.1f} s; records in {recorder.path}")
    finish(ctx, partial=False)


def finish(ctx, partial: bool) -> None:
    """What every run ends with, complete or interrupted (reports and tracking hook in here)."""


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Hydra re-raises instead of printing its own multi-line report; we print one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    sys.argv = [sys.argv[0] if sys.argv else "attnbench", *argv]
    try:
        hydra_entry()
    except (ConfigError, HydraException, OmegaConfBaseException) as ex:
        print(f"attnbench: config error: {one_line(ex)}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
