"""The generated README tables, one registry per table module.

Each module of README tables (readme_tables*.py) holds its own ``TABLES`` and marks each table
function with its ``table(name)``; report/readme/regenerate.py imports those modules and merges their
registries. Imports run one way, from regenerate.py to the tables: no table module imports
regenerate.py, and nothing registers itself into another module on import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pandas as pd

if TYPE_CHECKING:
    from attnbench.report.frame import RunData

TableFn = Callable[["RunData"], pd.DataFrame]


class Tables(dict[str, TableFn]):
    """README table name -> the function of the experiment's records that makes it."""

    def table(self, name: str) -> Callable[[TableFn], TableFn]:
        """Register a README table: a function of the experiment's records returning a DataFrame."""

        def register(fn: TableFn) -> TableFn:
            if name in self:
                raise ValueError(f"README table {name!r} is registered twice")
            self[name] = fn
            return fn

        return register


# a README's generated table block, and what a check finds wrong in one (regenerate, verdict_words)
BLOCK = re.compile(r"(<!-- table: (?P<name>[\w/.-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


@dataclass
class Problem:
    readme: Path
    what: str

    def __str__(self) -> str:
        return f"{self.readme}: {self.what}"
