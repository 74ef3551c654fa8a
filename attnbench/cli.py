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
    python -m attnbench report --decision [--root DIR]     # every experiment -> reports/decision/
    python -m attnbench dashboard entity=E project=P [exp=NAME] [name=TITLE] [--dry-run]
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, InterpolationResolutionError, OmegaConfBaseException, ValidationError

from . import config as config_mod
from . import rundir
from .config import ConfigError
from .rundir import RunDirError

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
    task overrides, free text and secrets hashed (attnbench/rundir.py ``dir_name``)."""
    hydra_node = _root_.hydra
    conf = hydra_node.job.config.override_dirname
    return rundir.dir_name(typed_overrides(hydra_node), [str(k) for k in conf.exclude_keys], str(conf.item_sep), str(conf.kv_sep))


def typed_overrides(hydra_node: DictConfig) -> list[str]:
    """The task overrides as typed (an interpolation in one, ``seed=${oc.env:X}``, left unresolved)."""
    return [str(o) for o in OmegaConf.to_container(hydra_node.overrides.task, resolve=False)]  # type: ignore[union-attr]


OmegaConf.register_new_resolver("attnbench_dirname", run_dir_name, replace=True)

EXIT_BAD_INPUT, EXIT_SIGINT, EXIT_SIGTERM = 2, 130, 143  # 128 + the signal number, as shells report it


class Terminated(KeyboardInterrupt):
    """SIGTERM (sent by SLURM, Docker, `timeout`), handled like Ctrl-C: a KeyboardInterrupt, so that
    every ``except KeyboardInterrupt`` (training saves its checkpoint) sees it too."""


def _raise_terminated(signum, frame) -> NoReturn:
    raise Terminated()


def fail(message: str, config: bool = False) -> NoReturn:
    """Bad input: one line on stderr, exit code 2."""
    print(f"attnbench: {'config error: ' if config else ''}{message}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


def one_line(ex: BaseException) -> str:
    """Describe a config failure in one line: field, value, what is allowed."""
    if isinstance(ex, ConfigError):
        return str(ex)
    cause = ex.__cause__ if isinstance(ex.__cause__, OmegaConfBaseException) else ex
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and getattr(cause, "object_type", None) is not None:
        import dataclasses

        fields = [f.name for f in dataclasses.fields(cause.object_type)] if dataclasses.is_dataclass(cause.object_type) else []
        return f"{cause.full_key}: unknown key; allowed keys: {', '.join(fields)}"
    if isinstance(cause, ValidationError):  # a wrong type, or a value outside an Enum field's set (config/choices.py)
        first = str(cause).splitlines()[0]
        choices = re.search(r"expected one of \[(.*)\]", first)
        return f"{cause.full_key}={cause.value!r}: {'one of ' + choices.group(1) if choices else first}"
    if isinstance(cause, InterpolationResolutionError):  # ${oc.env:UNSET}, ${model.nonexistent}
        why = re.sub(r"^\w+ raised while resolving interpolation: ", "", str(cause).splitlines()[0]).strip()
        return f"{cause.full_key}: its interpolation does not resolve ({why})"
    if isinstance(ex, MissingConfigException) and ex.options:
        return f"{str(ex).splitlines()[0]}; available: {', '.join(ex.options)}"
    return " ".join(str(ex).split())


def list_groups() -> set[str]:
    """Config groups that take a list of configs: those the root config's defaults list gives one
    (``attention``); every other group (``exp``, ``model``, ...) takes one config."""
    from importlib.resources import files

    import yaml

    defaults = yaml.safe_load(files("attnbench.conf").joinpath("config.yaml").read_text()).get("defaults", [])
    return {str(k) for d in defaults if isinstance(d, dict) for k, v in d.items() if isinstance(v, list)}


def check_group_choices(overrides: list[str]) -> None:
    """A config-group override must name a config: Hydra parses `+exp=false` as a bool and
    fails with a ValueError that names no field, and merges `+exp=[smoke,kv_memory]` into one
    config, so catch both here, before composing."""
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
        options = sorted(f.name.removesuffix(".yaml") for f in conf.joinpath(group).iterdir() if f.name.endswith(".yaml"))
        typed = (o.input_line or "").split("=", 1)[-1]
        if isinstance(o.value(), list) and group not in list_groups():
            hint = f"; to run several, sweep them: -m +{group}={typed.strip('[]')}" if group == "exp" else ""
            raise ConfigError(group, typed, f"one of {', '.join(options)} (one {group}, not a list){hint}")
        if not isinstance(o.value(), (str, list, dict)) and not o.is_delete():
            raise ConfigError(group, typed, f"one of {', '.join(options)}")


def preflight(cfg: DictConfig, run_dir: Path) -> None:
    """Everything checked before a run touches the disk: the config, the device, the directories.

    Raises ConfigError or RunDirError (one-line messages); creates nothing.
    """
    from .checkpoints import cache_root
    from .experiments import CACHE_USERS, NEEDS_CUDA

    config_mod.validate(cfg)
    if cfg.exp.name not in NEEDS_CUDA:  # those record their designs skipped instead
        check_backend(cfg)
    check_run_dir_path(run_dir)
    rundir.check_contents(run_dir)
    rundir.check_writable(run_dir, "run directory", "choose another with hydra.run.dir=...")
    if cfg.exp.name in CACHE_USERS:
        rundir.check_writable(cache_root(), "cache directory", "set ATTNBENCH_CACHE to a writable directory")


def check_backend(cfg: DictConfig) -> None:
    """The device exists, ``ATTNBENCH_BACKEND`` names a backend, and a Triton backend (asked by
    ``backend=`` or that variable) has a CUDA device and triton to run on (TRITON_INTERPRET=1: the
    CPU, tests only). Raises ConfigError."""
    import importlib.util

    import torch

    from .kernels.backend import BACKENDS, env_backend

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", "cuda", "torch sees no CUDA device here; use device=cpu or device=auto")
    try:
        from_env = env_backend.__wrapped__()  # read now: the environment of this run, not a cached one
    except ValueError:
        raise ConfigError("ATTNBENCH_BACKEND", os.environ.get("ATTNBENCH_BACKEND"), f"one of {', '.join(BACKENDS)}") from None
    field, backend = ("backend", str(cfg.backend)) if str(cfg.backend) != "auto" else ("ATTNBENCH_BACKEND", from_env)
    if backend != "triton":
        return
    if importlib.util.find_spec("triton") is None:
        raise ConfigError(field, "triton", "triton is not installed here (pip install 'attnbench[gpu]'); use backend=reference or auto")
    on_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if not on_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ConfigError(
            field,
            "triton",
            f"Triton kernels need a CUDA device and device={cfg.device} runs on the CPU here; use backend=reference or auto",
        )


def check_run_dir_path(run_dir: Path) -> None:
    """A run directory's path must not hold a secret: a path cannot be masked where it is written
    (the console, W&B's logs, the records' run_dir)."""
    from .redact import holds_secret

    if holds_secret(str(Path(run_dir).absolute())):
        raise RunDirError(
            "run directory's path holds a secret (an environment variable's credential); choose another with hydra.run.dir=..."
        )


def task_config(cfg: DictConfig) -> DictConfig:
    """The config a task sees (the hydra node removed), as Hydra's run_job makes it."""
    task = copy.deepcopy(cfg)
    with read_write(task), open_dict(task):
        task.pop("hydra", None)
    return task


