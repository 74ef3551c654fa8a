"""Architectures the cost and memory formulas read: production presets, and the scaled models.

An ``Arch`` is what attnbench.bench.memory and attnbench.bench.costmodel need to know about a
model: one letter a layer and the attention shapes. Production presets are not trained here;
they give the memory tables and the GPU projections. Every number carries its source.

Layer letters: S softmax (GQA), L lightning, W sliding window, M msa, and, for presets only,
D = DeepSeek sparse attention over MLA (a compressed latent cache plus indexer keys).

Each preset carries its release's license as seed 000 states it (``license``, quoted in
``sources["license"]``; "not stated" where the write-up says nothing: Text-01 and the
non-MiniMax presets). Read the license file of the exact release before serving it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from attnbench.config.schema import design_fields
from attnbench.designs import preset_letters
from attnbench.model.backbone import layout_for


NOT_STATED = "not stated"  # the license of a preset whose release the write-up does not license


@dataclass(frozen=True)
class Arch:
    name: str
    layout: str  # one letter a layer, full length (not tiled)
    d_model: int
    n_heads: int  # query heads H
    n_kv_heads: int  # KV heads G (GQA); for D layers the MLA "heads" are n_heads
    head_dim: int  # D
    window: int = 0  # W: keys each query sees (itself included)
    block_size: int = 0  # M: tokens per key block
    top_k: int = 0  # M: blocks per query, the local block included
    index_heads: int = 0  # M: index query heads (one per KV group); D: indexer heads
    index_dim: int = 0  # M, D: index head dim (one shared index key head is cached per token)
    index_topk: int = 0  # D: tokens each query attends to
    mla_latent: int = 0  # D: kv_lora_rank, the compressed KV cached per token
    mla_rope: int = 0  # D: qk_rope_head_dim, the decoupled RoPE key cached per token
    mla_qk_nope: int = 0  # D: per-head no-RoPE query/key dims (prefill, uncompressed)
    mla_v: int = 0  # D: per-head value dims
    lightning_heads: int = 0  # L: heads of the lightning layers (0: n_heads), same width n_heads x head_dim
    qkv_conv: int = 0  # L: kernel of the labelled short-convolution variant (caches K - 1 projected tokens)
    active_params: float = 0.0  # parameters used per token (published; the non-attention FLOPs)
    total_params: float = 0.0
    sources: dict = field(default_factory=dict, compare=False, hash=False)
    # the release's license as the write-up states it (its source in sources["license"]); NOT_STATED where it does not say
    license: str = field(default=NOT_STATED, compare=False, hash=False)

    @property
    def n_layers(self) -> int:
        return len(self.layout)

    def count(self, letter: str) -> int:
        return self.layout.count(letter)

    @property
    def lightning_shape(self) -> tuple[int, int]:
        """(heads, head dim) of the lightning layers."""
        h = self.lightning_heads or self.n_heads
        return h, self.n_heads * self.head_dim // h


def from_model(model_cfg, design_cfg) -> Arch:
    """The Arch of an attnbench model (cfg.model + one cfg.attention design): the backbone's
    shapes, and each design setting that declares the Arch field it sets (attnbench/specs/settings.py)."""
    m, d = model_cfg, design_cfg
    settings = {f.metadata["arch"]: getattr(d, name) for name, (_, f) in design_fields().items() if f.metadata["arch"]}
    return Arch(
        name=d.name,
        layout=layout_for(m, d),
        d_model=m.d_model,
        n_heads=m.n_heads,
        n_kv_heads=m.n_kv_heads,
        head_dim=m.head_dim,
        index_heads=m.n_kv_heads,  # one index query head per KV group (model/msa.py)
        **settings,
    )


# --- production presets ------------------------------------------------------------------

TEXT01 = Arch(
    name="minimax_text01",
    # config.json attn_type_list: 0 (lightning) x7 then 1 (softmax), repeated; 80 layers.
    layout="LLLLLLLS" * 10,
    d_model=6144,  # config.json hidden_size
    n_heads=64,  # num_attention_heads (lightning layers use the same 64 heads of 128)
    n_kv_heads=8,  # num_key_value_heads (softmax layers, GQA)
    head_dim=128,  # head_dim; rotary_dim 64 (RoPE on half of each head)
    active_params=45.9e9,  # MiniMax-01 report (arXiv 2501.08313): 456B total, 45.9B activated
    total_params=456e9,
    sources={
        "architecture": "huggingface.co/MiniMaxAI/MiniMax-Text-01 config.json (hidden_size 6144, "
        "num_hidden_layers 80, num_attention_heads 64, num_key_value_heads 8, head_dim 128, "
        "num_local_experts 32, num_experts_per_tok 2, rotary_dim 64, attn_type_list)",
        "params": "MiniMax-01 technical report, arXiv 2501.08313: 456B total, 45.9B activated",
        "cache claim": "seed 000: 'Only 10 of its 80 layers keep a cache that grows with the context, about 40 KiB per token in BF16'",
    },
)

M1 = replace(
    TEXT01,
    name="minimax_m1",
    sources={
        "architecture": "huggingface.co/MiniMaxAI/MiniMax-M1-80k config.json: the Text-01 "
        "architecture (80 layers, 7 lightning : 1 softmax, 64 heads, 8 KV heads, head_dim 128)",
        "params": "MiniMax-M1 report, arXiv 2506.13585: built on MiniMax-Text-01, 456B total, 45.9B activated",
        "cache claim": "seed 000: 'M1: a hybrid reasoning model ... built on Text-01'",
        "license": "seed 000: 'M1 shipped in two versions with 40,000- and 80,000-token thinking budgets, under the Apache 2.0 license.'",
    },
    license="Apache 2.0",
)

M2 = Arch(
    name="minimax_m2",
    layout="S" * 62,  # full softmax attention in all 62 layers
    d_model=3072,  # config.json hidden_size
    n_heads=48,  # num_attention_heads
    n_kv_heads=8,  # num_key_value_heads
    head_dim=128,  # head_dim; rotary_dim 64
    active_params=10e9,  # 230B total, 10B active (model card; transformers docs minimax_m2.md)
    total_params=230e9,
    sources={
        "architecture": "huggingface.co/MiniMaxAI/MiniMax-M2 config.json (hidden_size 3072, "
        "num_hidden_layers 62, num_attention_heads 48, num_key_value_heads 8, head_dim 128, "
        "256 experts top-8, intermediate 1536, rotary_dim 64)",
        "params": "MiniMax-M2 model card / transformers docs minimax_m2.md: 230B total, 10B active",
        "layout claim": "seed 000: 'with full softmax attention in all 62 layers'",
        "license": "seed 000: 'M2 is MIT.'; 'M2's tag says \"modified-mit\"; its license file is plain MIT'",
    },
    license="MIT",
)

M27 = replace(  # M2.7: M2's architecture, another license
    M2,
    name="minimax_m27",
    sources={
        **M2.sources,
        "architecture": "seed 000: 'M2.1 (December 2025), M2.5 (February 2026), and M2.7 (April 2026) kept M2's architecture'; "
        "the numbers are M2's (huggingface.co/MiniMaxAI/MiniMax-M2 config.json)",
        "license": "seed 000: 'M2.7 is under a non-commercial license: free for personal use, research, and non-profits, but "
        '"any Commercial Use ... is prohibited without obtaining a separate, prior written authorization from MiniMax"\'',
    },
    license="non-commercial (commercial use needs MiniMax's prior written authorization)",
)

M3 = Arch(
    name="minimax_m3",
    layout="SSS" + "M" * 57,  # first 3 layers dense, then MSA (57 of 60)
    d_model=6144,  # hidden_size
    n_heads=64,  # num_attention_heads
    n_kv_heads=4,  # num_key_value_heads
    head_dim=128,
    block_size=128,  # index_block_size
    top_k=16,  # index_topk_blocks (the local block included: local_blocks = 1, boosted into the top 16)
    index_heads=4,  # index_n_heads (one per KV group)
    index_dim=128,  # index_head_dim; one shared index key head is cached per token
    active_params=23e9,  # seed 000: 'about 428 billion parameters with about 23 billion active'
    total_params=428e9,
    sources={
        "architecture": "transformers MiniMaxM3VLTextConfig defaults (checkpoint MiniMaxAI/MiniMax-M3-preview): "
        "hidden_size 6144, num_hidden_layers 60, num_attention_heads 64, num_key_value_heads 4, head_dim 128, "
        "index_n_heads 4, index_head_dim 128, index_block_size 128, index_topk_blocks 16, index_local_blocks 1; "
        "the indexer caches one key head of 128 per token (MiniMaxM3VLSparseCacheLayer.idx_keys)",
        "layout": "seed 000: 'in 57 of its 60 layers a small index picks ... the 16 most relevant blocks of 128'; "
        "docs/DESIGN.md: the first layers stay dense (3 of 60)",
        "params": "seed 000: about 428B total, about 23B active",
        "method": "MiniMax Sparse Attention, arXiv 2606.13392 (block 128, k = 16, 2,048 KV tokens per query)",
        "license": 'seed 000: \'the MiniMax Community License allows commercial use with a visible "Built with MiniMax M3" credit, '
        "and requires MiniMax's written authorization for products with more than 20 million US dollars of yearly revenue'",
    },
    license="MiniMax Community License (visible 'Built with MiniMax M3' credit; written authorization above 20M USD yearly revenue)",
)

DEEPSEEK_V32 = Arch(
    name="deepseek_v32",
    layout="D" * 61,  # num_hidden_layers 61, DSA (indexer + sparse MLA) in every layer
    d_model=7168,
    n_heads=128,  # num_attention_heads (MLA: no KV heads; the latent is shared)
    n_kv_heads=1,
    head_dim=128,  # qk_nope_head_dim
    index_heads=64,  # index_n_heads
    index_dim=128,  # index_head_dim (one indexer key of 128 per token)
    index_topk=2048,  # index_topk: tokens each query attends to
    mla_latent=512,  # kv_lora_rank
    mla_rope=64,  # qk_rope_head_dim
    mla_qk_nope=128,  # qk_nope_head_dim
    mla_v=128,  # v_head_dim
    active_params=37e9,  # DeepSeek-V3 report (arXiv 2412.19437): 671B total, 37B activated
    total_params=671e9,
    sources={
        "architecture": "huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp config.json (hidden_size 7168, "
        "num_hidden_layers 61, num_attention_heads 128, kv_lora_rank 512, qk_rope_head_dim 64, "
        "qk_nope_head_dim 128, v_head_dim 128, index_n_heads 64, index_head_dim 128, index_topk 2048)",
        "cache": "MLA caches the 512-d latent plus the 64-d RoPE key per token and layer (DeepSeek-V2 "
        "report, arXiv 2405.04434); DSA adds one 128-d indexer key per token and layer (DeepSeek-V3.2 report)",
        "params": "DeepSeek-V3 report, arXiv 2412.19437: 671B total, 37B activated",
    },
)

GEMMA3_27B = Arch(
    name="gemma3_27b",
    # sliding_window_pattern 6: layer i is global when (i + 1) % 6 == 0 -> 10 global, 52 local
    layout="".join("S" if (i + 1) % 6 == 0 else "W" for i in range(62)),
    d_model=5376,  # hidden_size
    n_heads=32,  # num_attention_heads
    n_kv_heads=16,  # num_key_value_heads
    head_dim=128,
    window=1024,  # sliding_window
    active_params=27e9,  # dense model
    total_params=27e9,
    sources={
        "architecture": "huggingface.co/google/gemma-3-27b-pt config.json text_config (hidden_size 5376, "
        "num_hidden_layers 62, num_attention_heads 32, num_key_value_heads 16, head_dim 128, "
        "sliding_window 1024, sliding_window_pattern 6)",
        "layout": "Gemma 3 technical report, arXiv 2503.19786: 5 local layers per global layer, local span 1024",
        "role": "the sliding-window hybrid of docs/DESIGN.md (seed 000: 'A sliding-window hybrid they also tried')",
    },
)

PRESETS: dict[str, Arch] = {a.name: a for a in (TEXT01, M1, M2, M27, M3, DEEPSEEK_V32, GEMMA3_27B)}

for _arch in PRESETS.values():
    assert set(_arch.layout) <= set(preset_letters()), _arch.name
