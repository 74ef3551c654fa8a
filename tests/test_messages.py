"""Every message names the right thing, in one line, as text: paths and user values are printed
as they are (never read as Rich markup), a full disk names the directory that is full (run
directory, cache, W&B directory), an impossible size names its own field."""

from __future__ import annotations

import signal

from attnbench import cli, rundir

from helpers import compose_cfg

QUICK = ["+exp=smoke", "exp.designs=[softmax]", "threads=1", "report.pdf=false", "wandb.mode=disabled"]


def run_in_process(run, overrides: list[str]) -> None:
    import torch

    threads = torch.get_num_threads()
    cfg = compose_cfg([*QUICK, *overrides])
    try:
        cli.prepare(cfg, run)
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
