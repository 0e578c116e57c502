"""logit_bias, allowed_token_ids and min_tokens (engine/logit_bias.py): the engine's greedy
decodes against Hugging Face models decoding under transformers' SequenceBias,
PrefixConstrained, MinNewTokensLength and RepetitionPenalty processors
(tests/fixtures/make_hf_token_lists_fixture.py); the in-step lists against a numpy
transcription; min_tokens with stop strings against a brute-force decode of every prefix."""

import math
import pathlib
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest
from tokenizers import decoders

from engine import LLM, SamplingParams
from engine.logit_bias import MIN_WIDTH, apply_token_lists, held_back, lists_for
from engine.sampling_params import MAX_LISTED_TOKENS
from engine.stop_strings import first_stop, protected_chars, stop_string_hit, truncate_at_stop
from tests.sampler_cases import POOL, cases, token_list_params

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
CASES = cases("hf_token_lists")
_params = token_list_params  # (case): its lists, stops and penalty, greedy, 20 tokens at most


# ---- the lists ---------------------------------------------------------------------------------


def test_apply_token_lists_matches_a_numpy_transcription():
    rng = np.random.default_rng(0)
    s, v, b = 4, 30, 8
    logits = rng.standard_normal((s, v)).astype(np.float32)
    ids = np.full((s, b), -1, np.int32)
    values = np.zeros((s, b), np.float32)
    ids[0, :3], values[0, :3] = [4, 9, 29], [1.5, -100.0, -math.inf]
    ids[1, :2], values[1, :2] = [0, 7], [0.0, 2.0]  # restricted to tokens 0 and 7
    ids[2, :1], values[2, :1] = [3], [-math.inf]  # restricted to nothing but a ban: all -inf
    restrict = np.array([False, True, True, False])
    got = np.asarray(
        apply_token_lists(
            jnp.asarray(logits), jnp.asarray(ids), jnp.asarray(values), jnp.asarray(restrict)
        )
    )
    want = logits.copy()
    for i in range(s):
        listed = {int(t): float(x) for t, x in zip(ids[i], values[i], strict=True) if t >= 0}
        for j in range(v):
            if j in listed:
                want[i, j] = want[i, j] + np.float32(listed[j])
            elif restrict[i]:
                want[i, j] = -np.inf
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[3].view(np.uint32), logits[3].view(np.uint32))


def _no_output(item):
    raise AssertionError("no item here has bad words: its output is not read")


def _item(num_generated=0, **kw):
    return SimpleNamespace(sampling_params=SamplingParams(**kw), num_generated=num_generated)


def test_lists_for_a_step():
    eos = (2, 5)
    items = [
        _item(),  # nothing listed
        _item(logit_bias={7: 1.0, 3: -2.0}),
        _item(num_generated=3, min_tokens=4, stop_token_ids=(9,), max_tokens=8),
        _item(num_generated=4, min_tokens=4, stop_token_ids=(9,), max_tokens=8),  # past it
        _item(allowed_token_ids=[2, 4, 6], logit_bias={6: 0.5, 8: 3.0}, min_tokens=1),
        _item(min_tokens=2, ignore_eos=True, stop_token_ids=(11,)),
    ]
    lists = lists_for(items, 8, eos, _no_output)
    assert lists.ids.shape == (8, MIN_WIDTH) and lists.ids.dtype == np.int32
    rows = [{} for _ in range(8)]  # what the step's scatter-add makes of each row
    for i, row in enumerate(rows):
        for t, x in zip(lists.ids[i].tolist(), lists.values[i].tolist(), strict=True):
            if t >= 0:
                row[t] = row.get(t, 0.0) + x
    inf = math.inf
    assert rows == [
        {},
        {3: -2.0, 7: 1.0},
        {2: -inf, 5: -inf, 9: -inf},
        {},
        # 8 is outside the allowed set: dropped; EOS 5 too (restricted away anyway).
        {2: -inf, 4: 0.0, 6: 0.5},
        {11: -inf},
        {},
        {},
    ]
    assert lists.restrict.tolist() == [False, False, False, False, True, False, False, False]
    assert lists_for(items[:1] + items[3:4], 8, eos, _no_output) is None
    many = [_item(allowed_token_ids=range(9))]
    assert lists_for(many, 1, eos, _no_output).ids.shape == (1, 16)
    # An engine that keeps the feature on (runner.StickyFeatures): at least min_width wide,
    # and lists of no token where no row lists one.
    wide = lists_for(many, 1, eos, _no_output, min_width=32)
    assert wide.ids.shape == (1, 32) and wide.ids[0, :9].tolist() == list(range(9))
    assert (wide.ids[0, 9:] == -1).all() and not wide.values[0, 9:].any()
    empty = lists_for(items[:1], 8, eos, _no_output, min_width=16)
    assert empty.ids.shape == (8, 16) and (empty.ids == -1).all() and not empty.restrict.any()
    assert held_back(SamplingParams(stop_token_ids=(3, 2)), (2,)) == (2, 3)


