"""``python -m attnbench +exp=NAME [overrides]``: compose, validate, run one experiment.

Config errors (a mistyped key, an unknown option, a value out of range) stop before any work
with exit code 2 and one line on stderr naming the field, the value and what is allowed.
Every run ends (completed, failed, or interrupted by Ctrl-C: then partial) by writing its
report (report.html, report.pdf) and its W&B runs (offline by default) from its records.

Subcommands (dispatched before Hydra sees the arguments):
    python -m attnbench report RUN_DIR [RUN_DIR ...] [--out DIR] [--no-pdf]
    python -m attnbench report --all-experiments [--root DIR]
    python -m attnbench report --decision [--root DIR]     # every experiment -> reports/decision/
    python -m attnbench dashboard entity=E project=P [exp=NAME] [name=TITLE] [--dry-run]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from . import config as config_mod
from .config import ConfigError

config_mod.register()


def one_line(ex: BaseException) -> str:
    """Describe a config failure in one line: field, value, what is allowed."""
    if isinstance(ex, ConfigError):
        return str(ex)
    cause = ex.__cause__ if isinstance(ex.__cause__, OmegaConfBaseException) else ex
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and getattr(cause, "object_type", None) is not None:
        import dataclasses

        fields = [f.name for f in dataclasses.fields(cause.object_type)] if dataclasses.is_dataclass(cause.object_type) else []
        return f"{cause.full_key}: unknown key; allowed keys: {', '.join(fields)}"
    if isinstance(cause, ValidationError):
        return f"{cause.full_key}: {str(cause).splitlines()[0]}"
    if isinstance(ex, MissingConfigException) and ex.options:
        return f"{str(ex).splitlines()[0]}; available: {', '.join(ex.options)}"
    return " ".join(str(ex).split())


def check_group_choices(overrides: list[str]) -> None:
    """A config-group override must name a config: Hydra parses `+exp=false` as a bool and
    fails with a ValueError that names no field, so catch that here, before composing."""
    from importlib.resources import files

    from hydra.core.override_parser.overrides_parser import OverridesParser

    conf = files("attnbench.conf")
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return  # a syntax error: Hydra's own message names the override
    for o in parsed:
        group = o.key_or_group
        if o.is_sweep_override() or "@" in group or not conf.joinpath(group).is_dir():
            continue
        if not isinstance(o.value(), (str, list, dict)) and not o.is_delete():
            options = sorted(f.name.removesuffix(".yaml") for f in conf.joinpath(group).iterdir() if f.name.endswith(".yaml"))
            raise ConfigError(group, o.input_line.split("=", 1)[-1], f"one of {', '.join(options)}")


def config_error(overrides: list[str]) -> str | None:
    """Compose and validate ``overrides`` as the CLI does; the one-line error, or None if valid."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="attnbench.conf", version_base="1.3"):
        try:
            check_group_choices(overrides)
            config_mod.validate(compose(config_name="config", overrides=overrides))
        except (ConfigError, HydraException, OmegaConfBaseException) as ex:
            return one_line(ex)
    return None


@hydra.main(version_base="1.3", config_path="pkg://attnbench.conf", config_name="config")
def hydra_entry(cfg: DictConfig) -> None:
    try:
        config_mod.validate(cfg)
    except ConfigError as ex:  # exit here: past this point Hydra would add its own report
        print(f"attnbench: config error: {ex}", file=sys.stderr)
        sys.exit(2)
    run(cfg, Path(HydraConfig.get().runtime.output_dir))


def run(cfg: DictConfig, run_dir: Path) -> None:
    import torch

    from .experiments import runner
    from .kernels import force
    from .results import Recorder
    from .runner import RunContext, config_dict, config_hash, resolve_device, seed_everything

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seeds = seed_everything(cfg.seed)
    device = resolve_device(cfg.device)
    recorder = Recorder(run_dir / "results.jsonl", cfg.exp.name, {**config_dict(cfg), "seeds": seeds}, config_hash(cfg))
    ctx = RunContext(cfg=cfg, run_dir=run_dir, recorder=recorder, device=device)
    ctx.console.print(f"[bold]attnbench[/] exp={cfg.exp.name} designs={','.join(ctx.design_names)} "
                      f"device={device} run_dir={run_dir}")
    start = time.perf_counter()
    status = "failed"
    try:
        with force(None if cfg.backend == "auto" else cfg.backend):
            runner(cfg.exp.name)(ctx)
        status = "completed"
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        recorder.close(status, time.perf_counter() - start)
        ctx.console.print(f"{status} in {time.perf_counter() - start:.1f} s; records in {recorder.path}")
        if status == "interrupted":  # every finished cell is already on disk (cells commit atomically)
            ctx.console.print(f"{len(recorder.done_cells)} cells recorded; rerun the same command to resume")
        finish_run(cfg, run_dir, ctx.console, status)
    if status == "interrupted":
        sys.exit(130)


