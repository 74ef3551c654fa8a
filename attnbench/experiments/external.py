"""exp=needle_external / multihop_external: attnbench's needle and multi-hop tasks against a model it
did not train in-process (``external.model``: an attnbench checkpoint, a transformers folder or an
OpenAI-compatible server; attnbench/external/sources.py).

The tasks are attnbench's own generators (tasks/generate.py), rendered (external.render) as words
one token each (tokens: external/tokens.py), so an exported attnbench model reads through
transformers or a server exactly the tokens the in-process scorer feeds it, or as prose (text:
external/prose.py) for a language model, lengths counted in its own tokens. One request a probe:
the context and the probe up to its scored position; the answer is the first generated word
(tokens) or the completion's first number (text), scored by exact match against the target. Cells
run from the shortest; one projected past exp.budget from this run's measured speed, or longer
than the model's context, is recorded skipped. needle_external: multi-key needles (eval.variant) at eval.depths;
multihop_external: chains of eval.hops hops (eval.chains a haystack, start key given, final value
scored).

Records (``design`` is the source's label, ``external: true``; the trained-model verdicts never
read them, and the report shows them apart as external checkpoints):
  external/answer   one a request: value 1 or 0 (measured), or None with ``status: failed`` and
                    its reason (a failed request is never a wrong answer); prompt tokens,
                    prefill / decode / total seconds, the target and the answer's word
  external/acc      one a (task, length[, hops]): hits / scored requests with the 95% Wilson
                    interval and the haystack-clustered bootstrap interval, failed requests counted
Each request is a cell of its own: a killed run resumes without repeating or losing a request.
"""

from __future__ import annotations

import time

import numpy as np

from attnbench.external import prose
from attnbench.external.sources import Answer, Request, Source, SourceError, open_source, text_tokenizer
from attnbench.external.tokens import parse, render, words
from attnbench.records.stats import cluster_bootstrap, wilson
from attnbench.tasks.generate import Sample, task_samples
from attnbench.training.trainer import vocab_of

TASK_SEED = 7919  # mixed into every haystack's seed (with the run's seed, the length, the hops and the haystack index)


def label(source: Source) -> str:
    """The records' ``design``: the source kind and the model's name (folder, or served name)."""
    name = source.identity.get("served_name") or source.where.rstrip("/").rsplit("/", 1)[-1]
    return f"{source.kind}:{name}"


def _cells(cfg) -> list[dict]:
    """The (task, length, hops) cells of this experiment, in order."""
    lens = [int(n) for n in cfg.eval.context_lens]
    if cfg.exp.name == "multihop_external":
        return [{"task": "chain", "context_len": n, "hops": int(h)} for n in lens for h in cfg.eval.hops]
    return [{"task": f"niah_{cfg.eval.variant}", "context_len": n, "hops": None} for n in lens]


def _samples(cfg, vocab, cell: dict, haystack: int) -> list[Sample]:
    rng = np.random.default_rng([TASK_SEED, int(cfg.seed), cell["context_len"], cell["hops"] or 0, haystack])
    return task_samples(
        rng,
        vocab,
        cell["context_len"],
        cell["task"],
        depths=list(cfg.eval.depths),
        hops=cell["hops"] or 1,
        chains=int(cfg.eval.chains),
        kind=cfg.task.haystack,
        value_noise=float(cfg.task.value_noise),
    )


def _token_request(cfg, table: list[str], sample: Sample, probe, ident: str) -> tuple[Request, str, dict]:
    """A probe as words, one a token (external/tokens.py): the context and the probe up to its scored token."""
    scored = [i for i, t in enumerate(probe.targets) if t >= 0]
    if len(scored) != 1:
        raise SourceError(f"a probe with {len(scored)} scored tokens; external runs score one (variant multikey or single)")
    ids = [int(t) for t in sample.context] + [int(t) for t in probe.tokens[: scored[0] + 1]]
    return Request(ident, render(ids, table), ids, int(cfg.external.max_new_tokens)), table[int(probe.targets[scored[0]])], {}


