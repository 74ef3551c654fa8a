"""Every message names the right thing, in one line, as text: paths and user values are printed
as they are (never read as Rich markup), a full disk names the directory that is full (run
directory, cache, W&B directory), an impossible size names its own field."""

from __future__ import annotations

import signal

from attnbench.cli import main as cli, preflight
from attnbench.cli import run as cli_run
from attnbench.records import rundir

from helpers import compose_cfg

QUICK = ["+exp=smoke", "exp.designs=[softmax]", "threads=1", "report.pdf=false", "wandb.mode=disabled"]


def run_in_process(run, overrides: list[str]) -> None:
    import torch

    threads = torch.get_num_threads()
    cfg = compose_cfg([*QUICK, *overrides])
    try:
        preflight.prepare(cfg, run)
        cli.run(cfg, run)
    finally:
        torch.set_num_threads(threads)
        rundir.release(run)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_run_directory_with_brackets_is_printed_as_it_is(tmp_path, capsys):
    """Hydra names a run directory after list overrides (exp.designs=[softmax]): Rich markup would eat the brackets."""
    run = tmp_path / "exp.designs=[softmax],x=[bold]:smile:"
    run_in_process(run, [])
    err = capsys.readouterr().err
    assert f"run_dir={run}\n" in err and f"records in {run / 'results.jsonl'}" in err, err
    assert f"report: {run / 'report.html'} (" in err, err


def lines_of(run) -> list[dict]:
    import json

    return [json.loads(l) for l in (run / "results.jsonl").read_text().splitlines()]


def test_a_disk_full_at_the_start_names_the_run_directory_in_one_line(tmp_path, monkeypatch, capsys):
    """The lock file cannot be written (ENOSPC, no file name): one line naming the run directory, exit 1."""
    import errno

    import pytest

    from attnbench.cli.preflight import prepare_or_exit

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rundir, "claim", full)
    with pytest.raises(SystemExit) as ex:
        prepare_or_exit(compose_cfg(QUICK), tmp_path / "run")
    err = capsys.readouterr().err
    assert ex.value.code == 1 and err.count("\n") == 1 and err.startswith(f"attnbench: disk full writing {tmp_path / 'run'}: "), err


def test_a_full_disk_while_saving_a_checkpoint_names_the_checkpoint(tmp_path):
    """torch.save hides the ENOSPC behind RuntimeError('[enforce fail at inline_container.cc...]'): the file is named."""
    import errno

    from attnbench.basics import atomic_write

    def save(f):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598") from None

    target = tmp_path / "cache" / "checkpoints" / "softmax-abc" / "final.pt"
    try:
        atomic_write(target, save)
    except BaseException as ex:  # noqa: BLE001 (the test reads what the run would)
        line = cli.disk_full(ex, tmp_path / "run")
    assert line is not None and line.startswith(f"attnbench: disk full writing {target}: "), line
    assert not list(target.parent.iterdir())  # the temp file went


def test_a_full_disk_at_the_report_is_one_line_and_no_wandb_error(tmp_path, monkeypatch, capsys):
    import errno

    from attnbench.tracking import wandb_runs as tracking
    from attnbench.runner import text_console

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "report.html"))

    started = []
    monkeypatch.setattr("attnbench.report.build_report", full)
    monkeypatch.setattr(tracking, "start", lambda *a, **k: started.append(a))
    cfg = compose_cfg([*QUICK, "wandb.mode=offline"])
    code = cli_run.finish_run(cfg, tmp_path / "run", text_console(), "completed")
    err = capsys.readouterr().err
    assert code == 1 and not started and err.count("\n") == 1 and "disk full writing" in err, err


def fail_after_one_cell(monkeypatch, ex: BaseException) -> None:
    from attnbench import experiments

    def broken(ctx):
        cell = ctx.cell(design="softmax")
        cell.record("softmax", "smoke/grad_norm", 1.0, "norm")
        cell.commit()
        raise ex

    monkeypatch.setattr(experiments, "runner", lambda name: broken)


