"""Retrieval prompts (passkey, needle in a haystack), built in token space to exact lengths.

A prompt is `prefix + haystack[:k] + needle + haystack[k:] + question` with exactly `length`
tokens; the needle goes at the haystack's unit (sentence) boundary nearest `depth` x haystack
length. Two ways to make the parts:

- `TextTask`: English templates through a tokenizer (`Codec`); the answer is a number, and a
  reply is right when the first number in it equals the answer.
  passkey: Mohtashami & Jaggi, "Landmark Attention" (arXiv:2305.16300), repeated filler.
  needle: RULER's single needle (Hsieh et al., arXiv:2404.06654) in a varied haystack (a text
  file, or built-in sentences).
- `TokenTask`: the same structure made of token ids, for models without a tokenizer (random-
  weight presets): marker ids stand in for the words, the answer is a run of ids, and a reply
  is right when it starts with exactly those ids.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Protocol

import numpy as np

TASKS = ("passkey", "needle")


class Codec(Protocol):
    """Text <-> token ids without special tokens (e.g. a `tokenizers.Tokenizer` wrapper)."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class TokenizerCodec:
    """`Codec` over a Hugging Face `tokenizers.Tokenizer` (BOS is added by the prompt builder)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids])


@dataclasses.dataclass(frozen=True)
class Needle:
    """One hidden fact: its token ids, the question's ids and the answer expected."""

    needle: list[int]
    question: list[int]
    answer: str | tuple[int, ...]  # text tasks: the number; token tasks: the ids


@dataclasses.dataclass(frozen=True)
class RetrievalSample:
    """One prompt of the grid."""

    task: str
    length: int  # prompt tokens
    depth: float  # requested needle depth in [0, 1]
    trial: int
    prompt: np.ndarray  # [length] int32
    answer: str | tuple[int, ...]
    needle_start: int  # index of the needle's first token in `prompt`
    needle_len: int
    haystack_start: int  # index of the haystack's first token (after BOS and intro)
    haystack_len: int

    @property
    def actual_depth(self) -> float:
        """Where the needle landed: fraction of the haystack before it."""
        before = self.needle_start - self.haystack_start
        return before / self.haystack_len if self.haystack_len else 0.0


_FIRST_NUMBER = re.compile(r"\d+")


def first_number(text: str) -> str | None:
    m = _FIRST_NUMBER.search(text)
    return m.group(0) if m else None