def prepare(cfg: DictConfig, run_dir: Path) -> None:
    """Check everything (``preflight``), then claim the run directory: its lock, and its config."""
    preflight(cfg, run_dir)  # first: bad input stops before the model's imports (torch's compiler, triton)
    from .runner import config_hash

    from . import distributed

    distributed.check_launch(cfg)
    if distributed.launch_rank() == 0:  # one claim per run: the other processes of a job share it
        rundir.claim(run_dir, config_hash(cfg), lock=cfg.lock, force=cfg.force, say=lambda line: print(line, file=sys.stderr, flush=True))


def prepare_or_exit(cfg: DictConfig, run_dir: Path) -> None:
    try:
        OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves, or one line now
        prepare(cfg, run_dir)
    except (ConfigError, HydraException, OmegaConfBaseException) as ex:
        fail(one_line(ex), config=True)
    except RunDirError as ex:
        fail(str(ex))
    except KeyboardInterrupt:  # Ctrl-C while waiting for another run's lock: nothing started yet
        print("attnbench: interrupted before the run started; nothing recorded", file=sys.stderr)
        sys.exit(EXIT_SIGINT)


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
        """Mask secrets in the files Hydra just wrote (.hydra/*.yaml hold the overrides as typed)."""
        from .redact import redact

        for f in Path(str(config.hydra.runtime.output_dir), str(config.hydra.output_subdir or ".hydra")).glob("*.yaml"):
            text = f.read_text()
            if redact(text) != text:
                f.write_text(redact(text))

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        rundir.release(Path(str(config.hydra.runtime.output_dir)))


def job_dir(config: DictConfig) -> Path:
    """A single run's directory, resolved; exit 2 in one line when it does not resolve or is empty
    (an empty hydra.run.dir would be the current directory)."""
    try:
        text = str(config.hydra.run.dir)
    except OmegaConfBaseException as ex:
        fail(one_line(ex), config=True)
    if not text.strip():
        fail("hydra.run.dir='': an empty run directory would be the current directory; name one (hydra.run.dir=DIR)", config=True)
    return Path(text)


