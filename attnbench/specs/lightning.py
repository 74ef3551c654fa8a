"""Lightning attention (L): linear attention with a per-head decay; a fixed D x D state per head."""

from __future__ import annotations

from dataclasses import dataclass

from . import Spec
from .settings import setting


@dataclass
class LightningSettings:
    """What a lightning layer reads (the gated delta layer reads the same: its heads and its conv)."""

    lightning_heads: int = setting(0, min=0, arch="lightning_heads", help="heads of the layer (0: model.n_heads), at the same total width")
    qkv_conv: int = setting(
        0,
        min=0,
        arch="qkv_conv",
        help="kernel of a short causal depthwise conv on q, k, v (0: none, the faithful Text-01 layer; gated delta: 0 is its 4)",
    )

    @staticmethod
    def check(d, where: str, cfg) -> None:
        """The heads split the attention width evenly."""
        from attnbench.config.errors import ConfigError

        width = cfg.model.n_heads * cfg.model.head_dim
        if d.lightning_heads and width % d.lightning_heads:
            raise ConfigError(
                f"{where}.lightning_heads", d.lightning_heads, f"must divide the attention width model.n_heads x model.head_dim = {width}"
            )


class Lightning(Spec):
    name, op = "lightning", "lightning"
    grows, state = False, True
    compiled_prefill = fill_runs_op = True
    baselines: tuple[str, ...] = ("reference", "fla")
    plain_kw = True
    outputs = ("o", "final_state")
    gqa_inputs = False

    def costs(self):
        from attnbench.bench import op_costs as cm  # the formulas (imported on use: a spec loads no cost model)

        return {"lightning": cm.lightning_cost}

    def token_elements(self, arch):
        return 0

    def layer_bytes(self, arch, n, e, state_e):
        if n == 0:
            return 0
        h, d = arch.lightning_shape
        conv = max(arch.qkv_conv - 1, 0) * 3 * h * d * e  # the conv variant's last K - 1 inputs
        return h * d * d * state_e + conv

    def fill_cache(self, attn, cache, n, batch, rnd):
        cache.state, cache.length = rnd(batch, attn.H, attn.D, attn.D).float(), n

    def projection_params(self, arch):
        C, H, D = arch.d_model, arch.n_heads, arch.head_dim
        return C * 3 * H * D + C * H * D + H * D * C

    def fill_width(self, arch):
        return 5 * arch.n_heads * arch.head_dim  # q, k, v, gate and output projections: it runs its attention

    def inputs(self, sh, rnd):
        """q, k scaled by 0.3; a decode-like call (T < S) starts from a random state (fp32)."""
        from attnbench.model.lightning import decay_rates

        x = dict(q=rnd(sh.B, sh.H, sh.T, sh.D, scale=0.3), k=rnd(sh.B, sh.H, sh.T, sh.D, scale=0.3), v=rnd(sh.B, sh.H, sh.T, sh.D))
        x["decay"] = decay_rates(sh.H, 0, 2).to(x["q"].device)  # (H,) the first of two layers' rates
        if sh.T < sh.keys:
            x["state"] = rnd(sh.B, sh.H, sh.D, sh.D).float()
        return x

    def call(self, x, sh, backend, **kw):
        """(o, final state); keywords (compute_dtype) go to the plain-torch reference."""
        import attnbench.kernels as K  # on use: the config reads this module's settings without torch

        if backend == "reference" and kw:
            from attnbench.kernels.lightning.reference import lightning_attn

            return lightning_attn(x["q"], x["k"], x["v"], x["decay"], initial_state=x.get("state"), **kw)
        return K.lightning_attn(x["q"], x["k"], x["v"], x["decay"], initial_state=x.get("state"), backend=backend)

    def naive(self, x, sh):
        from attnbench.kernels.lightning import naive as lightning_naive

        return lightning_naive.lightning_attn(x["q"], x["k"], x["v"], x["decay"], initial_state=x.get("state"))


SPEC = Lightning()