def test_out_of_memory_and_a_file_size_limit_end_in_one_line_with_the_traceback_in_the_log(tmp_path, monkeypatch, capsys):
    import errno

    import pytest

    cases = [
        (MemoryError(), "attnbench: out of memory (MemoryError)"),
        (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"), "attnbench: out of memory"),
        (OSError(errno.EFBIG, "File too large", str(tmp_path / "big")), f"attnbench: file size limit reached writing {tmp_path / 'big'}"),
    ]
    for i, (ex, want) in enumerate(cases):
        run = tmp_path / f"run{i}"
        fail_after_one_cell(monkeypatch, ex)
        with pytest.raises(SystemExit) as exit_:
            run_in_process(run, [])
        err = capsys.readouterr().err
        (line,) = [l for l in err.splitlines() if l.startswith("attnbench: ") and "attnbench exp=" not in l]
        assert exit_.value.code == 1 and line.startswith(want) and "Traceback" not in err, err
        assert "Traceback" in (run / "attnbench.log").read_text()  # the whole story in the run's log
        assert "out of memory" not in line or line.endswith(f"traceback in {run / 'attnbench.log'}"), line
        assert lines_of(run)[-1]["type"] == "footer" and lines_of(run)[-1]["status"] == "failed"


def test_ctrl_c_or_sigterm_during_report_is_one_line(tmp_path, monkeypatch, capsys):
    import sys

    import pytest

    from attnbench.cli.run import Terminated

    from report_fixtures import write_run

    run = write_run(tmp_path / "run")
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # main() masks the console: undone after the test
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    for ex, code, name in ((KeyboardInterrupt(), 130, "SIGINT (Ctrl-C)"), (Terminated(), 143, "SIGTERM")):

        def interrupted(*a, exc=ex, **k):
            raise exc

        monkeypatch.setattr("attnbench.report.build_report", interrupted)
        try:
            with pytest.raises(SystemExit) as exit_:
                cli.main(["report", str(run), "--no-pdf"])
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        err = capsys.readouterr().err
        assert exit_.value.code == code and err == f"attnbench: report: {name}; the report was not finished, rerun the same command\n", err


def test_a_signal_during_interpreter_shutdown_is_one_line_and_143(tmp_path):
    """SIGTERM in an atexit callback after a finished run (W&B's, logging's): one line, 143, no
    ``Exception ignored in atexit callback``."""
    import subprocess
    import sys

    code = (
        "import atexit, os, signal, sys, time\n"
        "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(5)))\n"  # runs last
        "from attnbench.cli.main import main\n"
        f"main({[*QUICK, f'hydra.run.dir={tmp_path}/run']!r})\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 143, res.stderr[-3000:]
    assert res.stderr.strip().splitlines()[-1] == "attnbench: SIGTERM while exiting; the run and its sinks were written", res.stderr
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr, res.stderr


def test_a_full_or_unwritable_wandb_directory_is_named_in_one_line(tmp_path, monkeypatch, capsys):
    """W&B's own write fails (ENOSPC with no file name, or EACCES on its directory): the child's one
    line names RUN_DIR/wandb, not a bare ``OSError`` (what the parent prints as the W&B line)."""
    import errno
    import json

    import wandb

    from attnbench.tracking import wandb_runs

    from report_fixtures import write_run

    run = write_run(tmp_path / "run")
    cases = [
        (OSError(errno.ENOSPC, "No space left on device"), f"W&B: disk full writing {run / 'wandb'}: "),
        (PermissionError(errno.EACCES, "Permission denied", str(run / "wandb" / "x")), f"W&B: cannot write {run / 'wandb' / 'x'} ("),
    ]
    for ex, want in cases:

        def init(*a, exc=ex, **k):
            try:
                raise exc
            except OSError as inner:  # wandb wraps its errors: the OSError is the cause
                raise wandb.Error("could not init run") from inner

        monkeypatch.setattr(wandb, "init", init)
        code = wandb_runs.main([str(run), "--config", json.dumps({"mode": "offline"})])
        out = capsys.readouterr().out
        assert code == 1 and out.count("\n") == 1 and out.startswith(want), out


def test_the_wandb_sync_command_works_for_a_directory_with_brackets(tmp_path):
    """A sweep's job directory ``exp.designs=[softmax]``: pasted into a shell, the printed command
    must name that directory's runs (unquoted, ``[softmax]`` is a pattern matching one letter)."""
    import subprocess

    from attnbench.tracking.wandb_runs import sync_command

    run = tmp_path / "exp.designs=[softmax]"
    written = [run / "wandb" / "offline-run-20260101_000000-abc"]
    written[0].mkdir(parents=True)
    cmd = sync_command([run], written)
    echoed = subprocess.run(["bash", "-c", "echo " + cmd.removeprefix("wandb sync ")], capture_output=True, text=True, check=True)
    assert echoed.stdout.strip() == str(written[0]), (cmd, echoed.stdout)
