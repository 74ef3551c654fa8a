"""C7's second half, engine maturity, as a dated and sourced table, not a verdict (issue 47, item 1).

"Linear attention lacked mature support" is a statement about serving engines, which no run here
can measure: what the harness measures is whether the design makes each feature costly
(c7_serving.py). So the engines' state is written down as data, one row per (engine, feature),
each with the version and date its source states, the status the source shows and the source
itself. A fact no source read here confirms says "not checked": a row never fills in what an
engine probably does. ``CHECKED_ON`` is the day the sources were read; the table says nothing
about later releases.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKED_ON = "2026-12-06"
NOT_CHECKED = "not checked"
# the three features the claim names, and the model support the rest depends on
FEATURES = ("model support", "low-precision state", "prefix caching", "speculative decoding")


@dataclass(frozen=True)
class EngineRow:
    engine: str
    version: str  # the release the source names, or NOT_CHECKED
    feature: str  # one of FEATURES
    status: str  # what the source shows, in a few words
    date: str  # the source's own date (opened, filed, published), or NOT_CHECKED
    source: str  # where to read it: repository and PR/issue number, or a documentation page


ENGINES = (
    EngineRow(
        "vLLM",
        NOT_CHECKED,
        "model support",
        "merged: MiniMax-Text-01 inference, with a separate cache manager for the linear-attention state",
        "2025-02-18",
        "vllm-project/vllm PR 13454",
    ),
    EngineRow(
        "vLLM",
        NOT_CHECKED,
        "model support",
        "merged: MiniMax-Text-01 on the V1 engine, eager mode only at that PR; its test command turns prefix caching off",
        "2025-08-03",
        "vllm-project/vllm PR 22151",
    ),
    EngineRow(
        "vLLM",
        NOT_CHECKED,
        "low-precision state",
        "state dtypes are settings (mamba_cache_dtype, mamba_ssm_cache_dtype; its test sets float32); "
        "an fp8 state for the lightning layers: not checked",
        NOT_CHECKED,
        "vllm-project/vllm PR 24883",
    ),
    EngineRow(
        "vLLM",
        "0.30.0 (docs)",
        "prefix caching",
        "hybrid Mamba models: the recurrent state is kept only on a block grid, so a hit resumes at a block "
        "boundary; a checkpoint at the shared-prefix end is opt-in; whether MiniMax's lightning layers take this path: not checked",
        NOT_CHECKED,
        "vLLM docs, Automatic Prefix Caching, section Hybrid Mamba models",
    ),
    EngineRow(
        "vLLM",
        "0.19.1",
        "prefix caching",
        "open issue: no prefix-cache hit on a Mamba-hybrid model (Qwen3.5) for prompts shorter than its 528-token block",
        "2026-04-23",
        "vllm-project/vllm issue 40696",
    ),
    EngineRow(
        "vLLM",
        "0.30.0 (docs)",
        "speculative decoding",
        "EAGLE/MTP speculative decoding on the Mamba group is named as a condition of the prefix-end checkpoint, "
        "so it exists for hybrid Mamba models; for MiniMax's lightning layers: not checked",
        NOT_CHECKED,
        "vLLM docs, Automatic Prefix Caching, section Hybrid Mamba models",
    ),
    EngineRow(
        "SGLang",
        NOT_CHECKED,
        "model support",
        "merged: Triton prefill kernel for MiniMax-Text-01's lightning attention",
        "2025-01-16",
        "sgl-project/sglang PR 2911",
    ),
    EngineRow(
        "SGLang",
        NOT_CHECKED,
        "model support",
        "merged: a lightning-attention decode kernel in sgl-kernel",
        "2025-01-21",
        "sgl-project/sglang PR 3030",
    ),
    EngineRow(
        "SGLang",
        NOT_CHECKED,
        "model support",
        "closed without merging: MiniMax-Text-01 / M1 model (its serve command turns the radix cache off); "
        "whether a later PR landed it: not checked",
        "2025-10-11",
        "sgl-project/sglang PR 11466",
    ),
    EngineRow("SGLang", NOT_CHECKED, "low-precision state", NOT_CHECKED, NOT_CHECKED, "no source read"),
    EngineRow("SGLang", NOT_CHECKED, "prefix caching", NOT_CHECKED, NOT_CHECKED, "no source read"),
    EngineRow("SGLang", NOT_CHECKED, "speculative decoding", NOT_CHECKED, NOT_CHECKED, "no source read"),
    EngineRow(
        "transformers",
        NOT_CHECKED,
        "model support",
        "merged: MiniMax-Text-01 (hybrid of lightning and softmax attention) in Hugging Face Transformers",
        "2025-01-22",
        "huggingface/transformers PR 35831",
    ),
)


def engine_lines(rows: tuple[EngineRow, ...] = ENGINES) -> list[str]:
    """One evidence line per row, after a line that says what the table is and is not."""
    head = f"engine maturity (a dated, sourced table, not a verdict; sources read {CHECKED_ON}; unconfirmed facts say {NOT_CHECKED!r})"
    return [head] + [f"engine maturity: {r.engine} {r.version}, {r.feature}: {r.status} ({r.date}; {r.source})" for r in rows]