def test_lists_for_then_the_step_match_the_params_transcribed():
    """lists_for's rows through apply_token_lists against each request's lists applied
    straight from its SamplingParams: rows of different lengths (one past MIN_WIDTH), an id
    both biased and held back by min_tokens (bias + -inf = -inf), a biased unrestricted
    row whose min_tokens bans every stop id."""
    eos, vocab = (2, 5), 20
    items = [
        _item(),
        _item(num_generated=1, min_tokens=2, logit_bias={9: 5.0, 3: 1.0}, stop_token_ids=(9,)),
        _item(allowed_token_ids=range(12), logit_bias={4: 2.0, 15: 1.0}, min_tokens=1),
        _item(num_generated=2, min_tokens=3, ignore_eos=True, logit_bias={5: -1.5}),
    ]
    lists = lists_for(items, 5, eos, _no_output)
    assert lists.ids.shape == (5, 16)
    logits = np.random.default_rng(1).standard_normal((5, vocab)).astype(np.float32)
    logits[0, 7] = logits[1, 0] = -0.0  # an unlisted logit keeps its sign bit too
    got = np.asarray(
        apply_token_lists(
            jnp.asarray(logits),
            jnp.asarray(lists.ids),
            jnp.asarray(lists.values),
            jnp.asarray(lists.restrict),
        )
    )
    want = logits.copy()
    for i, it in enumerate(items):
        sp = it.sampling_params
        for t, b in sp.logit_bias or ():
            want[i, t] += np.float32(b)
        if sp.allowed_token_ids is not None:
            want[i, [t for t in range(vocab) if t not in sp.allowed_token_ids]] = -np.inf
        if it.num_generated < sp.min_tokens:
            banned = set(sp.stop_token_ids) | (set() if sp.ignore_eos else set(eos))
            want[i, sorted(banned)] = -np.inf
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    # The step adds up an id listed twice, whichever value comes first.
    twice = apply_token_lists(
        jnp.zeros((2, 4)),
        jnp.asarray([[1, 1], [1, 1]], jnp.int32),
        jnp.asarray([[-math.inf, 2.0], [2.0, 0.5]], jnp.float32),
        jnp.zeros(2, bool),
    )
    assert np.asarray(twice).tolist() == [[0.0, -math.inf, 0.0, 0.0], [0.0, 2.5, 0.0, 0.0]]


def test_bounds_are_inclusive():
    most = MAX_LISTED_TOKENS
    sp = SamplingParams(logit_bias={0: 100, 1: -100.0}, allowed_token_ids=[0])
    assert sp.logit_bias == ((0, 100.0), (1, -100.0)) and sp.allowed_token_ids == (0,)
    assert len(SamplingParams(logit_bias=dict.fromkeys(range(most), 1.0)).logit_bias) == most
    assert len(SamplingParams(allowed_token_ids=[*range(most)] * 2).allowed_token_ids) == most
    assert len(SamplingParams(stop_token_ids=range(most)).stop_token_ids) == most


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(min_tokens=5, max_tokens=4), r"min_tokens=5: must be an integer in \[0, max_tok"),
        (dict(min_tokens=-1), r"min_tokens=-1"),
        (dict(logit_bias={1: 100.5}), r"logit_bias\[1\]=100.5: must be in \[-100.0, 100.0\]"),
        (dict(logit_bias={1: float("nan")}), r"logit_bias\[1\]=nan"),
        (dict(logit_bias={-3: 1.0}), r"logit_bias: token id -3 must be an integer >= 0"),
        (dict(logit_bias={"5": 1.0}), r"logit_bias: token id '5'"),
        (dict(logit_bias=[(1, 1.0), (1, 2.0)]), r"logit_bias: token id 1 given twice"),
        (dict(logit_bias=5), r"logit_bias=5: must map token ids to biases"),
        (dict(logit_bias=dict.fromkeys(range(2049), 1.0)), r"logit_bias: 2049 token ids, at m"),
        (dict(allowed_token_ids=[]), r"allowed_token_ids=\(\): must be one or more"),
        (dict(allowed_token_ids="ab"), r"allowed_token_ids='ab': must be a sequence"),
        (dict(allowed_token_ids=[1, True]), r"allowed_token_ids=\(1, True\)"),
        (dict(allowed_token_ids={1: 2.0}), r"allowed_token_ids=\{1: 2.0\}: must be a sequ"),
        (dict(allowed_token_ids=range(2049)), r"allowed_token_ids: 2049 token ids, at most"),
        (dict(stop_token_ids=range(2049)), r"stop_token_ids: 2049 token ids, at most 2048"),
        (dict(logit_bias={1: -100.5}), r"logit_bias\[1\]=-100.5: must be in"),
        (dict(logit_bias={True: 1.0}), r"logit_bias: token id True must be an integer"),
    ],
)
def test_bad_lists_are_refused_naming_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kw)


