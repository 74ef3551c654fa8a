"""The import layering: names are leaf data, the config loads no torch, the report reads records
and the verdicts only, and no import runs in a circle.

Imports are read from the source with ``ast`` (module-level ones and those inside functions;
those under ``if TYPE_CHECKING:`` are left out, they never run), so a lazy import that breaks a
rule fails here as surely as one at the top of a file.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# package-dir in pyproject.toml: kernels/ ships as attnbench.kernels
SOURCES = ((ROOT / "attnbench", "attnbench"), (ROOT / "kernels", "attnbench.kernels"))


def modules() -> dict[str, Path]:
    """Dotted module name -> its file, for attnbench and attnbench.kernels."""
    out = {}
    for base, package in SOURCES:
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


MODULES = modules()


def _resolve(name: str) -> str:
    """The module of this tree that importing ``name`` runs last (a name inside a module: that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(module: str) -> set[str]:
    """The modules of this tree that ``module`` imports (anywhere in it, outside TYPE_CHECKING blocks)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                continue
            if isinstance(child, ast.Import):
                found.update(_resolve(a.name) for a in child.names if a.name.startswith("attnbench"))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.startswith("attnbench"):
                    for a in child.names:  # `from pkg import module` imports the module
                        found.add(_resolve(f"{target}.{a.name}") if f"{target}.{a.name}" in MODULES else _resolve(target))
            visit(child)

    visit(ast.parse(path.read_text()))
    found.discard(module)
    return {m for m in found if m}


def under(prefix: str) -> list[str]:
    return [m for m in MODULES if m == prefix or m.startswith(prefix + ".")]


def _within(name: str, packages) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_the_import_reader_sees_lazy_and_relative_imports():
    """The reader itself: a relative import, a lazy one inside a function, a TYPE_CHECKING one left out."""
    assert "attnbench.verdicts.readings" in imports("attnbench.verdicts.rules")  # from .records import ...
    assert "attnbench.tasks.stage" in imports("attnbench.verdicts.quality")  # lazily, inside _mqar_levels too
    assert "attnbench.config" not in imports("attnbench.model.backbone")  # only under TYPE_CHECKING


def test_importing_the_config_loads_no_torch_model_or_experiment():
    code = (
        "import sys, attnbench.config\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'attnbench.model', 'attnbench.experiments.',"
        " 'attnbench.bench', 'attnbench.kernels', 'attnbench.training')))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def test_the_report_and_the_verdicts_load_no_torch():
    """Every module of attnbench.report and attnbench.verdicts imports without torch (a report reads records)."""
    names = [m for m in MODULES if _within(m, ("attnbench.report", "attnbench.verdicts")) and not m.endswith(".__main__")]
    code = f"import importlib, sys\nfor m in {names!r}: importlib.import_module(m)\nprint(sorted(m for m in sys.modules if m == 'torch'))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


RUNS = ("attnbench.experiments", "attnbench.tasks", "attnbench.training")


def test_the_report_imports_no_experiment_task_trainer_or_model():
    bad = {m: sorted(i for i in imports(m) if _within(i, (*RUNS, "attnbench.model"))) for m in under("attnbench.report")}
    assert not {m: i for m, i in bad.items() if i}


# What the verdicts may import from the tasks: the generator's arithmetic (numpy, no torch).
TASK_ARITHMETIC = ("attnbench.tasks", "attnbench.tasks.generate", "attnbench.tasks.levels", "attnbench.tasks.policies")
TASK_ARITHMETIC += ("attnbench.tasks.stage", "attnbench.tasks.vocab")


def test_the_verdicts_read_records_and_the_tasks_arithmetic_only():
    allowed = ("attnbench.verdicts", "attnbench.basics", "attnbench.records.stats", "attnbench.names", *TASK_ARITHMETIC)
    verdicts = under("attnbench.verdicts")
    bad = {m: sorted(i for i in imports(m) if i not in allowed and i not in verdicts) for m in verdicts}
    assert not {m: i for m, i in bad.items() if i}
    for m in TASK_ARITHMETIC:  # and those import nothing else
        assert imports(m) <= {*TASK_ARITHMETIC, "attnbench.names"}, (m, imports(m) - set(TASK_ARITHMETIC))


def test_names_the_registry_and_the_basics_are_leaves():
    """attnbench.names, attnbench.designs and attnbench.basics import nothing of attnbench (every layer reads them)."""
    for leaf in LAYERS[0][1]:
        assert imports(leaf) == set(), leaf


def test_leaf_names_match_what_they_name():
    from attnbench import names
    from attnbench.bench.presets import PRESETS
    from attnbench.kernels.backend import BACKENDS
    from attnbench.model.engine import FORMATS

    assert tuple(PRESETS) == names.PRESETS
    assert BACKENDS == names.BACKENDS and FORMATS == names.SERVING_FORMATS
    assert all(module.startswith("attnbench.experiments.") and module in MODULES for module in names.EXPERIMENTS.values())


def test_no_import_runs_in_a_circle():
    """The import graph of attnbench and its kernels is acyclic (lazy imports included)."""
    graph = {m: imports(m) for m in MODULES}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(m) :] + [m]))
        if m in done:
            return
        for n in sorted(graph[m]):
            if n in MODULES:
                visit(n, [*path, m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])


# The layers, lowest first: a module imports its own layer and those below it, never one above.
# A module's layer is that of the longest prefix naming it. The registry (designs.py) names the
# specs and layers as strings ("attnbench.specs.msa:SPEC") and loads them on use: a lookup by
# name, not an import, so it is no arrow here.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaf", ("attnbench", "attnbench.basics", "attnbench.names", "attnbench.designs", "attnbench.heap")),
    ("records", ("attnbench.records", "attnbench.scripts")),
    ("tasks", ("attnbench.tasks",)),
    ("config", ("attnbench.config",)),
    ("kernels", ("attnbench.kernels",)),
    ("model", ("attnbench.model",)),
    # models attnbench did not train in-process: attnbench's Model as a transformers model, sources, the token renderer
    ("external", ("attnbench.external",)),
    # the cost formulas each spec names (specs -> op_costs; the cost model reads the specs)
    ("op costs", ("attnbench.bench.cost_terms", "attnbench.bench.op_costs", "attnbench.bench.presets", "attnbench.bench.memory")),
    ("specs", ("attnbench.specs",)),
    ("bench", ("attnbench.bench",)),
    ("run context", ("attnbench.runner", "attnbench.evaluation")),
    ("training", ("attnbench.training",)),
    ("verdicts", ("attnbench.verdicts",)),
    ("report", ("attnbench.report",)),
    ("tracking", ("attnbench.tracking",)),
    ("experiments", ("attnbench.experiments",)),
    ("cli", ("attnbench.cli", "attnbench.__main__")),
)


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest prefix naming ``module``."""
    best, found = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    assert found >= 0, f"{module}: in no layer of LAYERS"
    return found


def test_every_module_has_a_layer():
    assert all(layer_of(m) >= 0 for m in MODULES)


def test_no_module_imports_a_higher_layer():
    """Imports run one way, down the layers (lazy imports included)."""
    bad = []
    for m in sorted(MODULES):
        for i in sorted(imports(m)):
            if layer_of(i) > layer_of(m):
                bad.append(f"{m} ({LAYERS[layer_of(m)][0]}) -> {i} ({LAYERS[layer_of(i)][0]})")
    assert not bad, "\n".join(bad)


def test_a_module_name_says_its_room():
    """No two modules share a base name, except one file per design in model/ and specs/ and one
    file per role (naive, reference, triton) in each op folder of kernels/."""
    from collections import defaultdict

    by_name = defaultdict(list)
    for m in MODULES:
        if MODULES[m].name not in ("__init__.py", "__main__.py"):
            by_name[m.rpartition(".")[2]].append(m)
    designs = {"attnbench.model", "attnbench.specs"}
    shared = {
        name: sorted(ms)
        for name, ms in by_name.items()
        if len(ms) > 1
        and not all(m.rpartition(".")[0] in designs for m in ms)
        and not all(m.startswith("attnbench.kernels.") and m.count(".") == 3 for m in ms)
    }
    assert not shared, shared


def test_the_root_holds_few_modules():
    """attnbench/ itself holds at most 10 modules; the rest live in packages named for their job."""
    root = sorted(p.name for p in (ROOT / "attnbench").glob("*.py"))
    assert len(root) <= 10, root
