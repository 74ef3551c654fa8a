"""Keep secrets out of what attnbench writes: records, logs, reports, W&B config.

A secret is the value of an environment variable whose name looks like a credential
(WANDB_API_KEY, HF_TOKEN, ..._SECRET, ..._PASSWORD). Every writer passes its text through
``redact`` (or its dict through ``redact_obj``), so even a config that interpolates
``${oc.env:WANDB_API_KEY}`` by mistake never lands on disk with the key in it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)
MIN_LEN = 8  # shorter values ("1", "true") would redact ordinary text
MASK = "***redacted***"


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of credential-looking environment variables, longest first."""
    env = os.environ if env is None else env
    found = {v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= MIN_LEN}
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    for value in secret_values() if secrets is None else secrets:
        text = text.replace(value, MASK)
    return text


def redact_obj(obj: Any, secrets: list[str] | None = None) -> Any:
    """A copy of a JSON-like object with every secret inside its strings masked."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(obj, str):
        return redact(obj, secrets)
    if isinstance(obj, Mapping):
        return {redact_obj(k, secrets): redact_obj(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v, secrets) for v in obj]
    return obj


def scrubbed_env(keep: tuple[str, ...] = ()) -> dict[str, str]:
    """os.environ without credential-looking variables (except those named in ``keep``)."""
    return {k: v for k, v in os.environ.items() if k in keep or not SECRET_NAME.search(k)}
