"""Batch-invariant mode: a probe request's tokens and logprob bits do not depend on the
batch it shares, its position, the prefill chunk budget, preemption, or decode vs prefill."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pytest

from engine import LLM, SamplingParams
from engine import llm as llm_module

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
PROBE_PARAMS = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def _probe(arch: str) -> list[int]:
    return json.loads((FIXTURES / arch / "reference.json").read_text())["prompts"][1]


def _bits(logprobs) -> list[int]:
    return np.asarray(logprobs, np.float32).view(np.uint32).tolist()


def _hidden_among_co_requests(llm: LLM, probe, rng) -> tuple:
    """Run `probe` at a random position among 1..24 random co-requests; its output."""
    n = int(rng.integers(1, 25))
    prompts = [rng.integers(3, 512, int(rng.integers(1, 60))).tolist() for _ in range(n)]
    params = [
        SamplingParams(max_tokens=int(rng.integers(1, 16)), ignore_eos=True) for _ in range(n)
    ]
    at = int(rng.integers(0, n + 1))
    prompts.insert(at, probe)
    params.insert(at, PROBE_PARAMS)
    out = llm.generate(prompts, params)[at]
    return out.token_ids, _bits(out.logprobs)


def _decoding_equals_prefilling(arch: str, alone: tuple, at=(2, 9)) -> None:
    """Decoding position j of the probe (after prefilling its prompt and first j tokens)
    gives the token and logprob bits the probe's own run gave there."""
    llm = LLM(str(FIXTURES / arch), batch_invariant=True, max_model_len=128, num_pages=8)
    one = SamplingParams(max_tokens=1, ignore_eos=True)
    for j in at:
        (out,) = llm.generate([_probe(arch) + alone[0][:j]], one)
        assert (out.token_ids, _bits(out.logprobs)) == (alone[0][j : j + 1], alone[1][j : j + 1])


def _scenario(
    arch: str,
    batch_invariant: bool,
    budgets=(16, 80, 512),
    num_pages=8,
    n_samples=1,
    **engine_kw,
) -> tuple[tuple, list[tuple], int]:
    """(probe alone, probe in random batches under each chunk budget, preemptions); with
    `n_samples` > 1 it also checks that many greedy samples of the probe (which share its
    first page) each equal the probe alone."""
    probe = _probe(arch)
    rng = np.random.default_rng(11)
    # The pool of the batched runs below (the probe alone fits in it): the same KV shapes,
    # so the alone run's step programs are theirs too (fewer compilations).
    alone_llm = LLM(
        model=str(FIXTURES / arch),
        batch_invariant=batch_invariant,
        max_model_len=128,
        num_pages=num_pages,
        **engine_kw,
    )
    (out,) = alone_llm.generate([probe], PROBE_PARAMS)
    alone = (out.token_ids, _bits(out.logprobs))
    if n_samples > 1:
        (group,) = alone_llm.generate([probe], dataclasses.replace(PROBE_PARAMS, n=n_samples))
        assert alone_llm.stats()["num_prompt_tokens_shared"] > 0
        assert [(s.token_ids, _bits(s.logprobs)) for s in group.samples] == [alone] * n_samples
    mixed, preemptions = [], 0
    for budget in budgets:
        # 8 pages of 16 tokens: too few for the co-requests, so some are preempted.
        llm = LLM(
            model=str(FIXTURES / arch),
            batch_invariant=batch_invariant,
            max_num_batched_tokens=budget,
            max_num_seqs=min(budget, 32),
            num_pages=num_pages,
            max_model_len=128,
            **engine_kw,
        )
        mixed.append(_hidden_among_co_requests(llm, probe, rng))
        preemptions += llm.stats()["num_preemptions"]
    return alone, mixed, preemptions


@pytest.mark.parametrize("arch", ["llama", "deepseek_v3", "deepseek_v32"])
def test_probe_output_is_bitwise_identical_in_any_batch(arch):
    alone, mixed, preemptions = _scenario(arch, batch_invariant=True, n_samples=3)
    assert preemptions > 0
    for tokens, bits in mixed:
        assert tokens == alone[0]
        assert bits == alone[1]


