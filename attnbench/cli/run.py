"""A run once its checks passed (attnbench.cli.preflight): ``run`` runs the experiment, then its
sinks (``finish``: the footer, then ``finish_run``: report, PDF, W&B), and turns Ctrl-C and
SIGTERM (``Terminated``) into a partial run with exit code 130 or 143, a signal while finishing
into the sinks left ``Cut`` (one line), and a full disk into one line and exit code 1.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from omegaconf import DictConfig

from attnbench.cli.preflight import EXIT_SIGINT, EXIT_SIGTERM, disk_full

if TYPE_CHECKING:
    from attnbench.runner import RunContext


FINISHED: list[Path] = []  # run directories whose run and sinks are over (a later signal only cuts the exit)


def exit_now(signum, frame) -> NoReturn:
    """A signal once the run is over and written (Hydra's last callbacks, atexit: W&B, logging):
    one line and 130/143 at once, never an ``Exception ignored in atexit callback`` traceback."""
    import os

    name, code = ("SIGTERM", EXIT_SIGTERM) if signum == signal.SIGTERM else ("SIGINT", EXIT_SIGINT)
    try:
        sys.stderr.write(f"attnbench: {name} while exiting; the run and its sinks were written\n")
        sys.stderr.flush()
    finally:
        os._exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM (sent by SLURM, Docker, `timeout`), handled like Ctrl-C: a KeyboardInterrupt, so that
    every ``except KeyboardInterrupt`` (training saves its checkpoint) sees it too."""


def _raise_terminated(signum, frame) -> NoReturn:
    raise Terminated()


def describe(ex: BaseException) -> str:
    """A failure in one line (the footer's and the report's ``error``)."""
    if isinstance(ex, SystemExit) and isinstance(ex.code, str):
        text = ex.code
    else:
        text = f"{type(ex).__name__}: {ex}" if str(ex) else type(ex).__name__
    return " ".join(text.split())[:500]


class Cut(BaseException):
    """A signal while the sinks (footer, report, PDF, W&B) are written: the rest are skipped."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.name, self.code = ("SIGTERM", EXIT_SIGTERM) if signum == signal.SIGTERM else ("SIGINT", EXIT_SIGINT)


def _raise_cut(signum, frame) -> NoReturn:
    for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal ends the process at once
        signal.signal(sig, signal.SIG_DFL)
    raise Cut(signum)


def out_of_memory(ex: BaseException) -> str | None:
    """The one line for a failure to allocate memory (MemoryError, torch's allocators), anywhere in ``ex``'s chain; else None."""
    seen: BaseException | None = ex
    while seen is not None:
        text = str(seen)
        if isinstance(seen, MemoryError) or (
            isinstance(seen, RuntimeError)
            and ("out of memory" in text.lower() or "can't allocate memory" in text or "DefaultCPUAllocator" in text)
        ):
            return f"attnbench: out of memory ({describe(seen)[:200]}); the records so far are kept, the footer says failed"
        seen = seen.__cause__ or seen.__context__
    return None


def log_traceback(ex: BaseException, run_dir: Path) -> Path:
    """Append ``ex``'s traceback (secrets masked) to the run's log file (Hydra's job log, else
    RUN_DIR/attnbench.log): the console gets one line, the log the whole story."""
    import logging
    import traceback

    from attnbench.records.redact import redact

    files = [Path(h.baseFilename) for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    path = next((f for f in files if f.parent == Path(run_dir).absolute()), run_dir / "attnbench.log")
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(redact("".join(traceback.format_exception(ex))))
    except OSError:
        pass  # the disk that failed the run may not take the log either: the one line still says what happened
    return path


def run(cfg: DictConfig, run_dir: Path) -> None:
    """Run the experiment, then its sinks (footer, report, PDF, W&B); exit 130/143 after a signal,
    1 (one line) when the disk is full, and re-raise any other failure after the sinks."""
    import torch

    from attnbench.training import distributed
    from attnbench.experiments import NEEDS_CUDA, runner
    from attnbench.heap import keep_freed_memory
    from attnbench.kernels import force
    from attnbench.records.write import Recorder
    from attnbench.runner import BudgetSpent, config_dict, config_hash, resolve_device, seed_everything

    # SIGTERM finishes the run partially (exit 143); in a distributed run distributed.session
    # owns SIGTERM (torchrun stopping the job: one line, exit 143, no teardown)
    previous = signal.getsignal(signal.SIGTERM) if distributed.active() else signal.signal(signal.SIGTERM, _raise_terminated)
    previous_int = signal.getsignal(signal.SIGINT)
    main = distributed.is_main()  # a distributed run's rank 0 alone writes records, report and W&B
    try:  # setup: a signal here stops before any cell ran (the header is one write: whole or absent)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        keep_freed_memory()  # large activations reuse the heap's pages (attnbench/heap.py)
        seeds = seed_everything(cfg.seed)
        no_cuda = cfg.exp.name in NEEDS_CUDA and not torch.cuda.is_available()  # it records its designs skipped
        device = distributed.process_device(resolve_device("cpu" if no_cuda else cfg.device))
        recorder = Recorder(run_dir / "results.jsonl", cfg.exp.name, {**config_dict(cfg), "seeds": seeds}, config_hash(cfg), write=main)
    except KeyboardInterrupt as ex:
        signal.signal(signal.SIGTERM, previous)
        name = "SIGTERM" if isinstance(ex, Terminated) else "SIGINT (Ctrl-C)"
        print(f"attnbench: {name} before the run started; no cell ran, rerun the same command to start", file=sys.stderr)
        sys.exit(EXIT_SIGTERM if isinstance(ex, Terminated) else EXIT_SIGINT)
    except OSError as ex:
        line = disk_full(ex, run_dir)
        if line is None:
            raise
        signal.signal(signal.SIGTERM, previous)
        print(line, file=sys.stderr)
        sys.exit(1)
    ctx = _context(cfg, run_dir, recorder, device, main)
    start = time.perf_counter()
    status, error, code = "failed", None, 0
    failure: BaseException | None = None
    try:
        with force(None if cfg.backend == "auto" else cfg.backend):
            runner(cfg.exp.name)(ctx)
        status = "completed"
    except BudgetSpent as spent:  # exp.budget ran out at a cell boundary: the stop is recorded, the run completed
        budget_stop(ctx, spent)
        status = "completed"
    except KeyboardInterrupt as ex:  # Ctrl-C or SIGTERM: finish like a run, partially
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal ends the process at once
            signal.signal(sig, signal.SIG_DFL)
        status, code = "interrupted", EXIT_SIGTERM if isinstance(ex, Terminated) else EXIT_SIGINT
        error = "SIGTERM" if isinstance(ex, Terminated) else "SIGINT (Ctrl-C)"
    except BaseException as ex:
        failure, error = ex, describe(ex)
    full = disk_full(failure, run_dir) if failure is not None else None
    oom = out_of_memory(failure) if failure is not None and full is None else None
    if status != "interrupted":  # a signal while finishing cuts the remaining sinks (one line, 130/143)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _raise_cut)
    sinks_code = finish(cfg, run_dir, ctx, status, error, time.perf_counter() - start, sinks=main and full is None)
    if status != "interrupted" and sinks_code in (0, 1):  # not cut: the handlers go back as they were
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    if full is not None or oom is not None:  # one line; the traceback goes to the run's log
        log = log_traceback(failure, run_dir)  # type: ignore[arg-type]
        print(full or f"{oom}; traceback in {log}", file=sys.stderr)
        sys.exit(1)
    if sinks_code > 1:  # a signal cut the sinks (its line is printed)
        if failure is not None:  # the run had failed already: that stays the news (a torchrun rank's line, exit 1)
            raise failure
        sys.exit(sinks_code)
    if failure is not None:
        raise failure
    FINISHED.append(run_dir)
    if code or sinks_code:
        sys.exit(code or sinks_code)


def _context(cfg: DictConfig, run_dir: Path, recorder, device, main: bool) -> RunContext:
    """The run's context (its cells done on any process), after saying what a repair removed and what runs."""
    from attnbench.training import distributed
    from attnbench.config import parse_duration
    from attnbench.runner import CELL_BUDGET, RunContext, text_console

    recorder.done_cells = distributed.from_main(lambda: recorder.done_cells)
    ctx = RunContext(cfg=cfg, run_dir=run_dir, recorder=recorder, device=device, console=text_console(quiet=not main))
    if cfg.exp.name in CELL_BUDGET:
        ctx.budget_s = parse_duration(cfg.exp.budget)
    if main and recorder.repaired.summary():  # the summary says what happens to each line and cell
        ctx.console.print(
            f"attnbench: {recorder.repaired.summary()}; repaired: the removed lines are kept in {recorder.path.name}.damaged",
            markup=False,
            highlight=False,
        )
    from attnbench.names import EXTERNAL

    # an external run has no design: its line names the model
    what = f"model={cfg.external.model}" if cfg.exp.name in EXTERNAL else f"designs={','.join(ctx.design_names)}"
    ctx.console.print(f"attnbench exp={cfg.exp.name} {what} device={device} run_dir={run_dir}")
    return ctx


def budget_stop(ctx: RunContext, spent) -> None:
    """Record where exp.budget stopped a CELL_BUDGET experiment (a ``skipped`` record, note
    ``budget``: the cell not started and every one after it), and say it in the run's last line."""
    from attnbench.records.integrity import cell_name

    where = cell_name(spent.cell.coords, spent.cell.key)
    note = f"budget: exp.budget={ctx.cfg.exp.budget} spent after {spent.spent_s:.1f} s; this cell and the ones after it not run"
    design = spent.cell.coords.get("design") or "all"
    row = ctx.make_record(design, "budget/stopped_at", where, "cell", "skipped", note=note)
    ctx.recorder.write_cell(f"budget-{time.time_ns()}", [row], {"budget": "stopped", "at": where})
    ctx.last_line = f"attnbench: {note} (from {where}); rerun the same command to continue, or raise exp.budget"


def planned_sinks(cfg: DictConfig, main: bool) -> list[str]:
    """The sinks this run writes after its cells, in order."""
    out = ["footer"]
    if main and cfg.report.enabled:
        out.append("report.html")
        if cfg.report.pdf:
            out.append("report.pdf")
    if main and cfg.wandb.mode != "disabled":
        out.append("W&B")
    return out


def finish(cfg: DictConfig, run_dir: Path, ctx, status: str, error: str | None, wall_s: float, sinks: bool) -> int:
    """The footer, then (``sinks``) the report and W&B, then the experiment's last line
    (``ctx.last_line``: what the budget left out). Returns 0; 1 when the disk was full (the one
    line printed); 130/143 when a signal cut them (one line; a ``sinks`` line after the footer names
    what was cut; rerunning the same command writes them)."""
    recorder, console, done = ctx.recorder, ctx.console, []
    try:
        try:
            recorder.close(status, wall_s, error)
            done.append("footer")
        except OSError as ex:
            line = disk_full(ex, run_dir)
            if line is None:
                raise
            if sinks:
                console.print(line, markup=False, highlight=False)
            return 1
        console.print(
            f"{status} in {wall_s:.1f} s" + (f" ({error})" if error else "") + f"; records in {recorder.path}",
            markup=False,
            highlight=False,
        )
        if status == "interrupted":  # every finished cell is already on disk (cells commit atomically)
            console.print(f"{len(recorder.done_cells)} cells recorded; rerun the same command to resume")
        code = finish_run(cfg, run_dir, console, status, done) if sinks else 0
        if ctx.last_line:  # the run's last line: what the budget left out (the report's first line)
            console.print(ctx.last_line, markup=False, highlight=False)
        return code
    except Cut as cut:
        cut_now = [s for s in planned_sinks(cfg, sinks) if s not in done]
        try:
            if "footer" in cut_now:  # the footer comes first: write it, saying it was cut
                recorder.close(status, wall_s, error or cut.name)
                cut_now.remove("footer")
                done.append("footer")
            recorder._append({"type": "sinks", "signal": cut.name, "done": done, "cut": cut_now})
        except OSError:
            pass  # a full disk as well: the one line below still says what was cut
        print(
            f"attnbench: {cut.name} while finishing: {', '.join(cut_now) or 'nothing'} cut "
            f"({', '.join(done) or 'nothing'} written); rerun the same command to write them",
            file=sys.stderr,
        )
        return cut.code


def finish_run(cfg: DictConfig, run_dir: Path, console, status: str, done: list[str] | None = None) -> int:
    """The sinks: report and W&B from the run's records. Neither can fail the run; a full disk
    gives one line and 1. ``done`` collects the sinks written (a signal, ``Cut``, may stop them).

    The W&B child runs while Chromium prints the PDF (two processes, two cores); the whole W&B
    step is capped at wandb.timeout_s from its start.
    """
    from attnbench.tracking import wandb_runs

    done = [] if done is None else done
    t0 = time.perf_counter()
    from attnbench.runner import config_dict

    wcfg = config_dict(cfg.wandb)
    res, logging, logging_started, code = None, None, 0.0, 0
    try:
        if cfg.report.enabled:
            try:
                from attnbench.report import build_report
                from attnbench.report.pdf import PdfError, html_to_pdf

                title = f"attnbench report: {cfg.exp.name}" + ("" if status == "completed" else f" ({status}, partial)")
                res = build_report([run_dir], pdf=False, command=f"python -m attnbench report {run_dir}", title=title)
                done.append("report.html")
                logging, logging_started = wandb_runs.start(run_dir, wcfg), time.perf_counter()  # figures exist now
                if cfg.report.pdf:
                    t = time.perf_counter()
                    try:
                        res.pdf = html_to_pdf(res.html, run_dir / "report.pdf", timeout_s=cfg.report.pdf_timeout_s)
                    except PdfError as ex:
                        res.pdf_error = str(ex)
                    res.seconds["pdf"] = time.perf_counter() - t
                    done.append("report.pdf")
                pdf = f", {res.pdf.name} ({res.seconds['pdf']:.1f} s)" if res.pdf else ""
                console.print(f"report: {res.html} ({res.seconds['total']:.1f} s){pdf}")
                if res.pdf_error:
                    console.print(f"report: no PDF: {res.pdf_error}")
            except Exception as ex:  # a report bug must not cost the run its records or its exit status
                line = disk_full(ex, run_dir)
                if line is not None:
                    console.print(line, markup=False, highlight=False)
                    return 1  # the disk is full: W&B's files would fail on it too (a second error)
                else:
                    console.print(
                        f"report: failed ({type(ex).__name__}: {ex}); records are intact; retry with `python -m attnbench report {run_dir}`"
                    )
        if logging is None:
            logging, logging_started = wandb_runs.start(run_dir, wcfg), time.perf_counter()
        msg = logging.wait(cfg.wandb.timeout_s - (time.perf_counter() - logging_started))
        done.append("W&B")
    except Cut:
        if logging is not None:
            logging.kill()  # its own session: a signal to this process does not reach it
        raise
    console.print(f"{msg} (sinks done {time.perf_counter() - t0:.1f} s after the run)")
    return code
