"""Serving readiness (issue 28, claim C7): presets' licenses, prefix resume and speculative
rollback for every layout letter, their costs, low-precision storage, exp=serving at a tiny size."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from attnbench.bench.presets import NOT_STATED, PRESETS
from attnbench.report.tables import presets_table

ROOT = Path(__file__).resolve().parents[1]
SEEDS = " ".join(p.read_text() for p in sorted((ROOT / "docs" / "sources").glob("*.txt")))

LICENSES = {  # issue 28: as the write-up states them
    "minimax_text01": NOT_STATED,
    "minimax_m1": "Apache 2.0",
    "minimax_m2": "MIT",
    "minimax_m27": "non-commercial",
    "minimax_m3": "MiniMax Community License",
    "deepseek_v32": NOT_STATED,
    "gemma3_27b": NOT_STATED,
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_carries_its_license_with_a_verbatim_source(name):
    arch = PRESETS[name]
    assert arch.license.startswith(LICENSES[name]), (name, arch.license)
    if arch.license == NOT_STATED:
        assert "license" not in arch.sources
        return
    quoted = re.findall(r"'(.+?)'(?:;|$)", arch.sources["license"])
    assert quoted, arch.sources["license"]
    for q in quoted:
        assert q.replace('\\"', '"') in SEEDS, (name, q)


def test_presets_table_shows_the_license_beside_the_cache_sizes():
    rows = []
    for preset in ("minimax_m2", "minimax_m27", "gemma3_27b"):
        common = dict(preset=preset, dtype="bfloat16", status="projected", design=preset, unit="bytes")
        rows.append({**common, "metric": "memory/cache_bytes_per_token", "v": 253952.0, "value": 253952.0, "context_len": None})
    table = presets_table(pd.DataFrame(rows))
    assert table is not None and table.columns[-1] == ("", "license")
    got = {r[0].text: r[-1] for r in table.rows}
    assert got["minimax_m2"].text == "MIT" and "plain MIT" in got["minimax_m2"].title
    assert got["minimax_m27"].text.startswith("non-commercial")
    assert got["gemma3_27b"].text == NOT_STATED
