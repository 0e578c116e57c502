"""Structured outputs (vLLM's `StructuredOutputsParams`): a request's output must match a
regular expression, be one of a list of choices, or be JSON that a schema accepts.

Every constraint becomes a regular expression (a JSON schema through outlines_core's
`build_regex_from_schema`; choices as an alternation), and outlines_core compiles it with
the tokenizer's vocabulary into an index: for each state of the expression's automaton,
the tokens whose bytes keep the text on a path to a match and the state each leads to.
outlines_core is the automaton vLLM's "outlines" backend uses; it is imported only when a
request asks for structured output (the GPU image does not have it).

Each step, every row whose request is constrained gets a bitmask of its allowed tokens
(`[S, ceil(V / 32)]` int32, bit t % 32 of word t // 32; vLLM's layout); the step sends
every other token's logit to -inf (logit_bias.apply_allowed_mask). The model's EOS tokens are
allowed exactly where the text so far is a whole match; the tokenizer's other special
tokens never are. A row without a constraint has every bit set, so its logits are bitwise
unchanged (batch invariance holds). The mask of a step depends on the token the step
before sampled, so a constrained request's steps are not scheduled ahead
(engine/scheduler.py). Logprobs stay those of the raw logits, as with the other lists.

A request's automaton state follows its output: before each of its sampled rows the
guide takes the tokens generated since (a preempted request keeps its output, so its
state too). Compiled indexes are kept per expression (MAX_INDEXES, least recently used
dropped), and each automaton state's mask row once written (MAX_MASK_BYTES). Compiling
an index for a large vocabulary and a deep schema takes seconds (docs/benchmarks.md),
which `add_request`/`generate` spend before queueing the request.
"""

from __future__ import annotations

import collections
import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Compiled expressions kept per engine: a nested JSON schema's index at a 65k vocabulary
# holds ~160 MB (docs/benchmarks.md), so a few.
MAX_INDEXES = 8
MAX_MASK_BYTES = 128 << 20  # mask rows kept per engine, one per automaton state met
MAX_CHOICES = 1024
MAX_PATTERN_CHARS = 65536  # a regex, a schema's JSON text, or all choices together

_KINDS = ("json", "regex", "choice", "json_object")