class TextTask:
    """Passkey or needle prompts in words, through `codec`."""

    default_max_new_tokens = 16  # room for the number however the tokenizer splits it

    PASSKEY_INTRO = (
        "There is an important info hidden inside a lot of irrelevant text. Find it and "
        "memorize it. I will quiz you about the important information there."
    )
    PASSKEY_FILLER = (
        "The grass is green.",
        "The sky is blue.",
        "The sun is yellow.",
        "Here we go.",
        "There and back again.",
    )
    NEEDLE_INTRO = (
        "Some special magic numbers are hidden within the following text. Make sure to "
        "memorize it. I will quiz you about the numbers afterwards."
    )
    # Default haystack when no text file is given: varied, unremarkable sentences.
    NEEDLE_FILLER = (
        "The old mill by the river was rebuilt after the flood.",
        "Most of the town's bread still comes from a single bakery.",
        "Each autumn the orchards send their apples to the northern markets.",
        "A narrow bridge links the two halves of the village.",
        "The library keeps its maps in a cold room under the stairs.",
        "Travelers often stop at the inn before crossing the pass.",
        "The council meets on the first Monday of every month.",
        "Fishing boats leave the harbor well before sunrise.",
        "In winter the lake freezes thick enough to walk across.",
        "The school moved to a larger building ten years ago.",
        "Wild horses graze on the hills east of the road.",
        "A bell in the tower rings once every hour.",
        "The museum displays tools that farmers used a century ago.",
        "Merchants from the coast bring salt and dried fish.",
        "The forest path is marked with white stones.",
        "Rain in spring turns the valley green within days.",
    )
    NEEDLE_KEYS = (
        "amber", "brisk", "cobalt", "dusty", "elder", "frosty", "gentle", "hollow",
        "ivory", "jolly", "lunar", "mellow", "noble", "olive", "quiet", "rustic",
    )  # fmt: skip
    NEEDLE_NOUNS = (
        "anchor", "beacon", "canyon", "dagger", "ember", "falcon", "garden", "harbor",
        "island", "jacket", "kettle", "lantern", "meadow", "needle", "orchid", "pillar",
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        codec: Codec,
        bos_token_id: int | None = None,
        haystack_text: str | None = None,
    ):
        if name not in TASKS:
            raise ValueError(f"task={name!r}: expected one of {TASKS}")
        self.name = name
        self.codec = codec
        intro = self.PASSKEY_INTRO if name == "passkey" else self.NEEDLE_INTRO
        self.prefix = ([] if bos_token_id is None else [bos_token_id]) + codec.encode(intro)
        if name == "passkey":
            sentences = list(self.PASSKEY_FILLER)
        elif haystack_text is not None:
            sentences = [s for s in re.split(r"(?<=[.!?])\s+", haystack_text.strip()) if s]
            if not sentences:
                raise ValueError("haystack_text: is empty")
        else:
            sentences = list(self.NEEDLE_FILLER)
        self._sentences = sentences
        self._units: list[list[int]] = []  # encoded sentences, extended on demand
        self._next = 0  # next sentence to encode

    def unit(self, i: int) -> list[int]:
        """The i-th haystack unit: the sentences in order, cycling, encoded once each."""
        misses = 0
        while len(self._units) <= i:
            s = self._sentences[self._next % len(self._sentences)]
            self._next += 1
            ids = self.codec.encode(" " + s)
            if ids:
                self._units.append(ids)
                misses = 0
            elif (misses := misses + 1) >= len(self._sentences):
                raise ValueError("haystack_text: no sentence encodes to any token")
        return self._units[i]

    def make_needle(self, rng: np.random.Generator) -> Needle:
        enc = self.codec.encode
        if self.name == "passkey":
            key = str(int(rng.integers(10_000, 100_000)))
            needle = f" The pass key is {key}. Remember it. {key} is the pass key."
            return Needle(enc(needle), enc(" What is the pass key? The pass key is"), key)
        word = f"{rng.choice(self.NEEDLE_KEYS)}-{rng.choice(self.NEEDLE_NOUNS)}"
        value = str(int(rng.integers(1_000_000, 10_000_000)))
        needle = f" One of the special magic numbers for {word} is: {value}."
        question = (
            f" What is the special magic number for {word} mentioned in the provided text? "
            f"The special magic number for {word} mentioned in the provided text is"
        )
        return Needle(enc(needle), enc(question), value)

    def is_correct(self, answer: str | tuple[int, ...], output: str | Sequence[int]) -> bool:
        text = output if isinstance(output, str) else self.codec.decode(output)
        return first_number(text) == answer

    def render(self, output: str | Sequence[int]) -> str:
        return output if isinstance(output, str) else self.codec.decode(output)


