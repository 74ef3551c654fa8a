"""attnbench.kernels: the attention ops every design is built from.

Each op lives in its own folder: ``naive.py`` (the truth: the short dense formula, O(T^2),
float64-capable, which the tests, the correctness gate and the benchmarks' checks all use),
``reference.py`` (the fast plain-torch path, the CPU backend), ``triton.py`` (the GPU kernels,
forward and backward, same signature as the reference, queries aligned to the last T of S >= T
keys included; on CPU they run only under TRITON_INTERPRET=1, for tests) and ``__init__.py``
(the public function, its shape docstring, and the call into the one backend switch in
``backend.py``). Helpers every Triton module shares are in ``triton_common.py``; the one
tolerance rule of every check against a naive truth is ``tolerance.py``.
"""

from .backend import BACKENDS, choose, for_layout, force, label, reset
from .dsa import dsa_attn, dsa_index_kl, dsa_select
from .gated_delta import gated_delta
from .lightning import lightning_attn
from .msa import msa_attn, msa_select
from .sliding_window import sliding_window_attn
from .softmax import softmax_attn

__all__ = [
    "BACKENDS",
    "choose",
    "for_layout",
    "force",
    "label",
    "reset",
    "dsa_attn",
    "dsa_index_kl",
    "dsa_select",
    "gated_delta",
    "lightning_attn",
    "msa_attn",
    "msa_select",
    "sliding_window_attn",
    "softmax_attn",
]
