"""The Hydra app: bad configs stop at start, smoke runs end to end (every experiment: test_experiments.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest

from attnbench.report.pdf import find_chromium, weasyprint_error

from helpers import compose_cfg

EXPS = sorted(p.stem for p in resources.files("attnbench.conf").joinpath("exp").iterdir() if p.name.endswith(".yaml"))


def run_cli(*args, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "attnbench", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_help_is_attnbench_own(tmp_path):
    """--help (conf/hydra/help/attnbench.yaml): the main command, every experiment, the docs."""
    res = run_cli("--help", cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "+exp=needle_4m" in out and "docs/DESIGN.md" in out and "report --help" in out, out
    assert "powered by Hydra" not in out, out
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ") and line.split()}
    assert set(EXPS) <= listed, sorted(set(EXPS) - listed)
    assert (Path(__file__).resolve().parents[1] / "docs" / "DESIGN.md").is_file()


@pytest.mark.parametrize(
    "override, field",
    [
        ("design=nope", "design"),
        ("attention.msa.layout=SXM", "attention.msa.layout"),
        ("model.n_kv_heads=3", "model.n_kv_heads"),
        ("model.d_modle=64", "model.d_modle"),
        ("attention.msa.top_k=0", "attention.msa.top_k"),
        ("exp.budget=soon", "exp.budget"),
        ("wandb.mode=sometimes", "wandb.mode"),
        ("wandb.timeout_s=0", "wandb.timeout_s"),
    ],
)
def test_bad_config_stops_with_one_line(tmp_path, override, field):
    res = run_cli("+exp=smoke", override, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path, timeout=60)
    assert res.returncode == 2, res.stderr
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "run" / "results.jsonl").exists()


@pytest.mark.parametrize(
    "override, line",
    [
        ("device=gpu", "device='gpu': one of auto, cpu, cuda; did you mean cpu?"),
        ("train.parallel=mpi", "train.parallel='mpi': one of none, ddp, fsdp"),
        ("kernels.ops=[softmax,flash]", "kernels.ops[1]='flash': one of softmax, sliding_window, lightning, msa, gated_delta, dsa"),
    ],
)
def test_a_value_outside_a_fixed_set_fails_at_compose_in_the_one_line_form(override, line):
    """Enum fields (attnbench/config/choices.py): OmegaConf refuses the value, the CLI names field, value, choices."""
    from attnbench.cli.preflight import config_error

    assert config_error(["+exp=smoke", override]) == line


def unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot write in: a read-only one, or where root ignores modes, /sys."""
    ro = tmp_path / "read-only"
    ro.mkdir()
    ro.chmod(0o500)
    for candidate in (ro, Path("/sys")):
        try:
            (candidate / ".probe").mkdir()
        except OSError:
            return candidate
        (candidate / ".probe").rmdir()
    pytest.skip("no unwritable directory here (root, and /sys is writable)")


