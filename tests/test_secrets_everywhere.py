"""No secret in any file a run or a sweep writes, nor on the console, in any encoding a writer can
give it (YAML plain, folded, single- and double-quoted; JSON; URL; HTML), Hydra's own files
(.hydra/*.yaml, a sweep's multirun.yaml) included: secrets of five shapes, passed literally, by
interpolation and in a sweep."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import yaml

# each begins with HEAD and ends with TAIL: neither may appear anywhere, whatever a writer did in between
HEAD, TAIL = "ZQXf", "fXQZ"
SHAPES = {
    "LONG_SECRET": "ZQXf correct horse battery staple and many more words so that a yaml writer folds it fXQZ",
    "COLON_SECRET": "ZQXf: it's #1 pass fXQZ",
    "QUOTE_SECRET": 'ZQXf"quo\\te back\\slash fXQZ',
    "UNICODE_SECRET": "ZQXf-pässwörd-ünïcode-fXQZ",
    "LONG200_SECRET": "ZQXf" + "0123456789abcdef" * 12 + "fXQZ",  # 200 characters
}
assert len(SHAPES["LONG200_SECRET"]) == 200


def encodings(secret: str) -> set[str]:
    """Every form a writer may give ``secret`` (YAML's four scalar styles at any width, JSON, URL, HTML)."""
    out = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], html.escape(secret)}
    out |= {urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret), secret.replace("'", "''")}
    for style in ("'", '"', ">", None):
        for width in (40, 80):
            text = yaml.dump([secret], default_style=style, width=width, allow_unicode=True)
            out.add(text.removeprefix("- ").strip().strip("'\"").strip(">-").strip())
    return {f for f in out if f}


def quoted(value: str) -> str:
    """``value`` as a Hydra override value (the grammar's quoting)."""
    return f'"{value}"' if "'" in value else f"'{value}'"


def run_cli(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnbench", *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def assert_nothing_holds_a_secret(root: Path, console: str) -> None:
    files = [f for f in root.rglob("*") if f.is_file()]
    assert files
    for name, secret in SHAPES.items():
        # the secret's distinctive part, as every writer may break or escape it
        for form in encodings(secret):
            assert form not in console, (name, form)
            leaked = [str(f.relative_to(root)) for f in files if form.encode() in f.read_bytes()]
            assert not leaked, (name, form, leaked)
    for part in (HEAD, TAIL):  # a folded or escaped form's ends
        assert part not in console, part
        leaked = [str(f.relative_to(root)) for f in files if part.encode() in f.read_bytes()]
        assert not leaked, (part, leaked)


QUICK = ["+exp=smoke", "exp.designs=[softmax]", "threads=1", "report.pdf=false", "wandb.mode=disabled"]


def env_with_secrets(tmp_path: Path) -> dict:
    return {**os.environ, **SHAPES, "ATTNBENCH_CACHE": str(tmp_path / "cache")}


def test_literal_and_interpolated_secrets_are_masked_in_every_file(tmp_path):
    """Each shape typed out in a free-text field, and each interpolated: .hydra/*.yaml, records,
    report, logs, console."""
    s = SHAPES
    args = [
        *QUICK,
        f"exp.description={quoted(s['LONG_SECRET'])}",
        f"wandb.group={quoted(s['COLON_SECRET'])}",
        f"wandb.tags=[{quoted(s['QUOTE_SECRET'])},{quoted(s['UNICODE_SECRET'])},{s['LONG200_SECRET']},"
        + ",".join("'${oc.env:" + name + "}'" for name in s)
        + "]",
        f"hydra.run.dir={tmp_path}/run",
    ]
    res = run_cli(args, tmp_path, env_with_secrets(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "run" / ".hydra" / "overrides.yaml").is_file()
    assert_nothing_holds_a_secret(tmp_path / "run", res.stdout + res.stderr)
    assert "***redacted***" in (tmp_path / "run" / ".hydra" / "overrides.yaml").read_text()


@pytest.mark.slow
def test_secrets_in_a_sweep_are_masked_in_multirun_yaml_and_every_job(tmp_path):
    s = SHAPES
    args = [
        "-m",
        *QUICK,
        f"exp.description={quoted(s['LONG_SECRET'])},plain",
        f"wandb.group={quoted(s['COLON_SECRET'])}",
        f"wandb.tags=[{quoted(s['QUOTE_SECRET'])},{quoted(s['UNICODE_SECRET'])},{s['LONG200_SECRET']}]",
        f"hydra.sweep.dir={tmp_path}/sweep",
    ]
    res = run_cli(args, tmp_path, env_with_secrets(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "sweep" / "multirun.yaml").is_file()
    assert_nothing_holds_a_secret(tmp_path / "sweep", res.stdout + res.stderr)
