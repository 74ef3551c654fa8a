"""The text renderer (attnbench/external/prose.py, external.render=text): attnbench's generated needles
and chains as prose, lengths counted in the target model's own tokens.

The tokenizer is built here (a byte-level BPE trained on the renderer's own filler and needles, a
BOS added as Llama's adds one), so the tests need nothing downloaded; the end-to-end run uses a
random tiny Llama saved beside it (its answers are noise: the test is of the harness, not the model).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnbench.external import prose
from attnbench.tasks.generate import task_samples
from attnbench.tasks.vocab import Vocab

from helpers import compose_cfg, run_in_process

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tokenizer():
    from attnbench.external import transformers_ready

    transformers_ready()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    rng = np.random.default_rng(0)
    corpus = [prose.filler_sentence(rng) for _ in range(2000)]
    corpus += [f"The special magic number for amber-falcon is {rng.integers(10**6, 10**7)}." for _ in range(200)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>", "<pad>"]
    tok.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    )
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def _render(tokenizer, task: str, length: int, seed: int, hops: int = 1, depths=(0.0, 0.3, 0.5, 0.9, 1.0)):
    vocab = Vocab()
    samples = task_samples(np.random.default_rng(seed), vocab, length, task, depths=list(depths), hops=hops, chains=2)
    return [
        (prose.render(task, s, p, vocab, tokenizer, length, np.random.default_rng([seed, i])), p)
        for i, s in enumerate(samples)
        for p in s.probes
    ]


@pytest.mark.parametrize("length", [500, 1000, 5000])
@pytest.mark.parametrize("task", ["niah_single", "niah_multikey", "chain"])
def test_length_is_counted_in_the_models_tokens(tokenizer, task, length):
    """A prompt is at most the cell's length in the tokenizer's tokens, and within one filler sentence of it."""
    for p, _ in _render(tokenizer, task, length, seed=length, hops=2):
        assert len(tokenizer(p.text)["input_ids"]) == p.tokens  # the whole prompt's count, BOS included
        assert length - p.unit <= p.tokens <= length, (p.tokens, p.unit)
        assert p.unit > 0 and p.filler_tokens > 0


def test_needles_sit_at_their_stated_depth(tokenizer):
    """The probed needle's sentence has depth x the filler's tokens before it, to within half a sentence,
    counted here from the prompt itself."""
    depths = (0.0, 0.1, 0.35, 0.5, 0.8, 1.0)
    for task in ("niah_single", "niah_multikey"):
        for p, probe in _render(tokenizer, task, 3000, seed=11, depths=depths):
            key = re.search(r"magic number for (\S+) mentioned", p.text).group(1)
            start = p.text.index(f"The special magic number for {key} is ")
            body_start = p.text.index("\n") + 1
            before = [s for s in re.split(r"(?<=\.) ", p.text[body_start:start]) if s and "magic number" not in s]
            tokens_before = sum(len(tokenizer(" " + s, add_special_tokens=False)["input_ids"]) for s in before)
            assert abs(tokens_before - probe.depth * p.filler_tokens) <= p.unit / 2 + 1, (task, probe.depth, tokens_before, p.filler_tokens)
            assert abs(p.depth_tokens - probe.depth) <= p.unit / 2 / p.filler_tokens + 1e-9


@pytest.mark.parametrize("hops", [1, 2, 3, 4])
def test_a_chain_in_prose_resolves_to_its_target(tokenizer, hops):
    """Following the prompt's assignments from the variable asked about reaches the target number, in
    exactly ``hops`` steps: the prose says what the generated chain says."""
    for p, _ in _render(tokenizer, "chain", 2000, seed=hops, hops=hops):
        assign = dict(re.findall(r"VAR ([A-Z]{5}) = (VAR [A-Z]{5}|\d+)\.", p.text))
        name = re.search(r"which number does VAR ([A-Z]{5}) hold", p.text).group(1)
        steps, value = 0, f"VAR {name}"
        while value.startswith("VAR "):
            value, steps = assign[value[4:]], steps + 1
        assert value == p.target and steps == hops


def test_the_same_seed_gives_the_same_text(tokenizer):
    a = [p.text for p, _ in _render(tokenizer, "niah_multikey", 800, seed=3)]
    b = [p.text for p, _ in _render(tokenizer, "niah_multikey", 800, seed=3)]
    c = [p.text for p, _ in _render(tokenizer, "niah_multikey", 800, seed=4)]
    assert a == b and a != c


def test_read_takes_the_first_number():
    assert prose.read(" 4820917.\nThe") == "4820917" and prose.read("is 12 or 13") == "12" and prose.read("no idea") == ""


def test_other_tasks_and_too_short_cells_are_refused(tokenizer):
    vocab = Vocab()
    s = task_samples(np.random.default_rng(0), vocab, 200, "niah_multivalue")[0]
    with pytest.raises(ValueError, match="text renderer writes"):
        prose.render("niah_multivalue", s, s.probes[0], vocab, tokenizer, 200, np.random.default_rng(0))
    s = task_samples(np.random.default_rng(0), vocab, 64, "niah_multikey", depths=[0.5])[0]
    with pytest.raises(ValueError, match="alone are"):
        prose.render("niah_multikey", s, s.probes[0], vocab, tokenizer, 64, np.random.default_rng(0))


def test_project_scales_the_measured_speed():
    from attnbench.experiments.external import project

    assert project([], 1000, 5) is None
    assert project([(1000, 1.0)], 2000, 10) == pytest.approx(20.0)  # one length: linear
    assert project([(1000, 1.0), (2000, 4.0)], 4000, 1) == pytest.approx(16.0)  # quadratic, fitted
    assert project([(1000, 1.0), (2000, 16.0)], 4000, 1) == pytest.approx(64.0)  # clipped to 2
    assert project([(1000, 1.0), (2000, 1.0)], 4000, 1) == pytest.approx(2.0)  # clipped to 1


@pytest.fixture(scope="module")
def llama(tokenizer, tmp_path_factory):
    """A random tiny Llama and the tokenizer, saved as a transformers folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("llama")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _run(run, overrides):
    return run_in_process(
        compose_cfg(["+exp=needle_external", "threads=1", "report.enabled=false", "wandb.mode=disabled", *overrides]), run
    )


