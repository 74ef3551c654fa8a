"""The checks before a run starts (the half of the CLI that stops bad input): a config error, a
run, cache or sweep directory that cannot be used, or a run directory holding another config's
records ends in one line on stderr and exit code 2, before anything is created. ``prepare``
runs them and claims the run directory; ``config_error`` answers the same for a list of
overrides without running (tests, the launchers). attnbench.cli.main's ``Guard`` calls them from Hydra.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, InterpolationResolutionError, OmegaConfBaseException, ValidationError

from attnbench import config as config_mod
from attnbench.records import rundir
from attnbench.config import ConfigError
from attnbench.records.rundir import RunDirError


EXIT_BAD_INPUT, EXIT_SIGINT, EXIT_SIGTERM = 2, 130, 143  # 128 + the signal number, as shells report it


def typed_overrides(hydra_node: DictConfig) -> list[str]:
    """The task overrides as typed (an interpolation in one, ``seed=${oc.env:X}``, left unresolved)."""
    return [str(o) for o in OmegaConf.to_container(hydra_node.overrides.task, resolve=False)]  # type: ignore[union-attr]


def fail(message: str, config: bool = False) -> NoReturn:
    """Bad input: one line on stderr, exit code 2."""
    print(f"attnbench: {'config error: ' if config else ''}{message}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


def one_line(ex: BaseException) -> str:
    """Describe a config failure in one line: field, value, what is allowed, and the allowed name
    closest to a mistyped one."""
    return with_suggestion(_one_line(ex))


def with_suggestion(line: str) -> str:
    """``line`` with "; did you mean NAME?" where it names a value outside a list of names (a
    config group's options, a design's) and one of them is close (difflib)."""
    import difflib
    from importlib.resources import files

    found = re.search(r"Could not (?:find|load) '([\w@.]+)/([^']+)'", line)
    if found:  # Hydra's missing group option; "Could not load" lists only its search path
        group, typed = found.groups()
        conf = files("attnbench.conf").joinpath(group)
        options = sorted(f.name.removesuffix(".yaml") for f in conf.iterdir() if f.name.endswith(".yaml")) if conf.is_dir() else []
        if "; available:" not in line and options:
            line = f"{group}={typed!r}: no such config; available: {', '.join(options)}"
    else:
        value = re.match(r"[\w.@+]+=(['\"]?)([^'\"]*)\1: one of ([\w, .-]+?)(?: \(|$)", line)
        if not value:
            return line
        typed, options = value.group(2), [o.strip() for o in value.group(3).split(",")]
    close = difflib.get_close_matches(typed, options, n=1, cutoff=0.6)
    return f"{line}; did you mean {close[0]}?" if close and close[0] != typed else line


def _one_line(ex: BaseException) -> str:
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
    from attnbench.basics import cache_root
    from attnbench.experiments import CACHE_USERS, NEEDS_CUDA
    from attnbench.names import EXTERNAL

    config_mod.validate(cfg)
    if cfg.exp.name in EXTERNAL:  # the model it names exists (a folder, a server that answers): one line, no run directory
        from attnbench.external.sources import SourceError, check

        try:
            check(str(cfg.external.model), cfg.external)
        except SourceError as ex:
            raise config_mod.ConfigError("external.model", cfg.external.model or None, str(ex).split(": ", 1)[-1]) from None
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

    from attnbench.kernels.backend import BACKENDS, env_backend

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
    from attnbench.records.redact import holds_secret

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
    from attnbench.runner import config_hash

    from attnbench.training import distributed

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
    except OSError as ex:  # a disk full already: name the directory, one line (a callback's exception would be a warning)
        line = disk_full(ex, run_dir)
        if line is None:
            raise
        print(line, file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C while waiting for another run's lock: nothing started yet
        print("attnbench: interrupted before the run started; nothing recorded", file=sys.stderr)
        sys.exit(EXIT_SIGINT)


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

    from attnbench.runner import config_hash

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

    from attnbench.runner import config_hash

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


def disk_full(ex: BaseException, where: Path) -> str | None:
    """The one line for a write the disk could not take (ENOSPC, a quota, a file-size limit:
    EFBIG), anywhere in ``ex``'s chain; else None."""
    import errno

    from attnbench.records.write import DISK_FULL, DiskFull, free_bytes

    seen: BaseException | None = ex
    while seen is not None:
        if isinstance(seen, DiskFull):
            return f"attnbench: {seen}"
        if isinstance(seen, OSError) and seen.errno in (*DISK_FULL, errno.EFBIG):
            path = Path(seen.filename) if seen.filename else where
            if seen.errno == errno.EFBIG:
                return f"attnbench: file size limit reached writing {path} (ulimit -f); the records so far are kept"
            return f"attnbench: disk full writing {path}: {free_bytes(path):,} bytes free"
        seen = seen.__cause__ or seen.__context__
    return None