def _text_request(cfg, vocab, tokenizer, cell: dict, sample: Sample, probe, ident: str, rng) -> tuple[Request, str, dict]:
    """A probe as prose (external/prose.py), ``context_len`` of the target model's tokens at most."""
    p = prose.render(cell["task"], sample, probe, vocab, tokenizer, cell["context_len"], rng)
    need = len(tokenizer(" " + p.target, add_special_tokens=False)["input_ids"]) + 2  # the number's tokens, and room
    extra = {"depth_tokens": p.depth_tokens, "filler_tokens": p.filler_tokens, "filler_unit": p.unit}
    return Request(ident, p.text, None, max(int(cfg.external.max_new_tokens), need)), p.target, extra


def requests_of(cfg, vocab, table: list[str], cell: dict, tokenizer=None) -> list[tuple[dict, Request, str]]:
    """(coordinates, request, target word) of every probe of the cell's haystacks; ``tokenizer`` (the
    target model's) renders them as prose (external.render=text), else as token words."""
    out = []
    for h in range(int(cfg.eval.haystacks)):
        for s, sample in enumerate(_samples(cfg, vocab, cell, h)):
            for j, probe in enumerate(sample.probes):
                coords = {**cell, "haystack": h, "sample": s, "probe": j, "depth": probe.depth}
                ident = f"{cell['task']}/{cell['context_len']}/{cell['hops'] or 0}/{h}/{s}/{j}"
                if tokenizer is None:
                    req, target, extra = _token_request(cfg, table, sample, probe, ident)
                else:  # one rng a sample: its probes share the haystack's text and names, as they share its tokens
                    rng = np.random.default_rng([TASK_SEED, int(cfg.seed), cell["context_len"], cell["hops"] or 0, h, s, 1])
                    req, target, extra = _text_request(cfg, vocab, tokenizer, cell, sample, probe, ident, rng)
                out.append(({**coords, **extra}, req, target))
    return out


def _answer_fields(a: Answer, target: str, table: list[str] | None) -> tuple[int | None, dict]:
    """(hit, fields) of an answer: the first word as a token (token renderer, ``table``) or the first
    number of the completion (text renderer, ``table`` None), exact match."""
    if table is None:
        got = prose.read(a.text)
    else:
        first = a.first_id if a.first_id is not None else parse(a.text, table)
        got = table[first] if 0 <= first < len(table) else a.text[:40]
    fields: dict = {"prompt_tokens": a.prompt_tokens, "prefill_s": a.prefill_s, "decode_s": a.decode_s, "total_s": a.total_s}
    fields.update(target=target, answer=got)
    if a.status != "measured":
        return None, {**fields, "reason": a.reason}
    return int(got == target), fields


def project(seen: list[tuple[int, float]], length: int, n: int) -> float | None:
    """Seconds ``n`` requests of ``length`` tokens should take, from this run's measured (length,
    seconds a request) cells: the last one scaled by (length / its length)^p, p fitted between the two
    longest lengths measured (clipped to 1..2: reading the prompt at least, full attention at most),
    1 with one length. None before anything is measured."""
    if not seen:
        return None
    by_len = sorted(dict(seen).items())
    (l1, t1), p = by_len[-1], 1.0
    if len(by_len) > 1:
        l0, t0 = by_len[-2]
        p = float(np.clip(np.log(max(t1, 1e-9) / max(t0, 1e-9)) / np.log(l1 / l0), 1.0, 2.0))
    return n * t1 * (length / l1) ** p


def _plan(ctx, cell: dict, todo: int, seen: list[tuple[int, float]], max_ctx) -> str | None:
    """Why the cell is skipped (longer than the model's context, or projected past exp.budget), or None."""
    if max_ctx and cell["context_len"] + 8 > int(max_ctx):
        return f"longer than the model's context ({max_ctx})"
    need, left = project(seen, cell["context_len"], todo), ctx.budget.seconds - (time.perf_counter() - ctx.started)
    if todo and need is not None and need > left:
        return f"projected {need:.0f} s for {todo} requests from this run's measured speed; {max(left, 0):.0f} s of exp.budget={ctx.budget.text} left"
    return None


def _check_vocab(source: Source, vocab, name: str) -> None:
    known = source.identity.get("task")  # the vocabulary an attnbench model (exported or not) was trained on
    mine = {"n_keys": vocab.n_keys, "n_values": vocab.n_values, "n_filler": vocab.n_filler}
    if known and {k: known[k] for k in mine} != mine:
        raise SourceError(
            f"{name} was trained on the task vocabulary {known}; this run's task config differs (task.n_keys, n_values, n_filler)"
        )