def test_lists_are_normalized():
    sp = SamplingParams(logit_bias={np.int64(9): np.float32(-1), 2: 3}, allowed_token_ids=(5, 1, 5))
    assert sp.logit_bias == ((2, 3.0), (9, -1.0)) and sp.allowed_token_ids == (1, 5)
    assert SamplingParams(logit_bias=[(4, 1)]).logit_bias == ((4, 1.0),)
    assert hash(sp) == hash(SamplingParams(logit_bias={2: 3, 9: -1}, allowed_token_ids=[1, 5]))


def test_generate_parses_the_list_flags():
    from scripts import generate

    assert generate._parse_logit_bias(["42:-100", "7:2.5"]) == [(42, -100.0), (7, 2.5)]
    assert generate._parse_logit_bias([]) is None
    for bad in ("3", "x:1", "3:y", "3:"):
        with pytest.raises(ValueError, match=rf"^--logit_bias: '{bad}' is not id:bias$"):
            generate._parse_logit_bias(["1:1", bad])


# ---- the engine against Hugging Face -------------------------------------------------------------


@pytest.fixture(scope="module")
def llama():
    return LLM(
        str(FIXTURES / "llama"), dtype="float32", max_num_batched_tokens=16, max_num_seqs=8, **POOL
    )


def _check_against_hf(llm, arch):
    cases = [c for c in CASES if c["arch"] == arch]
    assert cases
    assert all(tuple(c["eos_token_ids"]) == llm.config.eos_token_ids for c in cases)
    plain = SamplingParams(max_tokens=20, ignore_eos=True)
    prompts = [c["prompt"] for c in cases]
    outs = llm.generate(prompts * 2, [_params(c) for c in cases] + [plain] * len(cases))
    for c, got, unlisted in zip(cases, outs, outs[len(cases) :], strict=False):
        assert got.token_ids == c["tokens"], c
        assert unlisted.token_ids == c["plain_tokens"] != c["tokens"]
        stopped = len(c["tokens"]) < 20
        assert got.finish_reason == ("stop" if stopped else "length")
    return cases, outs