def sweep_errors(config: DictConfig) -> list[str]:
    """The one-line error of each bad job of the sweep ``config`` (its overrides split as the sweeper
    splits them), each checked as ``Guard`` checks a single run, without creating anything."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    from .runner import config_hash

    loader = GlobalHydra.instance().config_loader()
    parsed = OverridesParser.create().parse_overrides(typed_overrides(config.hydra))
    jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    errors = []
    for i, job in enumerate(jobs):
        try:
            check_group_choices(list(job))
            job_cfg = loader.load_sweep_config(config, list(job))
            with open_dict(job_cfg):
                job_cfg.hydra.job.num = i
            HydraConfig.instance().set_config(job_cfg)
            task = task_config(job_cfg)
            OmegaConf.to_container(task, resolve=True)
            run_dir = Path(os.path.join(str(job_cfg.hydra.sweep.dir), str(job_cfg.hydra.sweep.subdir)))
            preflight(task, run_dir)
            if not task.force:
                rundir.check_identity(run_dir, config_hash(task))
        except (ConfigError, HydraException, OmegaConfBaseException) as ex:
            errors.append(f"job {i} ({' '.join(job)}): config error: {one_line(ex)}")
        except RunDirError as ex:
            errors.append(f"job {i} ({' '.join(job)}): {ex}")
    HydraConfig.instance().set_config(config)
    return errors


def config_error(overrides: list[str], check_dirs: bool = False) -> str | None:
    """Compose and validate ``overrides`` as the CLI does; the one-line error, or None if valid.

    With ``check_dirs`` also what ``Guard`` checks on disk (the run and cache directories, the
    run directory's config), without creating or locking anything.
    """
    from hydra import compose, initialize_config_module

    from .runner import config_hash

    with initialize_config_module(config_module="attnbench.conf", version_base="1.3"):
        try:
            check_group_choices(overrides)
            cfg = compose(config_name="config", overrides=overrides, return_hydra_config=check_dirs)
            if not check_dirs:
                config_mod.validate(cfg)
                return None
            HydraConfig.instance().set_config(cfg)
            if not str(cfg.hydra.run.dir).strip():
                return "hydra.run.dir='': an empty run directory would be the current directory; name one (hydra.run.dir=DIR)"
            task, run_dir = task_config(cfg), Path(str(cfg.hydra.run.dir))
            OmegaConf.to_container(task, resolve=True)
            preflight(task, run_dir)
            if not task.force:
                rundir.check_identity(run_dir, config_hash(task))
        except (ConfigError, HydraException, OmegaConfBaseException) as ex:
            return one_line(ex)
        except RunDirError as ex:
            return str(ex)
    return None


@hydra.main(version_base="1.3", config_path="pkg://attnbench.conf", config_name="config")
def hydra_entry(cfg: DictConfig) -> None:
    from . import distributed

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    prepare_or_exit(cfg, run_dir)  # done already by Guard for a single run; a sweep's jobs get here
    with distributed.session(cfg):  # torchrun / SLURM tasks: the process group (nothing otherwise)
        run(cfg, run_dir)


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


def disk_full(ex: BaseException, where: Path) -> str | None:
    """The one line for a write the disk could not take (ENOSPC, a quota), anywhere in ``ex``'s chain; else None."""
    from .results import DISK_FULL, DiskFull, free_bytes

    seen: BaseException | None = ex
    while seen is not None:
        if isinstance(seen, DiskFull):
            return f"attnbench: {seen}"
        if isinstance(seen, OSError) and seen.errno in DISK_FULL:
            path = Path(seen.filename) if seen.filename else where
            return f"attnbench: disk full writing {path}: {free_bytes(path):,} bytes free"
        seen = seen.__cause__ or seen.__context__
    return None


def run(cfg: DictConfig, run_dir: Path) -> None:
    """Run the experiment, then its sinks (footer, report, PDF, W&B); exit 130/143 after a signal,
    1 (one line) when the disk is full, and re-raise any other failure after the sinks."""
    import torch
    from rich.console import Console

    from . import distributed
    from .experiments import NEEDS_CUDA, runner
    from .heap import keep_freed_memory
    from .kernels import force
    from .results import Recorder
    from .runner import RunContext, config_dict, config_hash, resolve_device, seed_everything

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
    recorder.done_cells = distributed.from_main(lambda: recorder.done_cells)
    ctx = RunContext(
        cfg=cfg, run_dir=run_dir, recorder=recorder, device=device, console=Console(stderr=True, soft_wrap=True, quiet=not main)
    )
    if main and recorder.repaired.summary():  # the summary says what happens to each line and cell
        ctx.console.print(
            f"attnbench: {recorder.repaired.summary()}; repaired: the removed lines are kept in {recorder.path.name}.damaged",
            markup=False,
            highlight=False,
        )
    ctx.console.print(f"[bold]attnbench[/] exp={cfg.exp.name} designs={','.join(ctx.design_names)} device={device} run_dir={run_dir}")
    start = time.perf_counter()
    status, error, code = "failed", None, 0
    failure: BaseException | None = None
    try:
        with force(None if cfg.backend == "auto" else cfg.backend):
            runner(cfg.exp.name)(ctx)
        status = "completed"
    except KeyboardInterrupt as ex:  # Ctrl-C or SIGTERM: finish like a run, partially
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal ends the process at once
            signal.signal(sig, signal.SIG_DFL)
        status, code = "interrupted", EXIT_SIGTERM if isinstance(ex, Terminated) else EXIT_SIGINT
        error = "SIGTERM" if isinstance(ex, Terminated) else "SIGINT (Ctrl-C)"
    except BaseException as ex:
        failure, error = ex, describe(ex)
    full = disk_full(failure, run_dir) if failure is not None else None
    if status != "interrupted":  # a signal while finishing cuts the remaining sinks (one line, 130/143)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _raise_cut)
    sinks_code = finish(cfg, run_dir, ctx, status, error, time.perf_counter() - start, sinks=main and full is None)
    if status != "interrupted" and sinks_code in (0, 1):  # not cut: the handlers go back as they were
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    if full is not None:
        print(full, file=sys.stderr)
        sys.exit(1)
    if sinks_code > 1:  # a signal cut the sinks (its line is printed)
        if failure is not None:  # the run had failed already: that stays the news (a torchrun rank's line, exit 1)
            raise failure
        sys.exit(sinks_code)
    if failure is not None:
        raise failure
    if code or sinks_code:
        sys.exit(code or sinks_code)


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
    """The footer, then (``sinks``) the report and W&B. Returns 0; 1 when the disk was full (the one
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
        if sinks:
            return finish_run(cfg, run_dir, console, status, done)
        return 0
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
    from . import tracking

    done = [] if done is None else done
    t0 = time.perf_counter()
    from .runner import config_dict

    wcfg = config_dict(cfg.wandb)
    res, logging, logging_started, code = None, None, 0.0, 0
    try:
        if cfg.report.enabled:
            try:
                from .report import build_report
                from .report.pdf import PdfError, html_to_pdf

                title = f"attnbench report: {cfg.exp.name}" + ("" if status == "completed" else f" ({status}, partial)")
                res = build_report([run_dir], pdf=False, command=f"python -m attnbench report {run_dir}", title=title)
                done.append("report.html")
                logging, logging_started = tracking.start(run_dir, wcfg), time.perf_counter()  # figures exist now
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
                    code = 1
                else:
                    console.print(
                        f"report: failed ({type(ex).__name__}: {ex}); records are intact; retry with `python -m attnbench report {run_dir}`"
                    )
        if logging is None:
            logging, logging_started = tracking.start(run_dir, wcfg), time.perf_counter()
        msg = logging.wait(cfg.wandb.timeout_s - (time.perf_counter() - logging_started))
        done.append("W&B")
    except Cut:
        if logging is not None:
            logging.kill()  # its own session: a signal to this process does not reach it
        raise
    console.print(f"{msg} (sinks done {time.perf_counter() - t0:.1f} s after the run)")
    return code


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error in one line (argparse's documented hook: ``error``)."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog.split()[-1]}: {message} (see --help)")


def report_main(argv: list[str]) -> int:
    """``report``: exit 0 with a report; 2 with one line on stderr for bad input, or when the report
    was written but left damaged lines out (one line per damaged results file)."""
    from .report import all_experiments, build_report, decision_report
    from .report.data import EMPTY, NO_HEADER, ResultsError

    ap = OneLineParser(
        prog="python -m attnbench report", description="Write report.html and report.pdf from run directories' results.jsonl."
    )
    ap.add_argument("run_dirs", nargs="*", type=Path, help="run or sweep directories (merged into one report)")
    ap.add_argument("--out", type=Path, help="where to write (default: the run directory, or the one they share)")
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
            results = [decision_report(args.root, pdf=not args.no_pdf)]
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


def main(argv: list[str] | None = None) -> None:
    from .redact import mask_console

    mask_console()  # every line on the console, errors and tracebacks included, has its secrets masked
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "report":
        sys.exit(report_main(argv[1:]))
    if argv and argv[0] == "dashboard":
        from .dashboard import main as dashboard_main

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
    except KeyboardInterrupt as ex:  # a signal before the run started (run() handles its own)
        name = "SIGTERM" if isinstance(ex, Terminated) else "SIGINT (Ctrl-C)"
        print(f"attnbench: {name} before the run started; no cell ran, rerun the same command to start", file=sys.stderr)
        sys.exit(EXIT_SIGTERM if isinstance(ex, Terminated) else EXIT_SIGINT)
    except OSError as ex:
        line = disk_full(ex, Path.cwd())
        if line is None:
            raise
        print(line, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