def test_a_text_run_against_a_transformers_folder(llama, tmp_path, monkeypatch):
    """needle_external with the text renderer: prompts of the cell's length in the model's tokens,
    every answer recorded, the accuracy with its interval, W&B runs written (offline)."""
    from attnbench.tracking.wandb_runs import log_in_child

    from wandb_files import read_runs

    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    over = [
        f"external.model=hf:{llama}",
        "external.render=text",
        "eval.context_lens=[256,512]",
        "eval.haystacks=2",
        "eval.depths=[0.2,0.8]",
    ]
    lines = _run(tmp_path / "run", over)
    answers = [r for r in lines if r.get("metric") == "external/answer"]
    assert len(answers) == 8 and all(r["status"] == "measured" and r["render"] == "text" for r in answers)
    for r in answers:
        assert r["context_len"] - r["filler_unit"] <= r["prompt_tokens"] <= r["context_len"]
        assert re.fullmatch(r"\d{7}", r["target"]) and r["value"] == int(r["answer"] == r["target"])
    acc = [r for r in lines if r.get("metric") == "external/acc"]
    assert [r["context_len"] for r in acc] == [256, 512] and all(r["n"] == 4 and r["ci_method"] == "wilson" for r in acc)
    assert acc[0]["model_source"]["model_type"] == "llama"
    from attnbench.report.build import build_report

    html = build_report([tmp_path / "run"], pdf=False).html.read_text()  # external rows only: apart, no claims table
    assert "External checkpoints only" in html and "External checkpoints (not judged)" in html and 'id="claims-glance"' not in html
    msg = log_in_child(tmp_path / "run", {"mode": "offline", "project": "attnbench"}, timeout_s=120)
    assert msg.startswith("W&B: "), msg
    assert any(r["name"].startswith("needle_external/hf:") for r in read_runs(tmp_path / "run"))


def test_a_cell_past_the_budget_is_skipped_with_its_projection(llama, tmp_path, monkeypatch):
    from attnbench.experiments import external

    monkeypatch.setenv("ATTNBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(external, "project", lambda seen, length, n: None if not seen else 1e9)
    over = [f"external.model=hf:{llama}", "external.render=text", "eval.context_lens=[256,512]", "eval.haystacks=1", "eval.depths=[0.5]"]
    acc = [r for r in _run(tmp_path / "run", over) if r.get("metric") == "external/acc"]
    assert [r["status"] for r in acc] == ["measured", "skipped"] and "projected" in acc[1]["note"] and "exp.budget=30m" in acc[1]["note"]


def test_text_render_refuses_what_it_cannot_count(tmp_path):
    from attnbench.external.sources import SourceError, check

    ext = compose_cfg(["+exp=needle_external", "external.render=text"]).external
    with pytest.raises(SourceError, match="reads token ids"):
        check("attnbench:/nowhere", ext)
    with pytest.raises(SourceError, match="set external.tokenizer"):
        check("endpoint:http://127.0.0.1:9/v1", ext)
    with pytest.raises(SourceError, match="expected one of tokens, text"):
        check("hf:/nowhere", compose_cfg(["+exp=needle_external", "external.render=prose"]).external)


def test_greedy_decode_with_the_cache_equals_without(llama):
    """The decode loop hands the model its cache under the name its forward takes, and the tokens are
    those of recomputing the whole sequence each step."""
    from transformers import AutoModelForCausalLM

    from attnbench.external.sources import _greedy

    model = AutoModelForCausalLM.from_pretrained(llama, local_files_only=True).eval()
    x = torch.randint(3, 500, (2, 40), generator=torch.Generator().manual_seed(0))
    cached, _, _ = _greedy(model, x, 6, use_cache=True)
    plain, _, _ = _greedy(model, x, 6, use_cache=False)
    assert torch.equal(cached, plain)
