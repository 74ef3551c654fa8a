"""Export a trained attnbench model to a transformers folder that computes exactly what attnbench
computes: ``config.json`` (``model_type: attnbench``, ``auto_map`` naming the classes of
``modeling_attnbench.py``), ``model.safetensors``, ``generation_config.json`` (greedy, no cache)
and the token-level tokenizer (tokens.py). Load it with
``AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`` or serve it with
``transformers serve``; ``python -m attnbench export <checkpoint folder> <out>`` writes one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

MODELING = "modeling_attnbench.py"


def export(checkpoint: Path | str, out: Path | str) -> Path:
    """``checkpoint``: a folder with ``final.pt`` and ``record.json`` (attnbench/trained/<design>-<key>
    or the cache's); ``out``: the folder to write (created; files in it are replaced)."""
    from attnbench.external import hf_model
    from attnbench.external.tokens import tokenizer
    from attnbench.tasks.vocab import Vocab

    checkpoint, out = Path(checkpoint), Path(out)
    if not (checkpoint / "final.pt").exists() or not (checkpoint / "record.json").exists():
        raise FileNotFoundError(f"{checkpoint}: not a finished checkpoint (needs final.pt and record.json)")
    record = json.loads((checkpoint / "record.json").read_text())
    cfg = record["config"]
    config = hf_model.AttnbenchConfig(
        backbone=cfg["model"],
        design=cfg["design"],
        task={k: cfg["task"][k] for k in ("n_keys", "n_values", "n_filler")},
        attnbench={
            "checkpoint": checkpoint.name,
            "key": record.get("key"),
            "rule": record.get("rule"),
            "status": record.get("status"),
            "commit": (record.get("git") or {}).get("commit"),
        },
        auto_map={"AutoConfig": f"{MODELING[:-3]}.AttnbenchConfig", "AutoModelForCausalLM": f"{MODELING[:-3]}.AttnbenchForCausalLM"},
        bos_token_id=1,
        pad_token_id=0,
        eos_token_id=2,
    )
    model = hf_model.AttnbenchForCausalLM(config)
    model.backbone.load_state_dict(torch.load(checkpoint / "final.pt", map_location="cpu", weights_only=True))
    model.generation_config.update(do_sample=False, use_cache=False, bos_token_id=1, pad_token_id=0, eos_token_id=2)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    # no "architectures": `transformers serve` resolves a named architecture as a class of the transformers
    # package, which this one is not; without it, it loads the folder with AutoModelForCausalLM (auto_map)
    saved = json.loads((out / "config.json").read_text())
    saved.pop("architectures", None)
    (out / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    shutil.copyfile(hf_model.__file__, out / MODELING)
    tokenizer(Vocab(**config.task), int(cfg["model"]["vocab_size"])).save_pretrained(out)
    return out


__all__ = ["export", "MODELING"]
