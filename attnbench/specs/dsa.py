"""DeepSeek sparse attention over MLA (D): costed in production presets only, never built."""

from __future__ import annotations

from . import Spec


class DSA(Spec):
    name = "dsa"

    def costs(self):
        from attnbench.bench import op_costs as cm  # the formulas (imported on use: a spec loads no cost model)

        return {"dsa": cm.dsa_cost}

    def token_elements(self, arch):
        return arch.mla_latent + arch.mla_rope + arch.index_dim  # compressed KV, indexer key


SPEC = DSA()
