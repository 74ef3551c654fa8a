"""The token-level renderer: attnbench's task tokens as words, one word a token, and the tokenizer
that reads them back (a transformers ``PreTrainedTokenizerFast`` over a word-level vocabulary).

An exported attnbench model reads its own tasks through any text interface this way (a served
``/v1/completions`` request carries text): ``render`` turns the ids of a context and probe into
words (``<bos> f3 k12 v4 ... <sep> k12``), the tokenizer maps each word back to its id, so the
model sees exactly the tokens attnbench's in-process scorer feeds it, and ``parse`` reads an
answer's first word back as a token id.

    id 0 <pad>   1 <bos>   2 <sep>   3..6 <hop1>..<hop4>   7 <unk>
    keys k0..    values v0..    filler f0..    the rest of the model's vocabulary <unused{id}>
"""

from __future__ import annotations

from collections.abc import Iterable

from attnbench.tasks.vocab import HOP_BASE, MAX_HOPS, N_SPECIAL, Vocab

SPECIAL = ["<pad>", "<bos>", "<sep>"] + [f"<hop{k}>" for k in range(1, MAX_HOPS + 1)] + ["<unk>"]
assert len(SPECIAL) == N_SPECIAL and SPECIAL[HOP_BASE] == "<hop1>"


def words(vocab: Vocab, vocab_size: int) -> list[str]:
    """The word of every token id < vocab_size."""
    out = SPECIAL + [f"k{i}" for i in range(vocab.n_keys)] + [f"v{i}" for i in range(vocab.n_values)]
    out += [f"f{i}" for i in range(vocab.n_filler)]
    if len(out) > vocab_size:
        raise ValueError(f"the task vocabulary has {len(out)} tokens; the model reads {vocab_size}")
    return out + [f"<unused{i}>" for i in range(len(out), vocab_size)]


def render(ids: Iterable[int], table: list[str]) -> str:
    """Token ids -> the text the tokenizer reads back to the same ids."""
    return " ".join(table[int(i)] for i in ids)


def parse(text: str, table: list[str]) -> int:
    """The first word of a completion -> its token id (-1 if it is not a word of the table)."""
    first = text.split()[:1]
    index = {w: i for i, w in enumerate(table)}
    return index.get(first[0], -1) if first else -1


def tokenizer(vocab: Vocab, vocab_size: int):
    """The transformers tokenizer of ``words``: whitespace-split words, one id each, no added tokens
    (a context carries its own <bos>), decoded with a space between words."""
    from attnbench.external import transformers_ready

    transformers_ready()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    table = words(vocab, vocab_size)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(table)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with one space, changes nothing else
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", pad_token="<pad>", unk_token="<unk>", eos_token="<sep>", model_max_length=1 << 23
    )


__all__ = ["SPECIAL", "words", "render", "parse", "tokenizer"]
