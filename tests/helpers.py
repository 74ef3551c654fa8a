"""Compose configs the way the CLI does, for tests."""

from __future__ import annotations

from hydra import compose, initialize_config_module

from attnbench import config as config_mod

config_mod.register()


def compose_cfg(overrides: list[str]):
    with initialize_config_module(config_module="attnbench.conf", version_base="1.3"):
        return compose(config_name="config", overrides=overrides)
