"""Models attnbench did not train in-process: attnbench's own models exported to transformers
(export.py, hf_model.py), any ``AutoModelForCausalLM`` folder, or an OpenAI-compatible server
(sources.py), run on the same tasks (render.py).

transformers is imported only here (and only when one of these modules is): it depends on the
PyPI package ``kernels``, whose name the repository's own ``kernels/`` folder (installed as
``attnbench.kernels``) also has, so a Python started in the repository root would find the wrong
one. ``transformers_ready`` imports the installed ``kernels`` first, with the root off sys.path.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def transformers_ready() -> None:
    """Make ``import kernels`` (transformers' dependency) load the installed package, not the
    repository's ``kernels/`` folder; a no-op where it is not installed or already loaded."""
    loaded = sys.modules.get("kernels")
    root = Path(__file__).resolve().parents[2]  # the repository (or site-packages) root holding attnbench/
    if loaded is not None and root not in Path(getattr(loaded, "__file__", "") or "/").resolve().parents:
        return  # the installed package is already there
    saved_path, saved_mod = sys.path[:], sys.modules.pop("kernels", None)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != root]
    try:
        importlib.import_module("kernels")
    except ImportError:  # not installed: transformers then does without it
        if saved_mod is not None:
            sys.modules["kernels"] = saved_mod
    finally:
        sys.path[:] = saved_path


__all__ = ["transformers_ready"]