def test_llama_decodes_as_hf_with_token_lists(llama):
    cases, outs = _check_against_hf(llama, "llama")
    # min_tokens held a stop id back: it was the plain decode's second token.
    (c, out) = next((c, o) for c, o in zip(cases, outs, strict=False) if c.get("min_tokens"))
    assert c["plain_tokens"][1] in c["stop_token_ids"] and len(out.token_ids) > c["min_tokens"]
    assert out.stop_reason == out.token_ids[-1]
    # Logprobs stay those of the raw distribution (the prompt scores of a different step).
    scored = llama.score([c["prompt"] + out.token_ids])[0][len(c["prompt"]) - 1 :]
    np.testing.assert_allclose(out.logprobs, scored, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v2"])
def test_moe_and_mla_models_decode_as_hf_with_token_lists(arch):
    llm = LLM(
        str(FIXTURES / arch), dtype="float32", max_num_batched_tokens=32, max_num_seqs=4, **POOL
    )
    _check_against_hf(llm, arch)


def test_sampled_tokens_stay_in_the_allowed_set_and_off_banned_ones(llama):
    allowed = [3, 17, 40, 41, 300]
    params = [
        SamplingParams(temperature=1.5, seed=i, max_tokens=12, allowed_token_ids=allowed)
        for i in range(4)
    ] + [SamplingParams(temperature=1.5, seed=9, max_tokens=12, logit_bias={264: -100})]
    outs = llama.generate([[1, 5, 9, 13]] * 5, params)
    assert all(set(o.token_ids) <= set(allowed) for o in outs[:4])
    assert len({t for o in outs[:4] for t in o.token_ids}) >= 3  # it samples among them
    assert 264 not in outs[4].token_ids


def test_token_lists_are_checked_against_the_vocabulary(llama):
    for kw, match in [
        (dict(logit_bias={512: 1.0}), r"logit_bias: token id 512 is outside the vocabulary"),
        (dict(allowed_token_ids=[3, 600]), r"allowed_token_ids: token id 600 is outside"),
        (dict(stop_token_ids=(3, 2**31)), r"stop_token_ids: token id 2147483648 is outside"),
        (
            dict(allowed_token_ids=[2, 7], stop_token_ids=(7,), min_tokens=1),
            r"allowed_token_ids=\(2, 7\): min_tokens=1 bans every one of them",
        ),
    ]:
        with pytest.raises(ValueError, match=match):
            llama.generate([[1, 2, 3]], SamplingParams(**kw))
    # Allowed ids min_tokens leaves one of, or no min_tokens at all: fine; the first token is
    # the one not held back.
    outs = llama.generate(
        [[1, 2, 3]] * 2,
        [
            SamplingParams(allowed_token_ids=[2, 7, 9], stop_token_ids=(7,), min_tokens=1),
            SamplingParams(allowed_token_ids=[2, 7], stop_token_ids=(7,), max_tokens=3),
        ],
    )
    assert outs[0].token_ids[0] == 9 and set(outs[0].token_ids) <= {2, 7, 9}
    assert set(outs[1].token_ids) <= {2, 7}
    # With ignore_eos the EOS is not banned, so the same set is fine.
    out = llama.generate(
        [[1, 2, 3]],
        SamplingParams(allowed_token_ids=[2, 7], min_tokens=1, ignore_eos=True, max_tokens=3),
    )[0]
    assert set(out.token_ids) <= {2, 7} and len(out.token_ids) == 3


def _brute_stop(decode, ids, stop, min_tokens):
    """The first n > min_tokens whose text holds `stop` ending past the first min_tokens
    tokens' text, found by decoding every prefix whole."""
    protected = len(decode(ids[:min_tokens]))
    for n in range(min_tokens + 1, len(ids) + 1):
        text = decode(ids[:n])
        ends = [i + len(stop) for i in range(len(text)) if text.startswith(stop, i)]
        if any(e > protected for e in ends):
            return n
    return None


def test_min_tokens_ignores_stop_strings_in_the_first_tokens(llama):
    decode = llama.tokenizer.decode
    prompt = [1, 5, 9, 13, 5, 9, 7]
    free = llama.generate([prompt], SamplingParams(max_tokens=16, ignore_eos=True))[0]
    # A stop string the unstopped output holds early and again later.
    word = decode([free.token_ids[0]])
    assert free.token_ids.count(free.token_ids[0]) >= 2 and word
    for min_tokens in (0, 1, 3):
        n = _brute_stop(decode, free.token_ids, word, min_tokens)
        params = SamplingParams(max_tokens=16, ignore_eos=True, stop=word, min_tokens=min_tokens)
        out = llama.generate([prompt], params)[0]
        assert out.token_ids == free.token_ids[:n]
        assert out.stop_reason == word
        text = decode(out.token_ids)
        after = len(decode(out.token_ids[:min_tokens]))
        cut = text.find(word, max(0, after - len(word) + 1))
        assert out.text == text[:cut]
    assert _brute_stop(decode, free.token_ids, word, 1) > _brute_stop(
        decode, free.token_ids, word, 0
    )


def test_a_stop_string_made_after_min_tokens_counts_when_a_character_straddles_them():
    """Byte fallback (Llama-2 / Mistral style): "a€b" as a, the three bytes of €, b. With
    min_tokens=3 the third token ends inside "€": alone the first three decode to "a" and
    two U+FFFD, yet the whole text's first min_tokens-made characters are only "a", so a
    stop "€" (completed by token 4) or "b" (token 5) ends the request, as vLLM's
    incremental detokenizer (which holds an unfinished character back) finds them."""
    dec = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    vocab = ["a", "b", "<0xE2>", "<0x82>", "<0xAC>"]

    def detok(ids):
        return dec.decode([vocab[i] for i in ids])

    ids = [0, 2, 3, 4, 1]
    assert detok(ids) == "a\u20acb" and detok(ids[:3]) == "a\ufffd\ufffd"
    assert protected_chars(detok, ids, 3, detok(ids)) == 1
    assert stop_string_hit(detok, ids[:4], ["\u20ac"], 3) == "\u20ac"
    assert stop_string_hit(detok, ids, ["b"], 3) == "b"
    assert stop_string_hit(detok, ids, ["a"], 3) is None  # made by the first three
    assert truncate_at_stop(detok(ids), ["b"], False, after=1) == "a\u20ac"


def test_each_list_width_compiles_once_per_step_shape(llama):
    prompt = [1, 5, 9, 13, 5, 9, 7]

    def compiles(**kw):
        before = llama.stats()["num_compiles"]
        llama.generate([prompt], SamplingParams(max_tokens=4, ignore_eos=True, **kw))
        return llama.stats()["num_compiles"] - before

    compiles()  # the plain step's one bucket (the prefill's 7 tokens and decodes: T = 8)
    # Widths 32 and 64, which no other test here uses (this engine is shared).
    assert compiles(allowed_token_ids=range(20)) == 1  # one variant per bucket
    assert compiles(allowed_token_ids=range(32), logit_bias={3: 1.0}) == 0  # still 32
    assert compiles(allowed_token_ids=range(33)) == 1  # width 64
    assert compiles(logit_bias=dict.fromkeys(range(40), -1.0)) == 0


def test_unlisted_rows_are_bitwise_the_same_beside_listed_ones(llama):
    """The same two-request steps with and without a neighbour's lists (a variant of the
    step): the unlisted request's sampled tokens and logprobs do not move."""
    prompt = [1, 5, 9, 13, 5, 9, 7]
    sampled = SamplingParams(temperature=0.9, seed=5, max_tokens=10, ignore_eos=True)
    plain = SamplingParams(max_tokens=10, ignore_eos=True)
    listed = SamplingParams(
        max_tokens=10, min_tokens=10, logit_bias={264: -5.0}, allowed_token_ids=range(300)
    )
    beside_plain = llama.generate([prompt] * 2, [sampled, plain])[0]
    beside_listed = llama.generate([prompt] * 2, [sampled, listed])[0]
    assert beside_listed.token_ids == beside_plain.token_ids
    assert np.array_equal(np.float32(beside_listed.logprobs), np.float32(beside_plain.logprobs))


def test_first_stop_and_truncate_after_protected_text():
    assert first_stop("ab ab", ["ab"], after=2) == "ab"
    assert first_stop("ab xy", ["ab"], after=2) is None
    assert first_stop("aab", ["ab", "aab"], after=2) == "aab"  # ends at 3 > 2, starts first
    assert truncate_at_stop("ab cd ab", ["ab"], False, after=2) == "ab cd "
    assert truncate_at_stop("ab cd ab", ["ab"], True, after=1) == "ab"  # ends at 2 > 1
    assert truncate_at_stop("xabx", ["ab"], False, after=2) == "x"  # straddles: ends at 3


def test_params_keep_only_their_fields_and_rebuild_from_them():
    """The lists' per-request arrays are cached off the object: callers rebuild params from
    vars(p) (tests/test_engine.py does), and a collected one leaves nothing behind."""
    import gc

    from engine import logit_bias

    sp = SamplingParams(logit_bias={3: 1.0}, allowed_token_ids=[3, 4], presence_penalty=0.5)
    assert sp.penalized and logit_bias.listed_tokens(sp)[0].tolist() == [3, 4]
    assert SamplingParams(**vars(sp)) == sp
    held = len(logit_bias._CACHE)
    del sp
    gc.collect()
    assert len(logit_bias._CACHE) == held - 1


def test_min_tokens_holds_the_eos_back(llama):
    """A +100 bias makes the EOS the greedy first token; min_tokens=3 holds it back for
    three tokens, which are then the decode with the EOS biased away, and it stops the
    request at the fourth. With ignore_eos nothing is held back (and nothing stops)."""
    prompt = [1, 5, 9, 13, 5, 9, 7]
    (eos,) = llama.config.eos_token_ids
    outs = llama.generate(
        [prompt] * 4,
        [
            SamplingParams(max_tokens=6, logit_bias={eos: 100.0}),
            SamplingParams(max_tokens=3, logit_bias={eos: -100.0}),
            SamplingParams(max_tokens=6, min_tokens=3, logit_bias={eos: 100.0}),
            SamplingParams(max_tokens=3, min_tokens=3, ignore_eos=True, logit_bias={eos: 100.0}),
        ],
    )
    pushed, away, held, ignored = outs
    assert pushed.token_ids == [eos] and pushed.finish_reason == "stop"
    assert eos not in away.token_ids and len(away.token_ids) == 3
    assert held.token_ids == away.token_ids + [eos]
    assert (held.finish_reason, held.stop_reason) == ("stop", None)
    assert ignored.token_ids == [eos] * 3 and ignored.finish_reason == "length"
