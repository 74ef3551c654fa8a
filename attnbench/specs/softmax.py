"""Softmax attention (S): a KV cache of every token; the baseline of every op (causal SDPA)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from . import OpShape, Spec
from .settings import setting


class Position(StrEnum):
    """Position schemes of the softmax-type layers (S, W, M, D): RoPE on the whole head, on
    model.rotary_frac of it (Text-01's half-head RoPE), none, or partial RoPE with a learned
    s * log(n) logit scale (Scalable-Softmax), n the number of keys a query can see."""

    rope = "rope"
    partial = "partial"
    nope = "nope"
    logn = "logn"
    nope_logn = "nope_logn"


@dataclass
class SoftmaxSettings:
    """What a softmax-type layer reads (sliding window, msa and dsa build on it)."""

    position: Position = setting(Position.partial, help="RoPE scheme of the softmax-type layers (Position)")


class Softmax(Spec):
    name, op = "softmax", "softmax"
    quadratic = True
    baselines: tuple[str, ...] = ("reference", "flash_attn", "flex")

    def costs(self):
        from attnbench.bench import op_costs as cm  # the formulas (imported on use: a spec loads no cost model)

        return {"softmax": cm.softmax_cost}

    def token_elements(self, arch):
        return 2 * arch.n_kv_heads * arch.head_dim  # K and V

    def fill_cache(self, attn, cache, n, batch, rnd):
        k = rnd(batch, attn.Hkv, n, attn.D)
        cache.reserve(n + 1)  # room for the decode step's token, allocated once
        cache.append(k, rnd(batch, attn.Hkv, n, attn.D))

    def projection_params(self, arch):
        C, H, G, D = arch.d_model, arch.n_heads, arch.n_kv_heads, arch.head_dim
        return C * H * D + C * 2 * G * D + H * D * C

    def fill_width(self, arch):
        return 2 * arch.n_kv_heads * arch.head_dim

    def inputs(self, sh: OpShape, rnd):
        S = sh.keys
        return dict(q=rnd(sh.B, sh.H, sh.T, sh.D), k=rnd(sh.B, sh.Hkv, S, sh.D), v=rnd(sh.B, sh.Hkv, S, sh.D))

    def call(self, x, sh, backend, **kw):
        import attnbench.kernels as K  # on use: the config reads this module's settings without torch

        return (K.softmax_attn(x["q"], x["k"], x["v"], backend=backend),)

    def naive(self, x, sh):
        from attnbench.kernels.softmax import naive as softmax_naive

        return (softmax_naive.softmax_attn(x["q"], x["k"], x["v"]),)


SPEC = Softmax()
