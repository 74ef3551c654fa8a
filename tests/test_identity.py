"""Moving code must not move a hash: every composed config's hash and every checkpoint key
equal the snapshot (tests/data/identity.json), so run directories and attnbench/trained/ stay found.
The snapshot is rewritten only on purpose (``python -m tests.identity_snapshot``): adding a design
adds an entry to every composed config's attention group and so changes every config hash, never
another design's checkpoint key (the key reads that design's own settings)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.identity_snapshot import SNAPSHOT, snapshot

TRAINED = Path(__file__).resolve().parents[1] / "attnbench" / "trained"


def test_config_hashes_and_checkpoint_keys_unchanged():
    assert snapshot() == json.loads(SNAPSHOT.read_text())


def test_shipped_models_keep_their_keys():
    """Every shipped model's record names the key its folder carries."""
    for folder in sorted(p for p in TRAINED.iterdir() if p.is_dir()):
        record = json.loads((folder / "record.json").read_text())
        assert folder.name == f"{record['design']}-{record['key']}", folder.name


def test_shipped_models_are_found_by_their_keys():
    from attnbench.training import checkpoints

    for folder in sorted(p for p in TRAINED.iterdir() if p.is_dir() and (p / "final.pt").exists()):
        design, _, key = folder.name.rpartition("-")
        assert checkpoints.find(design, key) == folder, folder.name
