"""Speculative decoding with n-gram drafts (engine/speculative.py).

The proposer on exact token lists; the scheduler driven by a fake model that repeats its
context with period 3 (so drafts come true) on a fake KV cache that holds each slot's whole
prefix (a rejected draft's K/V read back, or a page short, fails an assertion); and the
engine: greedy tokens with speculation equal those without (and the Hugging Face fixture's),
bitwise in batch-invariant mode.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from engine import LLM, SamplingParams
from engine import llm as llm_module
from engine.kv_pages import PageManager
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from engine.speculative import NgramProposer, prepare_drafts, proposer_for, verify
from tests.sampler_cases import POOL
from tests.test_prefix_cache import ContentDevice, seq_of

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
PAGE = 4


def propose(tokens, k=3, **kw) -> tuple[int, ...]:
    return NgramProposer(num_speculative_tokens=k, **kw).propose(np.asarray(tokens), k)


def test_drafts_follow_the_latest_earlier_occurrence_of_the_longest_suffix():
    assert propose([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3]) == (7, 1, 2)  # the latest "1 2 3"
    assert propose([5, 2, 3, 8, 4, 2, 3], prompt_lookup_max=2) == (8, 4, 2)
    assert propose([5, 6, 7, 6, 7], k=5) == (6, 7)  # only what there is
    assert propose([1, 2, 3, 4]) == ()  # no earlier occurrence
    assert propose([4, 4, 4], k=2) == (4,)
    assert propose([1, 9, 2, 9], prompt_lookup_min=2) == ()  # "9" alone is too short


def test_the_proposer_equals_a_plain_search_and_its_window_follows_the_sequence():
    def plain_search(tokens, k, hi, lo):  # longest suffix first, latest occurrence first
        length = len(tokens)
        for n in range(min(hi, length - 1), lo - 1, -1):
            for s in range(length - 1 - n, -1, -1):
                if tokens[s : s + n] == tokens[length - n :]:
                    return tuple(tokens[s + n : s + n + k])
        return ()

    rng = np.random.default_rng(0)
    for _ in range(500):
        tokens = rng.integers(0, 4, int(rng.integers(1, 40))).tolist()
        hi = int(rng.integers(1, 6))
        lo, k = int(rng.integers(1, hi + 1)), int(rng.integers(1, 5))
        got = NgramProposer(k, hi, lo).propose(np.asarray(tokens), k)
        assert got == plain_search(tokens, k, hi, lo), (tokens, hi, lo, k)
    proposer = NgramProposer(2)
    seq = Sequence("s", (1, 2, 3), None)
    assert proposer.window(seq).tolist() == [1, 2, 3]
    seq.output_token_ids += [4, 5]
    assert proposer.window(seq).tolist() == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    "config,message",
    [
        ({"method": "eagle", "num_speculative_tokens": 2}, "method='eagle': expected 'ngram'"),
        ({"method": "ngram"}, "num_speculative_tokens: missing"),
        ({"num_speculative_tokens": 0}, "num_speculative_tokens=0: must be in"),
        ({"num_speculative_tokens": 17}, "num_speculative_tokens=17: must be <= 16"),
        ({"num_speculative_tokens": 2, "prompt_lookup_min": 5}, "prompt_lookup_min=5"),
        ({"num_speculative_tokens": 2, "draft_model": "x"}, "unknown keys ['draft_model']"),
        ("ngram", "must be a dict or None"),
    ],
)
def test_bad_configs_are_refused_by_key(config, message):
    with pytest.raises(ValueError, match=f"speculative_config.*{message}".replace("[", r"\[")):
        proposer_for(config)


# ---- the scheduler on a fake model --------------------------------------------------------


def periodic(context) -> int:
    """The fake model: the token three back (a period-3 loop), but 0 at every 11th
    position, where a draft from the loop is wrong."""
    return context[-3] if len(context) % 11 and len(context) >= 3 else 0


class SpecDevice(ContentDevice):
    """ContentDevice whose rows each give the fake model's token there; a drafting item's
    sample becomes its kept tokens, as the engine makes them (speculative.verify)."""

    def run(self, out):
        super().run(out)  # the KV checks
        sampled, rows, top, cu = {}, [], [], [0]
        for i, it in enumerate(out.items):
            context = list(self.seqs[it.request_id].all_token_ids[: it.start_pos])
            for tok in it.token_ids:
                context.append(tok)
                top.append(periodic(context))
            cu.append(len(top))
            if it.sample:
                sampled[it.request_id] = (top[-1], -1.0)
            if it.num_drafts:
                rows.append((i, cu[i]))
        top = np.asarray(top)
        verify(out.items, rows, sampled, top, np.full(len(top), -2.0), np.full(len(top), -3.0))
        return sampled


def reference(seq: Sequence, n: int) -> list[int]:
    context = list(seq.prompt_token_ids)
    for _ in range(n):
        context.append(periodic(context))
    return context[seq.num_prompt_tokens :]


def test_drafts_that_come_true_give_several_tokens_a_step():
    pages = PageManager(16, PAGE)
    sched = Scheduler(
        pages, 16, 4, 40, speculative=NgramProposer(num_speculative_tokens=3, prompt_lookup_max=2)
    )
    seqs = {}
    dev = SpecDevice(PAGE, seqs)
    a = seqs["a"] = seq_of("a", [1, 2, 3, 4, 5, 6], max_tokens=14)
    b = seqs["b"] = seq_of("b", [9, 8], max_tokens=5)  # no draft: decodes one at a time
    for seq in (a, b):
        seq.speculate = True
        sched.add(seq)
    steps = 0
    while sched.has_unfinished():
        out = sched.schedule()
        for it in out.items:  # the pages cover every draft's position
            assert len(it.page_ids) * PAGE >= it.kv_len_after
        sched.update(out, dev.run(out))
        steps += 1
    for seq in (a, b):
        assert seq.output_token_ids == reference(seq, seq.sampling_params.max_tokens)
        assert seq.finish_reason == "length"
    stats = sched.stats()
    # The loop 4 5 6 repeats from the first token on: 3 drafts a step, all kept, and
    # max_tokens cuts the drafts of the last steps short; "b" loops on 9 8 7 too.
    assert stats["num_accepted_tokens"] > 0 and stats["num_draft_tokens"] > 0
    assert steps < 14
    assert stats["num_pages_free"] == 16


def test_a_rejected_draft_is_overwritten_and_a_stop_token_ends_the_drafts():
    pages = PageManager(16, PAGE)
    sched = Scheduler(pages, 16, 4, 40, speculative=NgramProposer(num_speculative_tokens=4))
    seqs = {}
    dev = SpecDevice(PAGE, seqs)
    # The loop 1 2 3 drafts itself, but position 11 and 22 take a 0: those drafts fail.
    a = seqs["a"] = seq_of("a", [1, 2, 3, 1, 2, 3, 1, 2], max_tokens=20)
    c = seqs["c"] = seq_of("c", [4, 6, 8, 4, 6, 8], max_tokens=12, stop_token_ids=(6,))
    for seq in (a, c):
        seq.speculate = True
        sched.add(seq)
    while sched.has_unfinished():
        out = sched.schedule()
        sched.update(out, dev.run(out))
    assert a.output_token_ids == reference(a, 20) and 0 in a.output_token_ids
    assert 0 < sched.stats()["num_accepted_tokens"] < sched.stats()["num_draft_tokens"]
    # Its drafts "4 6 8 ..." are all kept by the model, but the stop token ends it at once.
    assert (c.output_token_ids, c.finish_reason) == ([4, 6], "stop")


# ---- the engine -----------------------------------------------------------------------------

REF = json.loads((FIXTURES / "llama" / "reference.json").read_text())
SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}


def _pair(**kw) -> tuple[LLM, LLM]:
    # test_parallel_sampling's engine shape (sampler_cases.POOL): the same step programs.
    kw = dict(
        model=str(FIXTURES / "llama"), max_num_seqs=8, max_num_batched_tokens=64, **POOL, **kw
    )
    return LLM(**kw), LLM(speculative_config=SPEC, **kw)


def test_greedy_tokens_are_those_without_drafts_and_the_hf_ones(monkeypatch):
    plain, spec = _pair()
    prompts = [*REF["prompts"], REF["prompts"][2][:10] * 3]
    greedy = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    want, got = plain.generate(prompts, greedy), spec.generate(prompts, greedy)
    for w, g in zip(want, got, strict=True):
        assert g.token_ids == w.token_ids
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-4, rtol=0)
    for g, tokens, logprobs in zip(got, REF["greedy_tokens"], REF["logprobs"], strict=False):
        assert g.token_ids[:16] == tokens
        np.testing.assert_allclose(g.logprobs[:16], logprobs, atol=2e-3, rtol=0)
    stats = spec.stats()
    assert 0 < stats["num_accepted_tokens"] < stats["num_draft_tokens"]
    assert stats["num_steps"] < plain.stats()["num_steps"]
    assert stats["num_pages_free"] == POOL["num_pages"]
    # A stop token among kept drafts ends the request there, as without drafts.
    stop = SamplingParams(temperature=0.0, max_tokens=40, stop_token_ids=[got[3].token_ids[20]])
    assert (
        spec.generate(prompts[3], stop)[0].token_ids
        == plain.generate(prompts[3], stop)[0].token_ids
    )
    # Beside a prompt-logprobs prefill (99 tokens: its later chunks share steps with the
    # decodes of a prompt that ends in the model's own loop, so drafts at once) the step
    # scores every row, drafts' included.
    mixed = [greedy, SamplingParams(max_tokens=4, prompt_logprobs=True)]
    pair = [prompts[3] + got[3].token_ids[:30], prompts[2] * 3]
    both = []

    def spy(items, batch, prompt_scored, min_rows, proposer):
        drafts, batch = prepare_drafts(items, batch, prompt_scored, min_rows, proposer)
        both.append(prompt_scored and bool(drafts[0]))
        return drafts, batch

    monkeypatch.setattr(llm_module, "prepare_drafts", spy)
    for w, g in zip(plain.generate(pair, mixed), spec.generate(pair, mixed), strict=True):
        assert g.token_ids == w.token_ids
        np.testing.assert_allclose(g.prompt_logprobs or [], w.prompt_logprobs or [], atol=1e-5)
    assert any(both)
    # Penalized requests decode one token at a time.
    drafts = spec.stats()["num_draft_tokens"]
    spec.generate(prompts, SamplingParams(max_tokens=20, repetition_penalty=1.1))
    assert spec.stats()["num_draft_tokens"] == drafts


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True),
        # Sampled requests draft too: each row draws what decoding one token a step would
        # (same seed, same generation index), and a draft is kept only where it equals that
        # draw, so the tokens are those without drafts.
        SamplingParams(
            temperature=0.5, top_k=20, top_p=0.9, seed=3, max_tokens=30, ignore_eos=True
        ),
    ],
    ids=["greedy", "sampled"],
)
def test_batch_invariant_drafts_change_no_bit(params):
    plain, spec = _pair(batch_invariant=True)
    prompts = [REF["prompts"][1], REF["prompts"][2][:10] * 3]
    before = spec.stats()
    for w, g in zip(plain.generate(prompts, params), spec.generate(prompts, params), strict=True):
        assert g.token_ids == w.token_ids
        bits = lambda x: np.asarray(x, np.float32).view(np.uint32).tolist()  # noqa: E731
        assert bits(g.logprobs) == bits(w.logprobs)
    assert spec.stats()["num_accepted_tokens"] > before["num_accepted_tokens"]


# ---- a draft model ------------------------------------------------------------------------


def _draft(model: str, k: int = 3, **more) -> dict:
    """vLLM's form: a "model" key (method "draft_model")."""
    return {"model": str(FIXTURES / model), "num_speculative_tokens": k, **more}


