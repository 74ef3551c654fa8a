"""exp=serving: what a design costs an inference engine (claim C7).

1. Low-precision storage (quality): each model answers needles from a cache stored in every
   format of model/serving.FORMATS (fp32, bf16, fp8 e4m3 / e5m2 by a round trip through
   torch.float8_*, int8 per-head absmax); compute stays fp32. The haystack is prefilled in fp32
   once and its cache stored at the end (``when=end``); for a design with lightning layers the
   prefill is also run in chunks of STORE_EVERY tokens with the cache stored after every chunk
   (``when=chunk``: the state an
   engine keeps between requests is rounded each time, and later chunks read it). The probes'
   own tokens are appended in fp32. One cell per (design, length, format, when), the same
   haystacks for every cell; ``serving/acc`` with the haystack as the interval's unit (the
   wider of a cluster bootstrap and Wilson), against the bytes the stored cache holds.
   With ``+curriculum=chain`` the models are exp=multihop's chain models and the probes are chains
   of ``eval.hops`` lookups (``serving/chain_acc``, scored on the final value, as many probes a
   cell as the needles get); that run has the storage part only (parts 2 and 3 are the needle run's).
2. Verify k (speed, this CPU): k = 1 .. 8 draft tokens after a prefilled context, checked in
   one forward against k single steps, medians of repeated timings with p25 / p75; the bytes
   this implementation keeps to roll them back (a snapshot: a length for growing caches, the
   lightning state, a copy of the ring); projected onto the GPU profiles (costmodel_serving.verify_cost).
3. Prefix caching and rollback, costed (costmodel_serving.prefix_cache_bytes, prefix_recompute_tokens,
   rollback_bytes): per design and production preset, ``projected``.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from attnbench.bench import costmodel, costmodel_serving, memory
from attnbench.bench.calibrate import load_profile
from attnbench.bench.presets import PRESETS, from_model
from attnbench.designs import spec_of
from attnbench.evaluation.streaming import score
from attnbench.experiments.longctx.plan import haystack_rng
from attnbench.model import ModelCache
from attnbench.model.lightning import LinearState
from attnbench.model.engine import BYTES, FORMATS, SCALE_BYTES, Storage, cache_tensors, saved_state
from attnbench.evaluation.fit import prefill_chunk
from attnbench.records.stats import cluster_bootstrap, wilson
from attnbench.tasks.generate import multihop, niah
from attnbench.training.trainer import get_model, stages_of, vocab_of

KS = tuple(range(1, 9))  # draft tokens verified at once
SAVE_EVERY = 256  # b: tokens between saved states of the prefix-cache costs
STORE_EVERY = 256  # when=chunk: the cache is stored after every this many prefill tokens (an engine's request or block)
PREFIX_LENS = (4096, 65536, 1048576)  # P of the prefix-cache costs
TASK_GROUP = 0  # the haystacks' generator group (needle_4m's single group)
CHAIN_GROUP = 100  # + hops: the chain haystacks' groups (apart from the needles')


def stored_bytes(cache, fmt: str) -> int:
    """Bytes the cache holds when stored in fmt: its elements x the format's bytes, + int8's scales
    (one fp32 a head's vector: a token's K, V or index key; a lightning head's D x D state)."""
    total = 0
    for layer in cache.layers:
        for t in cache_tensors(ModelCache([layer])):
            total += t.numel() * BYTES[fmt]
            if fmt == "int8":
                per = t.shape[-1] * (t.shape[-2] if isinstance(layer, LinearState) and t is layer.state else 1)
                total += t.numel() // per * SCALE_BYTES
    return total


@torch.no_grad()
def prefill(model, context: torch.Tensor, chunk: int, reserve: int, store: Storage | None = None):
    cache = model.new_cache()
    cache.reserve(reserve)
    for s in range(0, context.shape[1], chunk):
        model.prefill(context[:, s : s + chunk], cache)
        if store is not None:
            store.store(cache)
    return cache


@torch.no_grad()
def probe_all(model, cache, sample, device) -> list[bool]:
    snap, out = cache.snapshot(), []
    for probe in sample.probes:
        out.append(score(model(torch.tensor(probe.tokens, device=device)[None], cache).logits[0], probe).correct)
        cache.restore(snap)
    return out


def accuracy(per_haystack: list[list[bool]]) -> dict:
    hits = [float(sum(h)) for h in per_haystack]
    sizes = [float(len(h)) for h in per_haystack]
    k, n = int(sum(hits)), int(sum(sizes))
    w_lo, w_hi = wilson(k, n)
    b_lo, b_hi = cluster_bootstrap(hits, sizes)
    return dict(k=k, n=n, acc=k / max(n, 1), ci_low=min(w_lo, b_lo), ci_high=max(w_hi, b_hi), haystacks=len(per_haystack))


def chain_hops(cfg) -> list[int]:
    """The hop counts of the chain part: eval.hops when the curriculum has chain stages (+curriculum=chain,
    whose models are multihop's), else none (the needle models)."""
    return [int(h) for h in cfg.eval.hops] if any(s.hops > 0 for s in stages_of(cfg.train)) else []


def run(ctx) -> None:
    cfg = ctx.cfg
    vocab = vocab_of(cfg)
    depths = [float(d) for d in cfg.eval.depths]
    lengths = [int(n) for n in cfg.eval.context_lens]
    H = int(cfg.eval.haystacks)
    hops = chain_hops(cfg)
    H_chain = -(-H * len(depths) // int(cfg.eval.chains))  # as many probes a cell as the needles' (chains a haystack)
    for name in ctx.design_names:
        began = time.perf_counter()
        trained = get_model(cfg, name, ctx.device, console=ctx.console)
        ctx.train_s += time.perf_counter() - began  # exp.budget is the evaluation's, not the training's
        model = trained.model.eval()
        chunk = prefill_chunk(model, int(cfg.eval.chunk))
        for L in lengths:
            if not hops:
                storage(
                    ctx, name, trained, model, chunk, L, H, needles(cfg, vocab, L, depths), "serving/acc", task=f"niah_{cfg.eval.variant}"
                )
            for h in hops:
                storage(
                    ctx,
                    name,
                    trained,
                    model,
                    chunk,
                    L,
                    H_chain,
                    chains(cfg, vocab, L, h),
                    "serving/chain_acc",
                    task="chain",
                    hops=h,
                    scoring="final value",
                )
        if hops:  # the chain models add the storage part only: timings and costs are the needle run's
            continue
        verify_timing(ctx, name, model, lengths[0], chunk)
        costs(ctx, name, from_model(cfg.model, cfg.attention[name]))
    if not hops:
        for preset in ("minimax_text01", "minimax_m2", "minimax_m3", "gemma3_27b"):
            costs(ctx, preset, PRESETS[preset], preset=preset)


def needles(cfg, vocab, L: int, depths: list[float]):
    """Haystack i's needle samples (one for multikey; one a depth for single), needle_4m's generator seed (seed, length, group, i)."""

    def of(i: int):
        rng = haystack_rng(cfg.seed, L, TASK_GROUP, i)
        return niah(rng, vocab, L, cfg.eval.variant, depths, kind=cfg.task.haystack, value_noise=cfg.task.value_noise)

    return of


def chains(cfg, vocab, L: int, hops: int):
    """Haystack i's sample: eval.chains chains of ``hops`` lookups, one probe each (scored on the final value, as exp=multihop)."""

    def of(i: int):
        rng = haystack_rng(cfg.seed, L, CHAIN_GROUP + hops, i)
        return [
            multihop(rng, vocab, L, "chain", hops, n_chains=int(cfg.eval.chains), kind=cfg.task.haystack, value_noise=cfg.task.value_noise)
        ]

    return of


def storage(ctx, name: str, trained, model, chunk: int, L: int, H: int, samples_of, metric: str, *, task: str, **fields) -> None:
    """The storage cells of one design and length: the cache stored in every format (and, with lightning
    layers, after every chunk too), the same H haystacks (``samples_of(i)``: haystack i's samples) for all.
    ``metric`` serving/acc (needles; with serving/cache_bytes) or serving/chain_acc (chains, ``fields``
    hops and scoring; the bytes on the record)."""
    modes = ["end"] + (["chunk"] if any(spec_of(c).state for c in model.layout) else [])
    part = {"part": "storage"} if metric == "serving/acc" else {"part": "chain_storage", "hops": fields["hops"]}
    cells = {
        (fmt, when): ctx.cell(design=name, **part, key=trained.record["key"], context_len=L, fmt=fmt, when=when, haystacks=H)
        for when in modes
        for fmt in FORMATS
        if not (when == "chunk" and fmt == "float32")
    }
    if all(c.done for c in cells.values()):
        return
    hits: dict[tuple[str, str], list[list[bool]]] = {k: [] for k in cells}
    nbytes: dict[tuple[str, str], int] = {}
    began = time.perf_counter()
    for i in range(H):
        for key in cells:
            hits[key].append([])
        for sample in samples_of(i):
            context = torch.from_numpy(sample.context).to(ctx.device)[None]  # (1, L)
            reserve = L + max(len(p.tokens) for p in sample.probes)
            base = prefill(model, context, chunk, reserve)
            for (fmt, when), cell in cells.items():
                if cell.done:
                    continue
                if when == "end":
                    cache = saved_state(base)
                    Storage(fmt).store(cache)
                else:
                    cache = prefill(model, context, min(chunk, STORE_EVERY), reserve, Storage(fmt))
                nbytes[fmt, when] = stored_bytes(cache, fmt)
                hits[fmt, when][-1] += probe_all(model, cache, sample, ctx.device)
    seconds = time.perf_counter() - began
    what = f"{fields['hops']} hops" if "hops" in fields else ""
    for (fmt, when), cell in cells.items():
        if cell.done:
            continue
        a = accuracy(hits[fmt, when])
        common = dict(
            task=task,
            context_len=L,
            fmt=fmt,
            when=when,
            dtype="float32",
            n=a["n"],
            ci_low=a["ci_low"],
            ci_high=a["ci_high"],
            haystacks=a["haystacks"],
            chunk=chunk if when == "end" else min(chunk, STORE_EVERY),
            **fields,
        )
        b = nbytes[fmt, when]
        if metric == "serving/acc":
            cell.record(name, metric, a["acc"], "fraction", "measured", **common, note="cache stored in fmt, compute fp32")
            cell.record(name, "serving/cache_bytes", b, "bytes", "measured", **common, bytes_per_token=b / L, cell_s=round(seconds, 2))
        else:
            cell.record(
                name,
                metric,
                a["acc"],
                "fraction",
                "measured",
                **common,
                bytes_per_token=b / L,
                cell_s=round(seconds, 2),
                note="cache stored in fmt, compute fp32",
            )
        cell.commit()
        ctx.console.print(f"  {name} {L:>7,} {what:<7} {fmt:<14} {when:<5}: {a['k']}/{a['n']} ({b / L:,.1f} B/token)")


def _quantiles(xs: list[float]) -> tuple[float, float, float]:
    q = np.quantile(np.asarray(xs) * 1e3, [0.25, 0.5, 0.75])
    return float(q[1]), float(q[0]), float(q[2])


@torch.no_grad()
def verify_timing(ctx, name: str, model, n: int, chunk: int) -> None:
    """k drafts in one forward vs k single steps after n tokens; medians with p25 / p75 (ms)."""
    cfg = ctx.cfg
    repeats = max(int(cfg.bench.repeats), 7)
    cell = ctx.cell(design=name, part="verify", context_len=n, ks=list(KS), repeats=repeats, device=ctx.device.type)
    if cell.done:
        return
    g = torch.Generator().manual_seed(cfg.seed)
    context = torch.randint(cfg.model.vocab_size, (1, n), generator=g).to(ctx.device)
    drafts = torch.randint(cfg.model.vocab_size, (1, max(KS)), generator=g).to(ctx.device)
    cache = prefill(model, context, chunk, n + max(KS))
    snap = cache.snapshot()
    held = snapshot_bytes(snap)
    arch = from_model(cfg.model, cfg.attention[name])
    # CUDA runs asynchronously: a clock read without a sync would time the kernel launches
    sync = torch.cuda.synchronize if ctx.device.type == "cuda" else (lambda: None)
    for k in KS:
        one, steps = [], []
        for _ in range(repeats):  # alternated, so a change of machine load hits both
            sync()
            t = time.perf_counter()
            model(drafts[:, :k], cache)
            sync()
            one.append(time.perf_counter() - t)
            cache.restore(snap)
            sync()
            t = time.perf_counter()
            for j in range(k):
                model(drafts[:, j : j + 1], cache)
            sync()
            steps.append(time.perf_counter() - t)
            cache.restore(snap)
        common = dict(context_len=n, k=k, repeats=repeats, device=ctx.device.type, dtype="float32")
        for mode, xs in (("one_forward", one), ("k_steps", steps)):
            med, p25, p75 = _quantiles(xs)
            cell.record(name, "serving/verify_ms", med, "ms", "measured", mode=mode, p25_ms=p25, p75_ms=p75, **common)
        ratio = [s / o for s, o in zip(steps, one)]  # paired by repeat
        q = np.quantile(ratio, [0.25, 0.5, 0.75])
        cell.record(
            name,
            "serving/verify_speedup",
            float(q[1]),
            "x",
            "measured",
            p25=float(q[0]),
            p75=float(q[2]),
            hardware=f"this {ctx.device.type}",
            note="k single steps / one forward of k tokens, paired by repeat",
            **common,
        )
        cell.record(
            name,
            "serving/rollback_bytes",
            held,
            "bytes",
            "measured",
            method="snapshot",
            projected_states=costmodel_serving.rollback_bytes(arch, k, "float32", strategy="states"),
            projected_recompute=costmodel_serving.rollback_bytes(arch, k, "float32", strategy="recompute"),
            note="what this implementation keeps (model/serving.rollback: a length, the lightning state, a ring copy)",
            **common,
        )
    cell.commit()


def snapshot_bytes(snap) -> int:
    """Bytes of the tensors a snapshot keeps alive beside the cache (a KVCache's snapshot is a length)."""
    if isinstance(snap, torch.Tensor):
        return snap.numel() * snap.element_size()
    if isinstance(snap, (tuple, list)):
        return sum(snapshot_bytes(s) for s in snap)
    return 0


def costs(ctx, name: str, arch, preset: str | None = None) -> None:
    """Prefix-cache and rollback costs (bf16 caches, fp32 states) and verify-k on the GPU profiles: projected."""
    cfg = ctx.cfg
    cell = ctx.cell(design=name, part="costs", preset=preset, profiles=list(cfg.bench.profiles))
    if cell.done:
        return
    extra = {"preset": preset} if preset else {}
    for P in PREFIX_LENS:
        common = dict(context_len=P, save_every=SAVE_EVERY, dtype="bfloat16", method="analytic", **extra)
        cell.record(name, "serving/prefix_bytes", costmodel_serving.prefix_cache_bytes(arch, P, SAVE_EVERY), "bytes", "projected", **common)
        cell.record(name, "serving/prefix_plain_bytes", memory.cache_bytes(arch, P), "bytes", "projected", **common)
    worst = costmodel_serving.prefix_recompute_tokens(arch, SAVE_EVERY - 1, SAVE_EVERY)
    cell.record(name, "serving/prefix_recompute_tokens", worst / 2, "tokens", "projected", save_every=SAVE_EVERY, worst=worst, **extra)
    for k in KS:
        for strategy in costmodel_serving.ROLLBACK_STRATEGIES:
            cell.record(
                name,
                "serving/rollback_bytes",
                costmodel_serving.rollback_bytes(arch, k, strategy=strategy),
                "bytes",
                "projected",
                k=k,
                method=strategy,
                recompute_tokens=costmodel_serving.rollback_recompute_tokens(arch, k - 1, strategy),
                **extra,
            )
    n = 4096
    moe = None if preset else (int(cfg.model.n_experts), int(cfg.model.top_k_experts), int(cfg.model.d_expert))
    for profile in cfg.bench.profiles:
        hw = load_profile(profile)
        step = costmodel.model_cost(arch, "decode", n, moe=moe).seconds(hw, "bfloat16")
        for k in KS:
            one = costmodel_serving.verify_cost(arch, n, k, moe=moe).seconds(hw, "bfloat16")
            cell.record(
                name,
                "serving/verify_speedup",
                k * step / one,
                "x",
                "projected",
                k=k,
                context_len=n,
                hardware=profile,
                dtype="bfloat16",
                method="analytic",
                **extra,
            )
    cell.commit()
