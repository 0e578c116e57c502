"""The serving engine end to end: HF parity through LLM.generate, continuous batching with
preemption, abort, seeded sampling, bounded compilation, bad input."""

from __future__ import annotations

import collections
import json
import pathlib
import re
import time

import jax
import numpy as np
import pytest

from configs.presets import get_preset
from engine import LLM, SamplingParams, attention_ops, mla_expanded, runner
from models.load import convert_hf_to_orbax
from tests.test_prefix_cache import _bits

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
# qwen2_sliding: a 6-key sliding window on layer 1, full attention on layer 0; gpt_oss: an
# 8-key window on layer 0 and attention sinks (both hybrid models: the windowed layer's KV
# in a page pool of its own). The other families added in the 23rd session (qwen2_moe,
# olmoe, ernie4_5_moe, glm4_moe, glm4_moe_lite) differ from these in layer code the
# reference path checks against HF (test_hf_parity.py); left out here for the suite's time.
ARCHS = ["llama", "qwen2_sliding", "qwen3", "qwen3_moe", "mixtral"]
ARCHS += ["deepseek_v2", "deepseek_v3", "gpt_oss"]
GREEDY = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)


def _reference(arch: str) -> dict:
    return json.loads((FIXTURES / arch / "reference.json").read_text())


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_matches_hf_for_every_prefill_chunk_budget(arch, monkeypatch):
    ref = _reference(arch)
    # MLA: the 33-token prompt's span is long enough at the fixtures' heads for the expanded
    # form (the engine's choice for long prefill spans), so budgets of 64 and more check it.
    expanded_spans = []

    def spy(q_nope, *args):
        expanded_spans.append(q_nope.shape)
        return mla_expanded.paged_attention_mla_expanded(q_nope, *args)

    monkeypatch.setattr(attention_ops, "XLA_OPS", attention_ops.XLA_OPS._replace(mla_expanded=spy))
    jax.clear_caches()  # so the step is traced here, whatever ran before in this process
    for budget in (16, 64, 4096):
        llm = LLM(
            model=str(FIXTURES / arch),
            max_num_batched_tokens=budget,
            num_pages=32,
            max_model_len=128,
        )
        start = time.perf_counter()
        outs = llm.generate(ref["prompts"], GREEDY)
        wall = time.perf_counter() - start
        for out, tokens, logprobs in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
            assert out.token_ids == tokens, f"{arch} budget={budget}"
            np.testing.assert_allclose(out.logprobs, logprobs, atol=2e-3, rtol=0)
            assert out.finish_reason == "length"
        stats = llm.stats()
        assert stats["num_pages_free"] == stats["num_pages_total"]
        # The engine's split of its steps' time: both parts happened, neither is counted twice.
        assert 0 < stats["host_seconds"] and 0 < stats["wait_seconds"]
        assert stats["host_seconds"] + stats["wait_seconds"] <= wall
    # (Traced once: the engines share compiled steps.)
    assert bool(expanded_spans) == arch.startswith("deepseek")


# Families HF parity checks (tests/test_hf_parity.py) but ARCHS above does not: one chunked
# budget each (the prompts span several chunks and pages), every step padded to it
# (token_buckets: one program to compile, not five), keeps the suite short.
@pytest.mark.parametrize(
    "arch",
    [
        *("qwen2_moe", "olmoe", "ernie4_5_moe", "glm4_moe", "glm4_moe_lite", "minimax_m2"),
        *("dots1", "granitemoe", "flex_olmo"),  # (FlexOlmo: no norm before its blocks)
        # (Shared latent pages and indexers; chunked layers in a pool of their own.)
        "mistral_large4",
        "llama4",
        # (Windowed layers' pages in their pool, the global layers' wider ones in the main;
        # MiMo's values narrower than its keys, LongCat's MoE across two MLA layers.)
        *("gemma4", "mimo_v2_flash", "longcat_flash"),
        "gemma2",  # (its attention scores soft-capped)
        "laguna",  # (query heads per layer, softplus gates, a capped router)
        "kolibri1",  # (global layers without positions, a router biased on its logits)
        "bloom",  # (ALiBi: its slopes on every chunk's tiles and the decodes)
        *("gemma4_e", "gemma3n", "gemma4_unified", "zamba2"),  # (KV sharing, AltUp, Zamba2)
    ],
)
def test_generate_matches_hf_in_small_prefill_chunks(arch):
    ref = _reference(arch)
    kw = dict(max_num_batched_tokens=16, num_pages=32, max_model_len=128, token_buckets=(16,))
    llm = LLM(model=str(FIXTURES / arch), **kw)
    outs = llm.generate(ref["prompts"], GREEDY)
    assert llm.stats()["num_compiles"] == 1
    for out, tokens, logprobs in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
        assert out.token_ids == tokens, arch
        np.testing.assert_allclose(out.logprobs, logprobs, atol=2e-3, rtol=0)
    assert llm.stats()["num_pages_free"] == 32


