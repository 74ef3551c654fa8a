"""Gated DeltaNet (G): the gated delta rule with a fixed Dk x Dv fp32 state per head, as lightning's
(the same heads and width: attnbench/model/gated_delta.py), plus its short convolution's tail."""

from __future__ import annotations

from .lightning import Lightning

F32 = 4


def gated_delta_cost(phase, n, a, B, e, impl):
    """The chunked WY form (kernels/gated_delta/reference.py) per (batch, head) pair and token, chunk C:
    k k^T, q k^T and the masked decays (C Dk each), the triangular solve for U0 and W (C (Dk + Dv) / 2),
    the corrected values and the outputs (C Dv + 3 Dk Dv); decode is the recurrence, T of 1."""
    from attnbench.bench.cost_terms import Cost
    from attnbench.kernels.gated_delta.reference import chunk_for

    h, d = a.lightning_shape
    BH, T = B * h, (n if phase == "prefill" else 1)
    C = 1 if T == 1 else min(chunk_for(d), T)
    state = BH * d * d * F32
    flops = 2 * BH * T * (C * (2.5 * d + 1.5 * d) + 3 * d * d)
    io = BH * T * (4 * d + 2) * e + (2 * state if phase == "decode" else state)
    c = Cost().add("gated_delta", flops, io, 1 if impl == "fused" else 8 + 4 * -(-T // C))
    return c if impl == "fused" else c.add("glue", 0, 0, 40, kind="vec")


class GatedDelta(Lightning):
    name, op = "gdn", "gated_delta"
    compiled_prefill = False  # its blocks are not among Model.compile_prefill's (lightning's)
    baselines: tuple[str, ...] = ("reference",)
    plain_kw = False

    def costs(self):
        return {"gated_delta": gated_delta_cost}

    def layer_bytes(self, arch, n, e, state_e):
        if n == 0:
            return 0
        from attnbench.model.gated_delta import CONV

        h, d = arch.lightning_shape
        return h * d * d * state_e + ((arch.qkv_conv or CONV) - 1) * 3 * h * d * e  # the state, the conv's last K - 1 inputs

    def projection_params(self, arch):
        return super().projection_params(arch) + 2 * arch.d_model * arch.lightning_shape[0]  # W_a, W_b: one gate each a head

    def fill_width(self, arch):
        return super().fill_width(arch) + 2 * arch.lightning_shape[0]

    def inputs(self, sh, rnd):
        """q, k L2-normalised; log-gates from ~0 to ~-3, write strengths in (0, 1); a decode-like
        call (T < S) starts from a random state (fp32)."""
        import torch  # on use: the config reads the settings of these modules without torch
        import torch.nn.functional as F

        x = dict(
            q=F.normalize(rnd(sh.B, sh.H, sh.T, sh.D), dim=-1),
            k=F.normalize(rnd(sh.B, sh.H, sh.T, sh.D), dim=-1),
            v=rnd(sh.B, sh.H, sh.T, sh.D),
        )
        x["g"] = F.logsigmoid(rnd(sh.B, sh.H, sh.T, scale=2.0) + 2)
        x["beta"] = torch.sigmoid(rnd(sh.B, sh.H, sh.T))
        if sh.T < sh.keys:
            x["state"] = rnd(sh.B, sh.H, sh.D, sh.D).float()
        return x

    def call(self, x, sh, backend, **kw):
        import attnbench.kernels as K

        return K.gated_delta(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x.get("state"), backend=backend)

    def naive(self, x, sh):
        from attnbench.kernels.gated_delta import naive as gd_naive

        return gd_naive.gated_delta(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x.get("state"))


SPEC = GatedDelta()
