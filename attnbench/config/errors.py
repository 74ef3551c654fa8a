"""The config's error type and the small checks every validation module uses."""

from __future__ import annotations

from enum import Enum
from typing import Any


class ConfigError(ValueError):
    """A config value that cannot run: ``field=value: what is allowed``."""

    def __init__(self, field: str, value: Any, allowed: str):
        value = str(value) if isinstance(value, Enum) else value  # 'ddp', not <Parallel.ddp: 'ddp'>
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r}: {allowed}")


def parse_duration(text: str) -> float:
    """'90s', '15m', '2h', '1h30m', or a bare number of seconds -> seconds."""
    import re

    s = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return float(s)
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?", s)
    if not s or parts is None:
        raise ValueError(text)
    h, m, sec = (float(p) if p else 0.0 for p in parts.groups())
    return h * 3600 + m * 60 + sec


def positive(field_name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(field_name, value, "must be an integer >= 1")


def duration(field_name: str, value: Any) -> None:
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise ConfigError(field_name, value, "a duration such as 90s, 15m, 2h or 1h30m") from None
    if not seconds > 0:
        raise ConfigError(field_name, value, "a duration > 0 such as 90s, 15m, 2h or 1h30m")
