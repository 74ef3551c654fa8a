"""exp=multihop: do the designs compose lookups? Chains of 1-4 hops scattered in a haystack (claim C3).

Each haystack holds `eval.chains` chains of the cell's hop count. A probe gives only the
chain's start key and the hop count, ``[HOP_k K_a]``, and is scored on the chain's final value
(``multihop/acc``, scoring "final value"): a model must compose the k lookups itself; one exact
lookup answers the first link, which is wrong from 2 hops on (tests/test_tasks.py). The same
chains as k single lookups with every intermediate key given are scored apart, as a diagnostic
(``multihop/lookup_acc``): a model can pass it without composing anything. Each model is first
checked on the same probes at its own training length (``train/acc`` per hop count).

The 16-layer hybrid (two softmax layers) runs beside the 8-layer one so that a deficit is not
merely a count of exact-lookup layers. See attnbench/experiments/longctx/flow.py for the flow.
"""

from __future__ import annotations

from attnbench.experiments.longctx.plan import Grid
from attnbench.experiments.longctx.flow import run_grid
from attnbench.tasks.generate import multihop
from attnbench.training.trainer import vocab_of

SCORING = "final value"  # recorded with every multihop/acc: what a probe is scored on


def run(ctx) -> None:
    cfg = ctx.cfg
    vocab = vocab_of(cfg)
    groups = [{"hop_task": t, "hops": int(h)} for t in cfg.eval.hop_tasks for h in cfg.eval.hops]

    def make(rng, context_len, group):
        return [
            multihop(
                rng,
                vocab,
                context_len,
                group["hop_task"],
                group["hops"],
                n_chains=cfg.eval.chains,
                kind=cfg.task.haystack,
                value_noise=cfg.task.value_noise,
            )
        ]

    run_grid(
        ctx,
        Grid(
            metric="multihop/acc",
            task="multihop",
            groups=groups,
            make=make,
            by="hops",
            params={"chains": cfg.eval.chains, "haystack": cfg.task.haystack, "value_noise": cfg.task.value_noise},
            fields={"scoring": SCORING},
        ),
    )
