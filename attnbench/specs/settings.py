"""A design's settings: the fields of ``attention.<design>`` that its layers read, declared in its spec.

Each spec module (attnbench/specs/<design>.py) declares a dataclass of its settings with
``setting``; the registry (attnbench/designs.py) names it (``Design.settings``). What the rest of
the code used to spell out by field name is read from these declarations:

    the field, its type and default     config/schema.py (DesignConfig: every design's settings)
    its range                           config/ranges.py (check_ranges, before any work)
    its checks against other fields     the dataclass's ``check(d, where, cfg)`` (config/validate.py)
    whether a checkpoint key reads it   training/start.py (``keyed_at_default``, else only off its default)
    the Arch field it sets              bench/presets.py (from_model: the cost and memory formulas)

The config composes every design with every setting (DesignConfig is their union, so a hybrid
carries the settings of each of its letters), and reads these classes while it is imported: a
spec module imports no torch at its top (its ops import it when called), and this module
imports nothing of attnbench but the leaf helpers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attnbench.basics import Range


def setting(
    default: Any,
    *,
    help: str,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    keyed_at_default: bool = False,
    arch: str | None = None,
) -> Any:
    """A settings field: its default and what it means (``help``); a number's range (``min`` ..
    ``max``, ``min_open``: the low end excluded); ``keyed_at_default``: a checkpoint key reads it
    whatever its value (the settings keyed since checkpoint FORMAT 1); otherwise a key reads it
    only when it is set off its default, so adding a setting (a new design's, or an old
    design's whose default reproduces the old behaviour) leaves every trained model's key as it was; ``arch``: the field of bench.presets.Arch it
    sets when a configured model is costed (None: the cost formulas do not read it)."""
    numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
    bounded = Range(min, max, lo_open=min_open) if numeric else None
    if not numeric and (min is not None or max is not None):
        raise TypeError(f"a range is for numbers; the default {default!r} is not one")
    meta = {"help": help, "range": bounded, "keyed_at_default": keyed_at_default, "arch": arch}
    return dataclasses.field(default=default, metadata=meta)
