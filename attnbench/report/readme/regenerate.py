"""README numbers that come from the records beside them: generated tables, and a check.

    python -m attnbench.report.readme.regenerate            # rewrite the generated tables of experiments/*/README.md
    python -m attnbench.report.readme.regenerate --check    # list every mismatch, exit 1 if any (tests/test_readmes.py)

``--check`` also compares every verdict word of the READMEs and docs with ``judge_all``
(verdict_words.py).

A README marks a generated table with two HTML comments; the lines between them are replaced
by what the table function registered under NAME (a module of report/readme/) makes from that experiment's records (a
pandas DataFrame written as Markdown):

    <!-- table: needle_4m/accuracy -->
    | design | 1K | ...
    <!-- /table -->

Every other number in a README (prose, hand-written tables; code and code spans excepted)
must be one that a generated table of the same README shows, or a value of the runs' header
(config, hardware, versions), or be listed with the reason it is not from the records in the
README's closing comment:

    <!-- not from records: 2 (CPU cores of the machine); 8 (the claim's 8x) -->

So a number typed into prose from a terminal, or a single sample quoted as a mean, fails the
check unless a generated table shows it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

from attnbench.report.readme import task_models, costs, cuda_runs, loaded, width_ladder, serving_rows, speed, external_rows
from attnbench.report.frame import RunData, load
from attnbench.basics import fmt_len
from attnbench.report.readme.registry import BLOCK, Problem, Tables


def merged(*modules) -> Tables:
    """Every table module's registry in one (a name registered by two modules is an error)."""
    out = Tables()
    for m in modules:
        for name, fn in m.TABLES.items():
            out.table(name)(fn)
    return out


TABLES = merged(task_models, costs, cuda_runs, loaded, width_ladder, serving_rows, speed, external_rows)
ALLOW = re.compile(r"<!-- not from records:(?P<list>.*?)-->", re.S)
# a number: digits with thousands commas or decimals, units after it allowed (9.5x, 64K, 38 min);
# not the tail of an identifier (fp32, H200, C3, v0.1)
NUMBER = re.compile(r"(?<![\w.#/-])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?!\d|\.\d|,\d{3})")


def markdown(df: pd.DataFrame) -> str:
    return df.to_markdown(index=False, disable_numparse=True) + "\n"


def render(text: str, data: RunData) -> str:
    """``text`` with every generated block replaced by its table from ``data``."""

    def fill(m):
        name = m["name"]
        if name not in TABLES:
            raise KeyError(f"README table {name!r} is not registered in attnbench/report/readme/")
        return m.group(1) + markdown(TABLES[name](data)) + m.group(4)

    return BLOCK.sub(fill, text)


def _strip(text: str) -> str:
    """The prose of a README: generated blocks, code blocks, code spans, comments and links' targets removed."""
    text = BLOCK.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"\b(?:arXiv|issue|seed|commit)\s#?[\w.]+|#\d+", "", text)  # ids: arXiv 2501.08313, issue #10, seed 000
    return text


def numbers(text: str) -> list[str]:
    """Every number in ``text`` as written (without thousands commas)."""
    return [(m.group(1) + (m.group(2) or "")).replace(",", "") for m in NUMBER.finditer(text)]


def _header_numbers(data: RunData) -> set[str]:
    out: set[str] = set()

    def walk(x):
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, bool):
            return
        elif isinstance(x, (int, float)):
            out.add(f"{x:g}" if isinstance(x, float) else str(x))
            if isinstance(x, int) and x >= 1024:
                out.update(numbers(fmt_len(x)))
        elif isinstance(x, str):
            out.update(numbers(x))

    for h in data.headers:
        walk({k: h.get(k) for k in ("config", "hardware", "versions")})
    return out


def _norm(n: str) -> str:
    """12.50 -> 12.5, 21.0 -> 21: the same number however many trailing zeros it is printed with."""
    return n.rstrip("0").rstrip(".") if "." in n else n


def check(readme: Path, data: RunData | None) -> list[Problem]:
    """Stale generated tables, and numbers outside them that no table, header or allow-list holds."""
    text = readme.read_text()
    problems = []
    if data is not None:
        fresh = render(text, data)
        if fresh != text:
            problems.append(Problem(readme, "a generated table is out of date: run `python -m attnbench.report.readme.regenerate`"))
    shown = set()
    for m in BLOCK.finditer(text):
        shown.update(numbers(m["body"]))
    allowed = set()
    for m in ALLOW.finditer(text):
        allowed.update(numbers(" ".join(re.sub(r"\([^)]*\)", "", part) for part in m["list"].split(";"))))
    known = {_norm(n) for n in shown | allowed | (_header_numbers(data) if data is not None else set())}
    for n in numbers(_strip(text)):
        if _norm(n) not in known:
            problems.append(Problem(readme, f"{n} is in no generated table, header or 'not from records' list"))
    return problems


def experiment_readmes(root: Path | str = ".") -> list[tuple[Path, RunData | None]]:
    """(README, its experiment's records or None) for every experiments/<name>/README.md."""
    root = Path(root)
    out = []
    for readme in sorted((root / "experiments").glob("*/README.md")):
        files = [f for f in readme.parent.rglob("results.jsonl") if "wandb" not in f.parts]
        out.append((readme, load([readme.parent]) if files else None))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnbench.report.readme.regenerate", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="list mismatches instead of rewriting the tables")
    ap.add_argument("--root", type=Path, default=Path("."))
    args = ap.parse_args(argv)
    problems = []
    for readme, data in experiment_readmes(args.root):
        if args.check:
            problems += check(readme, data)
        elif data is not None:
            text = readme.read_text()
            fresh = render(text, data)
            if fresh != text:
                readme.write_text(fresh)
                print(f"updated {readme}")
    if args.check:  # and every verdict word in the READMEs and docs is judge_all's (verdict_words.py)
        from attnbench.report.readme.verdict_words import check_verdict_words

        problems += check_verdict_words(args.root)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