@pytest.mark.parametrize(
    "case, args, field",
    [
        ("negative seed", ["seed=-1"], "seed=-1"),
        ("seed past numpy's range", [f"seed={2**32}"], "seed="),
        ("more threads than cores", ["threads=1000"], "threads=1000"),
        ("no context length", ["eval.context_lens=[]"], "eval.context_lens"),
        ("zero budget", ["exp.budget=0"], "exp.budget"),
        ("a length no memory holds", ["exp.seq_len=100000000"], "exp.seq_len=100000000"),
        ("unknown lock mode", ["lock=sometimes"], "lock"),
        ("run directory is a file", ["hydra.run.dir={tmp}/file"], "is a file"),
        ("run directory below a file", ["hydra.run.dir={tmp}/file/run"], "is a file"),
        ("run directory in an unwritable directory", ["hydra.run.dir={unwritable}/run"], "cannot write"),
        ("cache below a file", ["ATTNBENCH_CACHE={tmp}/file/cache", "+exp=train"], "cache directory"),
        ("triton on a CPU-only machine", ["backend=triton", "device=cpu"], "backend='triton'"),
        ("an unknown ATTNBENCH_BACKEND", ["ATTNBENCH_BACKEND=bogus"], "ATTNBENCH_BACKEND='bogus'"),
        ("an unset environment variable", ["seed=${{oc.env:ATTNBENCH_UNSET_VARIABLE}}"], "seed: its interpolation does not resolve"),
        ("an interpolation to no key", ["exp.seq_len=${{model.nonexistent}}"], "exp.seq_len: its interpolation does not resolve"),
        ("a list where one experiment goes", ["+exp=[smoke,kv_memory]"], "one exp, not a list"),
        ("an empty run directory", ["hydra.run.dir="], "hydra.run.dir=''"),
    ],
)
def test_bad_input_stops_in_one_line_and_leaves_nothing(tmp_path, case, args, field):
    (tmp_path / "file").write_text("in the way\n")
    subs = {"tmp": tmp_path}
    if any("{unwritable}" in a for a in args):
        subs["unwritable"] = unwritable_dir(tmp_path)
    args = [a.format(**subs) for a in args]
    if "device=cpu" in args and "backend=triton" in args and os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1 runs Triton on the CPU")
    env = {**os.environ, **dict(a.split("=", 1) for a in args if a.startswith("ATTNBENCH_"))}
    overrides = [a for a in args if not a.startswith("ATTNBENCH_")]
    if not any(a.startswith("+exp=") for a in overrides):
        overrides.insert(0, "+exp=smoke")
    if not any(a.startswith("hydra.run.dir=") for a in overrides):
        overrides.append(f"hydra.run.dir={tmp_path}/run")
    before = sorted(tmp_path.rglob("*"))
    res = subprocess.run(
        [sys.executable, "-m", "attnbench", *overrides], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env
    )
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, (case, res.stderr[-3000:])
    assert lines[0].startswith("attnbench: ") and field in lines[0], (case, lines[0])
    assert sorted(tmp_path.rglob("*")) == before, case  # no run directory, no .hydra/, no log file


@pytest.mark.parametrize(
    "case, make, field",
    [
        ("results.jsonl is a directory", lambda d: (d / "results.jsonl").mkdir(), "results.jsonl is a directory"),
        ("the lock is a directory", lambda d: (d / ".attnbench.lock").mkdir(), ".attnbench.lock is a directory"),
        ("a file named .hydra", lambda d: (d / ".hydra").write_text("x\n"), ".hydra is a file"),
        ("results.jsonl a broken link", lambda d: (d / "results.jsonl").symlink_to(d / "nowhere"), "broken or looping"),
        ("a symlink loop", lambda d: (d.rmdir(), (d.parent / "loop").symlink_to(d), d.symlink_to(d.parent / "loop")), "looping"),
    ],
)
def test_run_directory_contents_of_the_wrong_kind_stop_in_one_line(tmp_path, case, make, field):
    """What a run directory already holds is checked before work: exit 2, one line, nothing created."""
    run = tmp_path / "run"
    run.mkdir()
    make(run)
    before = sorted(os.path.lexists(p) and str(p) for p in tmp_path.rglob("*"))
    res = run_cli("+exp=smoke", f"hydra.run.dir={run}", cwd=tmp_path)
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, (case, res.stderr[-3000:])
    assert field in lines[0], (case, lines[0])
    assert sorted(os.path.lexists(p) and str(p) for p in tmp_path.rglob("*")) == before, case


def test_a_sweep_with_bad_jobs_starts_none(tmp_path):
    """Every job of a sweep is checked before any starts: one line per bad job, nothing created."""
    res = run_cli("-m", "+exp=smoke", "seed=-1,0,${oc.env:ATTNBENCH_UNSET_VARIABLE}", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert len(lines) == 3 and "job 0 (+exp=smoke seed=-1)" in lines[0] and "seed=-1" in lines[0], lines
    assert "job 2" in lines[1] and "does not resolve" in lines[1] and "2 of the sweep's jobs" in lines[2], lines
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "multirun").exists()


