"""Structured outputs (engine/structured.py): the step's bitmask against numpy's own bit
unpacking, the tokenizer's bytes against its decoder, and the engine's greedy decodes under
regex / choice / JSON-schema constraints against Hugging Face's llama fixture decoding with
outlines_core's automaton (tests/fixtures/make_structured_fixture.py)."""

import dataclasses
import json
import pathlib
import re
import types

import jax.numpy as jnp
import numpy as np
import pytest
from tokenizers import Tokenizer

from engine import LLM, SamplingParams, StructuredOutputsParams
from engine.logit_bias import apply_allowed_mask
from engine.structured import token_bytes
from tests.sampler_cases import POOL

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
REFERENCE = json.loads((FIXTURES / "structured" / "reference.json").read_text())


def _constraint(case) -> StructuredOutputsParams:
    kind, spec = case["kind"], case["spec"]
    return StructuredOutputsParams(**{kind: spec})


def test_the_mask_keeps_exactly_the_tokens_whose_bit_is_set():
    rng = np.random.default_rng(0)
    vocab = 77  # not a multiple of 32: the last word is partly padding
    logits = rng.standard_normal((5, vocab)).astype(np.float32)
    mask = rng.integers(-(2**31), 2**31, (5, 3), dtype=np.int64).astype(np.int32)
    mask[2] = -1  # every bit: the row must come back bitwise unchanged
    got = np.asarray(apply_allowed_mask(jnp.asarray(logits), jnp.asarray(mask)))
    bits = np.unpackbits(mask.view(np.uint8), axis=1, bitorder="little")[:, :vocab]
    np.testing.assert_array_equal(got, np.where(bits == 1, logits, -np.inf))
    assert got[2].tobytes() == logits[2].tobytes()


def test_token_bytes_are_what_the_tokenizer_decodes():
    path = FIXTURES / "structured" / "tokenizer.json"
    tok = Tokenizer.from_file(str(path))
    pieces = token_bytes(json.loads(path.read_text()), 512)
    assert set(pieces) == set(range(3, 512))  # every token but <unk>, <s>, </s>
    for i, b in pieces.items():
        text = b.decode("utf-8", errors="replace")
        assert tok.decode([i]) == text, i
    assert sum(len(b) == 1 for b in pieces.values()) == 256  # every byte is a token


def test_sentencepiece_pieces_read_as_spaces_and_bytes():
    spm = {
        "decoder": {
            "type": "Sequence",
            "decoders": [{"type": "Replace"}, {"type": "ByteFallback"}],
        },
        "model": {"vocab": {"<s>": 0, "▁the": 1, "<0x0A>": 2, "é": 3, "x▁y": 4}},
        "added_tokens": [{"id": 0, "content": "<s>", "special": True}],
    }
    assert token_bytes(spm, 5) == {1: b" the", 2: b"\n", 3: "é".encode(), 4: b"x y"}
    word_level = {"decoder": None, "model": {"vocab": {"the": 0}}}
    with pytest.raises(ValueError, match="byte-level BPE or SentencePiece"):
        token_bytes(word_level, 1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "exactly one of json, regex, choice, json_object"),
        ({"regex": "a", "choice": ["a"]}, r"exactly one .*\['regex', 'choice'\]"),
        ({"choice": []}, "structured_outputs.choice: 1 to 1024 non-empty strings"),
        ({"choice": "yes"}, "structured_outputs.choice='yes': must be a sequence of strings"),
        ({"json": "{not json"}, "structured_outputs.json: not valid JSON"),
        ({"json": "[1]"}, "structured_outputs.json: a JSON schema is an object"),
        ({"regex": 5}, "structured_outputs.regex=5: must be a str"),
        ({"json_object": 1}, "json_object and disable_any_whitespace must be True or False"),
        ({"regex": "a" * 70000}, "70000 characters, at most 65536"),
    ],
)
def test_bad_constraints_are_refused_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StructuredOutputsParams(**kwargs)


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    """The llama fixture's weights with the byte-level BPE tokenizer the reference used."""
    model = tmp_path_factory.mktemp("structured_llama")
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (model / name).symlink_to(FIXTURES / "llama" / name)
    (model / "tokenizer.json").symlink_to(FIXTURES / "structured" / "tokenizer.json")
    return LLM(model=str(model), max_num_seqs=8, max_num_batched_tokens=64, **POOL)