def test_a_sliding_window_keeps_the_mode(monkeypatch):
    """mistral (an 8-key window on every layer) with 16-key KV blocks, so that the blocks
    before a token's window are skipped, from a first block that follows the other rows of
    its tile or decode batch: the probe stays bitwise the same alone, among co-requests with
    preemption, and decoded vs prefilled."""
    monkeypatch.setattr(llm_module, "_KV_BLOCK_TOKENS", 16)
    # Pages behind the window go back to the pool, so the pool is smaller here: at a
    # budget of 32 a sequence holds at most 1 + ceil((7 + 31) / 16) = 4 pages of 16.
    alone, mixed, preemptions = _scenario(
        "mistral", batch_invariant=True, budgets=(16, 32), num_pages=4
    )
    assert preemptions > 0
    for tokens, bits in mixed:
        assert (tokens, bits) == alone
    llm = LLM(model=str(FIXTURES / "mistral"), batch_invariant=True, max_model_len=128)
    one = SamplingParams(max_tokens=1, ignore_eos=True)
    for j in (3, 11):
        (out,) = llm.generate([_probe("mistral") + alone[0][:j]], one)
        assert (out.token_ids, _bits(out.logprobs)) == (alone[0][j : j + 1], alone[1][j : j + 1])


def test_fp8_kv_pages_keep_the_mode(monkeypatch):
    """Each cached row is quantized from itself alone, so fp8 pages keep the probe bitwise.
    With 32-key KV blocks (a 128-token sequence spans 4): the MLA attention takes the
    tiled path, whose tiles and blocks must keep the mode too (the other scenarios' page
    tables are one block wide, attended densely)."""
    monkeypatch.setattr(llm_module, "_KV_BLOCK_TOKENS", 32)
    alone, mixed, preemptions = _scenario(
        "deepseek_v3", batch_invariant=True, budgets=(16, 80), kv_cache_dtype="fp8"
    )
    assert preemptions > 0
    for tokens, bits in mixed:
        assert (tokens, bits) == alone


def test_without_the_mode_the_same_scenario_may_differ(capsys):
    # The GQA fixture: its steps compile in about half deepseek_v3's time at this file's
    # optimization level, and its probe bits differ too (2/2 when last measured).
    alone, mixed, _ = _scenario("llama", batch_invariant=False, budgets=(80, 512))
    differ = sum(bits != alone[1] for _, bits in mixed)
    with capsys.disabled():
        print(
            f"\n[batch_invariant=False] probe logprob bits differed in {differ}/{len(mixed)} "
            "mixed batches"
        )


@pytest.mark.parametrize("arch", ["llama", "deepseek_v3"])
def test_decode_equals_prefill_of_the_same_position(arch):
    # The scenario's pool (_scenario): its step programs serve these shapes too.
    llm = LLM(
        model=str(FIXTURES / arch),
        batch_invariant=True,
        max_model_len=128,
        num_pages=8,
        max_num_batched_tokens=64,
    )
    probe = _probe(arch)
    (full,) = llm.generate([probe], PROBE_PARAMS)
    one = SamplingParams(max_tokens=1, ignore_eos=True)
    for j in (1, 5, 11):
        (out,) = llm.generate([probe + full.token_ids[:j]], one)
        assert out.token_ids == full.token_ids[j : j + 1]
        assert _bits(out.logprobs) == _bits(full.logprobs[j : j + 1])


def test_the_mode_still_matches_hugging_face():
    ref = json.loads((FIXTURES / "qwen3_moe" / "reference.json").read_text())
    llm = LLM(
        model=str(FIXTURES / "qwen3_moe"), batch_invariant=True, max_model_len=128, num_pages=32
    )
    outs = llm.generate(ref["prompts"], SamplingParams(max_tokens=16, ignore_eos=True))
    for out, tokens, logprobs in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
        assert out.token_ids == tokens
        np.testing.assert_allclose(out.logprobs, logprobs, atol=2e-3, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "deepseek_v3"])
def test_pallas_kernels_keep_the_mode(arch):
    """attention_impl="pallas" (interpret mode on CPU): each kernel program reduces a fixed
    query tile over KV blocks aligned to position 0, so the probe is bitwise the same alone,
    among co-requests with preemption, and decoded vs prefilled."""
    probe = _probe(arch)
    rng = np.random.default_rng(5)

    def engine(**kw):
        return LLM(
            model=str(FIXTURES / arch),
            batch_invariant=True,
            attention_impl="pallas",
            max_model_len=128,
            **kw,
        )

    # Alone in the batched runs' pool: the same KV shapes, so their step programs are shared.
    (alone,) = engine(num_pages=8).generate([probe], PROBE_PARAMS)
    preemptions = 0
    for budget in (16, 80):
        llm = engine(max_num_batched_tokens=budget, max_num_seqs=min(budget, 32), num_pages=8)
        assert _hidden_among_co_requests(llm, probe, rng) == (
            alone.token_ids,
            _bits(alone.logprobs),
        )
        preemptions += llm.stats()["num_preemptions"]
    assert preemptions > 0
    (next_one,) = llm.generate(
        [probe + alone.token_ids[:5]], SamplingParams(max_tokens=1, ignore_eos=True)
    )
    assert next_one.token_ids == alone.token_ids[5:6]
    assert _bits(next_one.logprobs) == _bits(alone.logprobs[5:6])
