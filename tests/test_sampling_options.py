"""Request options beyond the sampler's: stop strings (SamplingParams.stop), checked against
a brute-force decode of every prefix with real `tokenizers` decoders and against the engine's
unstopped output; and top logprobs (SamplingParams.logprobs), against Hugging Face's logits
and the reference forward."""

import json
import pathlib
import random

import jax.numpy as jnp
import numpy as np
import pytest
from tokenizers import Tokenizer, decoders
from tokenizers.models import WordPiece

from engine import LLM, SamplingParams
from engine.sampling_params import MAX_LOGPROBS, RequestOutput, StreamDelta
from engine.stop_strings import stop_string_hit, truncate_at_stop
from models.reference import init_cache, prefill_bucket, reference_forward
from scripts.bench_stop_strings import byte_fallback_tokenizer, byte_level_tokenizer
from tests.sampler_cases import POOL

FIXTURES = pathlib.Path(__file__).parent / "fixtures"

_TEXT = "the cat sat on the mat. naïve café — 東京 🙂 x\n\ny, ünïcödé: 🙂🙂🙂 end"


def _first_hit_brute(decode, ids, stops) -> int | None:
    """Smallest n with a stop string in the text of ids[:n] (decoding every prefix whole)."""
    for n in range(1, len(ids) + 1):
        if any(s in decode(ids[:n]) for s in stops):
            return n
    return None


@pytest.mark.parametrize("make", [byte_level_tokenizer, byte_fallback_tokenizer])
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


@pytest.mark.parametrize("make", [byte_level_tokenizer, byte_fallback_tokenizer])
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
    # The tail is sized by the longest stop string, whatever the others are.
    assert stop_string_hit(tok.decode, ids, ["z", *stops]) == stops[0]


@pytest.mark.parametrize("make", [byte_level_tokenizer, byte_fallback_tokenizer])
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


