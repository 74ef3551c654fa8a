"""exp=kernels_gpu: the Triton kernels on a CUDA device, checked then timed, in one call.

    python -m attnbench +exp=kernels_gpu              # on a GPU machine, inside exp.budget (8 min)
    python -m attnbench +exp=kernels_gpu device=cpu   # the dry run (CI): interpreter, tiny shapes

1. Checks, for each op, dtype (kernels.dtypes: bf16, fp16) and T in check_lengths: forward and
   backward of backend="triton" against the fp32 reference on the same rounded inputs (at
   these lengths the dense naive truths, kernels/<op>/naive.py, would not fit), within twice
   the error of plain torch in that dtype plus 4 ulps of the output's scale (the rule of
   kernels/tolerance.py; plain torch = the reference run in that dtype, lightning's products
   in it). Lightning also checks its final state, msa its selection (identical rows, or rows that
   differ only between blocks whose scores tie to rounding). check_fwd_lengths: forward only.
2. Timings, of the ops whose checks all passed, in the first dtype: the forward at lengths, the
   forward + backward at grad_lengths; the kernel against its baselines (causal SDPA always;
   flash_attn, compiled FlexAttention, fla's chunk_lightning_attn and the plain-torch
   reference where listed in kernels.baselines and where they import / compile; a baseline that
   does not is recorded ``skipped`` with the reason). triton.testing.do_bench medians and
   quartiles; speedups = baseline / kernel, measured in this process.
3. summary.md beside results.jsonl. A cell that would start after exp.budget is recorded
   ``skipped``. On device=cpu every record carries dry_run=true: it proves the script runs
   end to end, its timings say nothing about speed.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

import torch

import attnbench.kernels as K
from attnbench.bench import ops as O
from attnbench.kernels import tolerance
from attnbench.bench.timing import Timing, time_fn
from attnbench.designs import BASELINE_OP, spec_of_op
from attnbench.runner import RunContext

GRAD_NAMES = ("q", "k", "v")
SELECT_MAX_GAP = 1e-3  # relative score gap allowed between differing msa selections (ties)


def use_interpreter(device: torch.device) -> None:
    """On CPU the kernels need Triton's interpreter, chosen before their modules are imported."""
    loaded = [m for m in sys.modules if m.startswith("attnbench.kernels.") and m.endswith(".triton")]
    want = "1" if device.type == "cpu" else "0"
    if device.type == "cuda" and os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise SystemExit("kernels_gpu on CUDA with TRITON_INTERPRET=1 would time the interpreter: unset it")
    if loaded and os.environ.get("TRITON_INTERPRET", "0") != want:
        raise SystemExit(f"Triton kernel modules {loaded} were imported before TRITON_INTERPRET={want} could be set")
    if device.type == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"