def _alone(llm: LLM, prompt, params):
    (out,) = llm.generate([prompt], params)
    return out


@pytest.mark.parametrize("arch", ["deepseek_v3"])  # MLA + MoE; GQA is covered by the others
def test_concurrent_requests_with_preemption_equal_each_request_alone(arch):
    rng = np.random.default_rng(7)
    n = 21
    prompts = [rng.integers(3, 512, int(rng.integers(1, 101))).tolist() for _ in range(n)]
    params = [
        SamplingParams(max_tokens=int(rng.integers(1, 25)), ignore_eos=True) for _ in range(n)
    ]
    # 32 pages of 16 tokens (the chunk-budget test's pool: its step programs): the largest
    # request needs 8, the whole load ~60.
    llm = LLM(
        model=str(FIXTURES / arch),
        num_pages=32,
        page_size=16,
        max_num_batched_tokens=64,
        max_num_seqs=16,
        max_model_len=128,
    )
    outs = llm.generate(prompts, params)
    stats = llm.stats()
    assert stats["num_preemptions"] > 0
    assert stats["num_pages_free"] == stats["num_pages_total"] == 32
    for prompt, p, out in zip(prompts, params, outs, strict=True):
        alone = _alone(llm, prompt, p)
        assert len(out.token_ids) == p.max_tokens
        assert out.token_ids == alone.token_ids
        np.testing.assert_allclose(out.logprobs, alone.logprobs, atol=1e-4, rtol=0)


def test_abort_mid_generation_frees_pages_and_leaves_others_unaffected():
    # The budget test's pool and length: its step programs (make test's compilation cache).
    llm = LLM(model=str(FIXTURES / "qwen3"), num_pages=32, max_model_len=128)
    prompts = [[5, 6, 7, 8, 9], list(range(10, 40)), [100, 200, 300]]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    alone = [_alone(llm, p, params) for p in prompts]
    ids = [llm.add_request(p, params) for p in prompts]
    deltas = {rid: [] for rid in ids}
    for _ in range(4):
        for d in llm.step():
            deltas[d.request_id].extend(d.token_ids)
    free_before = llm.stats()["num_pages_free"]
    assert llm.abort(ids[1])
    assert not llm.abort("no-such-request")
    finished = {}
    while llm.has_unfinished():
        for d in llm.step():
            deltas[d.request_id].extend(d.token_ids)
            if d.finish_reason is not None:
                finished[d.request_id] = d.finish_reason
    assert finished[ids[1]] == "abort"
    assert len(deltas[ids[1]]) == 4
    assert deltas[ids[1]] == alone[1].token_ids[:4]
    for i in (0, 2):
        assert finished[ids[i]] == "length"
        assert deltas[ids[i]] == alone[i].token_ids
    stats = llm.stats()
    assert stats["num_pages_free"] == stats["num_pages_total"] > free_before


def test_streaming_yields_the_same_tokens_as_generate():
    llm = LLM(model=str(FIXTURES / "mixtral"), num_pages=32, max_model_len=128)
    ref = _reference("mixtral")
    got = {}
    for deltas in llm.stream(ref["prompts"], GREEDY):
        for d in deltas:
            got.setdefault(d.request_id, []).extend(d.token_ids)
    assert list(got.values()) == ref["greedy_tokens"]


def test_seeded_sampling_is_the_same_alone_and_in_a_batch():
    llm = LLM(model=str(FIXTURES / "llama"), num_pages=32, max_model_len=128)
    target = [11, 22, 33, 44, 55, 66]
    params = SamplingParams(
        temperature=0.9, top_k=40, top_p=0.95, seed=1234, max_tokens=12, ignore_eos=True
    )
    alone = _alone(llm, target, params).token_ids
    others = [
        SamplingParams(temperature=1.0, seed=s, max_tokens=10, ignore_eos=True) for s in (1, 2, 3)
    ]
    batch = llm.generate(
        [[7, 8], target, list(range(3, 60)), [9]], [others[0], params, others[1], others[2]]
    )
    assert batch[1].token_ids == alone
    other_seed = SamplingParams(**{**params.__dict__, "seed": 4321})
    assert _alone(llm, target, other_seed).token_ids != alone


def test_greedy_rows_are_bitwise_the_same_in_the_greedy_and_the_sampling_program():
    """An all-greedy batch runs a step compiled without the sampler; a greedy row's tokens and
    logprob bits are those it gets beside a sampled row (the same shapes, in the program
    that samples), greedy traffic never compiles the sampling program, and once a step has
    sampled it runs that one (runner.StickyFeatures): same bits, no new compilation."""
    llm = LLM(model=str(FIXTURES / "llama"), num_pages=32, max_model_len=128)
    prompt = [11, 22, 33, 44, 55, 66]
    greedy = SamplingParams(max_tokens=8, ignore_eos=True)
    sampled = SamplingParams(temperature=0.9, top_k=40, seed=3, max_tokens=8, ignore_eos=True)
    beside_greedy = llm.generate([prompt, [7, 8, 9]], [greedy, greedy])[0]
    assert {v[0][2] for v in llm._variant_shapes} == {False}  # the greedy program only
    beside_sampled = llm.generate([prompt, [7, 8, 9]], [greedy, sampled])[0]
    assert {v[0][2] for v in llm._variant_shapes} == {False, True}
    programs = set(llm._variant_shapes)
    greedy_again = llm.generate([prompt, [7, 8, 9]], [greedy, greedy])[0]
    assert llm._variant_shapes == programs  # (the sampling program, kept on)
    for out in (beside_sampled, greedy_again):
        assert out.token_ids == beside_greedy.token_ids
        assert _bits(out.logprobs) == _bits(beside_greedy.logprobs)


