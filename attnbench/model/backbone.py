"""The shared MoE backbone: one layer layout string picks the attention of every layer.

    x = embed(idx)
    for each layer l (letter layout[l] in S L W M):
        x = x + attention_l(RMSNorm(x))
        x = x + MoE(RMSNorm(x))
    logits = head(RMSNorm(x))            (head tied to the embedding by default)

Everything but the attention is identical across designs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, cast

import copy
from dataclasses import dataclass

import torch
from torch import nn

from attnbench.designs import describe_letters, layout_letters, of, spec_of

from .moe import MoE

if TYPE_CHECKING:  # the schemas and layer types; at run time a layer gets the composed DictConfig node
    from attnbench.config import DesignConfig, ModelConfig

    from .lightning import LightningAttention
    from .msa import MSAAttention
    from .softmax import SoftmaxAttention

    Attention = SoftmaxAttention | LightningAttention | MSAAttention  # a layer's attention (SlidingWindow is a Softmax)


def resolve_layout(layout: str, n_layers: int) -> str:
    """A layout is one letter a layer; a shorter period is tiled when it divides n_layers."""
    bad = sorted(set(layout) - set(layout_letters()))
    if not layout or bad:
        raise ValueError(f"layout {layout!r}: letters must be from {layout_letters()} ({describe_letters()})")
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
        self.attn = cast("Attention", of(letter).layer_class()(cfg, design, layer))  # the registry's layer class: to mypy, a type
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


def _block_step(block: Block, x: torch.Tensor, cache):
    """One block of a prefill (the function Model.compile_prefill compiles)."""
    return block(x, cache)


class Model(nn.Module):
    # (chunk length, the compiled _block_step) once compile_prefill ran
    _compiled_prefill: tuple[int, Callable] | None = None

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
        chunk, compiled = self._compiled_prefill or (0, _block_step)
        for block, layer_cache in zip(self.block_list[:-1], cache.layers[:-1]):
            step = compiled if idx.shape[1] == chunk and spec_of(block.letter).compiled_prefill else _block_step
            x, _, _ = step(block, x, layer_cache)
        last = self.block_list[-1]
        last.attn.fill_cache(last.attn_norm(x), cache.layers[-1])

    def compile_prefill(self, chunk: int) -> bool:
        """From now on, prefill chunks of exactly `chunk` tokens through torch.compile'd lightning blocks.

        A lightning block's prefill time goes mostly to elementwise passes and copies around small
        matmuls, which Inductor fuses (experiments/cpu_speedups, case prefill_compiled); a softmax
        or msa block's time is its attention, and those blocks stay eager. The graph is compiled
        for one static chunk length, shared by every lightning block; other lengths (short
        contexts, a last partial chunk) run eagerly: compiled with dynamic shapes the code was
        slower than eager here and took minutes to compile (probes). The MoE's per-expert
        dispatch (MoE.dispatch) and the cache's token count stay outside the graph. Compiles now,
        on a warm-up prefill of two chunks of random tokens (the first starts without a state),
        after a short eager one that resolves each op's backend, so no later prefill is charged
        for it. Outputs match the eager prefill to fp32 rounding
        (tests/test_model.py). Returns False, compiling nothing, for a model without lightning blocks.
        """
        if not any(spec_of(c).compiled_prefill for c in self.layout[:-1]):
            return False
        warm = torch.randint(self.cfg.vocab_size, (1, 2 * chunk), generator=torch.Generator().manual_seed(0))
        warm = warm.to(self.embed.weight.device)
        with torch.no_grad():
            self.prefill(warm[:, :16], self.new_cache())  # eager: resolves each op's backend (an import, which Dynamo cannot trace)
            self._compiled_prefill = (chunk, torch.compile(_block_step, dynamic=False))
            try:
                cache = self.new_cache()
                for s in (0, chunk):
                    self.prefill(warm[:, s : s + chunk], cache)
            except Exception:  # e.g. no C++ compiler for Inductor: the model stays eager
                self._compiled_prefill = None
                raise
        return True

    def compiled_for(self, n: int) -> bool:
        """Whether a prefill of n tokens in chunks of the compiled length runs compiled blocks."""
        return self._compiled_prefill is not None and n >= self._compiled_prefill[0]

    def param_counts(self) -> dict[str, int]:
        """Parameters by part, and those active for one token (top-k of E experts)."""

        def count(module):
            return sum(p.numel() for p in module.parameters())

        attention = sum(count(b.attn) for b in self.block_list)
        experts = sum(b.moe.w_up_EFC.numel() + b.moe.w_down_ECF.numel() for b in self.block_list)
        total = count(self)
        active = total - experts + experts * self.cfg.top_k_experts // self.cfg.n_experts
        return {"total": total, "attention": attention, "experts": experts, "active": active, "embedding": self.embed.weight.numel()}