def _wordpiece_tokenizer() -> Tokenizer:
    """BERT style: "##" marks a word's continuation; a decode keeps the "##" of the token it
    starts with (no word before it to join)."""
    words = ["[UNK]", "x", "walk", "##ing", "do", "."]
    tok = Tokenizer(WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return tok


def test_a_tail_that_reads_as_a_stop_string_the_output_lacks_does_not_stop():
    # "walking" in the output: once the tail starts at "##ing" it decodes to "##ing ...",
    # but the whole output never holds "##" (a markdown heading's stop string).
    tok = _wordpiece_tokenizer()
    x, walk, ing = (tok.token_to_id(t) for t in ("x", "walk", "##ing"))
    ids = [x] * 20 + [walk, ing] + [x] * 40
    assert "##" not in tok.decode(ids) and tok.decode(ids[21:]).startswith("##ing")
    assert [n for n in range(1, len(ids) + 1) if stop_string_hit(tok.decode, ids[:n], ["##"])] == []
    # The tail leaves out only the output's first token ("walk"): still confirmed whole.
    ids = [walk, ing] + [x] * 15  # 17 tokens, one more than the tail of "##" (4 * 2 + 8)
    assert tok.decode(ids[1:]).startswith("##ing") and "##" not in tok.decode(ids)
    assert stop_string_hit(tok.decode, ids, ["##"]) is None


def test_no_stop_strings_or_no_output_is_no_hit():
    def decode(ids):
        return " ".join(f"w{t}" for t in ids)

    assert stop_string_hit(decode, [5, 397], ()) is None
    assert stop_string_hit(decode, [], ("w",)) is None


def test_the_stop_reason_is_the_stop_string_the_text_is_cut_at():
    # One token completes both: "w3" starts first, so the text is cut there and it is the
    # stop string named, whatever the order they were listed in.
    def decode(ids):
        return " ".join(f"w{t}" for t in ids)

    assert stop_string_hit(decode, [5, 397], ("97", "w3")) == "w3"
    assert stop_string_hit(decode, [5, 397], ("w39", "w3")) == "w39"  # longest at one start
    assert stop_string_hit(decode, [5, 397], ("97",)) == "97"


def test_truncate_at_the_earliest_stop_string():
    assert truncate_at_stop("abc STOP def END", ("END", "STOP"), include=False) == "abc "
    assert truncate_at_stop("abc STOP def END", ("END", "STOP"), include=True) == "abc STOP"
    # Two starting at the same place: the longer one is the one cut (and kept, if asked).
    assert truncate_at_stop("x ab y", ("a", "ab"), include=True) == "x ab"
    assert truncate_at_stop("x ab y", ("a", "ab"), include=False) == "x "
    assert truncate_at_stop("nothing here", ("zz",), include=False) == "nothing here"
    # Where a stop string first occurs counts, not where it last does.
    assert truncate_at_stop("a STOP b END c STOP", ("END", "STOP"), include=True) == "a STOP"
    assert truncate_at_stop("x END y END", ("END",), include=False) == "x "
    assert truncate_at_stop("x END y END", ("END",), include=True) == "x END"


@pytest.fixture(scope="module")
def llama():
    # tests/test_engine.py's pool (sampler_cases.POOL): the same step shapes, so the runs
    # share compiled programs through the suite's compilation cache.
    return LLM(model=str(FIXTURES / "llama"), max_num_seqs=8, max_num_batched_tokens=64, **POOL)


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
        # The stop string the text is cut at (the longest of those starting there).
        assert got.stop_reason == text[cut : max(end)]
    # The last token max_tokens allows completes the stop string: "stop" wins over "length".
    out, stop, _ = requests[0]
    n = _first_hit_brute(llama.tokenizer.decode, out.token_ids, stop)
    last = llama.generate(_PROMPTS[:1], SamplingParams(max_tokens=n, stop=stop))[0]
    assert last.token_ids == out.token_ids[:n] and last.finish_reason == "stop"
    # A stop string never produced changes nothing; the pool is whole afterwards.
    same = llama.generate(_PROMPTS[:1], SamplingParams(max_tokens=14, stop="no such text"))[0]
    assert same.token_ids == plain[0].token_ids and same.finish_reason == "length"
    assert same.stop_reason is None
    stats = llama.stats()
    assert stats["num_pages_free"] == stats["num_pages_total"]


def test_stop_reason_and_text_agree_when_one_token_completes_two_stop_strings(llama):
    # Greedy, this fixture writes "well well well w397 ..." after the prompt: the token
    # "w397" completes "97" and "w3"; the text is cut at "w3", so that is the stop_reason.
    for include, text in ((False, "well well well "), (True, "well well well w3")):
        params = SamplingParams(
            max_tokens=12, stop=("97", "w3"), include_stop_str_in_output=include
        )
        out = llama.generate([_PROMPTS[0]], params)[0]
        assert (out.text, out.finish_reason, out.stop_reason) == (text, "stop", "w3")


def test_request_output_keeps_its_positional_fields():
    # Fields added later go last: a RequestOutput built positionally as before keeps its
    # prompt_logprobs where they were given.
    out = RequestOutput("r", [1, 2], [3], [-0.5], "stop", "w3", [-1.25])
    assert out.prompt_logprobs == [-1.25] and out.stop_reason is None
    assert out.top_logprobs is None
    delta = StreamDelta("r", (1,), (-0.5,), None)
    assert delta.top_logprobs is None


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
    assert type(SamplingParams(stop=[np.str_("ab")]).stop[0]) is str
    assert SamplingParams(stop="x" * 1024).stop == ("x" * 1024,)  # the longest allowed


def test_new_options_are_off_by_default():
    p = SamplingParams()
    assert (p.stop, p.include_stop_str_in_output, p.logprobs, p.min_p) == ((), False, None, 0.0)


def test_stop_strings_need_a_tokenizer():
    llm = LLM(model="tiny-qwen3", max_num_seqs=2, max_num_batched_tokens=32, max_model_len=128)
    with pytest.raises(ValueError, match=r"stop=\('x',\): stop strings need the model's tok"):
        llm.generate([[5, 6, 7], [8, 9]], [SamplingParams(), SamplingParams(stop="x")])
    # Nothing was queued: the engine runs the next request and holds no pages.
    assert len(llm.generate([[5, 6, 7]], SamplingParams(max_tokens=2))[0].token_ids) == 2
    stats = llm.stats()
    assert stats["num_pages_free"] == stats["num_pages_total"]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def _assert_top_matches(top, want_row: np.ndarray, atol: float) -> None:
    """`top` [(id, logprob)] against a full log-softmax row: the values of the row's
    largest len(top) entries, and the ids wherever the row has no near-tie."""
    order = np.argsort(-want_row, kind="stable")[: len(top)]
    ids, values = [t for t, _ in top], np.array([v for _, v in top])
    np.testing.assert_allclose(values, want_row[order], atol=atol)
    np.testing.assert_allclose(values, want_row[ids], atol=atol)  # each id's own logprob
    gaps = -np.diff(np.sort(want_row)[::-1][: len(top) + 1])
    for i in range(len(top)):
        if gaps[i] > 2 * atol and (i == 0 or gaps[i - 1] > 2 * atol):
            assert ids[i] == order[i], (i, ids, order)
    assert np.all(np.diff(values) <= 0)


def test_top_logprobs_match_hugging_face_and_the_reference_forward(llama):
    ref = json.loads((FIXTURES / "llama" / "reference.json").read_text())
    prompt = ref["prompts"][0]
    n = 5
    out = llama.generate([prompt], SamplingParams(max_tokens=6, logprobs=n))[0]
    assert len(out.top_logprobs) == len(out.token_ids) == 6
    # The first token's: HF's logits at the prompt's last position (transformers 5.24).
    hf = _log_softmax(np.array(ref["last_prefill_logits_prompt0"], np.float64))
    _assert_top_matches(out.top_logprobs[0], hf, atol=2e-3)
    # Every token's: the reference forward (checked against HF in test_hf_parity.py) over
    # the prompt and the generated tokens.
    seq = prompt + out.token_ids
    ids = np.zeros(prefill_bucket(len(seq)), np.int32)
    ids[: len(seq)] = seq
    cfg = llama.config
    logits, _ = reference_forward(
        llama.params, cfg, jnp.asarray(ids), jnp.int32(0), init_cache(cfg, len(ids))
    )
    logits = np.asarray(logits)
    for i, top in enumerate(out.top_logprobs):
        assert len(top) == n
        _assert_top_matches(top, _log_softmax(logits[len(prompt) - 1 + i]), atol=2e-3)
        # Greedy: the most likely entry is the token and its logprob, bitwise.
        assert top[0] == (out.token_ids[i], out.logprobs[i])


def test_top_logprobs_of_sampled_tokens_in_a_mixed_batch(llama):
    params = [
        SamplingParams(max_tokens=8, temperature=1.5, seed=7, logprobs=MAX_LOGPROBS),
        SamplingParams(max_tokens=8),  # asks for none
        SamplingParams(max_tokens=8, temperature=0.8, seed=3, top_k=4, logprobs=1),
    ]
    outs = llama.generate(_PROMPTS[:3], params)
    assert outs[1].top_logprobs is None
    for out, p in zip(outs[::2], params[::2], strict=True):
        assert len(out.top_logprobs) == len(out.token_ids) == 8
        for token, logprob, top in zip(out.token_ids, out.logprobs, out.top_logprobs, strict=True):
            assert len(top) == p.logprobs and len({t for t, _ in top}) == p.logprobs
            values = [v for _, v in top]
            assert values == sorted(values, reverse=True) and values[0] <= 0.0
            # The unscaled distribution: the sampled token is listed with its own logprob,
            # bitwise, or is less likely than every listed one.
            listed = dict(top)
            if token in listed:
                assert listed[token] == logprob
            else:
                assert logprob <= values[-1]
    # Asking for top logprobs changes no token: the same seeds without them.
    plain = llama.generate(
        _PROMPTS[:3], [SamplingParams(**{**vars(p), "logprobs": None}) for p in params]
    )
    assert [o.token_ids for o in plain] == [o.token_ids for o in outs]
    assert [o.logprobs for o in plain] == [o.logprobs for o in outs]


def test_top_logprobs_stream_with_their_tokens(llama):
    got = []
    for deltas in llama.stream([_PROMPTS[0]], SamplingParams(max_tokens=4, logprobs=2)):
        for d in deltas:
            assert d.top_logprobs is not None and len(d.top_logprobs) == len(d.token_ids)
            got.extend(d.top_logprobs)
    whole = llama.generate([_PROMPTS[0]], SamplingParams(max_tokens=4, logprobs=2))[0]
    assert [list(t) for t in got] == whole.top_logprobs


def test_top_logprobs_are_batch_invariant():
    llm = LLM(
        model=str(FIXTURES / "llama"),
        max_num_seqs=4,
        max_num_batched_tokens=64,
        max_model_len=128,
        batch_invariant=True,
    )
    p = SamplingParams(max_tokens=5, logprobs=4)
    alone = llm.generate([_PROMPTS[1]], p)[0]
    crowd = llm.generate(_PROMPTS, [SamplingParams(max_tokens=9, logprobs=3)] * 4)
    mixed = llm.generate(
        [_PROMPTS[3], _PROMPTS[1], _PROMPTS[0]], [SamplingParams(max_tokens=7), p, p]
    )
    assert mixed[1].top_logprobs == alone.top_logprobs
    assert [t[:3] for t in alone.top_logprobs] == crowd[1].top_logprobs[:5]


@pytest.mark.parametrize("bad", [-1, MAX_LOGPROBS + 1, 2.0, True, "3"])
def test_logprobs_outside_its_range_is_refused(bad):
    with pytest.raises(ValueError, match=rf"logprobs={bad!r}: must be an integer in \[0, 20\]"):
        SamplingParams(logprobs=bad)
    assert SamplingParams(logprobs=np.int64(3)).logprobs == 3
    assert type(SamplingParams(logprobs=np.int64(3)).logprobs) is int
    # Both ends are allowed: 0 (off, as None) and MAX_LOGPROBS.
    assert [SamplingParams(logprobs=n).logprobs for n in (0, MAX_LOGPROBS)] == [0, 20]


def test_min_p_in_the_engine_keeps_only_tokens_near_the_top(llama):
    # min_p = 0.5 at temperature 1: a drawn token's logprob is within ln(0.5) of the top one
    # (read from the top logprobs of the same step). Without min_p the same seeds draw
    # tokens outside that band, so the bound is not met by chance.
    def draws(min_p):
        params = [
            SamplingParams(max_tokens=12, temperature=1.0, seed=s, min_p=min_p, logprobs=1)
            for s in range(4)
        ]
        outs = llama.generate(_PROMPTS, params)
        return [
            lp - top[0][1] for o in outs for lp, top in zip(o.logprobs, o.top_logprobs, strict=True)
        ]

    assert min(draws(0.5)) >= np.log(0.5) - 1e-6
    assert min(draws(0.0)) < np.log(0.5)


def test_every_option_at_once_under_preemption_equals_each_request_alone():
    """Batch-invariant engine, a pool too small for the load (preemption and recompute), and
    requests mixing stop strings, stop ids, top logprobs, min-p, top-k, seeded sampling,
    prompt logprobs, penalties (device-side counts rebuilt by recompute), logit bias,
    allowed tokens and min_tokens: every field of every output is bitwise that of the
    request alone."""
    rng = np.random.default_rng(11)
    llm = LLM(
        model=str(FIXTURES / "llama"),
        num_pages=8,
        page_size=8,
        max_num_batched_tokens=32,
        max_num_seqs=8,
        max_model_len=64,
        batch_invariant=True,
    )
    words = ["w3", "ee", "ow", "w41"]  # inside words, as this model writes them
    prompts, params = [], []
    for i in range(12):
        prompts.append(rng.integers(3, 512, int(rng.integers(2, 30))).tolist())
        params.append(
            SamplingParams(
                max_tokens=int(rng.integers(4, 20)),
                temperature=float(rng.choice([0.0, 0.9])),
                seed=i,
                top_k=int(rng.choice([0, 20])),
                min_p=float(rng.choice([0.0, 0.05])),
                stop=tuple(rng.choice(words, int(rng.integers(0, 3)), replace=False)),
                include_stop_str_in_output=bool(i % 2),
                stop_token_ids=(int(rng.integers(3, 512)),) if i % 3 == 0 else (),
                logprobs=int(rng.choice([0, 3])) or None,
                prompt_logprobs=bool(i % 4 == 1),
                presence_penalty=0.5 if i % 4 == 2 else 0.0,
                repetition_penalty=1.2 if i % 5 == 3 else 1.0,
                logit_bias={prompts[-1][0]: 2.0} if i % 3 == 1 else None,
                allowed_token_ids=range(3, 300) if i == 7 else None,
                min_tokens=3 if i % 4 == 0 else 0,
            )
        )
    # Before any option: a plain greedy and a plain sampled request, in the programs without
    # the features (and, the first, without the sampler).
    plain = [
        SamplingParams(max_tokens=6, temperature=0.0),
        SamplingParams(max_tokens=6, temperature=0.9, seed=5),
    ]
    before = [llm.generate([prompts[0]], p)[0] for p in plain]
    outs = llm.generate(prompts, params)
    stats = llm.stats()
    # The engine's steps now keep every option on (runner.StickyFeatures); the plain requests
    # get the same bits in those programs.
    sticky = llm._sticky
    assert sticky.sampling and sticky.with_top and sticky.penalized and sticky.list_width
    for p, first in zip(plain, before, strict=True):
        again = llm.generate([prompts[0]], p)[0]
        assert again.token_ids == first.token_ids
        bits = [np.asarray(o.logprobs, np.float32).view(np.uint32) for o in (again, first)]
        np.testing.assert_array_equal(*bits)
    assert stats["num_preemptions"] > 0
    assert stats["num_pages_free"] == stats["num_pages_total"]
    fields = ("token_ids", "logprobs", "top_logprobs", "prompt_logprobs", "text")
    for prompt, p, out in zip(prompts, params, outs, strict=True):
        alone = llm.generate([prompt], p)[0]
        for f in (*fields, "finish_reason", "stop_reason"):
            assert getattr(out, f) == getattr(alone, f), (f, p)
    reasons = {type(o.stop_reason).__name__ for o in outs if o.finish_reason == "stop"}
    assert "str" in reasons  # some request did stop on a stop string
