"""No module in attnbench/, kernels/ or experiments/ (its scripts) over MAX_MODULE lines, and no function over MAX_FUNCTION
(measured with ast: a function from its `def` line, decorators excluded, to its last line).

KNOWN holds the offenders not split yet, each at its present size: one may shrink or leave
the list, never grow, and no new one may join. The list is what issue 27's split did not
reach in its time (and the modules other work on that issue was moving); issue 27's split
emptied it, and it stays empty.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE, MAX_FUNCTION = 450, 80

KNOWN: dict[str, int] = {}  # path or path:function -> lines at most


def sizes() -> dict[str, int]:
    """Every module over MAX_MODULE and function over MAX_FUNCTION, with its length in lines."""
    out = {}
    for base in ("attnbench", "kernels", "experiments"):
        for path in sorted((ROOT / base).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            text = path.read_text()
            if len(text.splitlines()) > MAX_MODULE:
                out[name] = len(text.splitlines())
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION:
                        out[f"{name}:{node.name}"] = max(length, out.get(f"{name}:{node.name}", 0))
    return out


def test_modules_and_functions_are_short():
    found = sizes()
    new = {k: v for k, v in found.items() if k not in KNOWN}
    grown = {k: (v, KNOWN[k]) for k, v in found.items() if k in KNOWN and v > KNOWN[k]}
    assert not new, f"over {MAX_MODULE} lines a module or {MAX_FUNCTION} a function: {new}; split them"
    assert not grown, f"grew past their recorded size (now, recorded): {grown}"


def test_the_known_list_holds_no_one_already_short():
    found = sizes()
    fixed = sorted(k for k in KNOWN if k not in found)
    assert not fixed, f"no longer over the limit: remove {fixed} from KNOWN"


def test_the_measure_sees_a_long_function():
    """The ast measure itself: a function of 81 lines counts as 81."""
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    node = ast.parse(f"def f():\n{body}\n").body[0]
    assert node.end_lineno - node.lineno + 1 == 81
