"""The text renderer (``external.render=text``): attnbench's generated tasks as prose, for a model
that reads text (any transformers folder, any served model), RULER-style.

The generators stay the truth of a task (tasks/generate.py): which needles, at which depths, which
chain of lookups a probe asks for. This module reads that structure off a generated sample (every
key token of a context is a needle, its next token the needle's value; a needle's depth is its
slot's place in the haystack, the depth the generator states) and writes it as text:

    needles (niah_single / niah_multikey)    "The special magic number for amber-falcon is 4820917."
    chains (chain, 1-4 hops)                 "VAR QXKZB = VAR MPLRT."  ...  "VAR MPLRT = 73192."

in a haystack of filler sentences made here from small word lists by a seeded generator (nothing
ships or is fetched; the same seed gives the same text). Keys, variable names and numbers are drawn
per haystack, so no answer is a prior.

Lengths are counted in the target model's own tokens (its tokenizer, special tokens as the model is
sent them): the prompt is the instruction, the haystack and the question, filled with whole filler
sentences up to ``context_len`` tokens, so it is at most ``context_len`` and within one filler
sentence of it (``fit`` checks the whole prompt's count, not a sum of parts). A needle sits between
the filler sentences at its stated depth: the filler tokens before it are ``depth`` of the filler's
tokens, to within half a sentence. The prompt states the answer's format (a number) and ends with an
answer prefix; ``read`` takes the first number of the completion, scored by exact match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from attnbench.tasks.generate import Probe, Sample
from attnbench.tasks.vocab import N_SPECIAL, Vocab

TASKS = ("niah_single", "niah_multikey", "chain")  # the generated tasks this renderer writes as prose

# Filler: "<subject> <verb> <object> <place> <time>." from these lists, drawn by the haystack's rng.
SUBJECTS = "the old ferryman|a quiet neighbour|the baker's daughter|our teacher|the night clerk|a tired traveller|the gardener|my uncle|the young painter|a street musician|the harbour master|the librarian".split(
    "|"
)
VERBS = "mended|carried|painted|counted|sold|found|polished|folded|wrapped|measured|repaired|borrowed".split("|")
OBJECTS = "a wooden chair|the fishing nets|two baskets of apples|an old map|the blue lantern|a stack of letters|the kitchen table|a pair of boots|the garden gate|a box of candles|the ship's rope|a heavy coat".split(
    "|"
)
PLACES = "by the river|in the market square|behind the mill|near the station|on the hill road|in the back room|at the harbour|under the bridge|beside the chapel|in the orchard|at the crossroads|on the top floor".split(
    "|"
)
TIMES = "at dawn|after supper|before the rain|on a Sunday|late in the evening|in early spring|during the fair|at noon|one winter morning|while the bells rang|the day before|in the autumn".split(
    "|"
)
ADJECTIVES = "amber|brisk|cobalt|dusty|eager|frosty|gentle|hollow|ivory|jolly|keen|lunar|misty|noble|olive|proud|quiet|rusty|silver|tawny|umber|vivid|woolen|young|zesty|bold|calm|dark|early|faint|grand|humble".split(
    "|"
)
NOUNS = "falcon|harbor|lantern|meadow|pebble|quarry|raven|saddle|thistle|walnut|anchor|beacon|candle|dagger|ember|fable|garnet|hazel|island|jasper|kettle|ledger|marble|nectar|orchard|parcel|quill|ribbon|summit|tunnel|violet|willow".split(
    "|"
)

NUMBER = re.compile(r"\d+")


def filler_sentence(rng: np.random.Generator) -> str:
    parts = [SUBJECTS, VERBS, OBJECTS, PLACES, TIMES]
    words = " ".join(p[int(rng.integers(len(p)))] for p in parts)
    return words[0].upper() + words[1:] + "."


@dataclass(frozen=True)
class Needle:
    depth: float  # its slot's place in the haystack, 0 = start, 1 = end (the generator's stated depth)
    key: int  # the key's symbol
    value: int  # the value's symbol


def needles(sample: Sample, vocab: Vocab) -> list[Needle]:
    """The needles of a generated context, in context order: every key token and the value token after it."""
    ctx = np.asarray(sample.context)
    n_slots = max((len(ctx) - 2) // 2 - 1, 1)
    out = []
    for p in np.flatnonzero(vocab.is_key(ctx)):
        slot = (int(p) - 1) // 2
        out.append(Needle(slot / n_slots, int(ctx[p]) - N_SPECIAL, int(ctx[p + 1]) - N_SPECIAL - vocab.n_keys))
    return out


class Names:
    """The words of one haystack's symbols, drawn by its rng: key phrases, variable names, numbers."""

    def __init__(self, rng: np.random.Generator, vocab: Vocab):
        n = max(vocab.n_keys, vocab.n_values)
        pairs = rng.permutation(len(ADJECTIVES) * len(NOUNS))[:n]
        self.keys = [f"{ADJECTIVES[i // len(NOUNS)]}-{NOUNS[i % len(NOUNS)]}" for i in pairs]
        self.numbers = [str(x) for x in rng.choice(np.arange(1_000_000, 10_000_000), n, replace=False)]  # 7 digits, distinct
        letters = rng.integers(0, 26, (4 * n, 5))
        names = list(dict.fromkeys("".join(chr(65 + c) for c in row) for row in letters))[:n]  # distinct 5-letter names
        if len(names) < n:
            raise ValueError("too few distinct variable names were drawn")  # 26^5 names: never in practice
        self.variables = names