class Run:
    def __init__(self, ctx: RunContext):
        self.ctx, self.cfg, self.dev = ctx, ctx.cfg.kernels, ctx.device
        self.dry = self.dev.type != "cuda"
        self.shapes = self.cfg.dry_run if self.dry else self.cfg.shapes
        self.deadline = time.perf_counter() + ctx.budget.seconds
        self.min_run_time = 0.01 if self.dry else self.cfg.min_run_time
        self.passed: dict[str, bool] = {}
        self.skipped_baselines: set[tuple[str, str, str]] = set()  # (op, baseline, metric)

    def shape(self, T: int) -> O.Shape:
        s = self.shapes
        return O.Shape(s.batch, s.heads, s.kv_heads, T, s.head_dim, s.window, s.block_size, s.top_k, s.index_dim)

    def record(self, cell, op, metric, value, unit, status="measured", **kw):
        kw.setdefault("layout", "")
        if self.dry:
            kw["dry_run"] = True
        design = O.design_of(op)
        if cell is not None:
            cell.record(design, metric, value, unit, status, op=op, **kw)
        else:  # a record of its own (a skip): keyed by what it is about
            self.ctx.record(design, metric, value, unit, status, key=("op", "backend", "dtype", "context_len", "note"), op=op, **kw)

    def out_of_time(self) -> bool:
        return time.perf_counter() > self.deadline

    def free(self):
        if self.dev.type == "cuda":
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ checks

    def check(self, op: str, T: int, dtype: torch.dtype, grads: bool) -> None:
        """Check one (op, T, dtype); any exception is recorded ``failed`` (the run goes on)."""
        dt = str(dtype).removeprefix("torch.")
        cell = self.ctx.cell(part="check", op=op, T=T, dtype=dt, grads=grads)
        if self.out_of_time():
            self.record(None, op, "kernels/check_err", None, "abs", "skipped", dtype=dt, context_len=T, note="exp.budget spent")
            self.passed[op] = False
            return
        start = time.perf_counter()
        try:
            ok = self._check(cell, op, T, dtype, dt, grads)
        except Exception as ex:  # noqa: BLE001 - a kernel that cannot compile or run is a failed check
            import traceback

            traceback.print_exc()
            cell.pending.clear()
            self.record(
                cell,
                op,
                "kernels/check_err",
                None,
                "abs",
                "failed",
                backend="triton",
                dtype=dt,
                context_len=T,
                note=f"{type(ex).__name__}: {ex}"[:500],
            )
            ok = False
        for rec in cell.pending:
            rec["wall_s"] = time.perf_counter() - start
        cell.commit()
        self.passed[op] = self.passed.get(op, True) and ok
        self.free()

    def _check(self, cell, op: str, T: int, dtype: torch.dtype, dt: str, grads: bool) -> bool:
        sh = self.shape(T)
        x = O.make_inputs(op, sh, dtype, self.dev, seed=T)
        ok = True
        common = dict(backend="triton", dtype=dt, context_len=T, phase="fwd_bwd" if grads else "fwd")
        spec = spec_of_op(op)
        if spec.selects:  # the selection alone; the attention is then judged on the reference's
            with torch.no_grad():
                got = K.msa_select(x["index_q"], x["index_k"], sh.block_size, sh.top_k, backend="triton")
                want = K.msa_select(x["index_q"], x["index_k"], sh.block_size, sh.top_k, backend="reference")
            frac, gap, scale = O.selection_gap(got, want, x["index_q"], x["index_k"], sh.block_size)
            good = gap <= SELECT_MAX_GAP * max(scale, 1.0)
            ok &= good
            self.record(
                cell,
                "msa_select",
                "kernels/check_err",
                gap,
                "abs",
                "measured" if good else "failed",
                tensor="block_idx",
                rows_differing=frac,
                bound=SELECT_MAX_GAP * max(scale, 1.0),
                **common,
            )
            x["block_idx"] = want
        truth_x = {n: (t.float() if t.is_floating_point() else t) for n, t in x.items()}
        plain_kw = {"compute_dtype": dtype} if spec.plain_kw else {}
        do = torch.randn(x["q"].shape[:3] + (x["v"].shape[-1],), generator=torch.Generator().manual_seed(1)).to(self.dev, dtype)
        results = {}
        for name, backend, inputs, kw in (
            ("truth", "reference", truth_x, {}),
            ("plain", "reference", x, plain_kw),
            ("kernel", "triton", x, {}),
        ):

            def fn(z, backend=backend, kw=kw):
                return O.run(op, backend, z, sh, **kw)

            if grads:
                results[name] = O.fwd_bwd(fn, inputs, GRAD_NAMES, do)
            else:
                with torch.no_grad():
                    results[name] = (fn(inputs), {})
        tensors = [("o", *(results[n][0] for n in ("kernel", "plain", "truth")))]
        tensors += [(f"d{g}", *(results[n][1][g] for n in ("kernel", "plain", "truth"))) for g in results["kernel"][1]]
        for i, out in enumerate(spec.outputs[1:], 1):  # lightning's final state too (no gradient taken through it here)
            with torch.no_grad():
                tensors.append(
                    (
                        out,
                        spec.call(x, sh, "triton")[i],
                        spec.call(x, sh, "reference", **plain_kw)[i],
                        spec.call(truth_x, sh, "reference")[i],
                    )
                )
        for name, got_t, plain_t, truth_t in tensors:
            err, scale = tolerance.max_error(got_t, truth_t)
            torch_err, _ = tolerance.max_error(plain_t, truth_t)
            good, bound = tolerance.within(err, torch_err, scale, dtype)
            ok &= good
            self.record(
                cell,
                op,
                "kernels/check_err",
                err,
                "abs",
                "measured" if good else "failed",
                tensor=name,
                bound=bound,
                torch_err=torch_err,
                scale=scale,
                **common,
            )
            self.ctx.console.print(
                f"  check {op:<15} {dt:<8} T={T:<7} {name:<12} err {err:.2e} <= {bound:.2e}? {'ok' if good else 'FAILED'}"
            )
        return ok

    # ------------------------------------------------------------------ timings

    def baselines(self, op: str, x: dict, sx: dict, sh: O.Shape, metric: str, common: dict) -> dict[str, tuple[Callable, list]]:
        """Baseline name -> (forward, leaves); sx holds softmax-shaped inputs (GQA) for SDPA."""
        fns = {"sdpa": ((lambda: O.sdpa_causal(sx)), [sx["q"], sx["k"], sx["v"]])}
        for name in self.cfg.baselines:
            if name == "sdpa" or (op, name, metric) in self.skipped_baselines:
                continue
            try:
                got = O.baseline(name, op, x, sh)
            except Exception as ex:  # noqa: BLE001 - an optional package may fail in any way
                got, why = None, f"{type(ex).__name__}: {ex}"
            else:
                why = f"{name} has no {op} kernel"
            if got is None:
                self.skipped_baselines.add((op, name, metric))
                self.record(None, op, metric, None, "ms", "skipped", backend=name, note=why[:300], **common)
                continue
            fns[name] = got
        return fns

    def time_one(self, fn: Callable) -> Timing:
        # a dry run (interpreter on CPU) only shows the flow works: one call, not a timing
        return time_fn(fn, self.dev, min_run_time=self.min_run_time, warmup=0 if self.dry else 1, repeats=1 if self.dry else 3)

    def timings(self, op: str, T: int, dtype: torch.dtype, grads: bool) -> None:
        dt = str(dtype).removeprefix("torch.")
        metric, phase = ("latency/fwd_bwd_ms", "fwd_bwd") if grads else ("latency/prefill_ms", "fwd")
        cell = self.ctx.cell(part="time", op=op, T=T, dtype=dt, grads=grads)
        if cell.done:
            return
        common = dict(dtype=dt, context_len=T, scope="op")
        if not self.passed.get(op, False):
            self.record(None, op, metric, None, "ms", "skipped", backend="triton", note="its checks did not pass", **common)
            return
        if self.out_of_time():
            self.record(None, op, metric, None, "ms", "skipped", backend="triton", note="exp.budget spent", **common)
            return
        sh = self.shape(T)
        try:
            x = O.make_inputs(op, sh, dtype, self.dev, seed=T)
            spec = spec_of_op(op)
            sx = x if spec.gqa_inputs else O.make_inputs(BASELINE_OP, sh, dtype, self.dev, seed=T)
            for z in (x, sx):
                for n in GRAD_NAMES:
                    z[n].requires_grad_(grads)
            leaves = [x[n] for n in GRAD_NAMES]
            fns = {"triton": ((lambda: O.run(op, "triton", x, sh)), leaves)}
            for part, fn in ({} if grads else spec.parts(x, sh, "triton")).items():  # msa: its two parts alone
                fns[f"triton:{part.removeprefix(op + '_')}"] = (fn, leaves)
            fns.update(self.baselines(op, x, sx, sh, metric, common))
            timed = {name: (O.with_backward(fn, lv) if grads else fn) for name, (fn, lv) in fns.items()}
            ms = {}
            for name, fn in timed.items():
                try:
                    t = self.time_one(fn)
                except Exception as ex:  # noqa: BLE001 - one backend failing leaves the others standing
                    self.record(cell, op, metric, None, "ms", "failed", backend=name, note=f"{type(ex).__name__}: {ex}"[:500], **common)
                    self.free()
                    continue
                ms[name] = t.median_ms
                self.record(
                    cell,
                    op,
                    metric,
                    t.median_ms,
                    "ms",
                    backend=name,
                    p25_ms=t.p25_ms,
                    p75_ms=t.p75_ms,
                    n=t.n,
                    method=t.method,
                    device_name=t.device,
                    **common,
                )
                self.ctx.console.print(
                    f"  {phase:<7} {op:<15} {dt:<8} T={T:<7} {name:<14} {t.median_ms:9.3f} ms [{t.p25_ms:.3f}, {t.p75_ms:.3f}] n={t.n}"
                )
            for name, base in ms.items():
                if not name.startswith("triton") and "triton" in ms:
                    self.record(
                        cell, op, "kernels/speedup", base / ms["triton"], "x", backend="triton", baseline=name, phase=phase, **common
                    )
        except Exception as ex:  # noqa: BLE001 - out of memory, a compile error: record it, go on
            import traceback

            traceback.print_exc()
            cell.pending.clear()
            self.record(cell, op, metric, None, "ms", "failed", backend="triton", note=f"{type(ex).__name__}: {ex}"[:500], **common)
        cell.commit()
        self.free()


