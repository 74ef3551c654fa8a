"""Do the three routes give the same answers? For each model and task: the answer word of every request through
attnbench in-process, transformers (hf) and transformers serve (endpoint), compared request by request.

    python experiments/external/compare.py > experiments/external/comparison.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
ROUTES = ("attnbench", "hf", "endpoint")


def answers(run: Path) -> dict[str, str]:
    recs = (json.loads(line) for line in (run / "results.jsonl").read_text().splitlines())
    return {r["request"]: r["answer"] if r["status"] == "measured" else "failed" for r in recs if r.get("metric") == "external/answer"}


def main() -> None:
    for task in ("needle", "chain"):
        for model in ("softmax", "lightning_hybrid_h8"):
            got = {route: answers(HERE / f"{task}_{route}_{model}") for route in ROUTES}
            ref = got["attnbench"]
            row: dict[str, object] = {"task": task, "model": model, "requests": len(ref)}
            for route in ROUTES[1:]:
                row[f"{route}_same"] = sum(got[route].get(k) == v for k, v in ref.items())
                row[f"{route}_differ"] = sorted(k for k, v in ref.items() if got[route].get(k) != v)
            print(json.dumps(row))


if __name__ == "__main__":
    main()
