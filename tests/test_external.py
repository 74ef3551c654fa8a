"""External models (attnbench/external, exp=needle_external / multihop_external): attnbench's own
checkpoints exported to transformers compute what attnbench computes, and the same probes through
attnbench in-process, through transformers from the exported folder and through a real
``transformers serve`` process on localhost give the same answers.

The serve case starts the server the test needs (skipped, saying why, where transformers' serving
extra is not installed); everything else runs on what the test extra installs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from attnbench.training.checkpoints import SHIPPED

from helpers import compose_cfg, run_in_process

pytest.importorskip("transformers")

SOFTMAX = SHIPPED / "softmax-e088d84f15ecfe2d"  # needle models: full attention, and the 7:1 lightning hybrid
HYBRID = SHIPPED / "lightning_hybrid_h8-94a662842d5825f0"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    from attnbench.external.export import export

    root = tmp_path_factory.mktemp("exported")
    return {p.name: export(p, root / p.name) for p in (SOFTMAX, HYBRID)}


def _in_process(folder: Path):
    from omegaconf import OmegaConf

    from attnbench.model.backbone import Model

    record = json.loads((folder / "record.json").read_text())
    model = Model(OmegaConf.create(record["config"]["model"]), OmegaConf.create(record["config"]["design"]))
    model.load_state_dict(torch.load(folder / "final.pt", weights_only=True))
    return model.eval(), record


def test_tokens_round_trip():
    from attnbench.external.tokens import parse, render, tokenizer, words
    from attnbench.tasks.vocab import Vocab

    vocab = Vocab(64, 16, 64)
    table = words(vocab, 256)
    assert len(table) == len(set(table)) == 256
    tok = tokenizer(vocab, 256)
    ids = list(range(256)) + [5, 1, 2, 200, 9]
    assert tok(render(ids, table), add_special_tokens=False)["input_ids"] == ids
    assert tok.decode([80, 81]) == f"{table[80]} {table[81]}"
    assert parse(" v3 k4", table) == table.index("v3") and parse("", table) == -1 and parse("zebra", table) == -1
    with pytest.raises(ValueError, match="reads 100"):
        words(vocab, 100)


@pytest.mark.parametrize("folder", [SOFTMAX, HYBRID], ids=lambda p: p.name.split("-")[0])
def test_export_computes_what_attnbench_computes(exported, folder):
    from attnbench.external import transformers_ready

    transformers_ready()
    from transformers import AutoModelForCausalLM

    ref, _ = _in_process(folder)
    hf = AutoModelForCausalLM.from_pretrained(exported[folder.name], trust_remote_code=True, local_files_only=True).eval()
    x = torch.randint(8, 150, (2, 96), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = hf(x).logits, ref(x).logits
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)  # the same Model on the same weights: fp32 rounding at most
    # the buffers loading does not carry (RoPE's inv_freq) came back, and the tied head is tied
    assert hf.backbone.head.weight.data_ptr() == hf.backbone.embed.weight.data_ptr()


def _probes(folder: Path, n: int):
    from attnbench.experiments.external import requests_of
    from attnbench.external.tokens import words
    from attnbench.tasks.vocab import Vocab

    cfg = compose_cfg(["+exp=needle_external", "eval.context_lens=[128]", "eval.haystacks=2", "eval.depths=[0.2,0.8]"])
    vocab = Vocab(cfg.task.n_keys, cfg.task.n_values, cfg.task.n_filler)
    out = requests_of(cfg, vocab, words(vocab, 256), {"task": "niah_multikey", "context_len": 128, "hops": None})
    return out[:n]


def test_sources_agree_on_the_same_probes(exported):
    """attnbench in-process and transformers from the exported folder: the same first token for every probe."""
    from attnbench.external.sources import open_source

    ext = compose_cfg(["+exp=needle_external"]).external
    probes = _probes(SOFTMAX, 4)
    reqs = [r for _, r, _ in probes]
    mine = open_source(f"attnbench:{SOFTMAX}", ext, torch.device("cpu")).answer(reqs)
    theirs = open_source(f"hf:{exported[SOFTMAX.name]}", ext, torch.device("cpu")).answer(reqs)
    assert [a.first_id for a in mine] == [a.first_id for a in theirs]
    assert all(a.status == "measured" and a.prompt_tokens == len(r.ids) for a, r in zip(theirs, reqs))
    from attnbench.external.tokens import words
    from attnbench.tasks.vocab import Vocab

    table = words(Vocab(), 256)
    targets = [t for _, _, t in probes]  # the target words
    assert sum(table[a.first_id] == t for a, t in zip(mine, targets)) >= 3  # a learned needle model: not a test that cannot fail


def test_bad_names_fail_in_one_line(tmp_path):
    from attnbench.external.sources import SourceError, open_source

    ext = compose_cfg(["+exp=needle_external", "external.retries=0", "external.timeout_s=2"]).external
    for name, words_ in [
        ("gpt:foo", "expected one of"),
        (f"hf:{tmp_path / 'missing'}", "is not a folder"),
        (f"hf:{tmp_path}", "no config.json"),
        (f"attnbench:{tmp_path}", "not a finished checkpoint"),
        (f"endpoint:http://127.0.0.1:{_free_port()}/v1", "does not answer"),
    ]:
        with pytest.raises(SourceError, match=words_) as err:
            open_source(name, ext, torch.device("cpu"))
        assert "\n" not in str(err.value)


def test_cli_refuses_a_bad_model_in_one_line(tmp_path):
    """Before any work: exit 2, one line naming external.model, no run directory."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "attnbench", "+exp=needle_external", f"external.model=hf:{tmp_path / 'nope'}", f"hydra.run.dir={run}"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "external.model=" in out.stderr and "is not a folder" in out.stderr and not run.exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, overrides: list[str], run: Path):
    cfg = compose_cfg(
        [
            "+exp=needle_external",
            "eval.context_lens=[128]",
            "eval.haystacks=2",
            "eval.depths=[0.2,0.8]",
            "threads=1",
            "wandb.mode=disabled",
            "report.enabled=false",
            *overrides,
        ]
    )
    return run_in_process(cfg, run)