def summary(ctx, dry: bool) -> str:
    from attnbench.records.read import read_jsonl
    from attnbench.records.lines import versions

    rows = read_jsonl(ctx.recorder.path)
    recs = [r for r in rows if r.get("type") == "record"]
    checks = [r for r in recs if r["metric"] == "kernels/check_err"]
    header: dict = next((r for r in reversed(rows) if r.get("type") == "header"), {})
    hw, git = header.get("hardware", {}), header.get("git", {})
    v = versions()
    fla = _version("fla-core") or _version("flash-linear-attention")
    lines = [
        f"# kernels_gpu {'DRY RUN (Triton interpreter on CPU: the timings say nothing about speed)' if dry else 'run'}",
        "",
        f"device: {hw.get('gpu') or hw.get('cpu')}; torch {v.get('torch')}, triton {v.get('triton')}, "
        f"flash_attn {_version('flash-attn')}, fla {fla}; commit {git.get('commit')} (dirty: {git.get('dirty')})",
        "",
        "## checks (kernel error vs the fp32 reference <= bound = 2 x plain-torch error + 4 ulps)",
        "",
        "| op | dtype | T | phase | tensor | error | bound | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in checks:
        lines.append(
            f"| {r['op']} | {r.get('dtype', '')} | {r.get('context_len', '')} | {r.get('phase', '')} | "
            f"{r.get('tensor', '')} | {_num(r['value'])} | {_num(r.get('bound'))} | {r['status']} |"
        )
    lines += [
        "",
        "## timings (median ms; speedup = baseline / triton)",
        "",
        "| phase | op | dtype | T | backend | ms | speedup of triton | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    speed = {
        (r["op"], r["context_len"], r.get("dtype"), r.get("phase"), r["baseline"]): r["value"]
        for r in recs
        if r["metric"] == "kernels/speedup"
    }
    for r in recs:
        if r["metric"] not in ("latency/prefill_ms", "latency/fwd_bwd_ms"):
            continue
        phase = "fwd" if r["metric"] == "latency/prefill_ms" else "fwd_bwd"
        x = speed.get((r["op"], r.get("context_len"), r.get("dtype"), phase, r.get("backend")))
        lines.append(
            f"| {phase} | {r['op']} | {r.get('dtype', '')} | {r.get('context_len', '')} | {r.get('backend', '')} | "
            f"{_num(r['value'])} | {'' if x is None else f'{x:.2f}x'} | {r['status']}"
            f"{' (' + r['note'] + ')' if r.get('note') and r['status'] != 'measured' else ''} |"
        )
    return "\n".join(lines) + "\n"


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _num(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def run(ctx) -> None:
    use_interpreter(ctx.device)
    r = Run(ctx)
    ctx.console.print(
        f"  {'dry run (Triton interpreter, tiny shapes)' if r.dry else 'GPU run'}: "
        f"{r.shapes.batch=} {r.shapes.heads=} {r.shapes.kv_heads=} {r.shapes.head_dim=}"
    )
    for op in r.cfg.ops:
        for dt_name in r.cfg.dtypes:
            for T in r.shapes.check_lengths:
                r.check(op, T, O.DTYPES[dt_name], grads=True)
            for T in r.shapes.check_fwd_lengths:
                r.check(op, T, O.DTYPES[dt_name], grads=False)
    dtype = O.DTYPES[r.cfg.dtypes[0]]
    for T in r.shapes.lengths:
        for op in r.cfg.ops:
            r.timings(op, T, dtype, grads=False)
    for T in r.shapes.grad_lengths:
        for op in r.cfg.ops:
            r.timings(op, T, dtype, grads=True)
    text = summary(ctx, r.dry)
    (ctx.run_dir / "summary.md").write_text(text)
    ctx.console.print(text)
    failed = [op for op, ok in r.passed.items() if not ok]
    if failed:
        raise SystemExit(f"kernels_gpu: checks failed for {', '.join(failed)} (see {ctx.run_dir / 'summary.md'})")
