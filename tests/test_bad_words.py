"""bad_words (engine/logit_bias.py): the step's bans against the rule written out, and the
engine's greedy decodes against Hugging Face models under transformers'
NoBadWordsLogitsProcessor (tests/fixtures/make_hf_bad_words_fixture.py)."""

import math
import pathlib
from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer

from engine import LLM, SamplingParams, inputs
from engine.logit_bias import followed_bans, listed_tokens, lists_for
from tests.sampler_cases import POOL, cases

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
CASES = cases("hf_bad_words")
WORDS = ((7,), (3, 4), (1, 3, 4), (3, 9, 4))


def _item(output, sample=True, **kw):
    params = SamplingParams(bad_words_token_ids=WORDS, **kw)
    return SimpleNamespace(sampling_params=params, num_generated=len(output), sample=sample)


@pytest.mark.parametrize(
    "output, banned",
    [
        ((), set()),  # nothing generated to match
        ((3,), {4}),
        ((5, 1, 3), {4}),  # (3, 4) and (1, 3, 4) both end here
        ((3, 9), {4}),
        ((9, 3, 5), set()),
        ((3, 3, 9), {4}),
        ((1,), set()),
    ],
)
def test_a_words_last_token_is_banned_after_its_others(output, banned):
    params = SamplingParams(bad_words_token_ids=WORDS)
    assert set(followed_bans(params, list(output))) == banned
    # Written out: t is banned iff a longer word ends in t and the output ends with the rest.
    rule = {w[-1] for w in WORDS if len(w) > 1 and tuple(output[1 - len(w) :]) == w[:-1]}
    assert rule == banned
    # A one-token word is in the request's list at -inf whatever the output.
    ids, values = listed_tokens(params)
    assert dict(zip(ids.tolist(), values.tolist(), strict=True)) == {7: -math.inf}


def test_the_step_lists_hold_the_followed_bans_of_sampled_rows_only():
    outputs = {0: [5, 3], 1: [5, 3], 2: [1, 3]}
    items = [
        _item(outputs[0]),
        _item(outputs[1], sample=False),  # a prefill chunk that samples nothing
        _item(outputs[2], allowed_token_ids=[4, 8], logit_bias={4: 1.0}),
    ]
    lists = lists_for(items, 4, (), lambda it: outputs[items.index(it)])
    rows = [{} for _ in range(4)]  # what the step's scatter-add makes of each row
    for i, row in enumerate(rows):
        for t, x in zip(lists.ids[i].tolist(), lists.values[i].tolist(), strict=True):
            if t >= 0:
                row[t] = row.get(t, 0.0) + x
    # Row 1 samples nothing: only its one-token word (listed whatever the output). Row 2
    # keeps only 4 and 8: 7 is excluded anyway; 4 gets its bias + -inf.
    assert rows == [{4: -math.inf, 7: -math.inf}, {7: -math.inf}, {4: -math.inf, 8: 0.0}, {}]
    assert lists.restrict.tolist() == [False, False, True, False]


def test_words_are_tokenized_alone_and_after_a_space():
    tok = Tokenizer.from_file(str(FIXTURES / "llama" / "tokenizer.json"))
    the, of = tok.token_to_id("the"), tok.token_to_id("of")
    assert None not in (the, of)
    # The word-level tokenizer splits on whitespace: both forms are the same ids.
    assert inputs.bad_word_ids(tok, ["of", " of", "the of"]) == ((of,), (the, of))
    with pytest.raises(ValueError, match=r"bad_words=\['x'\]: need the model's tokenizer"):
        inputs.bad_word_ids(None, ["x"])


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(bad_words=[""]), r"bad_words=\[''\]: each must be a str with a non-space"),
        (dict(bad_words=5), r"bad_words=5: must be a sequence of strings"),
        (dict(bad_words=["x" * 1025]), r"of at most 1024 characters"),
        (dict(bad_words=["w"] * 257), r"bad_words: 257 words, at most 256"),
        (dict(bad_words_token_ids=[[]]), r"bad_words_token_ids: \(\) must be one or more"),
        (dict(bad_words_token_ids=[[1, -2]]), r"bad_words_token_ids: \(1, -2\) must be"),
        (dict(bad_words_token_ids="ab"), r"bad_words_token_ids='ab': must be a sequence of"),
        (dict(bad_words_token_ids=[[1]] * 2 + [[i] for i in range(2, 258)]), r"257 sequences"),
        (
            dict(bad_words_token_ids=[[2], [5, 2], [3]], allowed_token_ids=[3, 2]),
            r"allowed_token_ids=\(2, 3\): bad_words ban every one of them",
        ),
    ],
)
def test_bad_words_are_refused_naming_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kw)


# ---- the engine against Hugging Face -------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe"])
def test_greedy_decodes_equal_hugging_face_under_bad_words(arch):
    llm = LLM(
        str(FIXTURES / arch), dtype="float32", max_num_batched_tokens=16, max_num_seqs=4, **POOL
    )
    (case,) = [c for c in CASES if c["arch"] == arch]
    words = case["bad_words_token_ids"]
    assert any(len(w) > 1 for w in words)
    ahead = llm.stats()["num_steps_dispatched_ahead"]
    params = SamplingParams(max_tokens=16, ignore_eos=True, bad_words_token_ids=words)
    plain = SamplingParams(max_tokens=16, ignore_eos=True)
    got, unbanned = llm.generate([case["prompt"]] * 2, [params, plain])
    assert got.token_ids == case["tokens"] != unbanned.token_ids
    # Its decodes read the output before each token, so none was scheduled ahead.
    assert llm.stats()["num_steps_dispatched_ahead"] == ahead
    if arch == "llama":  # the same as words: the tokenizer's ids of their text
        text = [llm.tokenizer.decode(list(w)) for w in words]
        by_text = SamplingParams(**{**vars(params), "bad_words_token_ids": None, "bad_words": text})
        (by_text,) = llm.generate([case["prompt"]], by_text)
        assert by_text.token_ids == case["tokens"]
        with pytest.raises(ValueError, match=r"bad_words_token_ids: token id 512 is outside"):
            llm.generate([[1, 2]], SamplingParams(bad_words_token_ids=[[3, 512]]))
        with pytest.raises(ValueError, match=r"need the model's tokenizer"):
            LLM("tiny-llama").generate([[1, 2]], SamplingParams(bad_words=["x"]))