@dataclass(frozen=True)
class StructuredOutputsParams:
    """Exactly one of `json` (a JSON schema: a dict or its JSON text), `regex` (the whole
    output must match it, Python/Rust regex syntax without look-around or backreferences),
    `choice` (the output is one of these strings) or `json_object=True` (any JSON object).
    `whitespace_pattern` is the regex of the whitespace JSON may have between its tokens
    (default outlines_core's `[ ]?`); `disable_any_whitespace` allows none (compact JSON).
    """

    json: str | dict | None = None
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    json_object: bool = False
    whitespace_pattern: str | None = None
    disable_any_whitespace: bool = False

    def __post_init__(self):
        set_ = functools.partial(object.__setattr__, self)
        if not isinstance(self.json_object, bool) or not isinstance(
            self.disable_any_whitespace, bool
        ):
            raise ValueError(
                "structured_outputs: json_object and disable_any_whitespace must be True or False"
            )
        given = [k for k in _KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError(
                f"structured_outputs: exactly one of json, regex, choice, json_object must be "
                f"given (got {given or 'none'})"
            )
        if self.json is not None:
            schema = self.json
            if isinstance(schema, str):
                try:
                    schema = json.loads(schema)
                except json.JSONDecodeError as e:
                    raise ValueError(f"structured_outputs.json: not valid JSON ({e})") from None
            if not isinstance(schema, dict):
                raise ValueError(
                    f"structured_outputs.json: a JSON schema is an object, got {type(schema)}"
                )
            set_("json", json.dumps(schema))  # hashable; the properties keep their order
        if self.regex is not None and not isinstance(self.regex, str):
            raise ValueError(f"structured_outputs.regex={self.regex!r}: must be a str")
        if self.choice is not None:
            choice = self.choice
            if isinstance(choice, str) or not all(isinstance(c, str) for c in choice):
                raise ValueError(
                    f"structured_outputs.choice={choice!r}: must be a sequence of strings"
                )
            choice = tuple(choice)
            if not choice or not all(choice) or len(choice) > MAX_CHOICES:
                raise ValueError(
                    f"structured_outputs.choice: 1 to {MAX_CHOICES} non-empty strings "
                    f"(got {len(choice)})"
                )
            set_("choice", choice)
        ws = self.whitespace_pattern
        if ws is not None and not isinstance(ws, str):
            raise ValueError(f"structured_outputs.whitespace_pattern={ws!r}: must be a str")
        size = len(self.pattern())
        if size > MAX_PATTERN_CHARS:
            raise ValueError(
                f"structured_outputs: the expression has {size} characters, at most "
                f"{MAX_PATTERN_CHARS}"
            )

    def pattern(self) -> str:
        """The regular expression the output must match whole (JSON: before compiling the
        schema; see regex_for)."""
        if self.regex is not None:
            return self.regex
        if self.choice is not None:
            return "|".join(f"({re.escape(c)})" for c in self.choice)
        return self.json if self.json is not None else '{"type": "object"}'

    @property
    def is_json(self) -> bool:
        return self.json is not None or self.json_object


def regex_for(params: StructuredOutputsParams) -> str:
    """The expression outlines_core compiles: a JSON schema's through its converter."""
    if not params.is_json:
        return params.pattern()
    from outlines_core.json_schema import build_regex_from_schema

    ws = "" if params.disable_any_whitespace else params.whitespace_pattern
    try:
        return build_regex_from_schema(params.pattern(), ws)
    except (ValueError, TypeError) as e:
        raise ValueError(f"structured_outputs.json: unsupported schema ({e})") from None


# ---- the tokenizer's vocabulary as bytes ---------------------------------------------------


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's): printable bytes stand for themselves, the
    others for chr(256 + k) in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _decoder_kinds(decoder: dict | None) -> set[str]:
    if not decoder:
        return set()
    if decoder.get("type") == "Sequence":
        return set().union(*(_decoder_kinds(d) for d in decoder.get("decoders", ())))
    return {decoder.get("type")}


_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_bytes(tokenizer_json: dict, vocab_size: int) -> dict[int, bytes]:
    """Each ordinary token's bytes in the decoded text (ids below `vocab_size`; special
    tokens left out). Byte-level BPE (Llama 3, Qwen, DeepSeek, gpt-oss): through the byte
    alphabet. SentencePiece-style (Llama 2, Mistral): '▁' is a space and <0xNN> a byte.
    Other decoders (word-level, WordPiece) put text between tokens that depends on their
    neighbours, which no per-token automaton can follow: ValueError."""
    kinds = _decoder_kinds(tokenizer_json.get("decoder"))
    vocab = dict(tokenizer_json["model"].get("vocab") or {})
    if isinstance(tokenizer_json["model"].get("vocab"), list):  # Unigram: [[piece, score]]
        vocab = {piece: i for i, (piece, _) in enumerate(tokenizer_json["model"]["vocab"])}
    added = {t["content"]: t for t in tokenizer_json.get("added_tokens", ())}
    out = {}
    if "ByteLevel" in kinds:
        alphabet = _byte_decoder()
        for piece, i in vocab.items():
            if piece not in added and all(c in alphabet for c in piece):
                out[i] = bytes(alphabet[c] for c in piece)
    elif kinds & {"Metaspace", "Replace", "ByteFallback"}:
        for piece, i in vocab.items():
            m = _BYTE_TOKEN.fullmatch(piece)
            out[i] = bytes([int(m[1], 16)]) if m else piece.replace("▁", " ").encode()
    else:
        raise ValueError(
            f"structured_outputs: the tokenizer's decoder ({sorted(kinds) or 'none'}) joins "
            "tokens with text that depends on their neighbours; structured outputs need a "
            "byte-level BPE or SentencePiece tokenizer"
        )
    for content, t in added.items():  # added ordinary tokens are their literal text
        if not t.get("special"):
            out[t["id"]] = content.encode()
        else:
            out.pop(t["id"], None)
    return {i: b for i, b in out.items() if 0 <= i < vocab_size and b}


# ---- the engine's side ---------------------------------------------------------------------


class StructuredOutputs:
    """One engine's compiled expressions and its requests' automaton states."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: Sequence[int]):
        self._tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.num_words = -(-vocab_size // 32)
        self._eos = tuple(eos_token_ids)
        self._vocabulary = None
        self._indexes: collections.OrderedDict[str, Any] = collections.OrderedDict()
        # request id -> [guide, output tokens taken, its expression]
        self._guides: dict[str, list] = {}
        # (expression, automaton state) -> that state's mask row, least recently used first:
        # writing a mask walks every allowed token (most of the vocabulary inside a JSON
        # string), a copy does not.
        self._masks: collections.OrderedDict[tuple, np.ndarray] = collections.OrderedDict()

    def _vocab(self):
        if self._vocabulary is None:
            if self._tokenizer is None:
                raise ValueError(
                    "structured_outputs: needs the model's tokenizer.json (none in the model "
                    "directory)"
                )
            if not self._eos:
                raise ValueError("structured_outputs: the model config names no EOS token")
            import outlines_core

            pieces = token_bytes(json.loads(self._tokenizer.to_str()), self.vocab_size)
            by_bytes: dict[bytes, list[int]] = {}
            for i, b in pieces.items():
                if i not in self._eos:
                    by_bytes.setdefault(b, []).append(i)
            self._vocabulary = outlines_core.Vocabulary(self._eos[0], by_bytes)
        return self._vocabulary

    def index(self, params: StructuredOutputsParams):
        """The compiled index of `params` (built now if not kept): ValueError when the
        expression does not compile or the vocabulary cannot spell it."""
        regex = regex_for(params)
        got = self._indexes.get(regex)
        if got is None:
            import outlines_core

            vocabulary = self._vocab()
            try:
                got = outlines_core.Index(regex, vocabulary)
            except ValueError as e:
                field = "json" if params.is_json else "choice" if params.choice else "regex"
                raise ValueError(f"structured_outputs.{field}: cannot be compiled ({e})") from None
            self._indexes[regex] = got
            while len(self._indexes) > MAX_INDEXES:
                self._indexes.popitem(last=False)
        self._indexes.move_to_end(regex)
        return got

    def release(self, request_id: str) -> None:
        self._guides.pop(request_id, None)

    def _mask_row(self, request_id: str, params, output: Sequence[int], row: np.ndarray):
        state = self._guides.get(request_id)
        if state is None:
            import outlines_core

            guide = outlines_core.Guide(self.index(params))
            state = self._guides[request_id] = [guide, 0, regex_for(params)]
        guide, taken, regex = state
        for token in output[taken:]:
            if guide is not None:
                try:
                    guide.advance(
                        self._eos[0] if token in self._eos else token, return_tokens=False
                    )
                except ValueError:  # past a match the output went on (ignore_eos)
                    guide = None
        state[:2] = guide, len(output)
        key = (regex, None if guide is None else guide.get_state())
        cached = self._masks.get(key)
        if cached is None:
            cached = np.zeros_like(row)
            if guide is not None:
                guide.write_mask_into(cached.ctypes.data, cached.size, 4)
            if guide is None or cached[self._eos[0] >> 5] >> (self._eos[0] & 31) & 1:
                for t in self._eos:  # every EOS id where the vocabulary's one is allowed
                    cached[t >> 5] |= np.uint32(1 << (t & 31)).view(np.int32)
            self._masks[key] = cached
            while len(self._masks) * row.nbytes > MAX_MASK_BYTES:
                self._masks.popitem(last=False)
        self._masks.move_to_end(key)
        row[:] = cached

    def masks_for(
        self,
        items,
        num_rows: int,
        output_of: Callable[[Any], Sequence[int]],
        always: bool = False,
    ) -> np.ndarray | None:
        """The step's [num_rows, num_words] allowed-token bitmask for `items` (rows in
        order); None when no sampled row is constrained, unless `always` (an engine that
        keeps the feature on, runner.StickyFeatures: every bit set). `output_of(item)` is
        the item's output so far, whole (no step of a constrained request is scheduled
        ahead)."""
        rows = [
            (i, it)
            for i, it in enumerate(items)
            if it.sample and it.sampling_params.structured_outputs is not None
        ]
        if not rows and not always:
            return None
        mask = np.full((num_rows, self.num_words), -1, np.int32)
        for i, it in rows:
            self._mask_row(
                it.request_id, it.sampling_params.structured_outputs, output_of(it), mask[i]
            )
        return mask
