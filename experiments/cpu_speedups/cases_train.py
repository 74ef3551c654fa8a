"""measure.py's training cases: MSA's layer and step, lightning's op at 16K."""

from __future__ import annotations

import math

import torch

from experiments.cpu_speedups.harness import BASE, alternate, close, old_module


def msa_train_layer(calls: int, B: int = 16, T: int = 1024):
    """One msa layer's training ops, forward + backward: msa_attn and the index KL (tiny model
    shapes: H 2, Hkv 1, D 32, Di 32, block 16, top 4)."""
    from attnbench.kernels.msa import reference as new
    from attnbench.model.msa import index_kl, index_kl_dense

    old = old_module(
        "kernels/msa/reference.py",
        "old_msa_reference",
        {"from ..softmax.reference import": "from attnbench.kernels.softmax.reference import"},
    )
    H, G, D, Di, bs, k = 2, 1, 32, 32, 16, 4
    g = torch.Generator().manual_seed(0)
    q, kk, v = (torch.randn(B, h, T, D, generator=g, requires_grad=True) for h in (H, G, G))
    iq = torch.randn(B, G, T, Di, generator=g, requires_grad=True)
    ik = torch.randn(B, T, Di, generator=g, requires_grad=True)
    idx = new.msa_select(iq, ik, bs, k)
    scale = 1 / math.sqrt(D)

    def step(attn, kl):
        def run():
            o = attn(q, kk, v, idx, bs, scale=scale)
            loss = (o * o).mean() + kl(q.detach(), kk.detach(), iq, ik, idx, bs, scale)
            grads = torch.autograd.grad(loss, [q, kk, v, iq, ik])
            return o, loss, grads

        return run

    o_step, n_step = step(old.msa_attn, index_kl_dense), step(new.msa_attn, index_kl)
    (oo, ol, og), (no, nl, ng) = o_step(), n_step()
    close(no, oo, "o"), close(nl, ol, "loss")
    for a, b, name in zip(ng, og, ["dq", "dk", "dv", "diq", "dik"]):
        close(a, b, name, atol=1e-6)
    return [
        dict(
            design="msa",
            metric="speedup/msa_train_layer",
            unit="x",
            context_len=T,
            batch=B,
            what="msa_attn + index KL, forward + backward, one layer (H 2, Hkv 1, D 32, block 16, top 4)",
            old=f"{BASE}: block-major loop through autograd + dense T x T index KL",
            new="gathered rows (torch.autograd.Function, compiled tiles) + KL by rows",
            **alternate(o_step, n_step, calls),
        )
    ]


def msa_train_step(calls: int, B: int = 16, T: int = 1024):
    """A whole training step (forward, loss, backward) of the 8-layer msa task model; and the
    softmax model's step beside it (new code both), for scale."""
    import attnbench.model.msa as model_msa
    from attnbench.kernels.msa import reference as new
    from attnbench.model import Model
    from helpers import compose_cfg

    old = old_module(
        "kernels/msa/reference.py",
        "old_msa_reference",
        {"from ..softmax.reference import": "from attnbench.kernels.softmax.reference import"},
    )
    cfg = compose_cfg([])
    x = torch.randint(cfg.model.vocab_size, (B, T), generator=torch.Generator().manual_seed(0))
    models = {}
    for name in ("msa", "softmax"):
        torch.manual_seed(0)
        models[name] = Model(cfg.model, cfg.attention[name]).train()

    def step(name, use_old=False):
        def run():
            saved = new.msa_attn, model_msa.index_kl
            if use_old:
                new.msa_attn, model_msa.index_kl = old.msa_attn, model_msa.index_kl_dense
            try:
                m = models[name]
                m.zero_grad(set_to_none=True)
                out = m(x)
                loss = torch.nn.functional.cross_entropy(out.logits[:, -8:].flatten(0, 1), x[:, -8:].flatten())
                loss = loss + out.balance_loss + out.index_loss
                loss.backward()
                return loss.detach()
            finally:
                new.msa_attn, model_msa.index_kl = saved

        return run

    close(step("msa")(), step("msa", True)(), "loss")
    common = dict(unit="x", context_len=T, batch=B, what="training step: forward, loss, backward (8 layers, tiny model)")
    return [
        dict(
            design="msa",
            metric="speedup/msa_train_step",
            old=f"{BASE} msa path",
            new="gathered rows",
            **common,
            **alternate(step("msa", True), step("msa"), calls),
        ),
        dict(
            design="msa",
            metric="ratio/softmax_over_msa_train_step",
            old="softmax step (current code)",
            new="msa step (current code)",
            **common,
            **alternate(step("softmax"), step("msa"), calls),
        ),
    ]


def lightning_op_16k(calls: int, H: int = 8, D: int = 8, T: int = 16384):
    """lightning_attn forward on one 16K-token prefill chunk of the hybrid: forced short tiles
    against the default tiles (tile_for); same code otherwise. Recorded when `segment=` meant the
    tokens of a segment of all heads (an 8 MiB bound: two segments, against one); since the
    reference's tiles (aa733d3) it means the tokens of a tile of one (batch, head) pair, and the
    labels below say so."""
    from attnbench.kernels.lightning.reference import SEGMENT_BYTES, chunk_for, lightning_attn, segment_for
    from attnbench.model.lightning import decay_rates

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.nn.functional.silu(torch.randn(1, H, T, D, generator=g)) for _ in range(3))
    decay = decay_rates(H, 0, 8)
    old_segment = segment_for(H, chunk_for(D), budget=8 << 20)

    def run(seg):
        return lambda: lightning_attn(q, k, v, decay, segment=seg)

    with torch.no_grad():
        (oo, os_), (no, ns) = run(old_segment)(), run(None)()
        close(no, oo, "o"), close(ns, os_, "state")
        return [
            dict(
                design="lightning",
                metric="speedup/lightning_op",
                unit="x",
                context_len=T,
                heads=H,
                head_dim=D,
                what="lightning_attn forward, B 1, contiguous inputs",
                old=f"tiles of one (batch, head) pair x {old_segment} tokens (segment={old_segment})",
                new=f"tile_for: all {T} tokens of as many pairs as {SEGMENT_BYTES >> 20} MiB of scores allow",
                **alternate(run(old_segment), run(None), calls),
            )
        ]
