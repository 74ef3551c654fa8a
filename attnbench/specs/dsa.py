"""DeepSeek sparse attention (D): an indexer scores every past token; each query attends its top
tokens. One spec for both forms of the letter: the production presets' DSA over MLA (costed only,
attnbench.bench.presets: an MLA latent, its RoPE key and one indexer key a token) and the layer
built here (attnbench/model/dsa.py: GQA K, V and one indexer key a token, msa's token budget)."""

from __future__ import annotations

from .softmax import Softmax


def selection_ok(idx, index_q, index_w, index_k) -> bool:
    """idx equals dsa's naive selection, but for choices between tokens of tied scores."""
    import torch  # on use: the config reads the settings of these modules without torch

    from attnbench.kernels import tolerance
    from attnbench.kernels.dsa import naive as dsa_naive

    want = dsa_naive.dsa_select(index_q, index_w, index_k, idx.shape[-1])
    if torch.equal(idx, want):
        return True
    if not torch.equal(idx < 0, want < 0):
        return False
    scores = dsa_naive.index_scores(*(x.double() for x in (index_q, index_w, index_k)))
    got_s, want_s = dsa_naive.chosen_scores(idx, scores), dsa_naive.chosen_scores(want, scores)
    return torch.allclose(got_s, want_s, rtol=tolerance.TIE_RTOL, atol=tolerance.TIE_RTOL)


def tokens(sh) -> int:
    """Tokens a query attends to at an op shape: msa's budget, top_k blocks of block_size."""
    return sh.top_k * sh.block_size


def gqa_dsa_select_cost(phase, n, a, B, e, impl):
    """The layer built here, its selection: INDEX_HEADS ReLU index heads over every past token, then top-k."""
    from attnbench.bench.cost_terms import Cost, causal_pairs
    from attnbench.model.dsa import INDEX_HEADS

    T, S = (n, n) if phase == "prefill" else (1, n)
    Di = a.index_dim
    keys_idx = causal_pairs(T) if phase == "prefill" else S
    c = Cost().add("indexer", 2 * B * INDEX_HEADS * Di * keys_idx, e * B * (T * INDEX_HEADS * (Di + 1) + S * Di), 2)
    return c.add("indexer (relu, top-k)", 3 * B * INDEX_HEADS * keys_idx, 4 * B * keys_idx, 2, kind="vec")


def gqa_dsa_attn_cost(phase, n, a, B, e, impl):
    """The layer built here, its attention: GQA softmax over the top top_k * block_size tokens (msa's budget)."""
    from attnbench.bench.cost_terms import Cost, sum_window

    T, S = (n, n) if phase == "prefill" else (1, n)
    H, G, D, topk = a.n_heads, a.n_kv_heads, a.head_dim, a.top_k * a.block_size
    attended = sum_window(S, topk) - sum_window(S - T, topk)  # query at p attends to min(p + 1, topk) tokens
    c = Cost().add(
        "sparse attention", 4 * B * H * D * attended, e * B * (attended * 2 * G * D + 2 * T * H * D), 1 if impl == "fused" else 6
    )
    return c.add("sparse attention (exp)", B * H * attended, 0, 0, kind="exp")


def gqa_dsa_cost(phase, n, a, B, e, impl):
    """The layer built here (index_topk 0): its selection, then its attention."""
    return gqa_dsa_select_cost(phase, n, a, B, e, impl) + gqa_dsa_attn_cost(phase, n, a, B, e, impl)


def dsa_cost(phase, n, a, B, e, impl):
    """The presets' DSA over MLA (costmodel.dsa_cost) where the arch has an MLA latent, else the layer built here."""
    if a.mla_latent:
        from attnbench.bench import op_costs as cm  # the formulas (imported on use: a spec loads no cost model)

        return cm.dsa_cost(phase, n, a, B, e, impl)
    return gqa_dsa_cost(phase, n, a, B, e, impl)


class DSA(Softmax):
    name, op = "dsa", "dsa"
    quadratic = True  # the indexer scores every pair of tokens
    baselines = ("reference",)
    selects = True
    shape_settings = ("block_size", "top_k", "index_dim")  # its budget is msa's: top_k blocks of block_size tokens
    part_names = ("dsa_select", "dsa_attn")  # timed alone beside msa's two parts (Q-tokens' measured cost)

    def costs(self):
        return {"dsa": dsa_cost, "dsa_select": gqa_dsa_select_cost, "dsa_attn": gqa_dsa_attn_cost}

    def token_elements(self, arch):
        if arch.mla_latent:
            return arch.mla_latent + arch.mla_rope + arch.index_dim  # compressed KV, indexer key
        return 2 * arch.n_kv_heads * arch.head_dim + arch.index_dim  # K, V, indexer key

    def fill_cache(self, attn, cache, n, batch, rnd):
        k = rnd(batch, attn.G, n, attn.D)
        cache.reserve(n + 1)
        cache.append(k, rnd(*k.shape))
        cache.ik.append(rnd(batch, n, attn.Di))

    def projection_params(self, arch):
        from attnbench.model.dsa import INDEX_HEADS

        C, Di = arch.d_model, arch.index_dim
        return super().projection_params(arch) + C * INDEX_HEADS * (Di + 1) + C * Di

    def fill_width(self, arch):
        return super().fill_width(arch) + arch.index_dim

    def inputs(self, sh, rnd):
        x = super().inputs(sh, rnd)
        x["index_q"] = rnd(sh.B, sh.Hkv, sh.T, sh.index_dim)  # Hkv index heads at op shapes
        x["index_w"] = rnd(sh.B, sh.T, sh.Hkv)
        x["index_k"] = rnd(sh.B, sh.keys, sh.index_dim)
        return x

    def _select(self, x, sh, backend):
        import attnbench.kernels as K

        return K.dsa_select(x["index_q"], x["index_w"], x["index_k"], tokens(sh), backend=backend)

    def prepare(self, x, sh, backend):
        """x with the op's own selection, or None when it is not the naive one (up to ties)."""
        idx = self._select(x, sh, backend)
        return {**x, "idx": idx} if selection_ok(idx, x["index_q"], x["index_w"], x["index_k"]) else None

    def call(self, x, sh, backend, **kw):
        import attnbench.kernels as K

        idx = x.get("idx")
        return (K.dsa_attn(x["q"], x["k"], x["v"], self._select(x, sh, backend) if idx is None else idx, backend=backend),)

    def naive(self, x, sh):
        from attnbench.kernels.dsa import naive as dsa_naive

        idx = x.get("idx")
        if idx is None:
            idx = dsa_naive.dsa_select(x["index_q"], x["index_w"], x["index_k"], tokens(sh))
        return (dsa_naive.dsa_attn(x["q"], x["k"], x["v"], idx),)

    def parts(self, x, sh, backend):
        import attnbench.kernels as K

        idx = self._select(x, sh, backend)
        return {
            self.part_names[0]: lambda: self._select(x, sh, backend),
            self.part_names[1]: lambda: K.dsa_attn(x["q"], x["k"], x["v"], idx, backend=backend),
        }


SPEC = DSA()
