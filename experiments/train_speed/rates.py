"""Copy every shipped model's per-stage training rates into this experiment's records.

    python experiments/train_speed/rates.py [--out PATH]

For each attnbench/trained/*/record.json: its ``stage_rates`` (tokens/s, the cost model's FLOPs
per training token, GFLOP/s, fraction of the calibrated peak, phase shares; attnbench/training/rate.py),
or, for models trained before those were written, the same computed from its curve (no
calibrated peak then: fraction_of_peak null). One ``train/stage_rate`` record a stage, naming
its source. The file is rewritten whole (the rows are copies, not measurements of this script).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    from attnbench.experiments.train import stage_rates_of
    from attnbench.records.lines import now

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).with_name("rates") / "results.jsonl"))
    args = ap.parse_args()
    lines: list[dict[str, Any]] = [
        {"type": "header", "exp": "train_speed", "started": now(), "command": "python experiments/train_speed/rates.py"}
    ]
    for path in sorted((ROOT / "attnbench" / "trained").glob("*/record.json")):
        r = json.loads(path.read_text())
        if r.get("status") == "partial":  # a training to be resumed (checkpoints.ship): rates when it is done
            continue
        for row in stage_rates_of(SimpleNamespace(record=r)):
            lines.append(
                {
                    "type": "record", "exp": "train_speed", "design": r["design"], "metric": "train/stage_rate", "value": row["tokens_s"],
                    "unit": "tokens/s", "status": "measured", "seed": r["config"]["seed"], "model": path.parent.name,
                    "source": str(path.relative_to(ROOT)), "train_status": r["status"], "trained_at": (r.get("git") or {}).get("commit"),
                    "record_threads": r.get("threads"), **row,
                }
            )  # fmt: skip
    Path(args.out).write_text("".join(json.dumps(x) + "\n" for x in lines))
    print(f"{len(lines) - 1} stage rows from {args.out}")


if __name__ == "__main__":
    main()
