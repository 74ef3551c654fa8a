"""Every composed config's hash and every design's checkpoint key, for tests/test_identity.py.

``python -m tests.identity_snapshot`` rewrites tests/data/identity.json; do so only on purpose
(a changed hash orphans run directories, a changed key orphans attnbench/trained/).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from omegaconf import open_dict

from tests.helpers import compose_cfg

CONF = Path(__file__).resolve().parents[1] / "conf"
SNAPSHOT = Path(__file__).resolve().parent / "data" / "identity.json"


def snapshot() -> dict[str, dict[str, str]]:
    """{exp: {"config": hash, "config design=D": hash, "key D": checkpoint key}} over conf/exp/."""
    from attnbench import config as config_mod
    from attnbench.runner import config_hash
    from attnbench.training.start import checkpoint_key

    out: dict[str, dict[str, str]] = {}
    for path in sorted((CONF / "exp").glob("*.yaml")):
        cfg = compose_cfg([f"+exp={path.stem}"])
        config_mod.validate(cfg)
        row = {"config": config_hash(cfg)}
        for design in sorted(cfg.attention):
            row[f"key {design}"] = checkpoint_key(cfg, design)
            one = copy.deepcopy(cfg)  # as `design=D` on the command line, without composing again
            with open_dict(one):
                one.design = design
            row[f"config design={design}"] = config_hash(one)
        out[path.stem] = row
    return out


if __name__ == "__main__":
    SNAPSHOT.parent.mkdir(exist_ok=True)
    SNAPSHOT.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