@dataclass
class Prompt:
    text: str
    target: str  # the answer, as the model should write it
    tokens: int  # the prompt's length in the target model's tokens
    depth: float | None  # the probed needle's stated depth (the generator's; None for a chain's scattered needles)
    depth_tokens: float | None  # where it sits: filler tokens before it / filler tokens (within one sentence of depth)
    filler_tokens: int
    unit: int  # the longest filler sentence, in tokens: the length's and the depth's resolution


def _niah(sample: Sample, probe: Probe, names: Names, vocab: Vocab) -> tuple[str, list[tuple[float, str]], str, str]:
    key = probe.tokens[-1] - N_SPECIAL
    value = [t for t in probe.targets if t >= 0][0] - N_SPECIAL - vocab.n_keys
    head = "Some special magic numbers are hidden in the text below. Memorize them: you will be asked for one of them.\n"
    body = [(n.depth, f"The special magic number for {names.keys[n.key]} is {names.numbers[n.value]}.") for n in needles(sample, vocab)]
    tail = (
        f"\nWhat is the special magic number for {names.keys[key]} mentioned in the text above? Answer with the number only.\n"
        f"Answer: The special magic number for {names.keys[key]} is"
    )
    return head, body, tail, names.numbers[value]


def _chain(sample: Sample, probe: Probe, names: Names, vocab: Vocab) -> tuple[str, list[tuple[float, str]], str, str]:
    found = needles(sample, vocab)
    keys = {n.key for n in found}

    def rhs(symbol: int) -> str:  # a value that is itself a key names the next variable; the chain's last is a number
        return f"VAR {names.variables[symbol]}" if symbol in keys else names.numbers[symbol]

    start = probe.tokens[-1] - N_SPECIAL
    last = [t for t in probe.targets if t >= 0][0] - N_SPECIAL - vocab.n_keys
    head = (
        "The text below hides assignments such as VAR ABCDE = 12345 (ABCDE holds 12345) or VAR ABCDE = VAR FGHIJ "
        "(ABCDE holds what FGHIJ holds). Memorize them: you will be asked for the number one variable holds.\n"
    )
    body = [(n.depth, f"VAR {names.variables[n.key]} = {rhs(n.value)}.") for n in found]
    tail = (
        f"\nQuestion: following the assignments in the text above, which number does VAR {names.variables[start]} hold? "
        f"Answer with the number only.\nAnswer: VAR {names.variables[start]} holds the number"
    )
    return head, body, tail, names.numbers[last]