class TokenTask:
    """Passkey or needle prompts made of token ids (no tokenizer needed).

    Fixed marker ids (drawn once from `seed`) play the words; they never occur in the filler,
    so the needle is findable. passkey: filler = five fixed "sentences" repeated, needle =
    NEEDLE key END, question = QUESTION, answer = key. needle: filler = random ids, needle =
    NEEDLE k1 k2 IS v1..v5, question = QUESTION k1 k2 IS, answer = v1..v5.
    """

    MARKER_LEN = 3
    UNIT_LEN = 8
    PASSKEY_LEN = 5
    NEEDLE_KEY_LEN = 2
    NEEDLE_VALUE_LEN = 5

    def __init__(
        self,
        name: str,
        vocab_size: int,
        reserved_ids: Sequence[int] = (0,),
        seed: int = 0,
        bos_token_id: int | None = None,
    ):
        if name not in TASKS:
            raise ValueError(f"task={name!r}: expected one of {TASKS}")
        allowed = np.setdiff1d(np.arange(vocab_size), np.asarray(reserved_ids, dtype=np.int64))
        n_markers = 4 * self.MARKER_LEN
        if len(allowed) < 2 * n_markers:
            raise ValueError(f"vocab_size={vocab_size}: too small for token-space prompts")
        self.name = name
        # A longer reply cannot change the score: only its first len(answer) ids count.
        self.default_max_new_tokens = (
            self.PASSKEY_LEN if name == "passkey" else self.NEEDLE_VALUE_LEN
        )
        rng = np.random.default_rng([seed, 0x7A5C])
        markers = rng.choice(allowed, n_markers, replace=False)
        m = self.MARKER_LEN
        self.intro_ids, self.needle_ids, self.end_ids, self.question_ids = (
            markers[i * m : (i + 1) * m].tolist() for i in range(4)
        )
        self.is_ids = self.end_ids  # needle task: separates key and value
        self.content_ids = np.setdiff1d(allowed, markers)  # filler, keys and values
        self.prefix = ([] if bos_token_id is None else [bos_token_id]) + self.intro_ids
        self._pattern = [rng.choice(self.content_ids, self.UNIT_LEN).tolist() for _ in range(5)]
        # needle's varied filler: one stream, extended in order, so unit i is fixed by the seed.
        self._filler_rng = np.random.default_rng([seed, 0x5EED])
        self._units: list[list[int]] = []

    def unit(self, i: int) -> list[int]:
        if self.name == "passkey":
            return self._pattern[i % len(self._pattern)]
        while len(self._units) <= i:
            block = self._filler_rng.choice(self.content_ids, (1024, self.UNIT_LEN))
            self._units.extend(block.tolist())
        return self._units[i]

    def make_needle(self, rng: np.random.Generator) -> Needle:
        draw = lambda n: rng.choice(self.content_ids, n).tolist()
        if self.name == "passkey":
            key = draw(self.PASSKEY_LEN)
            return Needle(self.needle_ids + key + self.end_ids, list(self.question_ids), tuple(key))
        key, value = draw(self.NEEDLE_KEY_LEN), draw(self.NEEDLE_VALUE_LEN)
        needle = self.needle_ids + key + self.is_ids + value
        return Needle(needle, self.question_ids + key + self.is_ids, tuple(value))

    def is_correct(self, answer: str | tuple[int, ...], output: str | Sequence[int]) -> bool:
        if isinstance(output, str):
            raise ValueError("output: a token-space task needs token ids, got a string")
        return tuple(int(t) for t in output[: len(answer)]) == tuple(answer)

    def render(self, output: str | Sequence[int]) -> list[int]:
        return [int(t) for t in output]


RetrievalTask = TextTask | TokenTask


def build_sample(
    task: RetrievalTask, length: int, depth: float, trial: int, seed: int = 0
) -> RetrievalSample:
    """The prompt of `length` tokens with a fresh needle at `depth` (0 = first, 1 = last)."""
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depths: {depth} is outside [0, 1]")
    # The needle depends on the cell, the haystack on the task only: depths differ in place only.
    rng = np.random.default_rng([seed, length, round(depth * 1_000_000), trial])
    nd = task.make_needle(rng)
    fixed = len(task.prefix) + len(nd.needle) + len(nd.question)
    hay_len = length - fixed
    if hay_len < 0:
        raise ValueError(
            f"lengths: {length} is too short for a {task.name} prompt, which needs at least "
            f"{fixed} tokens"
        )
    units, bounds, total = [], [0], 0
    while total < hay_len:
        u = task.unit(len(units))[: hay_len - total]
        units.append(u)
        total += len(u)
        bounds.append(total)
    # Needle between units, at the boundary nearest the requested depth (lower on a tie).
    cut = min(range(len(bounds)), key=lambda i: (abs(bounds[i] - depth * hay_len), i))
    hay = [t for u in units for t in u]
    before, after = hay[: bounds[cut]], hay[bounds[cut] :]
    prompt = task.prefix + before + nd.needle + after + nd.question
    return RetrievalSample(
        task=task.name,
        length=length,
        depth=depth,
        trial=trial,
        prompt=np.asarray(prompt, dtype=np.int32),
        answer=nd.answer,
        needle_start=len(task.prefix) + len(before),
        needle_len=len(nd.needle),
        haystack_start=len(task.prefix),
        haystack_len=hay_len,
    )
