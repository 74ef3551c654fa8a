"""exp=needle_external / multihop_external: attnbench's needle and multi-hop tasks against a model it
did not train in-process (``external.model``: an attnbench checkpoint, a transformers folder or an
OpenAI-compatible server; attnbench/external/sources.py).

The tasks are attnbench's own generators (tasks/generate.py), rendered as words one token each
(external/tokens.py), so an exported attnbench model reads through transformers or a server
exactly the tokens the in-process scorer feeds it. One request a probe: the context and the
probe's tokens up to its scored position; the answer is the first generated word, scored by exact
match against the target. needle_external: multi-key needles (eval.variant) at eval.depths;
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

from attnbench.external.sources import Answer, Request, Source, SourceError, open_source
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


def requests_of(cfg, vocab, table: list[str], cell: dict) -> list[tuple[dict, Request, int]]:
    """(coordinates, request, target id) of every probe of the cell's haystacks."""
    out = []
    for h in range(int(cfg.eval.haystacks)):
        for s, sample in enumerate(_samples(cfg, vocab, cell, h)):
            for j, probe in enumerate(sample.probes):
                scored = [i for i, t in enumerate(probe.targets) if t >= 0]
                if len(scored) != 1:
                    raise SourceError(
                        f"{cell['task']}: a probe with {len(scored)} scored tokens; external runs score one (variant multikey or single)"
                    )
                ids = [int(t) for t in sample.context] + [int(t) for t in probe.tokens[: scored[0] + 1]]
                coords = {**cell, "haystack": h, "sample": s, "probe": j, "depth": probe.depth}
                ident = f"{cell['task']}/{cell['context_len']}/{cell['hops'] or 0}/{h}/{s}/{j}"
                out.append(
                    (coords, Request(ident, render(ids, table), ids, int(cfg.external.max_new_tokens)), int(probe.targets[scored[0]]))
                )
    return out


def _answer_fields(a: Answer, target: int, table: list[str]) -> tuple[int | None, dict]:
    got = a.first_id if a.first_id is not None else parse(a.text, table)
    fields = {
        "prompt_tokens": a.prompt_tokens,
        "prefill_s": a.prefill_s,
        "decode_s": a.decode_s,
        "total_s": a.total_s,
        "target": table[target],
        "answer": table[got] if 0 <= got < len(table) else a.text[:40],
    }
    if a.status != "measured":
        return None, {**fields, "reason": a.reason}
    return int(got == target), fields


def run(ctx) -> None:
    cfg = ctx.cfg
    source = open_source(str(cfg.external.model), cfg.external, ctx.device)  # a bad name fails here, in one line
    name, vocab = label(source), vocab_of(cfg)
    table = words(vocab, int(cfg.model.vocab_size))
    known = source.identity.get("task")  # the vocabulary an attnbench model (exported or not) was trained on
    if known and {k: known[k] for k in ("n_keys", "n_values", "n_filler")} != {
        "n_keys": vocab.n_keys,
        "n_values": vocab.n_values,
        "n_filler": vocab.n_filler,
    }:
        raise SourceError(
            f"{name} was trained on the task vocabulary {known}; this run's task config differs (task.n_keys, n_values, n_filler)"
        )
    common = {"external": True, "model_source": source.identity, "render": cfg.external.render}
    max_ctx = source.identity.get("max_context")
    ctx.console.print(f"{cfg.exp.name}: {name} ({source.kind}, {source.where})")
    for cell in _cells(cfg):
        acc_cell = ctx.cell(design=name, metric="external/acc", **cell)
        if acc_cell.done:
            continue
        if max_ctx and cell["context_len"] + 8 > int(max_ctx):
            acc_cell.record(
                name, "external/acc", None, "fraction", "skipped", note=f"longer than the model's context ({max_ctx})", **cell, **common
            )
            acc_cell.commit()
            continue
        done: dict[str, dict] = {}  # request -> its answer record (an earlier run's, or this one's)
        todo = []
        for coords, req, target in requests_of(cfg, vocab, table, cell):
            c = ctx.cell(design=name, metric="external/answer", request=req.ident)
            if c.done:
                done[req.ident] = {**c.recorded[0], "haystack": coords["haystack"]}
            else:
                todo.append((coords, c, req, target))
        t0 = time.perf_counter()
        answers = source.answer([r for _, _, r, _ in todo]) if todo else []
        for (coords, c, req, target), a in zip(todo, answers):
            hit, fields = _answer_fields(a, target, table)
            done[req.ident] = c.record(name, "external/answer", hit, "hit", a.status, request=req.ident, **coords, **fields, **common)
            c.commit()
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
        acc_cell.record(
            name,
            "external/acc",
            k / n if n else None,
            "fraction",
            "measured" if n else "failed",
            **cell,
            **common,
            k=k,
            n=n,
            failed=failed,
            ci_low=lo,
            ci_high=hi,
            ci_method="wilson",
            cluster_low=blo,
            cluster_high=bhi,
            haystacks=len(sizes),
            wall_s=time.perf_counter() - t0,
        )
        acc_cell.commit()
        hops = f", {cell['hops']} hops" if cell["hops"] else ""
        ctx.console.print(
            f"  {cell['task']} at {cell['context_len']:,}{hops}: {k}/{n} = {k / max(n, 1):.2f} [{lo:.2f}-{hi:.2f}]"
            + (f", {failed} failed" if failed else "")
            + f" ({len(todo)} requests now, {time.perf_counter() - t0:.1f} s)"
        )
