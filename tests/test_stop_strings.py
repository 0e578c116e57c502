"""Stop strings (SamplingParams.stop): the tail check against a brute-force decode of every
prefix, with real `tokenizers` decoders, and the engine against its own unstopped output."""

import pathlib
import random

import pytest
from tokenizers import Tokenizer, decoders
from tokenizers.models import BPE
from tokenizers.pre_tokenizers import ByteLevel

from engine import LLM, SamplingParams
from engine.stop_strings import stop_string_hit, truncate_at_stop

FIXTURES = pathlib.Path(__file__).parent / "fixtures"

_TEXT = "the cat sat on the mat. naïve café — 東京 🙂 x\n\ny, ünïcödé: 🙂🙂🙂 end"


def _byte_level_tokenizer() -> Tokenizer:
    """GPT-2 style byte-level BPE: every byte is a token, plus some merged pieces."""
    chars = ByteLevel.alphabet()
    vocab = {c: i for i, c in enumerate(sorted(chars))}
    for piece in ("Ġthe", "Ġcat", "Ġca", "Ã©", "ðŁ", "ĠæĿ±", "ĊĊ", "at"):
        vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(BPE(vocab, []))
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece_tokenizer() -> Tokenizer:
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


def _first_hit_brute(decode, ids, stops) -> int | None:
    """Smallest n with a stop string in the text of ids[:n] (decoding every prefix whole)."""
    for n in range(1, len(ids) + 1):
        if any(s in decode(ids[:n]) for s in stops):
            return n
    return None


@pytest.mark.parametrize("make", [_byte_level_tokenizer, _sentencepiece_tokenizer])
def test_tail_check_fires_at_the_same_token_as_decoding_the_whole_output(make):
    tok = make()
    decode = tok.decode
    rng = random.Random(0)
    vocab = tok.get_vocab_size()
    hits = 0
    for trial in range(150):
        # Random ids (half-characters included), or the ids of a stretch of real text.
        if trial % 3 == 0:
            ids = [rng.randrange(vocab) for _ in range(rng.randrange(20, 120))]
        else:
            a = rng.randrange(len(_TEXT))
            ids = tok.encode((_TEXT * 2)[a : a + rng.randrange(10, 60)]).ids
        text = decode(ids)
        # A stop string cut from the output itself (so most trials stop), and one absent.
        a = rng.randrange(len(text))
        stop = text[a : a + rng.randrange(1, 8)]
        if "\ufffd" in stop:
            continue
        stops = [stop, "never in this text \u2603"]
        want = _first_hit_brute(decode, ids, stops)
        got = next(
            (n for n in range(1, len(ids) + 1) if stop_string_hit(decode, ids[:n], stops)), None
        )
        assert got == want, (ids, stops)
        hits += want is not None
    assert hits >= 80  # the stops mostly occur: the check is exercised


@pytest.mark.parametrize("make", [_byte_level_tokenizer, _sentencepiece_tokenizer])
def test_a_stop_string_of_four_byte_characters_is_found_whole(make):
    # Each emoji is four one-byte tokens here: "🙂🙂🙂🙂" spans 16 tokens, the most that four
    # characters can; a shorter tail would see only part of it when it completes.
    tok = make()
    ids = tok.encode("ab 🙂🙂🙂🙂").ids
    assert len(ids) >= 16 + 3
    stops = ["🙂🙂🙂🙂"]
    assert stop_string_hit(tok.decode, ids, stops)
    assert not stop_string_hit(tok.decode, ids[:-1], stops)
    assert not stop_string_hit(tok.decode, ids[:-4], stops)


@pytest.mark.parametrize("make", [_byte_level_tokenizer, _sentencepiece_tokenizer])
def test_special_tokens_inside_a_stop_string_are_looked_across(make):
    # Special tokens decode to nothing; up to 8 of them may sit inside a stop string.
    tok = make()
    tok.add_special_tokens(["<|pad|>"])
    pad = tok.token_to_id("<|pad|>")
    head, emoji = tok.encode("ab ").ids, tok.encode("🙂").ids
    ids = head + emoji[:1] + [pad] * 4 + emoji[1:2] + [pad] * 4 + emoji[2:]
    assert tok.decode(ids) == "ab 🙂"
    assert stop_string_hit(tok.decode, ids, ["🙂"])
    assert not stop_string_hit(tok.decode, ids[:-1], ["🙂"])


def test_truncate_at_the_earliest_stop_string():
    assert truncate_at_stop("abc STOP def END", ("END", "STOP"), include=False) == "abc "
    assert truncate_at_stop("abc STOP def END", ("END", "STOP"), include=True) == "abc STOP"
    # Two starting at the same place: the longer one is the one cut (and kept, if asked).
    assert truncate_at_stop("x ab y", ("a", "ab"), include=True) == "x ab"
    assert truncate_at_stop("x ab y", ("a", "ab"), include=False) == "x "
    assert truncate_at_stop("nothing here", ("zz",), include=False) == "nothing here"


