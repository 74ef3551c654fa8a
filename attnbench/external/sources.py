"""Where an external run's answers come from: one ``Source`` a model, named by ``external.model``.

    attnbench:<folder>   a trained attnbench checkpoint (attnbench/trained/<design>-<key>), in-process:
                         the numbers an exported copy of it must match
    hf:<folder>          any AutoModelForCausalLM in a local folder (nothing is downloaded), with its
                         tokenizer, on the run's device, in external.dtype
    endpoint:<base URL>  an OpenAI-compatible server (vLLM, SGLang, ``transformers serve``): its
                         /v1/completions through the ``openai`` client; the API key is read from
                         the environment variable external.api_key_env and written nowhere

Every source answers a list of ``Request`` (a prompt as text or token ids, how many tokens to
generate) with one ``Answer`` each: the generated text, its first token id where the source has
ids, prefill and decode seconds, and ``status`` measured or failed (with the reason: a failed,
slow or refused request is never scored as a wrong answer). Decoding is greedy everywhere.

``check`` (which the CLI runs before a run starts, and ``open_source`` again) refuses a bad name in one line
(``SourceError``): a missing folder, a folder without a model, a server that does not answer.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

KINDS = ("attnbench", "hf", "endpoint")


class SourceError(ValueError):
    """A model source that cannot be used: said in one line, before any work."""


@dataclass
class Request:
    ident: str  # stable across runs: a killed run resumes by it
    text: str  # the prompt as text (what an endpoint is sent)
    ids: list[int] | None = None  # the prompt as token ids where the task has them (token-level tasks)
    max_new_tokens: int = 1


@dataclass
class Answer:
    text: str = ""
    first_id: int | None = None  # the first generated token's id (None from an endpoint)
    prompt_tokens: int | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    total_s: float | None = None
    status: str = "measured"  # measured | failed
    reason: str = ""


@dataclass
class Source:
    kind: str
    where: str  # the folder or URL
    identity: dict = field(default_factory=dict)  # what the records say the model is

    def answer(self, requests: list[Request]) -> list[Answer]:
        raise NotImplementedError


def parse_name(name: str) -> tuple[str, str]:
    kind, sep, where = str(name).partition(":")
    if not sep or kind not in KINDS or not where:
        raise SourceError(f"external.model={name!r}: expected one of {', '.join(k + ':<...>' for k in KINDS)}")
    return kind, where


def check(name: str, ext) -> None:
    """What ``open_source`` would refuse, found cheaply (no model loaded): the CLI calls it before a
    run starts, so that a bad name fails in one line with no run directory made."""
    kind, where = parse_name(name)
    _check_render(kind, ext)
    if kind == "endpoint":
        import urllib.error
        import urllib.request

        url = where.rstrip("/") + "/models"
        try:
            urllib.request.urlopen(url, timeout=min(float(ext.timeout_s), 10.0)).close()
        except urllib.error.HTTPError as e:
            if e.code not in (401, 403):  # a server that wants a key still answers; the client sends it
                raise SourceError(f"external.model={name!r}: {url} answered HTTP {e.code}") from None
        except (OSError, ValueError) as e:
            raise SourceError(f"external.model={name!r}: the server does not answer {url} ({type(e).__name__}: {str(e)[:120]})") from None
        return
    folder = Path(where).expanduser()
    if not folder.is_dir():
        raise SourceError(f"external.model={name!r}: {folder} is not a folder")
    need = ("final.pt", "record.json") if kind == "attnbench" else ("config.json",)
    missing = [f for f in need if not (folder / f).exists()]
    if missing:
        what = "a finished checkpoint" if kind == "attnbench" else "a transformers model folder"
        raise SourceError(f"external.model={name!r}: {folder} has no {' or '.join(missing)} (not {what})")


RENDERS = ("tokens", "text")


def _check_render(kind: str, ext) -> None:
    render = str(getattr(ext, "render", "tokens"))
    if render not in RENDERS:
        raise SourceError(f"external.render={render!r}: expected one of {', '.join(RENDERS)}")
    if render != "text":
        return
    if kind == "attnbench":
        raise SourceError("an attnbench checkpoint reads token ids: use the token renderer (external.render=tokens)")
    folder = str(getattr(ext, "tokenizer", "") or "")
    if kind == "endpoint" and not folder:
        raise SourceError(
            "external.render=text against an endpoint counts lengths in the model's tokens: set external.tokenizer=<local tokenizer folder>"
        )
    if folder and not Path(folder).expanduser().is_dir():
        raise SourceError(f"external.tokenizer={folder!r} is not a folder")


def text_tokenizer(source: "Source", ext):
    """The tokenizer the text renderer counts lengths in: external.tokenizer's (a local folder) where
    set, else the source's own (a transformers folder's)."""
    folder = str(getattr(ext, "tokenizer", "") or "")
    if folder:
        from attnbench.external import transformers_ready

        transformers_ready()
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(Path(folder).expanduser(), trust_remote_code=True, local_files_only=True)
        source.identity["tokenizer_path"] = folder
        source.identity.setdefault("tokenizer", type(tok).__name__)
        return tok
    own = getattr(source, "tokenizer", None)
    if own is None:
        raise SourceError(f"{source.kind}:{source.where} has no tokenizer to count a text prompt's tokens: set external.tokenizer")
    return own


def open_source(name: str, ext, device: torch.device) -> Source:
    """The source ``name`` names (``ext`` the run's external config section)."""
    check(name, ext)
    kind, where = parse_name(name)
    if kind == "endpoint":
        return Endpoint.connect(where, ext)
    folder = Path(where).expanduser()
    if kind == "attnbench":
        return InProcess.load(folder, device)
    return HFModel.load(folder, ext, device)


def _greedy(model, ids: torch.Tensor, n: int, use_cache: bool) -> tuple[torch.Tensor, float, float]:
    """Greedy continuation of ids (B, T) by n tokens: (B, n) ids, prefill seconds, decode seconds.

    Written out rather than ``model.generate`` because the two phases are timed apart (prefill:
    the prompt's forward pass to the first token; decode: the rest). The cache goes by the name the
    model's forward takes (transformers 5.x renamed ``past_key_values`` to ``cache``)."""
    import inspect

    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model(input_ids=ids, use_cache=use_cache) if use_cache else model(input_ids=ids)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        t1 = time.perf_counter()
        got, seq, past = [nxt], ids, getattr(out, name, None) if use_cache else None
        for _ in range(n - 1):
            seq = torch.cat([seq, nxt], 1)
            out = model(input_ids=nxt, use_cache=True, **{name: past}) if past is not None else model(input_ids=seq)
            past = getattr(out, name, None) if past is not None else None
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            got.append(nxt)
        return torch.cat(got, 1), t1 - t0, time.perf_counter() - t1


def _by_length(requests: list[Request], lengths: list[int], batch: int) -> list[list[int]]:
    """Indices of requests grouped by prompt length, at most ``batch`` a group: prompts of one
    length batch without padding (attnbench's models have no padding mask)."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(n, []).append(i)
    return [g[s : s + batch] for g in groups.values() for s in range(0, len(g), batch)]


@dataclass
class HFModel(Source):
    model: Any = None
    tokenizer: Any = None
    device: torch.device = torch.device("cpu")
    batch: int = 8

    @classmethod
    def load(cls, folder: Path, ext, device: torch.device) -> "HFModel":
        from attnbench.external import transformers_ready

        transformers_ready()
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        config = AutoConfig.from_pretrained(folder, trust_remote_code=True, local_files_only=True)
        dtype = getattr(torch, str(ext.dtype))
        loaded: Any = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, local_files_only=True, dtype=dtype)
        model = loaded.to(device).eval()
        tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True, local_files_only=True)
        weights = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
        identity = {
            "source": "hf",
            "path": str(folder),
            "model_type": config.model_type,
            "config_hash": _hash_file(folder / "config.json"),
            "weights_hash": _hash_file(weights[0]) if len(weights) == 1 else None,
            "tokenizer": type(tok).__name__,
            "dtype": str(ext.dtype),
            "max_context": getattr(config, "max_position_embeddings", None),
            "attnbench": getattr(config, "attnbench", None),
            "task": getattr(config, "task", None),  # an exported attnbench model's task vocabulary
        }
        return cls("hf", str(folder), identity, model, tok, device, int(ext.batch))

    def answer(self, requests: list[Request]) -> list[Answer]:
        # a text prompt is tokenized as a server would (special tokens added), the way the text renderer counted it
        ids = [r.ids if r.ids is not None else self.tokenizer(r.text)["input_ids"] for r in requests]
        use_cache = bool(getattr(self.model.generation_config, "use_cache", True))
        out: list[Answer] = [Answer() for _ in requests]
        for group in _by_length(requests, [len(x) for x in ids], self.batch):
            n = max(requests[i].max_new_tokens for i in group)
            x = torch.tensor([ids[i] for i in group], device=self.device)
            try:
                got, pre, dec = _greedy(self.model, x, n, use_cache)
            except (RuntimeError, ValueError) as e:  # e.g. out of memory: recorded, never a wrong answer
                for i in group:
                    out[i] = Answer(status="failed", reason=f"{type(e).__name__}: {str(e)[:200]}", prompt_tokens=len(ids[i]))
                continue
            for row, i in enumerate(group):
                toks = got[row, : requests[i].max_new_tokens].tolist()
                out[i] = Answer(
                    self.tokenizer.decode(toks), toks[0], len(ids[i]), pre / len(group), dec / len(group), (pre + dec) / len(group)
                )
        return out


@dataclass
class InProcess(Source):
    """A trained attnbench checkpoint run by attnbench itself (its Model, fp32): the reference
    an exported copy's answers are compared with. Prompts are token ids."""

    model: Any = None
    device: torch.device = torch.device("cpu")
    batch: int = 8

    @classmethod
    def load(cls, folder: Path, device: torch.device) -> "InProcess":
        from omegaconf import OmegaConf

        from attnbench.model.backbone import Model

        record = json.loads((folder / "record.json").read_text())
        model = Model(OmegaConf.create(record["config"]["model"]), OmegaConf.create(record["config"]["design"]))
        model.load_state_dict(torch.load(folder / "final.pt", map_location="cpu", weights_only=True))
        identity = {
            "source": "attnbench",
            "path": str(folder),
            "checkpoint": folder.name,
            "key": record.get("key"),
            "weights_hash": _hash_file(folder / "final.pt"),
            "dtype": "float32",
            "task": record["config"]["task"],
        }
        return cls("attnbench", str(folder), identity, model.to(device).eval(), device)

    def answer(self, requests: list[Request]) -> list[Answer]:
        out: list[Answer] = [Answer() for _ in requests]
        if any(r.ids is None for r in requests):
            raise SourceError("an attnbench checkpoint reads token ids: use the token renderer (external.render=tokens)")
        ids = [list(r.ids or []) for r in requests]
        for group in _by_length(requests, [len(x) for x in ids], self.batch):
            n = max(requests[i].max_new_tokens for i in group)
            x = torch.tensor([ids[i] for i in group], device=self.device)
            got, pre, dec = _greedy(_Logits(self.model), x, n, use_cache=False)
            for row, i in enumerate(group):
                toks = got[row, : requests[i].max_new_tokens].tolist()
                out[i] = Answer("", toks[0], len(ids[i]), pre / len(group), dec / len(group), (pre + dec) / len(group))
        return out


class _Logits:
    """attnbench's Model called the way _greedy calls a transformers model."""

    def __init__(self, model):
        self.model = model

    def __call__(self, input_ids, **_):
        return self.model(input_ids)

    def forward(self, input_ids):  # the signature _greedy reads
        return self.model(input_ids)


@dataclass
class Endpoint(Source):
    client: Any = None
    served: str = ""
    concurrency: int = 4
    timeout_s: float = 120.0

    @classmethod
    def connect(cls, url: str, ext) -> "Endpoint":
        import openai

        key = os.environ.get(str(ext.api_key_env), "") or "none"  # local servers take any key; it is written nowhere
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=int(ext.retries), timeout=float(ext.timeout_s))
        try:
            listed = [m.id for m in client.models.list().data]
        except openai.OpenAIError as e:
            raise SourceError(
                f"external.model=endpoint:{url}: the server does not answer /models ({type(e).__name__}: {str(e)[:160]})"
            ) from None
        served = str(ext.served_name or "") or (listed[0] if listed else "")
        if not served:
            raise SourceError(f"external.model=endpoint:{url}: the server lists no model; set external.served_name")
        identity = {"source": "endpoint", "url": url, "served_name": served, "listed": listed[:8]}
        return cls("endpoint", url, identity, client, served, int(ext.concurrency), float(ext.timeout_s))

    def _one(self, r: Request) -> Answer:
        import openai

        t0 = time.perf_counter()
        try:
            resp = self.client.completions.create(model=self.served, prompt=r.text, max_tokens=r.max_new_tokens, temperature=0.0)
        except openai.OpenAIError as e:  # after the client's retries with backoff: failed, with its reason
            return Answer(status="failed", reason=f"{type(e).__name__}: {str(e)[:200]}", total_s=time.perf_counter() - t0)
        usage = getattr(resp, "usage", None)
        text = resp.choices[0].text if resp.choices else ""
        return Answer(text, None, getattr(usage, "prompt_tokens", None), None, None, time.perf_counter() - t0)

    def answer(self, requests: list[Request]) -> list[Answer]:
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(self._one, requests))


def _hash_file(path: Path) -> str | None:
    import hashlib

    if not path.exists():
        return None
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


__all__ = ["KINDS", "SourceError", "Request", "Answer", "Source", "open_source", "parse_name"]