def _answers(lines) -> dict[str, int | None]:
    return {r["request"]: r["answer"] for r in lines if r.get("metric") == "external/answer"}


def test_needle_external_records_and_resumes(exported, tmp_path, monkeypatch):
    """Through the experiment: attnbench in-process and the exported folder give the same answers,
    and a rerun of a finished run repeats no request."""
    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    mine = _run(tmp_path, [f"external.model=attnbench:{SOFTMAX}"], tmp_path / "a")
    theirs = _run(tmp_path, [f"external.model=hf:{exported[SOFTMAX.name]}"], tmp_path / "b")
    assert _answers(mine) == _answers(theirs) and len(_answers(mine)) == 4
    acc = [r for r in theirs if r.get("metric") == "external/acc"]
    assert len(acc) == 1 and acc[0]["n"] == 4 and acc[0]["external"] is True and acc[0]["ci_method"] == "wilson"
    assert acc[0]["model_source"]["source"] == "hf" and acc[0]["model_source"]["task"]["n_keys"] == 64
    again = _run(tmp_path, [f"external.model=hf:{exported[SOFTMAX.name]}"], tmp_path / "b")
    assert sum(r.get("metric") == "external/answer" for r in again) == 4  # resumed: nothing asked twice


def test_failed_requests_are_recorded_failed(tmp_path, monkeypatch):
    """A request the source cannot answer is a failed record with its reason, never a wrong answer."""
    from attnbench.external import sources

    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    real = sources.InProcess.answer

    def flaky(self, requests):
        got = real(self, requests)
        got[0] = sources.Answer(status="failed", reason="TimeoutError: took too long")
        return got

    monkeypatch.setattr(sources.InProcess, "answer", flaky)
    lines = _run(tmp_path, [f"external.model=attnbench:{SOFTMAX}"], tmp_path / "run")
    answers = [r for r in lines if r.get("metric") == "external/answer"]
    failed = [r for r in answers if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["value"] is None and "TimeoutError" in failed[0]["reason"]
    acc = next(r for r in lines if r.get("metric") == "external/acc")
    assert acc["n"] == 3 and acc["failed"] == 1


def _serve_available() -> str | None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        return f"transformers serve needs its serving extra ({e.name} is missing)"
    return None


@pytest.mark.slow
def test_transformers_serve_gives_the_same_answers(exported, tmp_path):
    """A real ``transformers serve`` process on localhost, asked through the openai client: the
    same answers as transformers in-process and attnbench in-process."""
    why = _serve_available()
    if why:
        pytest.skip(why)
    from attnbench.external.sources import open_source

    folder, port = exported[SOFTMAX.name], _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    serve = [
        sys.executable,
        "-m",
        "transformers.cli.transformers",
        "serve",
        str(folder),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--trust-remote-code",
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(serve, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ext = compose_cfg(
            ["+exp=needle_external", "external.retries=0", "external.timeout_s=60", f"external.served_name={folder}"]
        ).external
        deadline = time.monotonic() + 120
        while True:
            try:
                source = open_source(f"endpoint:http://127.0.0.1:{port}/v1", ext, torch.device("cpu"))
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(f"transformers serve did not come up: {proc.stdout.read() if proc.poll() is not None else ''}")
                time.sleep(1)
        probes = _probes(SOFTMAX, 4)
        reqs = [r for _, r, _ in probes]
        served = source.answer(reqs)
        local = open_source(f"attnbench:{SOFTMAX}", ext, torch.device("cpu")).answer(reqs)
        from attnbench.external.tokens import parse, words
        from attnbench.tasks.vocab import Vocab

        table = words(Vocab(64, 16, 64), 256)
        assert all(a.status == "measured" for a in served), [a.reason for a in served]
        assert [parse(a.text, table) for a in served] == [a.first_id for a in local]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_renderer_uses_the_generators():
    """The external tasks are attnbench's own: the same haystack for the same seed, a needle at its depth."""
    probes = _probes(SOFTMAX, 4)
    coords, req, target = probes[0]
    assert req.ids[0] == 1 and len(req.ids) == 128 + 1  # <bos> .. <sep> (the context's length) and the probe's key
    key = req.ids[-1]
    at = [i for i, t in enumerate(req.ids[:-1]) if t == key]
    assert len(at) == 1 and req.text.split()[at[0] + 1] == target  # the needle [K V] is in the context, once
    assert abs(at[0] / 128 - coords["depth"]) < 0.1
    assert np.array_equal([r.ids for _, r, _ in probes], [r.ids for _, r, _ in _probes(SOFTMAX, 4)])