@pytest.fixture(scope="module")
def llama():
    return LLM(model=str(FIXTURES / "llama"), max_num_seqs=8, max_num_batched_tokens=64)


_PROMPTS = ["the cat sat on the", "a dog and the cat", "on the mat the", "w3 w4 w5"]


def test_engine_stops_where_the_text_first_holds_a_stop_string(llama):
    plain = llama.generate(_PROMPTS, SamplingParams(max_tokens=14))
    requests = []
    for i, out in enumerate(plain):
        words = out.text.split()
        # A string spanning two tokens, one inside a word, and one never produced.
        stop = (" ".join(words[3 + i % 3 : 5 + i % 3]), words[8][1:], "no such text")
        requests.append((out, stop, i % 2 == 1))
    params = [
        SamplingParams(max_tokens=14, stop=stop, include_stop_str_in_output=include)
        for _, stop, include in requests
    ]
    stopped = llama.generate(_PROMPTS, params)
    for (out, stop, include), got in zip(requests, stopped, strict=True):
        n = _first_hit_brute(llama.tokenizer.decode, out.token_ids, stop)
        assert n is not None and n < len(out.token_ids)
        assert got.token_ids == out.token_ids[:n] and got.logprobs == out.logprobs[:n]
        assert got.finish_reason == "stop"
        text = llama.tokenizer.decode(out.token_ids[:n])
        cut = min(text.find(s) for s in stop if s in text)
        end = [cut + len(s) for s in stop if text.find(s) == cut]
        assert got.text == (text[: max(end)] if include else text[:cut])
    # The last token max_tokens allows completes the stop string: "stop" wins over "length".
    out, stop, _ = requests[0]
    n = _first_hit_brute(llama.tokenizer.decode, out.token_ids, stop)
    last = llama.generate(_PROMPTS[:1], SamplingParams(max_tokens=n, stop=stop))[0]
    assert last.token_ids == out.token_ids[:n] and last.finish_reason == "stop"
    # A stop string never produced changes nothing; the pool is whole afterwards.
    same = llama.generate(_PROMPTS[:1], SamplingParams(max_tokens=14, stop="no such text"))[0]
    assert same.token_ids == plain[0].token_ids and same.finish_reason == "length"
    stats = llama.stats()
    assert stats["num_pages_free"] == stats["num_pages_total"]


def test_stop_strings_while_streaming_and_with_stop_tokens(llama):
    plain = llama.generate(_PROMPTS[0], SamplingParams(max_tokens=12))[0]
    stop = plain.text.split()[4]
    # A stop token id earlier than the stop string wins; later, the string does.
    early = SamplingParams(max_tokens=12, stop=stop, stop_token_ids=(plain.token_ids[1],))
    late = SamplingParams(max_tokens=12, stop=stop, stop_token_ids=(plain.token_ids[-1],))
    n = _first_hit_brute(llama.tokenizer.decode, plain.token_ids, (stop,))
    got = {}
    for deltas in llama.stream([_PROMPTS[0], _PROMPTS[0]], [early, late]):
        for d in deltas:
            got.setdefault(d.request_id, []).extend(d.token_ids)
            if d.finish_reason:
                assert d.finish_reason == "stop"
    a, b = got.values()
    first_stop_token = plain.token_ids.index(plain.token_ids[1]) + 1
    assert a == plain.token_ids[: min(first_stop_token, n)]
    assert b == plain.token_ids[:n]


def test_stop_strings_are_checked_before_anything_is_queued(llama):
    bad = [
        (dict(stop=""), "stop='': each stop string must be a non-empty str"),
        (dict(stop=["ok", 3]), "each stop string must be a non-empty str"),
        (dict(stop=b"x"), "must be a string or a sequence of strings"),
        (dict(stop="x" * 1025), "at most 1024 characters"),
        (dict(stop="x", include_stop_str_in_output=1), "include_stop_str_in_output=1"),
    ]
    for kwargs, match in bad:
        with pytest.raises(ValueError, match=match):
            SamplingParams(**kwargs)
    assert SamplingParams(stop="ab").stop == ("ab",)
    assert SamplingParams(stop=["ab", "c"]).stop == ("ab", "c")


def test_stop_strings_need_a_tokenizer():
    llm = LLM(model="tiny-qwen3", max_num_seqs=2, max_num_batched_tokens=32)
    with pytest.raises(ValueError, match=r"stop=\('x',\): stop strings need the model's tok"):
        llm.generate([[5, 6, 7], [8, 9]], [SamplingParams(), SamplingParams(stop="x")])
    # Nothing was queued: the engine runs the next request and holds no pages.
    assert len(llm.generate([[5, 6, 7]], SamplingParams(max_tokens=2))[0].token_ids) == 2
    stats = llm.stats()
    assert stats["num_pages_free"] == stats["num_pages_total"]