def test_a_draft_models_drafts_keep_the_hf_greedy_tokens():
    """The llama fixture drafted for by its own weights in int4 (the draft's
    "quantization": some drafts kept, some not; two random models of the fixtures would
    agree on next to none): the Hugging Face tokens, in fewer steps; the draft engine ran
    steps of its own. (Sampled requests keep the tokens too: verification is the same as
    for n-gram drafts, tested above.)"""
    shape = dict(model=str(FIXTURES / "llama"), max_num_seqs=8, max_num_batched_tokens=64)
    spec = LLM(**shape, **POOL, speculative_config=_draft("llama", quantization="int4"))
    greedy = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    got = spec.generate(REF["prompts"], greedy)
    for g, tokens, logprobs in zip(got, REF["greedy_tokens"], REF["logprobs"], strict=True):
        assert g.token_ids == tokens
        np.testing.assert_allclose(g.logprobs, logprobs, atol=2e-3, rtol=0)
    stats = spec.stats()
    assert 0 < stats["num_accepted_tokens"] < stats["num_draft_tokens"]
    assert stats["num_steps"] < 1 + 15  # (a token a step: the prefill's, then 15 decodes)
    assert stats["num_draft_model_steps"] > 0 and stats["num_pages_free"] == POOL["num_pages"]