def parts(task: str, sample: Sample, probe: Probe, names: Names, vocab: Vocab) -> tuple[str, list[tuple[float, str]], str, str]:
    """(instruction, [(depth, needle sentence)], question with answer prefix, target) of one probe."""
    if task in ("niah_single", "niah_multikey"):
        return _niah(sample, probe, names, vocab)
    if task == "chain":
        return _chain(sample, probe, names, vocab)
    raise ValueError(f"the text renderer writes {', '.join(TASKS)}; not {task!r} (use external.render=tokens)")


def boundary(depth: float, sizes: list[int]) -> int:
    """The sentence boundary (0..len(sizes)) whose filler tokens before it are nearest ``depth`` of all:
    a needle placed there is at its depth to within half a sentence."""
    cum = np.concatenate([[0], np.cumsum(sizes)])
    return int(np.argmin(np.abs(cum - depth * cum[-1])))


def _assemble(head: str, body: list[tuple[float, str]], tail: str, filler: list[str], sizes: list[int]) -> str:
    """The prompt with these filler sentences and each needle at the boundary of its depth."""
    at: dict[int, list[str]] = {}
    for depth, sentence in body:
        at.setdefault(boundary(depth, sizes), []).append(sentence)
    pieces: list[str] = []
    for i in range(len(sizes) + 1):
        pieces += at.get(i, [])
        if i < len(sizes):
            pieces.append(filler[i])
    return head + " ".join(pieces) + tail


def fit(
    tokenizer, head: str, body: list[tuple[float, str]], tail: str, filler_rng: np.random.Generator, context_len: int
) -> tuple[str, int, list[int]]:
    """(prompt, its tokens, the tokens of each filler sentence used): as many whole filler sentences
    as keep the prompt within ``context_len`` of the tokenizer's tokens."""

    def count(text: str) -> int:
        return len(tokenizer(text)["input_ids"])

    fixed = count(head + " ".join(s for _, s in body) + tail)
    if fixed > context_len:
        raise ValueError(f"the instruction, needles and question alone are {fixed} tokens; the cell asks for {context_len}")
    filler: list[str] = []
    sizes: list[int] = []
    room = context_len - fixed
    while sum(sizes) <= room:  # an estimate from sentence counts; the exact count of the whole prompt decides below
        new = [filler_sentence(filler_rng) for _ in range(max(16, (room - sum(sizes)) // 12 + 1))]
        filler += new
        sizes += [len(x) for x in tokenizer([" " + s for s in new], add_special_tokens=False)["input_ids"]]
    m = int(np.searchsorted(np.cumsum(sizes), room, side="right"))
    text = _assemble(head, body, tail, filler, sizes[:m])
    n = count(text)
    while n > context_len and m > 0:
        m -= 1
        text = _assemble(head, body, tail, filler, sizes[:m])
        n = count(text)
    while m < len(filler):
        more = _assemble(head, body, tail, filler, sizes[: m + 1])
        k = count(more)
        if k > context_len:
            break
        m, text, n = m + 1, more, k
    return text, n, sizes[:m]


def render(task: str, sample: Sample, probe: Probe, vocab: Vocab, tokenizer, context_len: int, rng: np.random.Generator) -> Prompt:
    """One probe of a generated sample as a prompt of at most ``context_len`` of the tokenizer's tokens."""
    names = Names(rng, vocab)
    head, body, tail, target = parts(task, sample, probe, names, vocab)
    text, n, sizes = fit(tokenizer, head, body, tail, rng, context_len)
    total = sum(sizes)
    at = None if probe.depth is None else sum(sizes[: boundary(probe.depth, sizes)]) / max(total, 1)
    return Prompt(text, target, n, probe.depth, at, total, max(sizes, default=0))


def read(completion: str) -> str:
    """The answer a completion gives: its first number ('' if it has none)."""
    got = NUMBER.search(completion)
    return got.group(0) if got else ""


__all__ = ["TASKS", "Needle", "needles", "Names", "Prompt", "parts", "fit", "render", "read", "filler_sentence"]
