"""exp=smoke: every design composes, trains one step, and its three paths agree.

For each design: build the tiny backbone, run forward + backward on random tokens, then
compare the full-sequence forward with (a) chunked prefill into a cache and (b) one-token
decode steps, and record the relative errors, cache bytes and parameter counts. A path that
disagrees (relative error > 1e-5) is recorded as ``failed`` and the run exits non-zero.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from attnbench.kernels import for_layout, label
from attnbench.model import Model, ModelCache

TOLERANCE = 1e-5  # fp32 relative error allowed between the three paths


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def prefill_logits(model: Model, idx: torch.Tensor, chunk: int) -> tuple[torch.Tensor, ModelCache]:
    cache = model.new_cache()
    logits = [model(idx[:, i : i + chunk], cache).logits for i in range(0, idx.shape[1], chunk)]
    return torch.cat(logits, dim=1), cache


def run(ctx) -> None:
    cfg, dev = ctx.cfg, ctx.device
    B, T, V = cfg.exp.batch, cfg.exp.seq_len, cfg.model.vocab_size
    failures = []
    for name in ctx.design_names:
        design = cfg.attention[name]
        cell = ctx.cell(design=name)
        if cell.done:
            ctx.console.print(f"  {name:<18} already recorded in this run directory; skipped")
            continue
        torch.manual_seed(cfg.seed)
        model = Model(cfg.model, design).to(dev)
        backend = label(for_layout(model.layout, cfg.backend, dev))  # the kernels that ran

        def rec(metric, value, unit, status="measured", **kw):
            return cell.record(name, metric, value, unit, status, backend=backend, dtype="float32", context_len=T, **kw)

        for part, n in model.param_counts().items():
            rec(f"params/{part}", n, "count")

        idx = torch.randint(V, (B, T + 1), generator=torch.Generator().manual_seed(cfg.seed)).to(dev)
        model.train()
        start = time.perf_counter()
        out = model(idx[:, :-1])
        ce = F.cross_entropy(out.logits.reshape(-1, V), idx[:, 1:].reshape(-1))
        loss = ce + cfg.model.balance_coef * out.balance_loss + design.index_loss_weight * out.index_loss
        loss.backward()
        step_ms = 1e3 * (time.perf_counter() - start)
        grad_norm = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters() if p.grad is not None))
        ok = math.isfinite(float(loss.detach())) and math.isfinite(grad_norm) and grad_norm > 0
        rec("smoke/train_loss", float(ce.detach()), "nats", "measured" if ok else "failed", note=f"ln(V)={math.log(V):.3f}")
        rec("smoke/grad_norm", grad_norm, "norm", "measured" if ok else "failed")
        rec("smoke/index_loss", float(out.index_loss.detach()), "nats")
        rec("smoke/fwd_bwd_ms", step_ms, "ms")
        if not ok:
            failures.append(f"{name}: non-finite loss or zero gradient")

        model.eval()
        with torch.no_grad():
            seq = idx[:, :T]
            full = model(seq).logits
            chunked, cache = prefill_logits(model, seq, cfg.exp.prefill_chunk)
            stepped, _ = prefill_logits(model, seq, 1)
        for path, got in (("prefill", chunked), ("decode", stepped)):
            err = relative_error(got, full)
            good = err <= TOLERANCE
            rec(f"smoke/{path}_vs_full_rel_err", err, "relative", "measured" if good else "failed", note=f"tolerance {TOLERANCE}")
            if not good:
                failures.append(f"{name}: {path} differs from the full forward by {err:.2e}")
        rec("cache/bytes", cache.nbytes(), "bytes")
        rec("cache/bytes_per_layer", cache.nbytes_by_layer(), "bytes")
        cell.commit()
        ctx.console.print(
            f"  {name:<18} {model.layout:<10} params={model.param_counts()['total']:>7,} "
            f"loss={float(ce.detach()):.3f} cache={cache.nbytes():>8,} B"
        )
    if failures:
        raise SystemExit("smoke failed: " + "; ".join(failures))