def test_a_step_mask_sets_every_bit_outside_the_constrained_rows(llm):
    """masks_for: None without a constrained row unless the engine keeps the mask on
    (runner.StickyFeatures: then every bit of every row); a constrained row's bits are the
    same either way; unsampled rows (prefill chunks) and padding rows keep every bit."""
    structured = llm._structured
    free = SamplingParams(max_tokens=4)
    held = SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(regex="ab+"))

    def item(rid, params, sample=True):
        return types.SimpleNamespace(request_id=rid, sampling_params=params, sample=sample)

    plain = [item("a", free), item("b", held, sample=False)]
    assert structured.masks_for(plain, 4, lambda it: []) is None
    everything = structured.masks_for(plain, 4, lambda it: [], always=True)
    assert everything.shape == (4, structured.num_words) and (everything == -1).all()
    decode = llm.tokenizer.decode
    starts = [t for t in range(structured.vocab_size) if re.fullmatch("ab*", decode([t]))]
    assert len(starts) >= 2  # ("a" and "ab" in this vocabulary)
    mixed = [item("a", free), item("c", held)]
    for always in (False, True):
        mask = structured.masks_for(mixed, 3, lambda it: [], always=always)
        assert (mask[[0, 2]] == -1).all()  # the free row, the padding row
        bits = np.unpackbits(mask[1].view(np.uint8), bitorder="little")
        allowed = np.flatnonzero(bits[: structured.vocab_size]).tolist()
        assert allowed == starts  # the first tokens of a match of ab+ ("a", "ab", ...)
    structured.release("c")


def test_greedy_decodes_match_hugging_face_under_the_constraints(llm):
    cases = REFERENCE["cases"]
    free = SamplingParams(max_tokens=8)  # an unconstrained row in the same steps
    params = [
        SamplingParams(max_tokens=c["max_tokens"], structured_outputs=_constraint(c)) for c in cases
    ]
    ahead = llm.stats()["num_steps_dispatched_ahead"]
    outs = llm.generate(
        [c["prompt_ids"] for c in cases] + [cases[0]["prompt_ids"]], params + [free]
    )
    for case, out in zip(cases, outs, strict=False):
        assert out.token_ids == case["output_ids"], case["name"]
        assert out.finish_reason == case["finish"], case["name"]
        assert out.text == case["text"], case["name"]
        if case["finish"] == "stop":
            assert re.fullmatch(case["regex"], out.text), case["name"]
            if case["kind"] == "json":
                json.loads(out.text)
    # No constrained step was dispatched ahead: each mask needs the token before it.
    assert llm.stats()["num_steps_dispatched_ahead"] == ahead
    (alone,) = llm.generate([cases[0]["prompt_ids"]], free)
    assert outs[-1].token_ids == alone.token_ids  # a row without a constraint is unchanged
    # The unconstrained decode differs (the reference checks it too): the mask bit.
    assert alone.token_ids != cases[0]["output_ids"][: len(alone.token_ids)]


def test_sampled_outputs_match_the_expression(llm):
    choice = StructuredOutputsParams(choice=["red apple", "green pear", "blue"])
    number = StructuredOutputsParams(regex=r"-?(0|[1-9][0-9]{0,3})\.[0-9]{2}")
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 20, 300]}},
        "required": ["ok", "n"],
    }
    compact = StructuredOutputsParams(json=schema, disable_any_whitespace=True)
    prompt = REFERENCE["cases"][0]["prompt_ids"]
    params = [
        SamplingParams(temperature=1.0, seed=7, max_tokens=40, n=3, structured_outputs=so)
        for so in (choice, number, compact)
    ]
    outs = llm.generate([prompt] * 3, params)
    for out, so in zip(outs, (choice, number, compact), strict=True):
        for sample in out.samples:
            assert sample.finish_reason == "stop", sample
            if so is choice:
                assert sample.text in so.choice
            elif so is number:
                assert re.fullmatch(so.regex, sample.text), sample.text
            else:
                got = json.loads(sample.text)
                assert set(got) == {"ok", "n"} and " " not in sample.text
                assert isinstance(got["ok"], bool) and got["n"] in (1, 20, 300)