@pytest.mark.parametrize(
    "overrides, want",
    [
        (["exp.description=../../../../escape"], "runs/smoke/exp.description=sha-"),
        (["exp.description=" + "x" * 300], "runs/smoke/exp.description=sha-"),
        (["exp.description=desc hf_SECRETabcdef123456"], "runs/smoke/exp.description=sha-"),
        (["seed=${oc.env:HOME}"], "runs/smoke/seed=sha-"),
        (["model.d_model=" + "9" * 300], "runs/smoke/model.d_model=999"),
        (["design=softmax", "seed=1"], "runs/smoke/design=softmax,seed=1"),
    ],
)
def test_free_text_never_names_a_run_directory(overrides, want):
    """A run directory's name holds no free text, no interpolated value and no path: those are
    hashed; it stays under runs/ and within a file name's length (attnbench/records/rundir.py dir_name)."""
    from hydra import compose, initialize_config_module
    from hydra.core.hydra_config import HydraConfig

    import attnbench.cli.main  # noqa: F401  (registers ${attnbench_dirname:})

    with initialize_config_module(config_module="attnbench.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+exp=smoke", *overrides], return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        run_dir = str(cfg.hydra.run.dir)
    assert run_dir.startswith(want), run_dir
    name = run_dir.split("/", 2)[2]
    assert "/" not in name and ".." not in name and len(name.encode()) <= 200 and "SECRET" not in name and "escape" not in name


