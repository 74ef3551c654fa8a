"""Sliding-window attention (W): a ring buffer of the last w tokens' K and V."""

from __future__ import annotations

from dataclasses import dataclass

from .settings import setting
from .softmax import Softmax, SoftmaxSettings


@dataclass
class SlidingWindowSettings(SoftmaxSettings):
    window: int = setting(64, keyed_at_default=True, min=1, arch="window", help="keys each query sees (itself included)")


class SlidingWindow(Softmax):
    name, op = "sliding_window", "sliding_window"
    grows, ring, quadratic = False, True, False
    cpu_flex = True
    shape_settings = ("window",)

    def costs(self):
        from attnbench.bench import op_costs as cm  # the formulas (imported on use: a spec loads no cost model)

        return {"sliding_window": cm.sliding_window_cost}

    def held(self, arch, n):
        return min(n, arch.window)  # until the window is full

    def fill_cache(self, attn, cache, n, batch, rnd):
        k = rnd(batch, attn.Hkv, min(n, attn.window), attn.D)
        cache.write(k, rnd(*k.shape))
        cache.length = n

    def band(self, sh):
        return sh.window

    def call(self, x, sh, backend, **kw):
        import attnbench.kernels as K  # on use: the config reads this module's settings without torch

        return (K.sliding_window_attn(x["q"], x["k"], x["v"], sh.window, backend=backend),)

    def naive(self, x, sh):
        from attnbench.kernels.sliding_window import naive as sliding_naive

        return (sliding_naive.sliding_window_attn(x["q"], x["k"], x["v"], sh.window),)


SPEC = SlidingWindow()
