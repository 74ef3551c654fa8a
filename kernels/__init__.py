"""attnbench.kernels: the attention ops every design is built from.

Each op lives in its own folder: ``reference.py`` (plain torch, the truth), ``triton.py``
(the fast GPU kernel, where one exists) and ``__init__.py`` (the public function, its shape
docstring, and the call into the one backend switch in ``backend.py``).
"""

from .backend import BACKENDS, choose, force
from .lightning import lightning_attn
from .msa import msa_attn, msa_select
from .sliding_window import sliding_window_attn
from .softmax import softmax_attn

__all__ = [
    "BACKENDS",
    "choose",
    "force",
    "lightning_attn",
    "msa_attn",
    "msa_select",
    "sliding_window_attn",
    "softmax_attn",
]