def results_file(tmp_path: Path) -> Path:
    """A real results file of a one-design smoke run."""
    res = run_cli(
        "+exp=smoke",
        "design=softmax",
        "threads=1",
        "report.enabled=false",
        "wandb.mode=disabled",
        f"hydra.run.dir={tmp_path}/run",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp_path / "run" / "results.jsonl"


def test_report_inputs_get_one_line(tmp_path):
    """report: damaged files are reported (the damage named in one line, exit 2), bad paths refused."""
    path = results_file(tmp_path)
    good = path.read_bytes()
    (tmp_path / "notes.txt").write_text("not results\n")
    n = good.count(b"\n") + 1  # the number of the line added
    cases = [
        ("a non-UTF-8 byte", good + b"\xff\xfe\n", ["{run}"], f"line {n}: not UTF-8"),
        ("a line holding 123", good + b"123\n", ["{run}"], f"line {n}: not a JSON object"),
        ("the results file itself, damaged", good + b"123\n", ["{run}/results.jsonl"], f"line {n}: not a JSON object"),
        ("a file that is not results", good, ["{tmp}/notes.txt"], "not an attnbench results file"),
        ("a path that does not exist", good, ["{tmp}/nothing"], "no such file"),
        ("--out is a file", good, ["{run}", "--out", "{tmp}/notes.txt"], "is a file"),
    ]
    for case, data, argv, want in cases:
        path.write_bytes(data)
        argv = [a.format(run=path.parent, tmp=tmp_path) for a in argv]
        res = run_cli("report", *argv, "--no-pdf", cwd=tmp_path, timeout=120)
        lines = [l for l in res.stderr.splitlines() if l.strip()]
        assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, (case, res.stderr[-3000:])
        assert want in lines[0], (case, lines[0])
        if want.startswith("line "):  # the report is still written, saying what it left out
            assert "Damaged results" in (path.parent / "report.html").read_text()


def test_missing_experiment_names_the_choices(tmp_path):
    res = run_cli(cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and "+exp=NAME" in res.stderr and "smoke" in res.stderr


def test_smoke_runs_end_to_end(tmp_path):
    # no wall-clock assertion (CI machines are shared); the timeout only stops a hang
    # exp.budget raised: on a loaded machine smoke's 60 s would stop it part-way (tests/test_unchecked_input.py tests that)
    res = run_cli("+exp=smoke", "exp.budget=1h", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [json.loads(l) for l in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    header, records = lines[0], [l for l in lines[1:] if l["type"] == "record"]
    assert header["type"] == "header" and header["config_hash"] and header["git"] and header["hardware"]["cpu_count"]
    for r in records:
        for key in ("exp", "design", "layout", "metric", "value", "unit", "status"):
            assert key in r, (key, r)
    designs = {r["design"] for r in records if r["status"] == "measured"}
    assert {"softmax", "lightning", "lightning_hybrid", "sliding_window", "msa"} <= designs
    layouts = {r["design"]: r["layout"] for r in records}
    assert layouts["lightning_hybrid"] == "LLLLLLLS"
    errs = [r for r in records if r["metric"].endswith("_vs_full_rel_err")]
    assert errs and all(r["status"] == "measured" and r["value"] <= 1e-5 for r in errs)
    # The sinks: a footer, the report (PDF where Chromium is), offline W&B runs by default.
    footer = json.loads((tmp_path / "run" / "results.jsonl").read_text().splitlines()[-1])
    assert footer["type"] == "footer" and footer["status"] == "completed"
    html = (tmp_path / "run" / "report.html").read_text()
    assert '<table id="decision"' in html and "lightning_hybrid" in html
    if find_chromium() or weasyprint_error() is None:
        assert (tmp_path / "run" / "report.pdf").stat().st_size > 10_000
    else:
        assert "no PDF: chromium: not found" in res.stderr
    assert len(list((tmp_path / "run" / "wandb").glob("offline-run-*"))) == 7  # 6 designs + the report


@pytest.mark.slow
def test_ctrl_c_leaves_a_partial_report_and_disabled_wandb_writes_nothing(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnbench", "+exp=smoke", "report.pdf=false", "wandb.mode=disabled", f"hydra.run.dir={tmp_path}/run"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        # a shell's background job (nohup ... &) ignores SIGINT, and so would the child
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stderr=subprocess.PIPE,
        text=True,
    )
    results = tmp_path / "run" / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait for the first design's records, then press Ctrl-C
        if results.exists() and '"type": "record"' in results.read_text():
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    lines = [json.loads(l) for l in results.read_text().splitlines()]
    assert lines[-1]["type"] == "footer" and lines[-1]["status"] == "interrupted"
    html = (tmp_path / "run" / "report.html").read_text()
    assert "(interrupted, partial)" in html and "1 run interrupted" in html
    assert "softmax" in html
    assert not (tmp_path / "run" / "wandb").exists() and "W&B: disabled" in err


def test_sigterm_finishes_like_ctrl_c_with_exit_143_and_a_partial_report(tmp_path):
    """SIGTERM (SLURM, Docker, `timeout`): the current cell stays whole, footer, partial report, 143."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnbench",
            "+exp=smoke",
            "threads=1",
            "report.pdf=false",
            "wandb.mode=disabled",
            f"hydra.run.dir={tmp_path}/run",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
        stderr=subprocess.PIPE,
        text=True,
    )
    results = tmp_path / "run" / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait for the first design's records, then send SIGTERM
        if results.exists() and '"type": "record"' in results.read_text():
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    lines = [json.loads(l) for l in results.read_text().splitlines()]  # every line whole
    assert lines[-1]["type"] == "footer" and lines[-1]["status"] == "interrupted" and lines[-1]["error"] == "SIGTERM"
    from attnbench.records.integrity import scan

    found = scan(results)
    assert not found.needs_repair and found.done_cells and len(found.done_cells) < 6  # whole cells, and not all
    html = (tmp_path / "run" / "report.html").read_text()
    assert "(interrupted, partial)" in html and "1 run interrupted (SIGTERM)" in html and "softmax" in html
    assert "interrupted in" in err and "rerun the same command to resume" in err


def test_a_failed_run_states_its_error_in_footer_and_report(tmp_path, monkeypatch):
    from attnbench.cli import main as cli
    from attnbench import experiments

    def broken(ctx):
        cell = ctx.cell(design="softmax")
        cell.record("softmax", "smoke/grad_norm", 1.0, "norm")
        cell.commit()
        raise RuntimeError("the haystack caught fire")

    monkeypatch.setattr(experiments, "runner", lambda name: broken)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError, match="caught fire"):
        cli.run(compose_cfg(["+exp=smoke", "report.pdf=false", "wandb.mode=disabled"]), tmp_path / "run")
    assert signal.getsignal(signal.SIGTERM) == before  # run() gives the handler back
    footer = json.loads((tmp_path / "run" / "results.jsonl").read_text().splitlines()[-1])
    assert footer["status"] == "failed" and footer["error"] == "RuntimeError: the haystack caught fire"
    html = (tmp_path / "run" / "report.html").read_text()
    assert "1 run failed (RuntimeError: the haystack caught fire)" in html  # the badge at the top
    assert "failed" in html and html.count("the haystack caught fire") >= 2  # and the caveat


def test_runs_keep_freed_memory_where_glibc_allows():
    """Every run sets glibc's malloc thresholds (attnbench/heap.py, called by cli.run): on Linux with
    glibc mallopt accepts them; elsewhere the call says it did not apply."""
    import platform

    from attnbench.heap import keep_freed_memory

    applies = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert keep_freed_memory() is applies


def test_report_answers_a_missing_header_and_empty_files_alike_for_a_file_or_its_directory(tmp_path):
    """A missing header, an empty file, a directory of empty files: exit 2 and one line, the same
    whether the directory or the file is named; a caveat where the report is still written."""
    import contextlib
    import io

    from attnbench.cli.main import report_main

    from report_fixtures import write_run

    def report(*argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = report_main([*map(str, argv), "--no-pdf"])
            except SystemExit as ex:
                code = ex.code
        return code, [l for l in err.getvalue().splitlines() if l.strip()]

    run = write_run(tmp_path / "headless")
    path = run / "results.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[1:]))
    for named in (run, path):
        code, lines = report(named)
        assert code == 2 and len(lines) == 1 and "no header line" in lines[0], (named, lines)
        assert "Results file:" in (run / "report.html").read_text() and "no header line" in (run / "report.html").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "results.jsonl").write_text("")
    answers = {tuple(report(named)[1]) for named in (empty, empty / "results.jsonl")}
    assert len(answers) == 1 and report(empty)[0] == report(empty / "results.jsonl")[0] == 2, answers
    (line,) = answers.pop()
    assert "empty: no header or record line" in line
    sweep = tmp_path / "sweep"
    for job in ("a", "b"):
        (sweep / job).mkdir(parents=True)
        (sweep / job / "results.jsonl").write_text("")
    code, lines = report(sweep)
    assert code == 2 and len(lines) == 1 and "every one empty" in lines[0], lines
    write_run(sweep / "c")  # one good run beside them: its report, the empty ones named
    code, lines = report(sweep)
    assert code == 2 and len(lines) == 2 and all("empty: no header or record line" in l for l in lines), lines
    assert (sweep / "report.html").read_text().count("Results file:") == 2


@pytest.mark.parametrize(
    "args, want",
    [
        (["+exp=needle4m"], "did you mean needle_4m?"),
        (["+exp=smoke", "design=softmx"], "did you mean softmax?"),
        (["+exp=smoke", "model=smal"], "did you mean small?"),
        (["+exp=smoke", "attention=[softmx]"], "did you mean softmax?"),
    ],
)
def test_a_typo_gets_the_nearest_name(tmp_path, args, want):
    """A mistyped experiment, design or config-group option: one line, rc 2, the closest valid name."""
    res = run_cli(*args, "wandb.mode=disabled", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, timeout=120)
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert lines[0].endswith(want), lines[0]