def _ask(ctx, name: str, source: Source, reqs, table, common: dict) -> tuple[dict[str, dict], int]:
    """Every request of a cell answered: an earlier run's records read back, the rest asked now.
    ({request: its answer record}, requests asked now)."""
    done: dict[str, dict] = {}
    todo = []
    for coords, req, target in reqs:
        c = ctx.cell(design=name, metric="external/answer", request=req.ident)
        if c.done:
            done[req.ident] = {**c.recorded[0], "haystack": coords["haystack"]}
        else:
            todo.append((coords, c, req, target))
    answers = source.answer([r for _, _, r, _ in todo]) if todo else []
    for (coords, c, req, target), a in zip(todo, answers):
        hit, fields = _answer_fields(a, target, table)
        done[req.ident] = c.record(name, "external/answer", hit, "hit", a.status, request=req.ident, **coords, **fields, **common)
        c.commit()
    return done, len(todo)


def _accuracy(done: dict[str, dict]) -> dict:
    """Hits over scored requests with the Wilson and the haystack-clustered bootstrap intervals; failed ones counted."""
    per_haystack: dict[int, list[int]] = {}
    failed = 0
    for rec in done.values():
        if rec.get("status") != "measured":
            failed += 1
        else:
            per_haystack.setdefault(int(rec["haystack"]), []).append(int(rec["value"]))
    hits = [float(sum(v)) for v in per_haystack.values()]
    sizes = [float(len(v)) for v in per_haystack.values()]
    k, n = int(sum(hits)), int(sum(sizes))
    lo, hi = wilson(k, n)
    blo, bhi = cluster_bootstrap(hits, sizes)
    return dict(k=k, n=n, failed=failed, ci_low=lo, ci_high=hi, ci_method="wilson", cluster_low=blo, cluster_high=bhi, haystacks=len(sizes))


def run(ctx) -> None:
    cfg = ctx.cfg
    seen: list[tuple[int, float]]
    source = open_source(str(cfg.external.model), cfg.external, ctx.device)  # a bad name fails here, in one line
    name, vocab = label(source), vocab_of(cfg)
    text = str(cfg.external.render) == "text"
    tokenizer = text_tokenizer(source, cfg.external) if text else None
    table = words(vocab, int(cfg.model.vocab_size))
    if not text:
        _check_vocab(source, vocab, name)
    common = {"external": True, "model_source": source.identity, "render": cfg.external.render}
    max_ctx, seen = source.identity.get("max_context"), []  # seen: (length, seconds a request) of this run's cells
    ctx.console.print(f"{cfg.exp.name}: {name} ({source.kind}, {source.where}, {cfg.external.render} renderer)")
    for cell in _cells(cfg):
        acc_cell = ctx.cell(design=name, metric="external/acc", **cell)
        if acc_cell.done:
            continue
        t0 = time.perf_counter()
        reqs = requests_of(cfg, vocab, table, cell, tokenizer)
        asked = sum(not ctx.cell(design=name, metric="external/answer", request=r.ident).done for _, r, _ in reqs)
        why = _plan(ctx, cell, asked, seen, max_ctx)
        if why:
            acc_cell.record(name, "external/acc", None, "fraction", "skipped", note=why, **cell, **common)
            acc_cell.commit()
            ctx.console.print(f"  {cell['task']} at {cell['context_len']:,}: skipped ({why})")
            continue
        done, asked = _ask(ctx, name, source, reqs, None if text else table, common)
        wall = time.perf_counter() - t0
        if asked:
            seen.append((cell["context_len"], wall / asked))
        acc = _accuracy(done)
        k, n, lo, hi = acc["k"], acc["n"], acc["ci_low"], acc["ci_high"]
        acc_cell.record(
            name, "external/acc", k / n if n else None, "fraction", "measured" if n else "failed", **cell, **common, **acc, wall_s=wall
        )
        acc_cell.commit()
        hops = f", {cell['hops']} hops" if cell["hops"] else ""
        failed = f", {acc['failed']} failed" if acc["failed"] else ""
        ctx.console.print(
            f"  {cell['task']} at {cell['context_len']:,}{hops}: {k}/{n} = {k / max(n, 1):.2f} [{lo:.2f}-{hi:.2f}]{failed} ({asked} requests now, {wall:.1f} s)"
        )
