"""Host cost of the stop-string check (engine/stop_strings.py) per sampled token.

  python -m scripts.bench_stop_strings                  # the figures in docs/benchmarks.md
  python -m scripts.bench_stop_strings --tokenizers=/path/to/tokenizer.json --num_tokens=8000

The scheduler calls `stop_string_hit` after every token of a request that has stop strings:
it decodes the output's last 4 x len + 8 tokens, so its cost should not grow with the output.
For each tokenizer (two built here, GPT-2-style byte-level BPE and Llama-2-style byte
fallback, plus the tokenizer.json files named) and each stop-string set, this times one check
on a random `num_tokens`-token output with no stop string in it (the common case), and one
decode of the whole output for comparison. Best of `repeats` timings of `checks` calls.
"""

from __future__ import annotations

import functools
import os
import random
import sys
import time

from absl import app, flags
from tokenizers import Tokenizer, decoders
from tokenizers.models import BPE
from tokenizers.pre_tokenizers import ByteLevel

from engine.stop_strings import stop_string_hit
from scripts.flag_checks import check_count

_TOKENIZERS = flags.DEFINE_list(
    "tokenizers", ["tests/fixtures/llama/tokenizer.json"], "tokenizer.json files to time too."
)
_NUM_TOKENS = flags.DEFINE_integer("num_tokens", 4000, "Output tokens of the timed request.")
_CHECKS = flags.DEFINE_integer("checks", 2000, "Calls per timing.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timings per figure (the best is shown).")

STOP_SETS = (("\n\n",), ("</answer>", "###", "\nUser:"))


def byte_level_tokenizer() -> Tokenizer:
    """GPT-2 style byte-level BPE: every byte is a token, plus some merged pieces."""
    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    for piece in ("Ġthe", "Ġcat", "Ġca", "Ã©", "ðŁ", "ĠæĿ±", "ĊĊ", "at"):
        vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(BPE(vocab, []))
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def byte_fallback_tokenizer() -> Tokenizer:
    """Llama-2 style: "▁" for spaces, byte fallback <0xXX>, the first leading space stripped."""
    vocab = {f"<0x{b:02X}>": b for b in range(256)}
    for piece in ("▁the", "▁cat", "▁", "at", "é", "東京", "▁end", "a", "t", "x"):
        vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(BPE(vocab, [], byte_fallback=True))
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    return tok


def _best(fn, calls: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def bench(name: str, tok: Tokenizer, num_tokens: int, checks: int, repeats: int) -> list[dict]:
    # A random output that holds none of the stop strings (the per-token common case): no
    # token whose text has a stop string's first character (all ASCII, so no run of
    # partial characters decodes to one either).
    firsts = {s[0] for stops in STOP_SETS for s in stops}
    allowed = [i for i in range(tok.get_vocab_size()) if not firsts & set(tok.decode([i], False))]
    rng = random.Random(0)
    ids = [rng.choice(allowed) for _ in range(num_tokens)]
    rows = []
    for stops in STOP_SETS:
        check = _best(functools.partial(stop_string_hit, tok.decode, ids, stops), checks, repeats)
        whole = _best(lambda: tok.decode(ids), max(1, checks // 100), repeats)
        rows.append(dict(tokenizer=name, stops=stops, check_us=1e6 * check, decode_us=1e6 * whole))
    return rows


def main(argv):
    del argv
    try:
        for name, flag, low in (("num_tokens", _NUM_TOKENS, 1), ("checks", _CHECKS, 1)):
            check_count(f"--{name}", flag.value, low=low, high=10**7)
        check_count("--repeats", _REPEATS.value, low=1, high=1000)
        tokenizers = [("byte-level BPE", byte_level_tokenizer())]
        tokenizers.append(("byte fallback", byte_fallback_tokenizer()))
        for path in _TOKENIZERS.value:  # all read before any timing
            if not os.path.isfile(path):
                raise FileNotFoundError(f"--tokenizers: {path!r} is not a file")
            try:
                tokenizers.append((path, Tokenizer.from_file(path)))
            except Exception as e:  # noqa: BLE001 (a bare Exception for a bad file)
                raise ValueError(f"--tokenizers: {path!r} is not a tokenizer.json ({e})") from None
    except Exception as e:  # noqa: BLE001 (tokenizers raises a bare Exception for a bad file)
        sys.exit(f"bench_stop_strings: {e}")
    print(f"| tokenizer | stop strings | us per check | us to decode all {_NUM_TOKENS.value} |")
    print("|---|---|---|---|")
    for name, tok in tokenizers:
        for r in bench(name, tok, _NUM_TOKENS.value, _CHECKS.value, _REPEATS.value):
            stops = ", ".join(repr(s) for s in r["stops"])
            print(f"| {name} | {stops} | {r['check_us']:.1f} | {r['decode_us']:.0f} |")


if __name__ == "__main__":
    app.run(main)
