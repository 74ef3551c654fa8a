"""exp=multihop: do the designs compose lookups? Chains of 1-4 hops scattered in a haystack (claim C3).

Each haystack holds `eval.chains` chains of the cell's hop count (plus their probes); the
16-layer hybrid (two softmax layers) runs beside the 8-layer one so that a deficit is not
merely a count of exact-lookup layers. See attnbench/experiments/longctx.py for the flow.
"""

from __future__ import annotations

from attnbench.experiments.longctx import Grid, run_grid
from attnbench.tasks.generate import multihop
from attnbench.train import vocab_of


def run(ctx) -> None:
    cfg = ctx.cfg
    vocab = vocab_of(cfg)
    groups = [{"hop_task": t, "hops": int(h)} for t in cfg.eval.hop_tasks for h in cfg.eval.hops]

    def make(rng, context_len, group):
        return [multihop(rng, vocab, context_len, group["hop_task"], group["hops"], n_chains=cfg.eval.chains,
                         kind=cfg.task.haystack, value_noise=cfg.task.value_noise)]

    run_grid(ctx, Grid(metric="multihop/acc", task="multihop", groups=groups, make=make, by="hops",
                       params={"chains": cfg.eval.chains, "haystack": cfg.task.haystack, "value_noise": cfg.task.value_noise}))