def test_the_target_drafting_for_itself_keeps_every_draft():
    """Batch-invariant: the llama fixture as its own draft model computes each draft as
    the target's step does, bit for bit, so every draft is kept: 4 tokens a step, the
    Hugging Face tokens. The target on a (one-device) mesh: its sharded step beside the
    draft engine's unsharded one."""
    llm = LLM(
        model=str(FIXTURES / "llama"),
        mesh="dp=1",
        batch_invariant=True,
        max_model_len=128,
        num_pages=8,
        max_num_batched_tokens=64,
        speculative_config=_draft("llama"),
    )
    greedy = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    (out,) = llm.generate([REF["prompts"][1]], greedy)
    assert out.token_ids == REF["greedy_tokens"][1]
    stats = llm.stats()
    assert stats["num_accepted_tokens"] == stats["num_draft_tokens"] == 15 // 4 * 3 + 2
    assert stats["num_steps"] == 1 + -(-15 // 4)
    # Asleep (vLLM's sleep mode), the draft engine too; awake, the same again.
    llm.sleep(2)
    assert llm.is_sleeping() and llm._scheduler.speculative._llm.is_sleeping()
    llm.wake_up()
    llm.load_weights(str(FIXTURES / "llama"))
    (again,) = llm.generate([REF["prompts"][1]], greedy)
    assert again.token_ids == out.token_ids
    assert llm.stats()["num_accepted_tokens"] == 2 * stats["num_accepted_tokens"]


def test_a_draft_model_is_checked_before_the_weights_are_read():
    llama = str(FIXTURES / "llama")
    with pytest.raises(ValueError, match="vocab_size=8192, the target's is 512"):
        LLM(
            model=llama,
            speculative_config={"model": "bench-llama-20m", "num_speculative_tokens": 2},
        )
    with pytest.raises(FileNotFoundError):
        LLM(model=llama, speculative_config=_draft("no_such_fixture"))
    for config, message in (
        ({"model": llama}, "num_speculative_tokens: missing"),
        ({"method": "draft_model", "num_speculative_tokens": 2}, "model: missing"),
        ({"model": llama, "num_speculative_tokens": 2, "prompt_lookup_max": 3}, "unknown keys"),
        ({"model": "", "num_speculative_tokens": 2}, "model='': expected a preset"),
        ({"model": llama, "num_speculative_tokens": 0}, "num_speculative_tokens=0: must be"),
    ):
        with pytest.raises(ValueError, match=f"speculative_config.*{message}"):
            proposer_for(config)
