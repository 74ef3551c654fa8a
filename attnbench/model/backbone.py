"""The shared MoE backbone: one layer layout string picks the attention of every layer.

    x = embed(idx)
    for each layer l (letter layout[l] in S L W M):
        x = x + attention_l(RMSNorm(x))
        x = x + MoE(RMSNorm(x))
    logits = head(RMSNorm(x))            (head tied to the embedding by default)

Everything but the attention is identical across designs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import copy
from dataclasses import dataclass

import torch
from torch import nn

from attnbench.designs import DESIGNS, LAYOUT_LETTERS, describe_letters

from .moe import MoE

if TYPE_CHECKING:  # the schemas and layer types; at run time a layer gets the composed DictConfig node
    from attnbench.config import DesignConfig, ModelConfig

    from .lightning import LightningAttention
    from .msa import MSAAttention
    from .softmax import SoftmaxAttention

    Attention = SoftmaxAttention | LightningAttention | MSAAttention  # a layer's attention (SlidingWindow is a Softmax)

ATTENTION = {c: DESIGNS[c].layer_class() for c in LAYOUT_LETTERS}  # letter -> layer class (attnbench.designs)


def resolve_layout(layout: str, n_layers: int) -> str:
    """A layout is one letter a layer; a shorter period is tiled when it divides n_layers."""
    bad = sorted(set(layout) - set(LAYOUT_LETTERS))
    if not layout or bad:
        raise ValueError(f"layout {layout!r}: letters must be from {LAYOUT_LETTERS} ({describe_letters()})")
    if n_layers % len(layout):
        raise ValueError(f"layout {layout!r} (length {len(layout)}) does not tile n_layers={n_layers}")
    return layout * (n_layers // len(layout))


def n_layers_for(cfg, design) -> int:
    """A design may set its own depth (e.g. 16 layers for LLLLLLLS x 2); else the model's."""
    return getattr(design, "n_layers", 0) or cfg.n_layers


def layout_for(cfg, design) -> str:
    return resolve_layout(design.layout, n_layers_for(cfg, design))


class Block(nn.Module):
    attn: Attention
    moe: MoE

    def __init__(self, cfg: ModelConfig, design: DesignConfig, layer: int, letter: str):
        super().__init__()
        self.letter = letter
        self.attn_norm = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.attn = cast("Attention", ATTENTION[letter](cfg, design, layer))  # ATTENTION's values: to mypy, Modules
        self.moe_norm = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.moe = MoE(cfg, layer)

    def forward(self, x, cache=None):
        a, index_loss = self.attn(self.attn_norm(x), cache)
        x = x + a
        m, balance = self.moe(self.moe_norm(x))
        return x + m, index_loss, balance


@dataclass
class Output:
    logits: torch.Tensor  # (B, T', V): T' = T, or the positions asked for
    balance_loss: torch.Tensor  # mean over layers of the MoE load-balancing loss
    index_loss: torch.Tensor  # sum over msa layers of the index KL (0 without msa layers / outside training)


class ModelCache:
    """One cache per layer (KV buffer, lightning state, ring buffer or MSA cache)."""

    def __init__(self, layers: list):
        self.layers = layers

    @property
    def length(self) -> int:
        return self.layers[0].length

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.layers)

    def nbytes_by_layer(self) -> list[int]:
        return [c.nbytes() for c in self.layers]

    def reserve(self, n: int) -> None:
        """Size growing caches for n tokens up front (exact memory, no copies while growing)."""
        for c in self.layers:
            c.reserve(n)

    def snapshot(self) -> list:
        """Cheap: KV buffers keep their length, small states keep a reference or a copy."""
        return [c.snapshot() for c in self.layers]

    def restore(self, snap: list) -> None:
        """Back to the snapshot: one prefill of a haystack serves many probes."""
        for c, s in zip(self.layers, snap):
            c.restore(s)


class Model(nn.Module):
    def __init__(self, cfg: ModelConfig, design: DesignConfig):
        super().__init__()
        n_layers = n_layers_for(cfg, design)
        if n_layers != cfg.n_layers:  # the layers read cfg.n_layers (lightning's decay scaling)
            cfg = copy.copy(cfg)  # a DictConfig node or a ModelConfig
            cfg.n_layers = n_layers
        self.cfg, self.design_name = cfg, design.name
        self.layout = resolve_layout(design.layout, n_layers)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, design, i, letter) for i, letter in enumerate(self.layout))
        self.norm = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight

    @property
    def block_list(self) -> list[Block]:
        """The blocks, typed (to a type checker an nn.ModuleList holds plain Modules)."""
        return cast(list[Block], list(self.blocks))

    def _init(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.cfg.init_std)

    def new_cache(self) -> ModelCache:
        return ModelCache([block.attn.new_cache() for block in self.block_list])

    def forward(self, idx: torch.Tensor, cache: ModelCache | None = None, logits_at=None) -> Output:
        """idx (B, T) token ids. With a cache, the T tokens continue the cached context.

        logits_at: positions (an index into T) for which logits are needed (None: all).
        """
        x = self.embed(idx)  # (B, T, C)
        index_loss, balance = x.new_zeros(()), x.new_zeros(())
        for i, block in enumerate(self.blocks):
            x, il, bl = block(x, cache.layers[i] if cache is not None else None)
            index_loss, balance = index_loss + il, balance + bl
        if logits_at is not None:
            x = x[:, logits_at]
        return Output(self.head(self.norm(x)), balance / len(self.blocks), index_loss)

    @torch.no_grad()
    def prefill(self, idx: torch.Tensor, cache: ModelCache) -> None:
        """Feed context tokens into the cache without computing logits.

        Nothing reads the last layer's outputs here, so the last layer only writes its cache
        (for a final softmax layer: K and V, no O(T^2) attention); every earlier layer runs in
        full, since later layers need its outputs.
        """
        x = self.embed(idx)
        for block, layer_cache in zip(self.blocks[:-1], cache.layers[:-1]):
            x, _, _ = block(x, layer_cache)
        last = self.block_list[-1]
        last.attn.fill_cache(last.attn_norm(x), cache.layers[-1])

    def param_counts(self) -> dict[str, int]:
        """Parameters by part, and those active for one token (top-k of E experts)."""

        def count(module):
            return sum(p.numel() for p in module.parameters())

        attention = sum(count(b.attn) for b in self.block_list)
        experts = sum(b.moe.w_up_EFC.numel() + b.moe.w_down_ECF.numel() for b in self.block_list)
        total = count(self)
        active = total - experts + experts * self.cfg.top_k_experts // self.cfg.n_experts
        return {"total": total, "attention": attention, "experts": experts, "active": active, "embedding": self.embed.weight.numel()}