def test_compilations_are_bounded_by_the_buckets():
    llm = LLM(
        model="tiny-qwen3",
        max_num_batched_tokens=64,
        max_num_seqs=16,
        num_pages=64,
        max_model_len=256,
    )
    rng = np.random.default_rng(3)
    prompts = [rng.integers(3, 512, int(rng.integers(1, 120))).tolist() for _ in range(12)]
    params = [
        SamplingParams(max_tokens=int(rng.integers(1, 10)), ignore_eos=True) for _ in range(12)
    ]
    llm.generate(prompts, params)
    llm.generate(prompts[:3], params[:3])
    stats = llm.stats()
    # Each shape bucket compiled exactly once, and there are few of them.
    assert stats["num_compiles"] == stats["num_step_shapes"] <= stats["num_buckets"]
    # T = S = 8 (runner.TOKEN_FLOOR); T in 16, 32, 64 with S in 8, 16 (runner.SEQ_FLOOR).
    assert stats["num_buckets"] == 1 + 3 * 2


@pytest.mark.parametrize(
    "prompt, params, field",
    [
        ([], SamplingParams(), "prompt"),
        ([5] * 200, SamplingParams(), "max_model_len"),
        ([5, 600], SamplingParams(), "vocabulary"),
        ("a string", SamplingParams(), "tokenizer"),
        ([5, 6], "not params", "sampling_params"),
    ],
)
def test_bad_input_raises_before_queueing_and_engine_stays_usable(prompt, params, field):
    llm = _bad_input_llm()
    with pytest.raises(ValueError, match=field):
        llm.generate([[5, 6, 7], prompt], params)
    stats = llm.stats()
    assert stats["num_waiting"] == stats["num_running"] == 0
    assert stats["num_pages_free"] == stats["num_pages_total"]
    (out,) = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3))
    assert len(out.token_ids) == 3


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(max_tokens=-1), "max_tokens"),
        (dict(temperature=-0.5), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-2), "top_k"),
        (dict(max_tokens=True), "max_tokens"),
        (dict(stop_token_ids=5), "stop_token_ids"),
        (dict(stop_token_ids=["x"]), "stop_token_ids"),
        (dict(prompt_logprobs=True, max_tokens=0), "prompt_logprobs"),
        (dict(temperature=float("inf")), "temperature"),
        (dict(temperature=True), "temperature"),
        (dict(temperature="0.5"), "temperature"),
        (dict(top_k=-1), "top_k"),
        (dict(top_k=2.5), "top_k"),
        (dict(seed=2**32), "seed"),
        (dict(seed=-1), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(stop_token_ids=[-1]), "stop_token_ids"),
        (dict(stop_token_ids=[True]), "stop_token_ids"),
        (dict(stop_token_ids=b"\x05"), "stop_token_ids"),
    ],
)
def test_bad_sampling_params(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_sampling_params_edges_and_normalization():
    params = SamplingParams(seed=2**32 - 1, top_k=0, stop_token_ids=[np.int64(5), 6])
    assert params.stop_token_ids == (5, 6) and all(type(t) is int for t in params.stop_token_ids)
    # numpy scalars are taken as the Python numbers they hold (an engine derives per-request
    # seeds from them; a numpy seed once broke that).
    params = SamplingParams(
        temperature=np.float32(0.5), max_tokens=np.int64(4), top_p=np.float64(0.9),
        top_k=np.int32(3), seed=np.uint32(7), ignore_eos=np.bool_(True),
    )  # fmt: skip
    assert params == SamplingParams(
        temperature=0.5, max_tokens=4, top_p=0.9, top_k=3, seed=7, ignore_eos=True
    )
    assert [type(getattr(params, f)) for f in ("temperature", "max_tokens", "seed")] == [
        float,
        int,
        int,
    ]
    for bad in ("False", 0, None):
        with pytest.raises(ValueError, match="ignore_eos="):
            SamplingParams(ignore_eos=bad)
    for bad in ("False", -1, 21, 1.0):  # vLLM's integer form: 0 (= True) to 20 top tokens
        with pytest.raises(ValueError, match=r"prompt_logprobs=.*an integer in \[0, 20\]"):
            SamplingParams(prompt_logprobs=bad)
    assert SamplingParams(prompt_logprobs=0).prompt_logprobs is True
    assert SamplingParams(prompt_logprobs=None).prompt_logprobs is False
    assert SamplingParams(prompt_logprobs=np.int64(3)).num_prompt_top_logprobs == 3


def test_bad_engine_arguments():
    with pytest.raises(ValueError, match="unknown preset"):
        LLM(model="no-such-model")
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        LLM(model="/tmp/does-not-exist/model")
    with pytest.raises(ValueError, match="page_size"):
        LLM(model="tiny-qwen3", page_size=0)
    with pytest.raises(ValueError, match="max_model_len"):
        LLM(model="tiny-qwen3", max_model_len=10**9)
    with pytest.raises(ValueError, match="token_buckets=.*max_num_batched_tokens=64"):
        LLM(model="tiny-qwen3", max_num_batched_tokens=64, token_buckets=(32,))


_LLM_CACHE: dict = {}


def _bad_input_llm() -> LLM:
    if "llm" not in _LLM_CACHE:
        _LLM_CACHE["llm"] = LLM(model="tiny-llama", max_model_len=64, num_pages=16)
    return _LLM_CACHE["llm"]


def _drain(llm: LLM, max_steps: int = 200) -> dict[str, tuple[list[int], str | None]]:
    """Step until nothing is left; each request's tokens and finish reason from the deltas."""
    got: dict[str, tuple[list[int], str | None]] = {}
    for _ in range(max_steps):
        if not llm.has_unfinished():
            return got
        for d in llm.step():
            tokens, _ = got.setdefault(d.request_id, ([], None))
            tokens.extend(d.token_ids)
            got[d.request_id] = (tokens, d.finish_reason)
    raise AssertionError(f"still unfinished after {max_steps} steps")


def _all_pages_free(llm: LLM) -> bool:
    stats = llm.stats()
    return stats["num_pages_free"] == stats["num_pages_total"]


def test_request_ids_stay_taken_until_their_last_delta():
    llm = _bad_input_llm()
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    want = _alone(llm, [8, 9, 10], params).token_ids
    # Automatic ids skip the ones callers chose.
    n = int(llm.add_request([5, 6], params)) + 1
    mine = [llm.add_request([5, 6, 7], params, request_id=str(n + k)) for k in range(2)]
    outs = llm.generate([[8, 9, 10], [8, 9, 10]], params)
    assert not {o.request_id for o in outs} & set(mine)
    assert [o.token_ids for o in outs] == [want, want]
    _drain(llm)  # (generate's steps ran the hand-added requests too, deltas unread)
    assert _all_pages_free(llm)
    # An aborted id is taken until the step() that returns its "abort" delta.
    llm.add_request([5, 6, 7], params, request_id="x")
    llm.step()
    assert llm.abort("x")
    with pytest.raises(ValueError, match="request_id='x'"):
        llm.add_request([8, 9, 10], params, request_id="x")
    deltas = llm.step()
    assert [(d.request_id, d.finish_reason) for d in deltas] == [("x", "abort")]
    assert _all_pages_free(llm)
    llm.add_request([8, 9, 10], params, request_id="x")
    assert _drain(llm) == {"x": (want, "length")}
    # max_tokens=0 by hand: a "length" delta from the next step(), then the id is free.
    llm.add_request([5], SamplingParams(max_tokens=0), request_id="z")
    assert llm.has_unfinished()  # until step() has returned its delta
    with pytest.raises(ValueError, match="request_id='z'"):
        llm.add_request([5], params, request_id="z")
    assert [(d.request_id, d.token_ids, d.finish_reason) for d in llm.step()] == [
        ("z", (), "length")
    ]
    llm.add_request([8, 9, 10], params, request_id="z")
    assert _drain(llm) == {"z": (want, "length")} and _all_pages_free(llm)


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_failed_launches_and_an_interrupted_readback_leave_the_engine_consistent(
    async_scheduling, monkeypatch
):
    """A step whose launch raises (a compile or allocation failure) is taken back and the
    same work scheduled again; one whose readback is interrupted (Ctrl-C while waiting) is
    read back by the next step(). The tokens are those of an undisturbed run."""
    llm = _bad_input_llm()
    llm.async_scheduling = async_scheduling
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    prompts = [[5, 6, 7], list(range(10, 30)), [8, 9]]
    want = [o.token_ids for o in llm.generate(prompts, params)]
    real_step, real_get, calls = llm._steps.plain, jax.device_get, collections.Counter()

    def flaky_step(*args):
        calls["step"] += 1
        if calls["step"] in (2, 3, 6):
            raise RuntimeError("RESOURCE_EXHAUSTED: injected")
        return real_step(*args)

    def flaky_get(x):
        calls["get"] += 1
        if calls["get"] == 3:
            raise KeyboardInterrupt
        return real_get(x)

    flaky_step._cache_size = real_step._cache_size  # for stats()
    monkeypatch.setattr(llm._steps, "plain", flaky_step)
    monkeypatch.setattr(jax, "device_get", flaky_get)
    try:
        ids = [llm.add_request(p, params) for p in prompts]
        got, raised = {}, collections.Counter()
        for _ in range(100):
            if not llm.has_unfinished():
                break
            try:
                deltas = llm.step()
            except (RuntimeError, KeyboardInterrupt) as e:
                raised[type(e).__name__] += 1
                continue
            for d in deltas:
                got.setdefault(d.request_id, []).extend(d.token_ids)
        assert raised == {"RuntimeError": 3, "KeyboardInterrupt": 1}
        assert [got[rid] for rid in ids] == want
        assert _all_pages_free(llm)
        # generate() that raises aborts its requests; the engine goes on.
        calls["step"] = 5  # the next launch fails
        with pytest.raises(RuntimeError, match="injected"):
            llm.generate(prompts, params)
        _drain(llm)
        assert _all_pages_free(llm) and llm.stats()["num_running"] == 0
    finally:
        llm.async_scheduling = True
    assert [o.token_ids for o in llm.generate(prompts, params)] == want


def test_stream_ends_on_its_records_and_closing_it_aborts(monkeypatch):
    llm = _bad_input_llm()
    params = SamplingParams(max_tokens=3, ignore_eos=True)
    want = _alone(llm, [5, 6, 7], params).token_ids
    real_step, steps = llm.step, [0]

    def counted_step():
        steps[0] += 1
        assert steps[0] < 100, "stream() keeps stepping an idle engine"
        return real_step()

    monkeypatch.setattr(llm, "step", counted_step)
    stream = llm.stream([[5, 6, 7]], params)
    first = next(stream)
    llm.generate([[8, 9]], params)  # finishes the stream's request too
    rest = [d for deltas in stream for d in deltas]
    assert [d.token_ids for d in first] == [(want[0],)] and rest == []
    assert _all_pages_free(llm)
    # Closing a stream early aborts what it has not finished, and frees its pages with the
    # next step, which hands no one "abort" deltas for ids only the closed stream knew.
    stream = llm.stream([[5, 6, 7], [8, 9]], SamplingParams(max_tokens=50, ignore_eos=True))
    next(stream)
    stream.close()
    assert llm.step() == [] and _all_pages_free(llm) and not llm.has_unfinished()
    # max_tokens=0: its finish delta comes first, before any step.
    steps[0] = 0
    zero = SamplingParams(max_tokens=0)
    deltas = [d for ds in llm.stream([[5, 6, 7], [5]], [params, zero]) for d in ds]
    assert steps[0] > 0 and deltas[0].finish_reason == "length" and not deltas[0].token_ids
    assert [d.token_ids[0] for d in deltas[1:]] == want


@pytest.mark.parametrize("arch", ["llama", "deepseek_v3"])
def test_score_matches_the_hf_logprobs_of_the_greedy_continuation(arch):
    """score(prompt + greedy tokens)[len(prompt) - 1:] are HF's chosen-token logprobs; chunks
    of 16 tokens make the scored rows span several steps."""
    ref = _reference(arch)
    llm = LLM(
        model=str(FIXTURES / arch), max_num_batched_tokens=16, num_pages=32, max_model_len=128
    )
    seqs = [p + g for p, g in zip(ref["prompts"], ref["greedy_tokens"], strict=True)]
    scores = llm.score(seqs)
    for s, p, seq, logprobs in zip(scores, ref["prompts"], seqs, ref["logprobs"], strict=True):
        assert s.shape == (len(seq) - 1,)
        np.testing.assert_allclose(s[len(p) - 1 :], logprobs, atol=2e-3, rtol=0)
    stats = llm.stats()
    assert stats["num_pages_free"] == stats["num_pages_total"]


def test_prompt_logprobs_k_are_the_hf_top_tokens():
    """prompt_logprobs=k: past the prompt, each position's top token is HF's greedy one with
    HF's logprob; at the prompt's last position the k most likely are those of HF's logits."""
    ref = _reference("llama")
    llm = LLM(
        model=str(FIXTURES / "llama"), max_num_batched_tokens=16, num_pages=32, max_model_len=128
    )
    prompt, greedy = ref["prompts"][0], ref["greedy_tokens"][0]
    (out,) = llm.generate([prompt + greedy], SamplingParams(max_tokens=1, prompt_logprobs=5))
    tops = out.prompt_top_logprobs
    assert len(tops) == len(out.prompt_logprobs) == len(prompt + greedy) - 1
    assert all(len(t) == 5 and t == sorted(t, key=lambda p: -p[1]) for t in tops)
    past = tops[len(prompt) - 1 :]
    assert [t[0][0] for t in past] == greedy
    np.testing.assert_allclose([t[0][1] for t in past], ref["logprobs"][0], atol=2e-3, rtol=0)
    logits = np.asarray(ref["last_prefill_logits_prompt0"], np.float64)
    hf = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
    order = np.argsort(-hf, kind="stable")[:5]  # gaps >= 0.018 in the fixture
    assert [t for t, _ in tops[len(prompt) - 1]] == order.tolist()
    np.testing.assert_allclose([lp for _, lp in tops[len(prompt) - 1]], hf[order], atol=2e-3)
    # Each prompt token's own logprob is at most its position's top one.
    assert all(lp <= t[0][1] + 1e-6 for lp, t in zip(out.prompt_logprobs, tops, strict=True))
    (plain,) = llm.generate([prompt + greedy], SamplingParams(max_tokens=1, prompt_logprobs=True))
    assert plain.prompt_top_logprobs is None and plain.prompt_logprobs == out.prompt_logprobs


def _mixed_run(async_scheduling: bool) -> tuple[dict, dict]:
    """Stop tokens, preemption and an abort after a request's 3rd token; every output."""
    rng = np.random.default_rng(5)
    llm = LLM(
        model=str(FIXTURES / "llama"),
        batch_invariant=True,
        num_pages=10,
        page_size=16,
        max_num_batched_tokens=64,
        max_num_seqs=16,
        max_model_len=128,
        async_scheduling=async_scheduling,
    )
    stop = tuple(range(3, 512, 9))
    ids = []
    for k in range(14):
        prompt = rng.integers(3, 512, int(rng.integers(1, 61))).tolist()
        params = SamplingParams(
            temperature=0.0 if k % 3 else 0.8,
            seed=k,
            max_tokens=int(rng.integers(1, 17)),
            stop_token_ids=list(stop) if k % 2 else [],
            ignore_eos=True,
        )
        ids.append(llm.add_request(prompt, params, request_id=f"r{k}"))
    victim = "r4"
    got = {rid: ([], [], None) for rid in ids}
    while llm.has_unfinished():
        for d in llm.step():
            tokens, logprobs, _ = got[d.request_id]
            got[d.request_id] = (tokens + list(d.token_ids), logprobs + list(d.logprobs), None)
            got[d.request_id] = (*got[d.request_id][:2], d.finish_reason)
            if d.request_id == victim and len(got[victim][0]) == 3 and d.finish_reason is None:
                assert llm.abort(victim)
    out = {
        rid: (t, np.asarray(lp, np.float32).view(np.uint32).tolist(), r)
        for rid, (t, lp, r) in got.items()
    }
    return out, {**llm.stats(), "programs": set(llm._variant_shapes)}


def test_async_scheduling_gives_the_synchronous_outputs():
    sync, sync_stats = _mixed_run(async_scheduling=False)
    ahead, stats = _mixed_run(async_scheduling=True)
    assert ahead == sync  # tokens, logprob bits and finish reasons
    reasons = [r for _, _, r in sync.values()]
    assert "stop" in reasons and "length" in reasons and sync["r4"][2] == "abort"
    assert sync_stats["num_preemptions"] > 0 and stats["num_preemptions"] > 0
    assert sync_stats["num_steps_dispatched_ahead"] == 0
    assert stats["num_steps_dispatched_ahead"] > stats["num_steps"] // 2
    assert stats["num_pages_free"] == stats["num_pages_total"] == 10
    # Feeding placeholders on the device adds no compilations (both engines share them):
    # the second run compiled only the step programs (variant and shape) the first lacked.
    assert stats["num_compiles"] - sync_stats["num_compiles"] == len(
        stats["programs"] - sync_stats["programs"]
    )


def _dot_precisions(preset: str, dtype: str) -> list[tuple[str, str, str]]:
    """(precision, lhs type, rhs type) of every dot in the step program the engine compiles
    for its first step, read from the lowered StableHLO (lowered, never run)."""
    llm = LLM(model=preset, dtype=dtype, page_size=8, num_pages=8, max_model_len=32)
    llm.add_request([1, 2, 3, 4, 5], SamplingParams(max_tokens=1))
    sched = llm._scheduler.schedule()
    batch = runner.pack(sched.items, llm.page_size, llm._buckets)
    batch = batch._replace(prev_tokens=jax.numpy.zeros(llm._buckets.feed_rows, np.int32))
    text = llm._steps.plain.lower(llm.params, llm._kv, batch).as_text()
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    found = [
        re.search(r"precision = \[(\w+), \1\] : \(tensor<[\dx]*(\w+)>, tensor<[\dx]*(\w+)>", d)
        for d in dots
    ]
    assert dots and all(found), dots
    return [m.groups() for m in found]


@pytest.mark.parametrize("preset", ["tiny-deepseek-v3", "tiny-mixtral"])
def test_float32_models_compute_float32_matmuls_and_bf16_ones_only_their_router(preset):
    """XLA:GPU runs a DEFAULT float32 dot in TF32 (seen on an H200: logprobs 0.2 from HF's),
    so a float32 model asks for HIGHEST everywhere; a bfloat16 one only in its float32
    router (one per MoE layer), leaving its bf16 matmuls at the fast default."""
    cfg = get_preset(preset)
    assert {p for p, _, _ in _dot_precisions(preset, "float32")} == {"HIGHEST"}
    bf16 = _dot_precisions(preset, "bfloat16")
    highest = [(lhs, rhs) for p, lhs, rhs in bf16 if p == "HIGHEST"]
    moe_layers = sum(cfg.is_moe_layer(i) for i in range(cfg.num_layers))
    assert highest == [("f32", "f32")] * moe_layers
    assert all(p == "DEFAULT" for p, lhs, rhs in bf16 if "bf16" in (lhs, rhs))


def _text_prompt_ids(model_dir, text: str) -> list[int]:
    llm = LLM(model=str(model_dir), page_size=8, num_pages=8, max_model_len=32)
    (out,) = llm.generate([text], SamplingParams(max_tokens=0))
    return out.prompt_token_ids


def test_text_prompts_get_a_bos_only_where_the_tokenizer_files_ask(tmp_path):
    """The tokenizer decides, as in Hugging Face: its post-processor, or add_bos_token in
    tokenizer_config.json; never the config's bos_token_id alone (Qwen configs name one their
    tokenizer does not add). transformers 5.24 gave [3, 4, 5] for this text and tokenizer.json
    with no tokenizer_config.json (checked by hand)."""
    import shutil

    text = "the of and"
    model = tmp_path / "m"
    shutil.copytree(FIXTURES / "llama", model)
    assert json.loads((model / "config.json").read_text())["bos_token_id"] == 1
    assert _text_prompt_ids(model, text) == [3, 4, 5]
    tok_cfg = model / "tokenizer_config.json"
    tok_cfg.write_text(json.dumps({"add_bos_token": False, "bos_token": "<s>"}))
    assert _text_prompt_ids(model, text) == [3, 4, 5]
    tok_cfg.write_text(json.dumps({"add_bos_token": True, "bos_token": {"content": "<s>"}}))
    assert _text_prompt_ids(model, text) == [1, 3, 4, 5]
    convert_hf_to_orbax(str(model), str(tmp_path / "orbax"))  # carries tokenizer_config.json
    assert _text_prompt_ids(tmp_path / "orbax", text) == [1, 3, 4, 5]
    # A post-processor that adds <s> itself (Llama 3's, Mistral's): one BOS, not two.
    tok = json.loads((model / "tokenizer.json").read_text())
    tok["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [
            {"SpecialToken": {"id": "<s>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
        ],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
    }
    (model / "tokenizer.json").write_text(json.dumps(tok))
    assert _text_prompt_ids(model, text) == [1, 3, 4, 5]
    tok_cfg.unlink()
    assert _text_prompt_ids(model, text) == [1, 3, 4, 5]


def test_score_of_token_id_0_is_its_log_probability():
    """Token id 0 is a real token (a score target of 0 is not 'no target'): its prompt
    logprob is the model's, as the reference forward gives it."""
    from models.hf_loader import load_hf_params
    from models.reference import init_cache, reference_forward

    cfg = get_preset("tiny-llama")
    llm = LLM(model=str(FIXTURES / "llama"), num_pages=8, max_model_len=64)
    seq = [5, 0, 7, 0, 9]
    (got,) = llm.score([seq])
    params = load_hf_params(FIXTURES / "llama", cfg)
    logits, _ = reference_forward(
        params, cfg, np.asarray(seq, np.int32), np.int32(0), init_cache(cfg, 64)
    )
    logits = np.asarray(logits, np.float64)
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    want = [logits[i, seq[i + 1]] - logz[i] for i in range(len(seq) - 1)]
    np.testing.assert_allclose(got, want, atol=2e-3, rtol=0)


def test_a_sliding_window_model_gives_back_the_pages_behind_its_window():
    """mistral: an 8-key window on every layer. Pages of 8 and a 16-token budget: a step's
    chunk and the 7 keys before it span 23 positions, so 1 + ceil(22 / 8) = 4 pages at
    most (by hand), where the 49 KV tokens of the 33-token prompt need 7. A pool of 4 runs
    the fixture's prompts together to Hugging Face's tokens; in a pool of 8 the sequence
    never holds more than 4 after a step."""
    ref = _reference("mistral")

    def run(num_pages, prompts) -> tuple[dict, list[int]]:
        """Each request's tokens and logprobs, and the pages held after each step."""
        llm = LLM(
            model=str(FIXTURES / "mistral"),
            page_size=8,
            num_pages=num_pages,
            max_num_batched_tokens=16,
            max_model_len=128,
        )
        ids = [llm.add_request(p, GREEDY) for p in prompts]
        out = {rid: ([], []) for rid in ids}
        held = []
        for _ in range(200):  # (a regression that preempts forever fails, not hangs)
            if not llm.has_unfinished():
                break
            for d in llm.step():
                out[d.request_id][0].extend(d.token_ids)
                out[d.request_id][1].extend(d.logprobs)
            stats = llm.stats()
            held.append(stats["num_pages_total"] - stats["num_pages_free"])
        assert not llm.has_unfinished()
        return [out[rid] for rid in ids], held

    outs, _ = run(4, ref["prompts"])
    for (tokens, logprobs), want, want_lps in zip(
        outs, ref["greedy_tokens"], ref["logprobs"], strict=True
    ):
        assert tokens == want
        np.testing.assert_allclose(logprobs, want_lps, atol=2e-3, rtol=0)
    _, held = run(8, ref["prompts"][2:])  # without the window's release: up to 7 pages
    assert max(held) <= 4 and held[-1] == 0


def test_a_hybrid_models_two_pools_share_the_memory_budget(monkeypatch):
    """Without num_pages, the KV memory budget first loses the penalty state's room (made
    when a penalized request comes: [max_num_seqs, vocab] int32 counts and bool flags) and
    a hybrid model's windowed pool (kv_pages.window_pool_pages); the full-attention layers'
    pool gets whole pages of the rest: what the engine allocates fits the budget, one more
    page of the full layers would not."""
    from engine import kv_budget
    from engine.kv_pages import window_pool_pages

    budget = 1 << 20  # under what max_num_seqs full-length sequences would take
    monkeypatch.setattr(kv_budget, "CPU_KV_BUDGET", budget)
    llm = LLM(model="tiny-gpt-oss", page_size=16, max_num_seqs=4, max_num_batched_tokens=64)
    cfg = llm.config
    (window_layer,) = cfg.windowed_layers
    stats = llm.stats()
    assert stats["num_window_pages_total"] == window_pool_pages(cfg.sliding_window, 16, 4, 64)
    sizes = [layer[0].shape[0] for layer in llm._kv]
    assert sizes[window_layer] == stats["num_window_pages_total"]
    assert {n for i, n in enumerate(sizes) if i != window_layer} == {stats["num_pages_total"]}
    assert stats["num_pages_total"] < 4 * -(-llm.max_model_len // 16)  # the budget binds
    allocated = sum(a.nbytes for layer in llm._kv for a in layer) + 4 * cfg.vocab_size * 5
    full_page = sum(
        a.nbytes // a.shape[0]
        for i, layer in enumerate(llm._kv)
        for a in layer
        if i != window_layer
    )
    assert allocated <= budget < allocated + full_page


def test_a_hybrid_model_keeps_its_windowed_layers_kv_in_a_pool_of_their_own():
    """qwen2_sliding: layer 0 attends to every key, layer 1 through a 6-key window. With
    pages of 8, a 16-token budget and 2 sequences at most, the windowed layer's pool has
    ceil((2 x (2 x 8 + 6 - 2) + 2 x 16) / 8) = 9 pages (by hand: kv_pages.window_pool_pages),
    and layer 0 the 64 of num_pages. The fixture's prompts (5, 17, 33 tokens; 16 new each)
    run to Hugging Face's tokens. After every step a sequence with c KV tokens holds all
    ceil(c / 8) pages in the main pool and, in the windowed one, only those from the page
    of key c - 5 (the next query's first) on; their 3 + 4 + 6 = 13 page positions outnumber
    the 9 pages, so pages given back are written again by another sequence."""
    ref = _reference("qwen2_sliding")
    llm = LLM(
        model=str(FIXTURES / "qwen2_sliding"),
        page_size=8,
        num_pages=64,
        max_num_batched_tokens=16,
        max_num_seqs=2,
        max_model_len=128,
        async_scheduling=False,  # no step in flight between the checks below
    )
    stats = llm.stats()
    assert (stats["num_pages_total"], stats["num_window_pages_total"]) == (64, 9)
    assert [k.shape[0] for k, _ in llm._kv] == [64, 9]
    ids = [llm.add_request(p, GREEDY) for p in ref["prompts"]]
    out = {rid: ([], []) for rid in ids}
    holders = collections.defaultdict(set)  # windowed pool page -> requests that held it
    for _ in range(200):
        if not llm.has_unfinished():
            break
        for d in llm.step():
            out[d.request_id][0].extend(d.token_ids)
            out[d.request_id][1].extend(d.logprobs)
        running = llm._scheduler._running
        for seq in running:
            c = seq.num_computed_tokens
            assert len(seq.page_ids) == len(seq.window_page_ids) == -(-c // 8)
            assert seq.num_released_pages == 0
            assert seq.num_released_window_pages == max(0, c - 5) // 8
            for page in seq.window_page_ids[seq.num_released_window_pages :]:
                holders[page].add(seq.request_id)
        stats = llm.stats()
        held = sum(len(s.window_page_ids) - s.num_released_window_pages for s in running)
        assert stats["num_window_pages_total"] - stats["num_window_pages_free"] == held
        assert stats["num_pages_total"] - stats["num_pages_free"] == sum(
            len(s.page_ids) for s in running
        )
    assert not llm.has_unfinished()
    for rid, tokens, logprobs in zip(ids, ref["greedy_tokens"], ref["logprobs"], strict=True):
        assert out[rid][0] == tokens
        np.testing.assert_allclose(out[rid][1], logprobs, atol=2e-3, rtol=0)
    assert any(len(reqs) > 1 for reqs in holders.values())
    stats = llm.stats()
    assert stats["num_window_pages_free"] == 9 and stats["num_pages_free"] == 64
