"""MSA sparse attention (M): K, V and one shared index key per token; each query attends its
local block and the top-k earlier blocks by index score."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .settings import setting
from .softmax import Softmax, SoftmaxSettings


class IndexPool(StrEnum):
    """A block's index score: the max over its keys' scores, or the score of its mean key."""

    max = "max"
    mean = "mean"


@dataclass
class MSASettings(SoftmaxSettings):
    """What an msa layer reads (a dsa layer too: its token budget is top_k blocks of block_size)."""

    block_size: int = setting(16, keyed_at_default=True, min=1, arch="block_size", help="tokens per key block")
    top_k: int = setting(4, keyed_at_default=True, min=1, arch="top_k", help="blocks per query (the local block included)")
    index_dim: int = setting(32, keyed_at_default=True, min=1, arch="index_dim", help="index head dim Di")
    index_pool: IndexPool = setting(
        IndexPool.max, keyed_at_default=True, help="block score: max over the block, or mean (the score of the mean key)"
    )
    index_rope: bool = setting(True, keyed_at_default=True, help="RoPE on the index heads (the same fraction as the main heads)")
    index_loss_weight: float = setting(1.0, keyed_at_default=True, min=0, help="weight of the index KL loss in training")

    @staticmethod
    def check(d, where: str, cfg) -> None:
        """Triton tiles (tl.arange) need power-of-two block sizes."""
        from attnbench.config.errors import ConfigError

        if cfg.backend == "triton" and d.block_size & (d.block_size - 1):
            raise ConfigError(f"{where}.block_size", d.block_size, "a power of two with backend=triton")


def selection_ok(block_idx, index_q, index_k, block_size: int) -> bool:
    """block_idx equals msa's naive selection, but for choices between blocks of tied scores."""
    import torch  # on use: the config reads this module's settings without torch

    from attnbench.kernels import tolerance
    from attnbench.kernels.msa import naive as msa_naive

    want = msa_naive.msa_select(index_q, index_k, block_size, block_idx.shape[-1])
    if torch.equal(block_idx, want):
        return True
    if not (torch.equal(block_idx[..., 0], want[..., 0]) and torch.equal(block_idx < 0, want < 0)):
        return False  # another local block, or padding where a block exists (or the reverse)
    scores = msa_naive.block_scores(index_q, index_k, block_size)  # (B, G, T, NB)
    got_s, want_s = msa_naive.chosen_scores(block_idx, scores), msa_naive.chosen_scores(want, scores)
    return torch.allclose(got_s, want_s, rtol=tolerance.TIE_RTOL, atol=tolerance.TIE_RTOL)


class MSA(Softmax):
    name, op = "msa", "msa"
    baselines = ("reference",)
    selects = True
    shape_settings = ("block_size", "top_k", "index_dim")
    part_names = ("msa_select", "msa_attn")

    def costs(self):
        from attnbench.bench import op_costs as cm  # the formulas (imported on use: a spec loads no cost model)

        return {"msa": cm.msa_cost, "msa_select": cm.msa_select_cost, "msa_attn": cm.msa_attn_cost}

    def token_elements(self, arch):
        return 2 * arch.n_kv_heads * arch.head_dim + arch.index_dim  # K, V, one shared index key

    def fill_cache(self, attn, cache, n, batch, rnd):
        k = rnd(batch, attn.G, n, attn.D)
        cache.reserve(n + 1)
        cache.append(k, rnd(*k.shape))
        cache.ik.append(rnd(batch, n, attn.Di))

    def projection_params(self, arch):
        C, G, Di = arch.d_model, arch.n_kv_heads, arch.index_dim
        return super().projection_params(arch) + C * G * Di + C * Di

    def fill_width(self, arch):
        return super().fill_width(arch) + arch.index_dim

    def inputs(self, sh, rnd):
        x = super().inputs(sh, rnd)
        x["index_q"] = rnd(sh.B, sh.Hkv, sh.T, sh.index_dim)
        x["index_k"] = rnd(sh.B, sh.keys, sh.index_dim)
        return x

    def prepare(self, x, sh, backend):
        """x with the op's own selection, or None when it is not the naive one (up to ties)."""
        import attnbench.kernels as K

        idx = K.msa_select(x["index_q"], x["index_k"], sh.block_size, sh.top_k, backend=backend)
        return {**x, "block_idx": idx} if selection_ok(idx, x["index_q"], x["index_k"], sh.block_size) else None

    def call(self, x, sh, backend, **kw):
        """Selection (unless x holds a block_idx) then attention."""
        import attnbench.kernels as K

        idx = x.get("block_idx")
        if idx is None:
            idx = K.msa_select(x["index_q"], x["index_k"], sh.block_size, sh.top_k, backend=backend)
        return (K.msa_attn(x["q"], x["k"], x["v"], idx, sh.block_size, backend=backend),)

    def naive(self, x, sh):
        from attnbench.kernels.msa import naive as msa_naive

        idx = x.get("block_idx")
        if idx is None:
            idx = msa_naive.msa_select(x["index_q"], x["index_k"], sh.block_size, sh.top_k)
        return (msa_naive.msa_attn(x["q"], x["k"], x["v"], idx, sh.block_size),)

    def parts(self, x, sh, backend):
        import attnbench.kernels as K

        idx = K.msa_select(x["index_q"], x["index_k"], sh.block_size, sh.top_k, backend=backend)
        return {
            self.part_names[0]: lambda: K.msa_select(x["index_q"], x["index_k"], sh.block_size, sh.top_k, backend=backend),
            self.part_names[1]: lambda: K.msa_attn(x["q"], x["k"], x["v"], idx, sh.block_size, backend=backend),
        }


SPEC = MSA()
