"""attnbench's backbone as a transformers model: ``AttnbenchConfig`` and ``AttnbenchForCausalLM``.

An exported folder (attnbench/external/export.py) holds this file as ``modeling_attnbench.py``
beside ``config.json`` (whose ``auto_map`` names the two classes), the weights and a tokenizer, so
``AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`` loads it, and so does
``transformers serve``: the way MiniMax-Text-01 first shipped its own modelling code. No
transformers class computes what attnbench computes (its experts are GELU MLPs, transformers'
MiniMax experts SwiGLU), so the model is attnbench's own ``Model``, built from the config's
``backbone`` and ``design`` sections, and its logits are attnbench's to the last bit.

The model keeps no cache between calls (``use_cache`` is off in the exported generation config):
every forward call reads the whole sequence, as attnbench's own scorer does for a probe's answer.
That is slow for long answers and exact; the task answers here are one to a few tokens.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from attnbench.external import transformers_ready

transformers_ready()  # before transformers: its dependency `kernels` is also the name of the repository's kernels/ folder

from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel  # noqa: E402
from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402


class AttnbenchConfig(PretrainedConfig):
    model_type = "attnbench"

    def __init__(
        self,
        backbone: dict | None = None,  # attnbench's model config (conf/model/*.yaml, as the checkpoint's record has it)
        design: dict | None = None,  # its attention design (conf/attention/*.yaml)
        task: dict | None = None,  # the task vocabulary it was trained on (n_keys, n_values, n_filler)
        attnbench: dict | None = None,  # where it came from: checkpoint key, rule, commit
        **kwargs: Any,
    ):
        self.backbone = dict(backbone or {})
        self.design = dict(design or {})
        self.task = dict(task or {})
        self.attnbench = dict(attnbench or {})
        kwargs.setdefault("vocab_size", self.backbone.get("vocab_size", 256))
        kwargs.setdefault("hidden_size", self.backbone.get("d_model", 64))
        kwargs.setdefault("num_hidden_layers", self.backbone.get("n_layers", 8))
        kwargs.setdefault("tie_word_embeddings", bool(self.backbone.get("tie_embeddings", True)))
        super().__init__(**kwargs)


class AttnbenchForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = AttnbenchConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    _no_split_modules: list[str] = []
    _tied_weights_keys = {"backbone.head.weight": "backbone.embed.weight"}

    def __init__(self, config: AttnbenchConfig):
        super().__init__(config)
        from omegaconf import OmegaConf

        from attnbench.model.backbone import Model

        # built on the CPU even where transformers initialises on the meta device, so that the
        # non-persistent buffers (RoPE's inv_freq), which are not in the weights file and which
        # loading replaces with empty tensors, can be put back by _init_weights
        with torch.device("cpu"):
            self.backbone = Model(cast(Any, OmegaConf.create(config.backbone)), cast(Any, OmegaConf.create(config.design)))
        self._computed = {
            (id(m), name): b.clone()
            for m in self.backbone.modules()
            for name, b in m.named_buffers(recurse=False)
            if name in m._non_persistent_buffers_set
        }
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module) -> None:
        """attnbench's Model initialises its weights itself and loading overwrites every one; the
        non-persistent buffers get back the values the Model computed."""
        for name, b in module.named_buffers(recurse=False):
            if (id(module), name) in self._computed:
                setattr(module, name, self._computed[id(module), name].to(b.device))

    def get_input_embeddings(self):
        return self.backbone.embed

    def get_output_embeddings(self):
        return self.backbone.head

    def forward(
        self,
        input_ids: torch.Tensor | None = None,  # (B, T)
        attention_mask: torch.Tensor | None = None,  # (B, T): all ones (the backbone has no padding mask)
        labels: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Any,  # past_key_values, cache_position, use_cache, ...: no cache is kept
    ) -> CausalLMOutputWithPast:
        if input_ids is None:
            raise ValueError("attnbench models read token ids (input_ids)")
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError("attnbench models have no padding mask: batch prompts of equal length (attention_mask all ones)")
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) and logits_to_keep else None
        out = self.backbone(input_ids, logits_at=keep)
        logits = out.logits  # (B, T', V)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        """The whole sequence every step: no cache is kept (see the module's docstring)."""
        return {"input_ids": input_ids, "attention_mask": attention_mask}


__all__ = ["AttnbenchConfig", "AttnbenchForCausalLM"]
