"""The claims' rules written into docs/DESIGN.md from the same data the judges and the report read
(``CLAIMS``' thresholds, ``Claim.rule``), so the document cannot drift from the code:

    python -m attnbench.verdicts.rules_doc            # rewrite the block between the markers
    python -m attnbench.verdicts.rules_doc --check    # exit 1 if the block is not what the code says
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from attnbench.verdicts.claims.judge import CLAIMS, COMMITTED_RULE, SEED_RULE, SHIPPED_RULE
from attnbench.verdicts.claims.questions import QUESTIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "DESIGN.md"
BLOCK = re.compile(r"(<!-- rules: generated -->\n)(.*?)(<!-- /rules -->)", re.S)
QUESTIONS_BLOCK = re.compile(r"(<!-- questions: generated -->\n)(.*?)(<!-- /questions -->)", re.S)


def rules_markdown() -> str:
    """One paragraph a claim: its id, its words, the rule with its thresholds."""
    out = []
    for c in CLAIMS:
        out.append(f"- **{c.id}** ({c.text}). {c.rule}\n")
    out.append(f"- **Seeds.** {SEED_RULE} C3 compares its seeds inside its own rule (above).\n")
    out.append(f"- **Shipped models.** {SHIPPED_RULE}\n")
    out.append(f"- **Committed code.** {COMMITTED_RULE}\n")
    return "\n".join(out)


def questions_markdown() -> str:
    """One paragraph a question beside the claims: its id, its words, the rule with its thresholds."""
    return "\n".join(f"- **{q.id}.** {q.text} {q.rule}\n" for q in QUESTIONS)


def rewrite(text: str) -> str:
    for block, marker in ((BLOCK, "rules"), (QUESTIONS_BLOCK, "questions")):
        if not block.search(text):
            raise ValueError(f"{DOC}: no '<!-- {marker}: generated -->' block")
    text = BLOCK.sub(lambda m: m.group(1) + "\n" + rules_markdown() + "\n" + m.group(3), text)
    return QUESTIONS_BLOCK.sub(lambda m: m.group(1) + "\n" + questions_markdown() + "\n" + m.group(3), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = DOC.read_text()
    new = rewrite(text)
    if args.check:
        if new != text:
            print(f"{DOC}: the rules block differs from the claims' rules; run python -m attnbench.verdicts.rules_doc")
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
