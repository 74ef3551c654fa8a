"""W&B: offline runs read back from their files, disabled writes none, failures cost bounded time,
no secret reaches a record, log, report or W&B file; the dashboard builds offline.

Run directories here hold SYNTHETIC TEST FIXTURES (tests/report_fixtures.py), except the CLI
run, which is a real one-design smoke run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from attnbench.tracking.dashboard import build_workspace
from attnbench.report import build_report
from attnbench.tracking.wandb_runs import last_error, log_in_child

from report_fixtures import write_run
from wandb_files import read_runs

FAKE_KEY = "fake0wandb0key0" + "7" * 25  # 40 characters, the shape of a real key


def test_offline_runs_read_back(tmp_path):
    run = write_run(tmp_path / "run", exp="fixture")
    build_report([run], pdf=False)  # figures/ for the report run
    msg = log_in_child(run, {"mode": "offline", "project": "attnbench", "tags": ["t1"]}, timeout_s=60)
    assert msg.startswith("W&B: 7 offline runs"), msg  # 5 designs + the presets' pseudo-design + the report
    runs = {r["name"]: r for r in read_runs(run)}
    assert set(runs) == {
        "fixture/softmax/seed0",
        "fixture/lightning/seed0",
        "fixture/lightning_hybrid/seed0",
        "fixture/swa_hybrid/seed0",
        "fixture/msa/seed0",
        "fixture/preset/seed0",
        "fixture/report",
    }
    soft = runs["fixture/softmax/seed0"]
    assert soft["group"] == "fixture" and "softmax" in soft["tags"] and "t1" in soft["tags"]
    assert soft["config"]["design"] == "softmax" and soft["config"]["model"]["d_model"] == 64
    s = soft["summary"]
    assert s["niah/acc@len=1024"] == pytest.approx(1.0)
    assert s["niah/acc@task=niah_multikey,len=1024,depth=0.5"] == pytest.approx(1.0)
    assert "latency/prefill_ms@len=65536,op=softmax,scope=layer,dtype=bfloat16" in s
    assert "latency/prefill_ms_projected@len=1048576,op=softmax,scope=layer,dtype=bfloat16" in s
    assert s["params/total"] == 161000 and s["records/skipped"] == 1
    assert s["records/_type"] == "table-file" and s["niah/heatmap/_type"] == "table-file"
    by_len = [h for h in soft["history"] if "context_len" in h]
    assert any(h.get("niah/acc") == pytest.approx(1.0) and h["context_len"] == 1024 for h in by_len)
    assert [h["train/loss"] for h in soft["history"] if "train/step" in h][0] == pytest.approx(4.1)
    report = runs["fixture/report"]
    assert report["job_type"] == "report" and "figures/latency/_type" in report["summary"]


def test_disabled_writes_nothing(tmp_path):
    run = write_run(tmp_path / "run")
    assert "disabled" in log_in_child(run, {"mode": "disabled"}, timeout_s=10)
    assert not (run / "wandb").exists()


def test_absent_wandb_is_harmless(tmp_path, monkeypatch):
    fake = tmp_path / "site" / "wandb"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('wandb is not installed (test stand-in)')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")]))
    run = write_run(tmp_path / "run")
    assert log_in_child(run, {"mode": "offline"}, timeout_s=30) == "W&B: wandb is not installed; nothing logged"
    assert not (run / "wandb").exists()


def test_failing_wandb_is_bounded_and_harmless(tmp_path, monkeypatch):
    run = write_run(tmp_path / "run")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    start = time.perf_counter()
    msg = log_in_child(run, {"mode": "online", "project": "attnbench"}, timeout_s=4)
    elapsed = time.perf_counter() - start
    assert elapsed < 8, elapsed
    assert msg.startswith("W&B: ") and ("gave up" in msg or "failed" in msg), msg
    assert FAKE_KEY not in msg
    assert not any(FAKE_KEY.encode() in f.read_bytes() for f in run.rglob("*") if f.is_file())


ODD = 'sk-SECRET"quo\\te 12345ü'  # a quote, a backslash, a space, a non-ASCII character
PEM = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----"


def test_secrets_are_recognised_by_value_and_masked_in_every_escaped_form():
    import html
    import json

    from attnbench.records.redact import MASK, redact, secret_values

    env = {"OPENAI_KEY": "sk-abcdefghijklmnop", "SSH_PRIVATE_KEY": PEM, "SOMETHING": "hf_abcdefghijklmnop", "ODD": ODD}
    env |= {"GIT_COMMIT": "0123456789abcdef0123", "PATH": "/usr/bin:/bin", "HOME": "/root"}
    secrets = secret_values(env)
    assert set(secrets) == {env["OPENAI_KEY"], PEM, env["SOMETHING"], ODD}  # the commit, PATH and HOME are not secrets
    for text in (json.dumps(ODD), json.dumps(ODD, ensure_ascii=False), html.escape(ODD), repr(ODD), json.dumps(PEM), "x" + ODD):
        assert redact(text, secrets).count(MASK) == 1 and "SECRET" not in redact(text, secrets), text
    jinja = str(__import__("markupsafe").escape(ODD))
    assert "SECRET" not in redact(jinja, secrets) and "SECRET" not in redact(
        ODD.encode("unicode_escape").decode().replace("\\xfc", "\\xFC"), secrets
    )
    assert redact("commit 0123456789abcdef0123", secrets) == "commit 0123456789abcdef0123"


def test_secrets_never_reach_the_console_or_a_run_directory_name(tmp_path):
    """A config error holding a secret and a secret in hydra.run.dir: one line, masked, nothing created."""
    env = {**os.environ, "OPENAI_KEY": "sk-abcdefghijklmnop0123"}
    for args, want in (
        (["exp.budget=sk-abcdefghijklmnop0123"], "exp.budget='***redacted***'"),
        ([f"hydra.run.dir={tmp_path}/run-sk-abcdefghijklmnop0123"], "holds a secret"),
    ):
        res = subprocess.run(
            [sys.executable, "-m", "attnbench", "+exp=smoke", *args], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
        )
        lines = [l for l in res.stderr.splitlines() if l.strip()]
        assert res.returncode == 2 and len(lines) == 1 and want in lines[0], res.stderr[-2000:]
        assert "abcdefghijklmnop" not in res.stdout + res.stderr and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_no_secret_reaches_records_logs_reports_or_wandb(tmp_path):
    """A real run with keys in the environment (by name, by value, with quotes, backslashes, spaces
    and non-ASCII characters), and a config that even interpolates them; every byte written is read."""
    env = {**os.environ, "WANDB_API_KEY": FAKE_KEY, "HF_TOKEN": "hf_" + "x" * 30, "OPENAI_KEY": ODD, "SSH_PRIVATE_KEY": PEM}
    env["ATTNBENCH_CACHE"] = str(tmp_path / "cache")
    run = tmp_path / "run"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnbench",
            "+exp=smoke",
            "design=softmax",
            "threads=1",
            "exp.description=${oc.env:WANDB_API_KEY} ${oc.env:OPENAI_KEY}",
            "wandb.tags=[${oc.env:WANDB_API_KEY},${oc.env:OPENAI_KEY}]",
            f"wandb.group=g-{env['HF_TOKEN']}",
            f"hydra.run.dir={run}",
        ],  # typed out: Hydra's .hydra/ holds it
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    files = [f for f in tmp_path.rglob("*") if f.is_file()]  # the run directory, W&B's files, the cache
    assert {"results.jsonl", "report.html", "cli.log"} <= {f.name for f in files}
    assert any(f.suffix == ".wandb" for f in files), "no offline W&B run was written"
    import html
    import json

    for secret in (FAKE_KEY, env["HF_TOKEN"], ODD, PEM):
        for form in {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], html.escape(secret), "SECRET"}:
            assert form not in res.stdout + res.stderr, form
            leaked = [str(f) for f in files if form.encode() in f.read_bytes()]
            assert not leaked, (form, leaked)
    assert "***redacted***" in (run / "results.jsonl").read_text()  # the interpolated key was caught


def test_secrets_in_wandb_settings_never_reach_wandb_files(tmp_path, monkeypatch):
    """The W&B child has no secrets to mask with (its environment is scrubbed): the parent masks
    tags, group, entity and project before handing them over."""
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    run = write_run(tmp_path / "run", exp="fixture")
    wcfg = {
        "mode": "offline",
        "project": "p",
        "entity": f"e{FAKE_KEY}",
        "group": f"g-{FAKE_KEY}",
        "tags": [FAKE_KEY, "plain"],
        "timeout_s": 60,
    }
    msg = log_in_child(run, wcfg, timeout_s=60)
    assert msg.startswith("W&B: 6 offline runs"), msg
    files = [f for f in (run / "wandb").rglob("*") if f.is_file()]
    assert any(f.suffix == ".wandb" for f in files)
    assert not [str(f) for f in files if FAKE_KEY.encode() in f.read_bytes()]
    soft = next(r for r in read_runs(run) if r["name"] == "fixture/softmax/seed0")
    assert "***redacted***" in soft["tags"] and "plain" in soft["tags"] and soft["group"] == "g-***redacted***"


def test_wandb_failure_is_one_line_naming_the_error(tmp_path):
    msg = log_in_child(tmp_path / "no-such-run", {"mode": "offline"}, timeout_s=60)
    assert msg.startswith("W&B: logging failed (ResultsError: ") and "no such file or directory" in msg, msg
    assert "\n" not in msg and msg.endswith("the run's records are unaffected")
    trace = (
        'Traceback (most recent call last):\n  File "x.py", line 3, in <module>\n    raise ConnectionError(url)\n'
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.wandb.ai'): Max retries exceeded\n"
    )
    assert last_error(trace).startswith("requests.exceptions.ConnectionError: HTTPSConnectionPool")


def test_dashboard_builds_offline():
    w = build_workspace("my-team", "attnbench", exp="needle_4m")
    names = [s.name for s in w.sections]
    assert names[:5] == ["Needle in a haystack", "Multi-hop", "Latency", "Memory", "MSA speedup"]
    panels = [p for s in w.sections for p in s.panels]
    ys = {y for p in panels for y in (getattr(p, "y", None) or getattr(p, "metrics", None) or [])}
    assert {
        "niah/acc",
        "multihop/acc",
        "latency/prefill_ms",
        "latency/decode_ms",
        "memory/cache_bytes_per_token",
        "msa_speedup/prefill",
        "train/loss",
    } <= ys
    assert any(getattr(p, "table_name", None) == "niah/heatmap" for p in panels)
    lines = [p for p in panels if type(p).__name__ == "LinePlot"]
    assert all(p.groupby.name == "design" for p in lines) and any(p.x == "context_len" and p.log_x for p in lines)
    assert "needle_4m" in str(w.runset_settings.filters) and w.runset_settings.groupby
    view = w._to_model()  # serializes to W&B's view spec without a network
    assert view.spec.section.panel_bank_config.sections[0].name == "Needle in a haystack"


def test_dashboard_cli(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "attnbench", "dashboard", "entity=e", "project=p", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert ok.returncode == 0 and "LinePlot" in ok.stdout, ok.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "attnbench", "dashboard", "project=p"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert bad.returncode == 2 and "entity=E" in bad.stderr


def test_one_wandb_run_per_cell_set_and_config(tmp_path):
    """Logging a run directory again (a rerun, a resumed run, a second identical run) replaces its
    offline runs instead of adding copies; the sync command names exactly the current runs; a
    superseded config's runs go aside with its records (force=true)."""
    from attnbench.records import rundir

    run = write_run(tmp_path / "run", exp="fixture")
    first = log_in_child(run, {"mode": "offline"}, timeout_s=300)
    assert first.startswith("W&B: 6 offline runs"), first
    ids = sorted(p.name.rsplit("-", 1)[1] for p in (run / "wandb").glob("offline-run-*"))
    (run / "wandb" / "offline-run-20000101_000000-stale").mkdir()  # another config's copy, by hand
    again = log_in_child(run, {"mode": "offline"}, timeout_s=300)
    runs = sorted((run / "wandb").glob("offline-run-*"))
    assert len(runs) == 7 and sorted(p.name.rsplit("-", 1)[1] for p in runs if not p.name.endswith("stale")) == ids
    assert "offline-run-*" not in again and all(str(p) in again for p in runs if not p.name.endswith("stale")), again
    assert "stale" not in again
    rundir.check_identity(run, "another-config", force=True, say=lambda line: None)
    assert not (run / "wandb").exists() and len(list(run.glob("wandb.superseded-*/offline-run-*"))) == 7