def test_constraints_the_vocabulary_cannot_spell_are_refused_before_queueing(llm):
    prompt = REFERENCE["cases"][0]["prompt_ids"]
    bad = [
        (
            StructuredOutputsParams(regex="(unclosed"),
            "structured_outputs.regex: cannot be compiled",
        ),
        (
            StructuredOutputsParams(json={"type": "frobnicate"}),
            "structured_outputs.json: unsupported",
        ),
    ]
    for so, match in bad:
        with pytest.raises(ValueError, match=match):
            llm.generate(
                [prompt, prompt], [SamplingParams(), SamplingParams(structured_outputs=so)]
            )
    assert not llm.has_unfinished()  # all or nothing: the good request was not queued
    (out,) = llm.generate([prompt], SamplingParams(max_tokens=2))
    assert len(out.token_ids) == 2


def test_a_word_level_tokenizer_is_refused():
    llm = LLM(model=str(FIXTURES / "llama"), max_num_seqs=8, max_num_batched_tokens=64, **POOL)
    so = StructuredOutputsParams(choice=["the", "of"])
    with pytest.raises(ValueError, match="structured outputs need a byte-level BPE"):
        llm.generate([[1, 3]], SamplingParams(structured_outputs=so))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_min_tokens_past_a_whole_match_repeats_eos_not_garbage(llm, temperature):
    # The choice is whole after a few tokens, where only EOS may follow, and min_tokens bans
    # EOS: the row samples under its expression alone (EOS, which does not stop the request
    # before min_tokens), not among no tokens at all (greedy took token 0, sampling any).
    so = StructuredOutputsParams(choice=["no", "yes"])
    prompt = REFERENCE["cases"][0]["prompt_ids"]
    params = SamplingParams(temperature=temperature, seed=1, min_tokens=6, max_tokens=12)
    (out,) = llm.generate([prompt], dataclasses.replace(params, structured_outputs=so))
    eos = REFERENCE["eos_token_id"]
    first = out.token_ids.index(eos)
    assert out.token_ids[first:] == [eos] * (len(out.token_ids) - first), out.token_ids
    assert llm.tokenizer.decode(out.token_ids[:first], skip_special_tokens=False) in so.choice
    assert out.finish_reason == "stop" and len(out.token_ids) == 7  # EOS stops after 6


def test_special_tokens_in_the_text_and_its_stop_strings(llm):
    # After the choice only EOS may follow; ignore_eos keeps it going, so "</s>" repeats.
    so = StructuredOutputsParams(choice=["no", "yes"])
    prompt = REFERENCE["cases"][0]["prompt_ids"]
    base = SamplingParams(max_tokens=6, ignore_eos=True, structured_outputs=so)
    keep = dataclasses.replace(base, skip_special_tokens=False)
    none = dataclasses.replace(base, detokenize=False)
    stop = dataclasses.replace(keep, stop=("</s>",), include_stop_str_in_output=True)
    skipped, kept, no_text, stopped = llm.generate([prompt] * 4, [base, keep, none, stop])
    word = skipped.text
    assert word in so.choice and skipped.finish_reason == "length"
    eos_count = len(kept.token_ids) - kept.token_ids.index(REFERENCE["eos_token_id"])
    assert kept.text == word + "</s>" * eos_count
    assert no_text.text is None and no_text.token_ids == skipped.token_ids
    # The first EOS's text is a stop string only where special tokens are kept.
    assert stopped.finish_reason == "stop" and stopped.stop_reason == "</s>"
    assert stopped.text == word + "</s>" and stopped.token_ids[-1] == REFERENCE["eos_token_id"]
    with pytest.raises(ValueError, match="stop strings need detokenize=True"):
        SamplingParams(stop=["x"], detokenize=False)
