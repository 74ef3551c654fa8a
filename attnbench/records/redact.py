"""Keep secrets out of what attnbench writes: records, logs, reports, W&B files, the console.

A secret is the value of an environment variable that is a credential, recognised by its name
(WANDB_API_KEY, HF_TOKEN, ..._SECRET, ..._PASSWORD, any name ending in _KEY) or by its value
(the prefixes providers give their keys: ``sk-``, ``hf_``, ``ghp_``, ``xoxb-``, ``AKIA``, ...,
and PEM private-key blocks). Every writer masks before it serialises (``redact_obj`` on the
object, then ``redact`` on the text); ``redact`` also catches the forms a secret takes once
escaped (JSON ``\\"`` and ``\\u00fc``, HTML ``&#34;``, Python ``\\xfc``, URL ``%20``), so even a
config that interpolates ``${oc.env:WANDB_API_KEY}`` by mistake never lands on disk with the key
in it. The CLI passes its console (stdout, stderr: every message and traceback) through
``RedactingStream``.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import urllib.parse
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, TextIO

SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|PRIVATE|_KEY$)", re.IGNORECASE)
# values that are credentials whatever their variable is called (providers' documented key prefixes)
SECRET_VALUE = re.compile(
    r"^(sk-|sk_(live|test)_|rk_(live|test)_|hf_|ghp_|gho_|ghu_|ghs_|ghr_|github_pat_|glpat-|xox[abposr]-|AKIA|ASIA|AIza|ya29\.)"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
MIN_LEN = 8  # shorter values ("1", "true") would redact ordinary text
MASK = "***redacted***"


def is_secret(name: str, value: str) -> bool:
    """Whether the environment variable ``name=value`` holds a credential."""
    return len(value) >= MIN_LEN and bool(SECRET_NAME.search(name) or SECRET_VALUE.search(value))


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of credential environment variables, longest first."""
    env = os.environ if env is None else env
    return _values(tuple(sorted(env.items())))


@lru_cache(maxsize=8)
def _values(items: tuple[tuple[str, str], ...]) -> list[str]:
    found = {v for k, v in items if is_secret(k, v)}
    return sorted(found, key=len, reverse=True)


def forms(secret: str) -> list[str]:
    """``secret`` as written raw and in the escaped forms serialisers give it, longest first."""
    out = {
        secret,
        json.dumps(secret)[1:-1],  # \" \\ \u00fc
        json.dumps(secret, ensure_ascii=False)[1:-1],
        html.escape(secret),  # &quot; &#x27;
        html.escape(secret).replace("&quot;", "&#34;").replace("&#x27;", "&#39;"),  # Jinja / markupsafe
        secret.encode("unicode_escape").decode("ascii"),  # \xfc
        repr(secret)[1:-1],
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret, safe=""),
        secret.replace("'", "''"),  # YAML single-quoted
        secret.replace("'", "\\'"),  # in a Hydra override's quoted value, as typed
    }
    upper_hex = re.sub(r"\\x([0-9a-f]{2})", lambda m: "\\x" + m.group(1).upper(), secret.encode("unicode_escape").decode("ascii"))
    out.add(upper_hex)
    out.add(re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), json.dumps(secret)[1:-1]))
    for line in secret.splitlines():  # a PEM block's lines, as a serialiser may break it up
        if len(line.strip()) >= MIN_LEN * 4 and not line.startswith("-----"):
            out.add(line.strip())
    return sorted((f for f in out if len(f) >= MIN_LEN), key=len, reverse=True)


@lru_cache(maxsize=8)
def _all_forms(secrets: tuple[str, ...]) -> list[str]:
    return sorted({f for s in secrets for f in forms(s)}, key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    for value in _all_forms(tuple(secret_values() if secrets is None else secrets)):
        if value in text:
            text = text.replace(value, MASK)
    return text


def holds_secret(text: str, secrets: list[str] | None = None) -> bool:
    return redact(text, secrets) != text


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


def redact_yaml_file(path: Path, secrets: list[str] | None = None) -> None:
    """Mask the secrets in a YAML file written by another program (Hydra's .hydra/*.yaml and
    multirun.yaml): its values are read back, so a secret the YAML writer folded over lines or
    quoted in any style is found, and the file is written again only if one was."""
    import yaml

    secrets = secret_values() if secrets is None else secrets
    if not secrets:
        return
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:  # not YAML after all: mask what the text shows
        data = None
    masked = redact_obj(data, secrets)
    if masked != data:
        text = yaml.safe_dump(masked, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1 << 16)
    if redact(text, secrets) != text or masked != data:
        path.write_text(redact(text, secrets), encoding="utf-8")


def scrubbed_env(keep: tuple[str, ...] = ()) -> dict[str, str]:
    """os.environ without credential variables (except those named in ``keep``)."""
    return {k: v for k, v in os.environ.items() if k in keep or not is_secret(k, v)}


class RedactingStream(io.TextIOBase):
    """A text stream that masks secrets in what it writes, line by line (a secret split over two
    writes of one line is still caught), then writes to ``inner``."""

    def __init__(self, inner: TextIO):
        self.inner, self._pending = inner, ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            head, self._pending = self._pending.rsplit("\n", 1)
            self.inner.write(redact(head + "\n"))
        if len(self._pending) > 8192:  # no newline for long: write it as it is (masked)
            self.inner.write(redact(self._pending))
            self._pending = ""
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.inner.write(redact(self._pending))
            self._pending = ""
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self):
        return getattr(self.inner, "encoding", "utf-8")

    def writable(self) -> bool:
        return True


def mask_console() -> None:
    """Pass sys.stdout and sys.stderr through ``RedactingStream`` (once)."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, RedactingStream):
            setattr(sys, name, RedactingStream(stream))