def finish_run(cfg: DictConfig, run_dir: Path, console, status: str) -> None:
    """The sinks: report and W&B from the run's records. Neither can fail the run.

    The W&B child runs while Chromium prints the PDF (two processes, two cores); the whole W&B
    step is capped at wandb.timeout_s from its start.
    """
    from . import tracking

    t0 = time.perf_counter()
    wcfg = OmegaConf.to_container(cfg.wandb, resolve=True)
    res, logging, logging_started = None, None, 0.0
    if cfg.report.enabled:
        try:
            from .report import build_report
            from .report.pdf import PdfError, html_to_pdf

            title = f"attnbench report: {cfg.exp.name}" + ("" if status == "completed" else f" ({status}, partial)")
            res = build_report([run_dir], pdf=False, command=f"python -m attnbench report {run_dir}", title=title)
            logging, logging_started = tracking.start(run_dir, wcfg), time.perf_counter()  # figures exist now
            if cfg.report.pdf:
                t = time.perf_counter()
                try:
                    res.pdf = html_to_pdf(res.html, run_dir / "report.pdf", timeout_s=cfg.report.pdf_timeout_s)
                except PdfError as ex:
                    res.pdf_error = str(ex)
                res.seconds["pdf"] = time.perf_counter() - t
            pdf = f", {res.pdf.name} ({res.seconds['pdf']:.1f} s)" if res.pdf else ""
            console.print(f"report: {res.html} ({res.seconds['total']:.1f} s){pdf}")
            if res.pdf_error:
                console.print(f"report: no PDF: {res.pdf_error}")
        except Exception as ex:  # a report bug must not cost the run its records or its exit status
            console.print(f"report: failed ({type(ex).__name__}: {ex}); records are intact; retry with "
                          f"`python -m attnbench report {run_dir}`")
    if logging is None:
        logging, logging_started = tracking.start(run_dir, wcfg), time.perf_counter()
    msg = logging.wait(cfg.wandb.timeout_s - (time.perf_counter() - logging_started))
    console.print(f"{msg} (sinks done {time.perf_counter() - t0:.1f} s after the run)")


def report_main(argv: list[str]) -> int:
    import argparse

    from .report import all_experiments, build_report, decision_report

    ap = argparse.ArgumentParser(prog="python -m attnbench report",
                                 description="Write report.html and report.pdf from run directories' results.jsonl.")
    ap.add_argument("run_dirs", nargs="*", type=Path, help="run or sweep directories (merged into one report)")
    ap.add_argument("--out", type=Path, help="where to write (default: the run directory, or the one they share)")
    ap.add_argument("--no-pdf", action="store_true", help="skip report.pdf")
    ap.add_argument("--all-experiments", action="store_true",
                    help="experiments/<name>/ -> reports/<name>/ for every recorded experiment")
    ap.add_argument("--decision", action="store_true",
                    help="every recorded experiment merged into reports/decision/ (the page to decide from)")
    ap.add_argument("--root", type=Path, default=Path("."), help="repository root for --all-experiments / --decision")
    args = ap.parse_args(argv)
    try:
        if args.decision:
            results = [decision_report(args.root, pdf=not args.no_pdf)]
        elif args.all_experiments:
            results = all_experiments(args.root, pdf=not args.no_pdf)
        elif args.run_dirs:
            results = [build_report(args.run_dirs, args.out, pdf=not args.no_pdf)]
        else:
            ap.error("give RUN_DIR(s), --all-experiments or --decision")
    except FileNotFoundError as ex:
        print(f"attnbench: report: {ex}", file=sys.stderr)
        return 2
    for res in results:
        print(f"report: {res.html}" + (f", {res.pdf}" if res.pdf else "") + f" ({res.seconds['total']:.1f} s)")
        if not args.no_pdf and res.pdf_error:
            print(f"report: no PDF: {res.pdf_error}", file=sys.stderr)
    if not results:
        print(f"report: no results.jsonl under {args.root / 'experiments'}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "report":
        sys.exit(report_main(argv[1:]))
    if argv and argv[0] == "dashboard":
        from .dashboard import main as dashboard_main

        sys.exit(dashboard_main(argv[1:]))
    # Hydra re-raises instead of printing its own multi-line report; we print one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    sys.argv = [sys.argv[0] if sys.argv else "attnbench", *argv]
    try:
        check_group_choices([a for a in argv if not a.startswith("-")])
        hydra_entry()
    except (ConfigError, HydraException, OmegaConfBaseException) as ex:
        print(f"attnbench: config error: {one_line(ex)}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
