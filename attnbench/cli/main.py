"""``python -m attnbench +exp=NAME [overrides]``: compose, validate, run one experiment.

Bad input stops before any work (before Hydra creates the run directory, see ``Guard``) with
exit code 2 and one line on stderr: a config error names the field, the value and what is
allowed; a run directory or cache directory that cannot be used, or a run directory that holds
another config's records, says so and what to do.
Every run ends (completed, failed, or interrupted by Ctrl-C or SIGTERM: then partial, exit code
130 or 143) by writing its footer, its report (report.html, report.pdf) and its W&B runs
(offline by default) from its records.

Subcommands (dispatched before Hydra sees the arguments):
    python -m attnbench report RUN_DIR [RUN_DIR ...] [--out DIR] [--no-pdf]
    python -m attnbench report --all-experiments [--root DIR]
    python -m attnbench report --decision [--root DIR] [--out DIR]  # every experiment -> reports/decision/
    python -m attnbench dashboard entity=E project=P [exp=NAME] [name=TITLE] [--dry-run]
    python -m attnbench export CHECKPOINT_FOLDER OUT_FOLDER  # a trained model -> a transformers folder (docs/external.md)

Here: the entry points, the ``Guard`` callback and the resolvers Hydra's config names; the
checks before a run are in cli/preflight.py, the run and its sinks in cli/run.py.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnbench import config as config_mod
from attnbench.records import rundir
from attnbench.cli.preflight import EXIT_BAD_INPUT, EXIT_SIGINT, EXIT_SIGTERM, check_group_choices, fail, job_dir, one_line
from attnbench.cli.preflight import prepare_or_exit, sweep_errors, task_config, typed_overrides
from attnbench.cli.preflight import disk_full
from attnbench.cli.run import FINISHED, Terminated, _raise_terminated, exit_now, run
from attnbench.config import ConfigError
from attnbench.records.rundir import RunDirError

config_mod.register()


def experiments_help() -> str:
    """``${attnbench_experiments:}`` in ``--help`` (conf/hydra/help/attnbench.yaml): one line per
    conf/exp/*.yaml, its name and its ``exp.description``, so the help follows the files.
    "$" is doubled: Hydra formats the help template with Python's string.Template."""
    from importlib.resources import files

    rows = []
    for f in sorted(files("attnbench.conf").joinpath("exp").iterdir(), key=lambda p: p.name):
        if not f.name.endswith(".yaml"):
            continue
        try:
            description = OmegaConf.select(OmegaConf.create(f.read_text()), "exp.description", default="")
        except (OmegaConfBaseException, ValueError) as ex:
            description = f"(cannot read {f.name}: {type(ex).__name__})"
        rows.append((f.name.removesuffix(".yaml"), str(description or "")))
    width = max((len(name) for name, _ in rows), default=0)
    return "\n".join(f"  {name:<{width}}  {text}".rstrip() for name, text in rows).replace("$", "$$")


OmegaConf.register_new_resolver("attnbench_experiments", experiments_help, replace=True)


def run_dir_name(*, _root_: DictConfig) -> str:
    """``${attnbench_dirname:}`` (conf/config.yaml): the run or sweep job directory's name from the
    task overrides, free text and secrets hashed (attnbench/records/rundir.py ``dir_name``)."""
    hydra_node = _root_.hydra
    conf = hydra_node.job.config.override_dirname
    return rundir.dir_name(typed_overrides(hydra_node), [str(k) for k in conf.exclude_keys], str(conf.item_sep), str(conf.kv_sep))


OmegaConf.register_new_resolver("attnbench_dirname", run_dir_name, replace=True)


class Guard(Callback):
    """Hydra callback (conf/config.yaml: hydra.callbacks.guard): runs ``prepare`` before Hydra
    creates the run directory and writes .hydra/ into it, so a refused run leaves nothing behind.
    Hydra turns a callback's exceptions into warnings, so a refusal exits here (one line, code 2).
    A sweep's jobs are composed by its launcher: each is checked at its start (``hydra_entry``),
    after Hydra made its job directory."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraConfig.instance().set_config(config)  # lets ${hydra:...} in hydra.run.dir resolve
        prepare_or_exit(task_config(config), job_dir(config))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Every job of the sweep checked before any starts: one line per bad job, exit 2, nothing created."""
        try:
            rundir.check_writable(Path(str(config.hydra.sweep.dir)), "sweep directory", "choose another with hydra.sweep.dir=...")
        except RunDirError as ex:
            fail(str(ex))
        except OmegaConfBaseException as ex:
            fail(one_line(ex), config=True)
        bad = sweep_errors(config)
        if bad:
            for line in bad:
                print(f"attnbench: {line}", file=sys.stderr)
            print(f"attnbench: {len(bad)} of the sweep's jobs cannot run; no job started", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Mask secrets in the files Hydra just wrote (.hydra/*.yaml hold the overrides as typed,
        a sweep's multirun.yaml too), in whatever YAML style Hydra gave them."""
        from attnbench.records.redact import redact_yaml_file

        files = list(Path(str(config.hydra.runtime.output_dir), str(config.hydra.output_subdir or ".hydra")).glob("*.yaml"))
        if config.hydra.mode == RunMode.MULTIRUN:
            files.append(Path(str(config.hydra.sweep.dir), "multirun.yaml"))
        for f in files:
            if f.is_file():
                redact_yaml_file(f)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from attnbench.records.redact import redact_yaml_file

        f = Path(str(config.hydra.sweep.dir), "multirun.yaml")
        if f.is_file():
            redact_yaml_file(f)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        rundir.release(Path(str(config.hydra.runtime.output_dir)))


@hydra.main(version_base="1.3", config_path="pkg://attnbench.conf", config_name="config")
def hydra_entry(cfg: DictConfig) -> None:
    from attnbench.training import distributed

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    prepare_or_exit(cfg, run_dir)  # done already by Guard for a single run; a sweep's jobs get here
    with distributed.session(cfg):  # torchrun / SLURM tasks: the process group (nothing otherwise)
        run(cfg, run_dir)


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error in one line (argparse's documented hook: ``error``)."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog.split()[-1]}: {message} (see --help)")


def report_main(argv: list[str]) -> int:
    """``report``: exit 0 with a report; 2 with one line on stderr for bad input, or when the report
    was written but left damaged lines out (one line per damaged results file)."""
    from attnbench.report import all_experiments, build_report, decision_report
    from attnbench.report.frame import EMPTY, NO_HEADER, ResultsError

    ap = OneLineParser(
        prog="python -m attnbench report", description="Write report.html and report.pdf from run directories' results.jsonl."
    )
    ap.add_argument("run_dirs", nargs="*", type=Path, help="run or sweep directories (merged into one report)")
    ap.add_argument(
        "--out", type=Path, help="where to write (default: the run directory, or the one they share; reports/decision/ with --decision)"
    )
    ap.add_argument("--no-pdf", action="store_true", help="skip report.pdf")
    ap.add_argument("--all-experiments", action="store_true", help="experiments/<name>/ -> reports/<name>/ for every recorded experiment")
    ap.add_argument(
        "--decision", action="store_true", help="every recorded experiment merged into reports/decision/ (the page to decide from)"
    )
    ap.add_argument("--root", type=Path, default=Path("."), help="repository root for --all-experiments / --decision")
    args = ap.parse_args(argv)
    if not (args.all_experiments or args.decision or args.run_dirs):
        ap.error("give RUN_DIR(s), --all-experiments or --decision")
    try:
        if args.out is not None:
            rundir.check_writable(args.out, "report directory --out", "choose another with --out DIR")
        if args.decision:
            results = [decision_report(args.root, pdf=not args.no_pdf, out=args.out)]
        elif args.all_experiments:
            results = all_experiments(args.root, pdf=not args.no_pdf)
        else:
            results = [build_report(args.run_dirs, args.out, pdf=not args.no_pdf)]
    except (ResultsError, RunDirError) as ex:
        fail(f"report: {ex}")
    except OSError as ex:  # a path that cannot be read or written
        fail(f"report: {ex.filename or ''}: {ex.strerror or ex}")
    damaged = False
    for res in results:
        print(f"report: {res.html}" + (f", {res.pdf}" if res.pdf else "") + f" ({res.seconds['total']:.1f} s)")
        if not args.no_pdf and res.pdf_error:
            print(f"report: no PDF: {res.pdf_error}", file=sys.stderr)
        for problem in res.problems:
            left_out = "" if problem.endswith((NO_HEADER, EMPTY + "; left out")) else "; those lines are left out of the report"
            print(f"attnbench: report: {problem}{left_out}", file=sys.stderr)
            damaged = True
    if not results:
        print(f"report: no results.jsonl under {args.root / 'experiments'}", file=sys.stderr)
    return EXIT_BAD_INPUT if damaged else 0


def export_main(argv: list[str]) -> int:
    """``export``: a trained checkpoint folder -> a transformers folder (attnbench/external/export.py);
    exit 2 with one line on stderr for a folder that is not a finished checkpoint."""
    ap = argparse.ArgumentParser(
        prog="python -m attnbench export", description="Export a trained attnbench model to a transformers folder."
    )
    ap.add_argument("checkpoint", type=Path, help="a folder with final.pt and record.json (attnbench/trained/<design>-<key>)")
    ap.add_argument("out", type=Path, help="the folder to write (AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True))")
    args = ap.parse_args(argv)
    from attnbench.external.export import export

    try:
        out = export(args.checkpoint, args.out)
    except (FileNotFoundError, ValueError) as ex:
        fail(f"export: {ex}")
    print(
        f"export: {out} (load with AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True), or: transformers serve {out} --trust-remote-code)"
    )
    return 0


def main(argv: list[str] | None = None) -> None:
    from attnbench.records.redact import mask_console

    mask_console()  # every line on the console, errors and tracebacks included, has its secrets masked
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "report":
        signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            sys.exit(report_main(argv[1:]))
        except KeyboardInterrupt as ex:  # Ctrl-C or SIGTERM: the report's files are written whole or not at all
            name, code = ("SIGTERM", EXIT_SIGTERM) if isinstance(ex, Terminated) else ("SIGINT (Ctrl-C)", EXIT_SIGINT)
            print(f"attnbench: report: {name}; the report was not finished, rerun the same command", file=sys.stderr)
            sys.exit(code)
    if argv and argv[0] == "export":
        sys.exit(export_main(argv[1:]))
    if argv and argv[0] == "dashboard":
        from attnbench.tracking.dashboard import main as dashboard_main

        sys.exit(dashboard_main(argv[1:]))
    # Hydra re-raises instead of printing its own multi-line report; we print one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    if os.environ.get("RANK", "0") != "0":  # torchrun's other processes: only rank 0 writes Hydra's files
        argv += ["hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
    sys.argv = [sys.argv[0] if sys.argv else "attnbench", *argv]
    import logging

    logging.raiseExceptions = False  # a log file the disk cannot take (Hydra's cli.log) prints no traceback
    signal.signal(signal.SIGTERM, _raise_terminated)  # from the start: composing, checking, waiting for a lock
    try:
        check_group_choices([a for a in argv if not a.startswith("-")])
        hydra_entry()
    except (ConfigError, HydraException, OmegaConfBaseException) as ex:
        fail(one_line(ex), config=True)
    except KeyboardInterrupt as ex:  # a signal before the run started, or after it ended (run() handles its own)
        name = "SIGTERM" if isinstance(ex, Terminated) else "SIGINT (Ctrl-C)"
        when = (
            "while exiting; the run and its sinks were written"
            if FINISHED
            else "before the run started; no cell ran, rerun the same command to start"
        )
        print(f"attnbench: {name} {when}", file=sys.stderr)
        sys.exit(EXIT_SIGTERM if isinstance(ex, Terminated) else EXIT_SIGINT)
    except OSError as ex:
        line = disk_full(ex, Path.cwd())
        if line is None:
            raise
        print(line, file=sys.stderr)
        sys.exit(1)
    for sig in (signal.SIGINT, signal.SIGTERM):  # over: a signal while Python shuts down (atexit) ends it in one line
        signal.signal(sig, exit_now)


if __name__ == "__main__":
    main()
