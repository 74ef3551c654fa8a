"""One truth for verdict words: what a README or doc says a claim reads is what ``judge_all`` gives.

    python -m attnbench.report.readme.regenerate --check    # runs check_verdict_words with the tables' check

A verdict statement is a claim id followed, within a few words of one sentence, by a verdict word
(verdicts/rules.py: "supported", "not supported", "partly supported", "inconclusive", ...): "C2
reads **inconclusive**", "C7: not supported", "C3 now reads "partly supported"". Each is compared
with ``judge_all``'s verdict for that claim on the repository's records (every experiments/<name>/
folder merged, as the decision report reads them), so a README cannot keep a verdict the rules
have since changed. A statement about a part ("C7's prefix part is supported", "C3 shows nope's
part as inconclusive") is compared with the verdicts of the parts whose label holds that word.

Not statements, so not checked: a bare "C5" (judged as C5a and C5b), a sentence in the past or
the conditional between the id and the word ("C4 was inconclusive", "C2 would read supported"),
a rule's wording ("C2's rule: supported if ..."),
text in code, HTML comments and generated tables (those come from the records already).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from attnbench.report.readme.registry import BLOCK, Problem
from attnbench.verdicts.rules import PARTLY, VERDICTS

# longest first, so "not supported" is never read as "supported"; "partly" alone is "partly supported"
WORDS = sorted(VERDICTS + ("partly",), key=len, reverse=True)
WORD = "|".join(r"\s+".join(map(re.escape, w.split())) for w in WORDS)
# an id, then at most 60 characters of one sentence (no full stop, semicolon or blank line), then
# a verdict word; the lookahead lets two ids of one sentence each be read
STATEMENT = re.compile(
    r"\b(?P<id>C[1-7][ab]?)\b(?=(?P<between>(?:[^.;\n]|\n(?!\s*\n)){0,60}?)\b(?P<word>" + WORD + r")\b(?!\s+(?:if|when|where|unless)\b))",
    re.I,
)
# between the id and the word: the past, the conditional or a rule's wording ("C2's rule: supported
# if ...") is not a statement of what the claim reads now
NOT_NOW = re.compile(r"\b(was|were|would|could|might|if|used to|had|before|earlier|once|rule)\b", re.I)
PART = re.compile(r"([\w-]+?)(?:'s)?\s+part\b", re.I)


@dataclass
class Statement:
    claim: str
    word: str  # a verdict of verdicts/rules.py
    part: str | None  # the word naming a part ("prefix"), or None for the claim's own verdict
    line: int


def doc_files(root: Path | str = ".") -> list[Path]:
    """The READMEs and docs a reader takes verdicts from."""
    root = Path(root)
    files = [*sorted((root / "experiments").glob("*/README.md")), root / "attnbench" / "trained" / "README.md"]
    files += [*sorted((root / "docs").glob("*.md")), root / "README.md"]
    return [f for f in files if f.is_file()]


def _prose(text: str) -> str:
    """``text`` with generated tables, code, code spans and comments blanked, newlines kept (line numbers hold)."""

    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    for pattern in (BLOCK, re.compile(r"```.*?```", re.S), re.compile(r"`[^`\n]*`"), re.compile(r"<!--.*?-->", re.S)):
        text = pattern.sub(blank, text)
    return text


def statements(text: str, claims: set[str]) -> list[Statement]:
    """The verdict statements of a Markdown text about the claims named in ``claims``."""
    prose = _prose(text)
    out = []
    for m in STATEMENT.finditer(prose):
        claim, between = m["id"].upper().replace("A", "a").replace("B", "b"), m["between"]
        if claim not in claims or NOT_NOW.search(between) or re.search(r"\bC[1-7][ab]?\b", between):
            continue  # another claim's id comes first: the word is that claim's
        word = " ".join(m["word"].lower().split())
        part = PART.search(between)
        out.append(
            Statement(claim, PARTLY if word == "partly" else word, part and part.group(1).lower(), prose.count("\n", 0, m.start()) + 1)
        )
    return out


def judged(root: Path | str = ".") -> dict:
    """claim id -> its Verdict from judge_all on every experiment's records (the decision report's reading)."""
    from attnbench.report.build import experiment_dirs
    from attnbench.report.frame import load
    from attnbench.verdicts.claims.judge import judge_all

    dirs = experiment_dirs(root)
    if not dirs:
        return {}
    data = load(dirs)
    return {c.id: v for c, v in judge_all(data.records, data.train)}


def check_verdict_words(root: Path | str = ".", verdicts: dict | None = None, files: list[Path] | None = None) -> list[Problem]:
    """Every verdict statement in ``files`` (default: doc_files) that differs from ``judge_all``."""
    from attnbench.verdicts.claims.judge import CLAIMS

    verdicts = judged(root) if verdicts is None else verdicts
    problems = []
    for path in doc_files(root) if files is None else files:
        for s in statements(path.read_text(), {c.id for c in CLAIMS}):
            v = verdicts.get(s.claim)
            if v is None:
                continue  # no records at all: nothing to compare with
            if s.part is None:
                if s.word != v.verdict:
                    problems.append(Problem(path, f"line {s.line}: {s.claim} reads {s.word!r} here, {v.verdict!r} in judge_all"))
                continue
            parts = {label: x for label, x in v.parts.items() if s.part in label.lower()}
            if not parts:
                problems.append(
                    Problem(path, f"line {s.line}: {s.claim}'s {s.part!r} part: judge_all has no such part ({', '.join(v.parts)})")
                )
            elif s.word not in parts.values():
                got = "; ".join(f"{label}: {x}" for label, x in parts.items())
                problems.append(Problem(path, f"line {s.line}: {s.claim}'s {s.part} part reads {s.word!r} here; judge_all: {got}"))
    return problems
