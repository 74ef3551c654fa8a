"""Signals at any moment (issue 30, B): SIGTERM and SIGINT in setup, while cells run, and while the
sinks are written (report, PDF, W&B) end in one line with exit 143 or 130, never a traceback; the
footer is whole and a ``sinks`` line names what was cut; a rerun writes what was cut."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnbench.cli import main as cli, preflight
from attnbench.records import rundir

from helpers import compose_cfg

CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}
QUICK = ["+exp=smoke", "exp.designs=[softmax]", "threads=1"]


def lines_of(run: Path) -> list[dict]:
    return [json.loads(l) for l in (run / "results.jsonl").read_text().splitlines()]


def kill_self(sig):
    os.kill(os.getpid(), sig)
    time.sleep(0.5)  # the handler runs at the next bytecode; never reached


def run_in_process(run: Path, overrides: list[str]) -> None:
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("phase", ["setup", "cells", "report", "pdf", "wandb"])
def test_each_signal_at_each_phase_ends_in_one_line(phase, sig, tmp_path, monkeypatch, capsys):
    from attnbench import experiments, runner
    from attnbench.tracking import wandb_runs as tracking
    from attnbench.report import pdf

    run = tmp_path / "run"
    overrides = ["report.pdf=true", "wandb.mode=offline", "wandb.timeout_s=30"]
    if phase == "setup":
        monkeypatch.setattr(runner, "seed_everything", lambda seed: kill_self(sig))
    elif phase == "cells":
        real = experiments.runner

        def interrupted(name):
            def go(ctx):
                real(name)(ctx)  # every cell done, then the signal before the experiment returns
                kill_self(sig)

            return go

        monkeypatch.setattr(experiments, "runner", interrupted)
    elif phase == "report":
        monkeypatch.setattr("attnbench.report.build_report", lambda *a, **k: kill_self(sig))
    elif phase == "pdf":
        monkeypatch.setattr(pdf, "html_to_pdf", lambda *a, **k: kill_self(sig))
    else:
        real_start = tracking.start

        def start(*a, **k):
            logging = real_start(*a, **k)
            kill_self(sig)
            return logging

        monkeypatch.setattr(tracking, "start", start)
    with pytest.raises(SystemExit) as ex:
        run_in_process(run, overrides)
    assert ex.value.code == CODES[sig], ex.value.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    name = "SIGTERM" if sig == signal.SIGTERM else "SIGINT"
    if phase == "setup":
        assert not (run / "results.jsonl").exists() or not any(l["type"] == "record" for l in lines_of(run))
        assert f"attnbench: {name}" in err and "before the run started" in err
        return
    lines = lines_of(run)  # every line whole
    footer = next(l for l in lines if l["type"] == "footer")
    if phase == "cells":
        assert footer["status"] == "interrupted" and lines[-1]["type"] == "footer"
        assert "rerun the same command to resume" in err
        return
    assert footer["status"] == "completed"
    (sinks,) = [l for l in lines if l["type"] == "sinks"]
    cut = {"report": ["report.html", "report.pdf", "W&B"], "pdf": ["report.pdf", "W&B"], "wandb": ["report.pdf", "W&B"]}[phase]
    assert sinks["signal"] == name and sinks["cut"] == cut, sinks
    (line,) = [l for l in err.splitlines() if "while finishing" in l]
    assert (
        line
        == f"attnbench: {name} while finishing: {', '.join(cut)} cut ({', '.join(sinks['done'])} written); rerun the same command to write them"
    )
    # the rerun writes what was cut (W&B off here: only the report is checked)
    monkeypatch.undo()
    run_in_process(run, ["report.pdf=false", "wandb.mode=disabled"])
    assert (run / "report.html").exists() and lines_of(run)[-1]["type"] == "footer"


def test_sigterm_right_after_completed_gives_one_line_and_143(tmp_path):
    """The issue's reproduction: SIGTERM once "completed in" is printed (the sinks' imports under way)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnbench", *QUICK, "report.pdf=false", "wandb.mode=offline", f"hydra.run.dir={tmp_path}/run"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    err = ""
    for line in proc.stderr:
        err += line
        if line.startswith("completed in"):
            proc.send_signal(signal.SIGTERM)
            break
    err += proc.stderr.read()
    assert proc.wait(timeout=120) == 143, err[-3000:]
    assert "Traceback" not in err and "Terminated" not in err, err[-3000:]
    assert err.count("while finishing") == 1, err[-3000:]
    lines = lines_of(tmp_path / "run")
    assert [l["type"] for l in lines[-2:]] == ["footer", "sinks"] and lines[-2]["status"] == "completed"
