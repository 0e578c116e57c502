"""Presence, frequency and repetition penalties (engine/penalties.py): the engine's greedy
decodes against Hugging Face models decoding under transformers' RepetitionPenaltyLogitsProcessor
and the OpenAI formula (tests/fixtures/make_hf_penalty_fixture.py); the device-side counts
against numpy's bincount; the penalty formula against a direct numpy transcription; and the
slot bookkeeping through preemption, aborts, async steps and more requests than slots."""

import pathlib
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

from engine import LLM, SamplingParams
from engine.penalties import (
    PenaltySlots,
    PenaltyState,
    apply_penalties,
    init_state,
    penalize,
    seed_rows,
    update_state,
)
from engine.runner import Buckets, pack
from tests.sampler_cases import POOL, cases, penalty_params

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
_params = penalty_params  # (case, **kw): the case's penalties, greedy, its length


def _plain(case) -> SamplingParams:
    return SamplingParams(max_tokens=len(case["tokens"]), ignore_eos=True)


def _cases(arch):
    return cases("hf_penalties", arch)


def _small_pool_llama(async_scheduling: bool = True, **options) -> LLM:
    """16 pages of 4 tokens (64 tokens), two sequences at most: the llama cases preempt
    each other. (max_model_len: the pool's 64 tokens, a page table no wider than one KV
    block, whose attention compiles in a third of the time of a 2048-token one.)"""
    return LLM(
        str(FIXTURES / "llama"),
        dtype="float32",
        page_size=4,
        num_pages=16,
        max_model_len=64,
        max_num_batched_tokens=16,
        max_num_seqs=2,
        async_scheduling=async_scheduling,
        **options,
    )


# ---- the formula and the counts -----------------------------------------------------------


def _numpy_penalties(logits, counts, in_prompt, rep, pres, freq):
    """Transcribed from the definitions: HF's RepetitionPenaltyLogitsProcessor (score < 0:
    score * r, else score / r, over prompt and output tokens) and the OpenAI API's
    mu[j] - c[j] * frequency - (c[j] > 0) * presence."""
    out = logits.astype(np.float32).copy()
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            if in_prompt[i, j] or counts[i, j] > 0:
                x = out[i, j]
                out[i, j] = x * np.float32(rep[i]) if x < 0 else x / np.float32(rep[i])
            out[i, j] -= np.float32(freq[i]) * np.float32(counts[i, j])
            out[i, j] -= np.float32(pres[i]) * np.float32(counts[i, j] > 0)
    return out


def test_apply_penalties_matches_the_definitions_and_leaves_rows_that_are_off_bitwise():
    rng = np.random.default_rng(0)
    s, v = 6, 40
    logits = rng.standard_normal((s, v)).astype(np.float32) * 3
    logits[0, :4] = [0.0, -0.0, np.inf * -1, 7.0]
    counts = rng.integers(0, 4, (s, v)) * (rng.random((s, v)) < 0.3)
    in_prompt = rng.random((s, v)) < 0.2
    rep = np.array([1.5, 0.7, 1.0, 2.0, 1.0, 1.2], np.float32)
    pres = np.array([0.0, 0.5, -1.0, 0.3, 0.0, 2.0], np.float32)
    freq = np.array([0.0, 0.2, 0.9, -0.4, 0.0, -2.0], np.float32)
    got = np.asarray(
        apply_penalties(
            jnp.asarray(logits),
            jnp.asarray(counts, jnp.int32),
            jnp.asarray(in_prompt),
            jnp.asarray(rep),
            jnp.asarray(pres),
            jnp.asarray(freq),
        )
    )
    want = _numpy_penalties(logits, counts, in_prompt, rep, pres, freq)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not np.array_equal(got[:4], logits[:4])
    np.testing.assert_array_equal(got[4].view(np.uint32), logits[4].view(np.uint32))


def test_update_state_counts_prompt_and_output_tokens_as_bincount_would():
    """A step of three rows: a decode (one output token), a chunk that starts a request (its
    row is zeroed first) and runs past its prompt (a recompute after preemption), and a
    middle prefill chunk; then padding tokens and an unpenalized row that write nothing."""
    vocab, slots = 12, 4
    rng = np.random.default_rng(1)
    old_counts = rng.integers(0, 3, (slots, vocab)).astype(np.int32)
    old_prompt = rng.random((slots, vocab)) < 0.5
    state = PenaltyState(jnp.asarray(old_counts), jnp.asarray(old_prompt))
    # rows: 0 = decode at position 9 (prompt 5) slot 2; 1 = recompute from 0, prompt 4,
    # 6 tokens, slot 0; 2 = prefill chunk at positions 3..5 of a prompt of 10, slot 3;
    # 3 = unpenalized decode; then 3 padding tokens.
    tok = [7, 1, 1, 5, 9, 1, 1, 4, 4, 11, 6, 0, 0, 0]
    pos = [9, 0, 1, 2, 3, 4, 5, 3, 4, 5, 20, 0, 0, 0]
    cu = [0, 1, 7, 10, 11]
    kv = [10, 6, 6, 21]
    slot = [2, 0, 3, -1]
    plen = [5, 4, 10, 3]
    new = update_state(state, *(jnp.asarray(a, jnp.int32) for a in (tok, pos, cu, kv, slot, plen)))
    counts, prompt = old_counts.copy(), old_prompt.copy()
    counts[2, 7] += 1
    counts[0], prompt[0] = 0, False
    counts[0] += np.bincount([1, 1], minlength=vocab)  # positions 4, 5 >= prompt 4
    prompt[0, [1, 5, 9]] = True
    prompt[3, [4, 11]] = True
    np.testing.assert_array_equal(np.asarray(new.output_counts), counts)
    np.testing.assert_array_equal(np.asarray(new.in_prompt), prompt)

    params = jnp.asarray([[1.3, 0.5, 0.25], [1.0, 0.0, 0.0], [2.0, 0.0, 1.0], [1.5, 1.0, 1.0]])
    logits = jnp.asarray(rng.standard_normal((4, vocab)), jnp.float32)
    got = np.asarray(penalize(logits, new, jnp.asarray(slot, jnp.int32), params))
    p = np.asarray(params)
    rows = [2, 0, 3]
    want = _numpy_penalties(
        np.asarray(logits)[:3], counts[rows], prompt[rows], p[:3, 0], p[:3, 1], p[:3, 2]
    )
    np.testing.assert_allclose(got[:3], want, rtol=1e-6)
    np.testing.assert_array_equal(got[3], np.asarray(logits)[3])  # slot -1: untouched


def test_update_state_keeps_a_row_that_starts_past_position_0_and_drops_padding_tokens():
    """Every row of the step is a request (no padding rows), so the padding tokens past
    cu_q_lens[-1] search into the last row: they must still write nowhere. Row 0 is the
    first decode of a 1-token prompt (position 1): its row was filled by the prefill before
    and is not a start, so nothing is zeroed; its output token is not marked as a prompt one."""
    vocab, slots = 10, 3
    rng = np.random.default_rng(3)
    old_counts = rng.integers(1, 3, (slots, vocab)).astype(np.int32)
    old_prompt = rng.random((slots, vocab)) < 0.5
    old_prompt[1, 6], old_prompt[1, 4] = True, False  # the prompt [6]; 4 is not in it
    state = PenaltyState(jnp.asarray(old_counts), jnp.asarray(old_prompt))
    # row 0: decode of token 4 at position 1, prompt 1, slot 1; row 1: a 3-token prompt
    # from position 0, slot 0; then 3 padding tokens (token 0 at position 0, as pack pads).
    tok = [4, 2, 5, 2, 0, 0, 0]
    pos = [1, 0, 1, 2, 0, 0, 0]
    cu, kv, slot, plen = [0, 1, 4], [2, 3], [1, 0], [1, 3]
    new = update_state(state, *(jnp.asarray(a, jnp.int32) for a in (tok, pos, cu, kv, slot, plen)))
    counts, prompt = old_counts.copy(), old_prompt.copy()
    counts[1] += np.bincount([4], minlength=vocab)
    counts[0], prompt[0] = 0, False
    prompt[0, [2, 5]] = True
    np.testing.assert_array_equal(np.asarray(new.output_counts), counts)
    np.testing.assert_array_equal(np.asarray(new.in_prompt), prompt)
    assert not prompt[0, 0] and not prompt[1, 4]

    params = jnp.asarray([[2.0, 0.5, 0.25], [1.5, 0.0, 0.0]], jnp.float32)
    logits = jnp.asarray(rng.standard_normal((2, vocab)), jnp.float32)
    got = np.asarray(penalize(logits, new, jnp.asarray(slot, jnp.int32), params))
    p = np.asarray(params)
    want = _numpy_penalties(np.asarray(logits), counts[[1, 0]], prompt[[1, 0]], *p.T)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_seeded_rows_are_what_steps_feeding_those_tokens_from_position_0_leave():
    """Two requests whose first steps start past 0: one at prompt position 6 (prompt 9),
    one re-admitted after a preemption at position 7 of a 5-token prompt (two outputs
    before it); their rows hold another request's counts. Seeding them equals a step that
    starts both at position 0 and feeds those tokens (update_state), other rows untouched."""
    vocab, num_slots = 12, 4
    rng = np.random.default_rng(4)
    old = PenaltyState(
        jnp.asarray(rng.integers(0, 3, (num_slots, vocab)), jnp.int32),
        jnp.asarray(rng.random((num_slots, vocab)) < 0.5),
    )
    a = [3, 3, 7, 1, 0, 11]  # prompt positions 0..5
    b_prompt, b_out = [2, 9, 9, 4, 5], [5, 8]
    i32 = lambda x: jnp.asarray(x, jnp.int32)  # noqa: E731
    want = update_state(
        old,
        i32(a + b_prompt + b_out + [0, 0]),  # two padding tokens
        i32(list(range(6)) + list(range(7)) + [0, 0]),
        i32([0, 6, 13]),
        i32([6, 7]),
        i32([3, 1]),
        i32([9, 5]),
    )
    tokens = a + b_prompt + b_out + [0, 0, 0]  # padded to 16
    owner = [0] * 6 + [1] * 7 + [-1] * 3
    is_output = [False] * 11 + [True, True] + [False] * 3
    got = seed_rows(old, i32([3, 1, -1, -1]), i32(tokens), i32(owner), jnp.asarray(is_output))
    np.testing.assert_array_equal(np.asarray(got.output_counts), np.asarray(want.output_counts))
    np.testing.assert_array_equal(np.asarray(got.in_prompt), np.asarray(want.in_prompt))
    assert np.asarray(got.output_counts)[1, [5, 8]].tolist() == [1, 1]


def test_penalty_slots_seed_the_rows_of_requests_starting_past_0():
    """fill() notes a new slot's request starting past position 0 (the prompt's tokens
    before it, and the output's after a preemption); seed() writes them and forgets them."""

    class It:
        def __init__(self, rid, start):
            self.request_id, self.start_pos = rid, start

    slots = PenaltySlots(3)
    params = np.float32([[1.2, 0, 0]] * 3)
    s, p = np.full(3, -1, np.int32), np.zeros(3, np.int32)
    prompts = {"a": [4, 5, 6, 7], "b": [1, 2, 3], "c": [8, 9]}
    outputs = {"b": [6, 6, 1], "a": [], "c": []}
    items = [It("a", 2), It("b", 5), It("c", 0)]
    slots.fill(
        items, params, lambda it: prompts[it.request_id], s, p, lambda it: outputs[it.request_id]
    )
    assert slots._to_seed == {"a": (0, [4, 5], []), "b": (1, [1, 2, 3], [6, 6])}
    state = slots.seed(init_state(3, 10))
    assert not slots._to_seed and slots.seed(state) is state
    counts, in_prompt = np.asarray(state.output_counts), np.asarray(state.in_prompt)
    assert np.flatnonzero(in_prompt[0]).tolist() == [4, 5] and not counts[0].any()
    assert np.flatnonzero(in_prompt[1]).tolist() == [1, 2, 3] and counts[1, 6] == 2
    assert not in_prompt[2].any() and not counts[2].any()  # c starts at 0: its step zeroes
    slots.release(["c"])
    slots.fill([It("d", 3)], params, lambda it: [1, 1, 1, 1], s, p)
    slots.release(["d"])  # released before its first step: nothing to seed
    assert not slots._to_seed


def test_init_state_is_zero():
    st = init_state(3, 7)
    assert st.output_counts.shape == (3, 7) and st.output_counts.dtype == jnp.int32
    assert not np.asarray(st.output_counts).any() and not np.asarray(st.in_prompt).any()


def test_penalty_slots_hand_out_reuse_and_refuse_past_capacity():
    class It:
        def __init__(self, rid, on=True):
            self.request_id = rid
            self.sampling_params = SamplingParams(repetition_penalty=1.1 if on else 1.0)

    def fill(items, prompt_len):
        # The step's penalty_params as runner.pack writes them, one padding row after.
        rows = [it.sampling_params for it in items]
        params = np.float32(
            [[r.repetition_penalty, r.presence_penalty, r.frequency_penalty] for r in rows]
            + [[1, 0, 0]]
        )
        return slots.fill(items, params, lambda it: [0] * prompt_len, s, p)

    slots = PenaltySlots(2)
    s, p = np.full(3, -1, np.int32), np.zeros(3, np.int32)
    assert fill([It("a"), It("x", on=False), It("b")], 10)
    assert s.tolist() == [0, -1, 1] and p.tolist() == [10, 0, 10] and len(slots) == 2
    s[:] = -1
    assert not fill([It("x", on=False)], 10)
    with pytest.raises(RuntimeError, match="no penalty slot left for 'c'"):
        fill([It("c")], 3)
    slots.release(["a", "a", "never"])
    s[:] = -1
    fill([It("b"), It("c")], 3)
    assert s[:2].tolist() == [1, 0] and p[:2].tolist() == [10, 3]


def test_pack_hands_the_step_each_rows_penalties_in_float32():
    """Columns repetition, presence, frequency, each the float32 of the request's value;
    padding rows are off (1, 0, 0); slots and prompt lengths are left to PenaltySlots."""
    sp = [
        SamplingParams(
            repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=-0.7, seed=1
        ),
        SamplingParams(seed=2),
        SamplingParams(
            repetition_penalty=0.9, presence_penalty=-1.9, frequency_penalty=1.1, seed=3
        ),
    ]
    items = [
        SimpleNamespace(
            request_id=str(i),
            token_ids=(5,),
            start_pos=0,
            kv_len_after=1,
            page_ids=(i,),
            sampling_params=p,
            num_generated=0,
            feed_index=-1,
        )
        for i, p in enumerate(sp)
    ]
    batch = pack(items, 16, Buckets(64, 8, pages_per_seq=2))
    rows = batch.penalty_params.shape[0]
    assert rows > len(items)  # a padding row to check
    want = np.zeros((rows, 3), np.float32)
    want[:, 0] = 1.0
    for i, p in enumerate(sp):
        want[i] = np.float32([p.repetition_penalty, p.presence_penalty, p.frequency_penalty])
    assert batch.penalty_params.dtype == np.float32
    np.testing.assert_array_equal(batch.penalty_params, want)
    assert (batch.penalty_slot == -1).all() and not batch.penalty_prompt_len.any()


@pytest.mark.parametrize(
    "field, value, limit",
    [
        ("presence_penalty", 2.5, r"\[-2.0, 2.0\]"),
        ("frequency_penalty", -2.01, r"\[-2.0, 2.0\]"),
        ("frequency_penalty", float("nan"), r"\[-2.0, 2.0\]"),
        ("presence_penalty", "0.1", r"\[-2.0, 2.0\]"),
        ("repetition_penalty", 0.0, r"\[0.01, 100.0\]"),
        ("repetition_penalty", 1e-38, r"\[0.01, 100.0\]"),
        ("repetition_penalty", 100.5, r"\[0.01, 100.0\]"),
        ("repetition_penalty", float("inf"), r"\[0.01, 100.0\]"),
        ("repetition_penalty", True, r"\[0.01, 100.0\]"),
    ],
)
def test_bad_penalties_are_refused_naming_the_field(field, value, limit):
    with pytest.raises(ValueError, match=field + ".*" + limit):
        SamplingParams(**{field: value})


def test_penalties_are_stored_as_floats_and_flag_the_request():
    sp = SamplingParams(presence_penalty=np.float32(0.5), repetition_penalty=np.int64(2))
    assert sp.presence_penalty == 0.5 and type(sp.presence_penalty) is float
    assert sp.repetition_penalty == 2.0 and sp.penalized
    assert not SamplingParams().penalized
    assert SamplingParams(frequency_penalty=-0.1).penalized


def test_penalty_bounds_are_inclusive_and_any_one_penalty_flags_the_request():
    for v in (-2.0, 2.0):
        sp = SamplingParams(presence_penalty=v, frequency_penalty=-v, repetition_penalty=100.0)
        assert (sp.presence_penalty, sp.frequency_penalty, sp.repetition_penalty) == (
            v,
            -v,
            100.0,
        )
    assert SamplingParams(repetition_penalty=0.01).repetition_penalty == 0.01
    assert type(SamplingParams(repetition_penalty=np.int64(2)).repetition_penalty) is float
    assert type(SamplingParams(frequency_penalty=np.float32(0.5)).frequency_penalty) is float
    assert SamplingParams(presence_penalty=0.1).penalized
    assert SamplingParams(repetition_penalty=0.9).penalized
    assert not SamplingParams(presence_penalty=-0.0, frequency_penalty=0.0).penalized


def test_penalize_with_every_penalty_off_is_bitwise_the_identity():
    """Slots held, counts and prompt marks present, but 1 / 0 / 0: the logits come back as
    they went in (-0.0 and -inf included), so sample() sees what it would without them."""
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((4, 30)).astype(np.float32)
    logits[0, :3] = [-0.0, -np.inf, 0.0]
    state = PenaltyState(
        jnp.asarray(rng.integers(1, 3, (4, 30)), jnp.int32), jnp.asarray(rng.random((4, 30)) < 0.5)
    )
    params = jnp.asarray([[1.0, 0.0, 0.0]] * 4, jnp.float32)
    out = penalize(jnp.asarray(logits), state, jnp.arange(4, dtype=jnp.int32), params)
    np.testing.assert_array_equal(np.asarray(out).view(np.uint32), logits.view(np.uint32))


# ---- the engine against Hugging Face ----------------------------------------------------------


@pytest.fixture(scope="module")
def llama():
    # A small token budget: the 17-token prompts prefill in chunks next to decodes.
    return LLM(
        str(FIXTURES / "llama"), dtype="float32", max_num_batched_tokens=16, max_num_seqs=8, **POOL
    )


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v2"])
def test_moe_and_mla_models_decode_as_hf_under_penalties(arch):
    llm = LLM(
        str(FIXTURES / arch), dtype="float32", max_num_batched_tokens=32, max_num_seqs=4, **POOL
    )
    cases = _cases(arch)
    assert cases
    outs = llm.generate(
        [c["prompt"] for c in cases] * 2, [_params(c) for c in cases] + [_plain(c) for c in cases]
    )
    for c, pen, plain in zip(cases, outs[: len(cases)], outs[len(cases) :], strict=True):
        assert pen.token_ids == c["tokens"]
        assert plain.token_ids == c["plain_tokens"] != c["tokens"]
    assert len(llm._penalty_slots) == 0


def test_llama_decodes_as_hf_under_penalties_next_to_unpenalized_requests(llama):
    cases = _cases("llama")
    assert len(cases) >= 3
    prompts = [c["prompt"] for c in cases] * 2
    params = [_params(c) for c in cases] + [_plain(c) for c in cases]
    outs = llama.generate(prompts, params)
    for c, pen, plain in zip(cases, outs[: len(cases)], outs[len(cases) :], strict=True):
        assert pen.token_ids == c["tokens"], (c["repetition_penalty"], c["presence_penalty"])
        assert plain.token_ids == c["plain_tokens"] != c["tokens"]
    # Logprobs stay those of the raw distribution: the prompt scores of prompt + output
    # (a different step variant, unpenalized) give the same values.
    c, pen = cases[0], outs[0]
    scored = llama.score([c["prompt"] + pen.token_ids])[0][len(c["prompt"]) - 1 :]
    np.testing.assert_allclose(pen.logprobs, scored, rtol=1e-5, atol=1e-5)
    assert len(llama._penalty_slots) == 0


def test_unpenalized_rows_are_bitwise_the_same_beside_penalized_ones(llama):
    """The same two-request steps with and without the penalty variant: the unpenalized
    request's sampled tokens and logprobs do not move (the state touches only its rows)."""
    c = _cases("llama")[0]
    sampled = SamplingParams(temperature=0.9, seed=5, max_tokens=12, ignore_eos=True)
    beside_plain = llama.generate([c["prompt"]] * 2, [sampled, _plain(c)])[0]
    beside_pen = llama.generate([c["prompt"]] * 2, [sampled, _params(c)])[0]
    assert beside_pen.token_ids == beside_plain.token_ids
    assert np.array_equal(np.float32(beside_pen.logprobs), np.float32(beside_plain.logprobs))


def test_sampled_penalized_request_is_bitwise_the_same_alone_and_in_a_batch():
    """Batch-invariant mode: a sampled, penalized request gives the same tokens and logprobs
    alone and beside other penalized requests (other slots, other shapes)."""
    llm = LLM(
        str(FIXTURES / "llama"),
        dtype="float32",
        batch_invariant=True,
        max_num_batched_tokens=32,
        max_num_seqs=4,
        **POOL,
    )
    cases = _cases("llama")
    params = _params(cases[2], temperature=0.8, seed=11)
    alone = llm.generate([cases[2]["prompt"]], params)[0]
    others = [_params(x, temperature=1.0) for x in cases]
    batch = llm.generate([cases[2]["prompt"]] + [x["prompt"] for x in cases], [params, *others])
    assert batch[0].token_ids == alone.token_ids
    assert np.array_equal(np.float32(batch[0].logprobs), np.float32(alone.logprobs))


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_penalties_survive_preemption_and_more_requests_than_slots(async_scheduling):
    """16 pages of 4 tokens hold 64 tokens; three 29-41-token requests preempt each other,
    recompute from position 0 (the step zeroes and refills their slot) and must still match
    Hugging Face. Twelve requests run through 2 slots; aborted ones give theirs back."""
    cases = _cases("llama")
    llm = _small_pool_llama(async_scheduling)
    outs = llm.generate([c["prompt"] for c in cases] * 4, [_params(c) for c in cases] * 4)
    for i, out in enumerate(outs):
        assert out.token_ids == cases[i % len(cases)]["tokens"]
    assert llm.stats()["num_preemptions"] > 0
    assert len(llm._penalty_slots) == 0
    stream = llm.stream([c["prompt"] for c in cases], [_params(c) for c in cases])
    next(stream)
    next(stream)
    stream.close()  # aborts the ones still running
    assert len(llm._penalty_slots) == 0
    again = llm.generate([cases[1]["prompt"]], _params(cases[1]))[0]
    assert again.token_ids == cases[1]["tokens"]


def test_penalized_requests_on_cached_pages_decode_as_hf():
    """With prefix caching, the penalized cases again: the 17-token prompts take their
    first page from the cache (their rows seeded with its tokens) and still give Hugging
    Face's penalized tokens."""
    llm = LLM(
        str(FIXTURES / "llama"),
        dtype="float32",
        max_num_batched_tokens=32,
        max_num_seqs=4,
        enable_prefix_caching=True,
        **POOL,
    )
    cases = _cases("llama")
    for warm in (False, True):
        outs = llm.generate([c["prompt"] for c in cases], [_params(c) for c in cases])
        for c, out in zip(cases, outs, strict=True):
            assert out.token_ids == c["tokens"]
            want = 16 if warm and len(c["prompt"]) > 16 else 0
            assert out.num_cached_tokens == want
    assert llm.stats()["prefix_cache_hits"] == 16 * sum(len(c["prompt"]) > 16 for c in cases)
    assert len(llm._penalty_slots) == 0


def test_penalties_survive_preemption_onto_cached_pages():
    """Prefix caching in the preemption case's pool: case 2 (presence and frequency
    penalties) is preempted by case 0 after 19 tokens, then re-admitted onto its own pages,
    output tokens included: its row is seeded with those as outputs (counted), and it
    still decodes as Hugging Face."""
    cases = _cases("llama")
    llm = _small_pool_llama(enable_prefix_caching=True)
    seeded = []  # (request id, prompt tokens, output tokens) per seeded row
    seed = llm._penalty_slots.seed

    def spy(state, mesh=None):
        seeded.extend((r, len(p), len(o)) for r, (_, p, o) in llm._penalty_slots._to_seed.items())
        return seed(state, mesh)

    llm._penalty_slots.seed = spy
    assert cases[2]["presence_penalty"] and cases[2]["frequency_penalty"]
    outs = llm.generate(
        [cases[0]["prompt"], cases[2]["prompt"]], [_params(cases[0]), _params(cases[2])]
    )
    assert [o.token_ids for o in outs] == [cases[0]["tokens"], cases[2]["tokens"]]
    assert llm.stats()["num_preemptions"] > 0
    assert [(p, o) for r, p, o in seeded if r == outs[1].request_id and o] == [(17, 19)]
    assert len(llm._penalty_slots) == 0


def test_a_slot_freed_by_a_stop_is_reused_while_a_step_ahead_still_writes_it():
    """Async, two sequences at most: A (penalized) stops on a stop token at step N while
    step N+1, dispatched ahead, already decodes it (writing its counts); B (penalized,
    waiting) then takes A's slot, and its first step zeroes the row after that write."""
    cases = _cases("llama")
    a_case, b_case = cases[2], cases[0]
    k = 6  # A stops at its 7th token
    stop = a_case["tokens"][k]
    k = a_case["tokens"].index(stop)
    llm = LLM(
        str(FIXTURES / "llama"), dtype="float32", max_num_batched_tokens=32, max_num_seqs=2, **POOL
    )
    taken = []  # (request id, slot) per penalized item, from the engine's own slot table
    fill = llm._penalty_slots.fill

    def spy(items, params, prompt_of, slot_out, prompt_out, *rest):
        on = fill(items, params, prompt_of, slot_out, prompt_out, *rest)
        taken.extend(
            (it.request_id, int(slot_out[i])) for i, it in enumerate(items) if slot_out[i] >= 0
        )
        return on

    llm._penalty_slots.fill = spy
    long_plain = SamplingParams(max_tokens=40, ignore_eos=True)
    outs = llm.generate(
        [a_case["prompt"], [7, 8, 9], b_case["prompt"]],
        [_params(a_case, stop_token_ids=(stop,)), long_plain, _params(b_case)],
    )
    assert outs[0].token_ids == a_case["tokens"][: k + 1] and outs[0].finish_reason == "stop"
    assert outs[2].token_ids == b_case["tokens"]
    a_slots = {s for rid, s in taken if rid == outs[0].request_id}
    b_slots = {s for rid, s in taken if rid == outs[2].request_id}
    assert a_slots == b_slots and len(a_slots) == 1
    assert llm.stats()["num_steps_dispatched_ahead"] > 0 and len(llm._penalty_slots) == 0


def test_top_logprobs_under_penalties_are_those_of_the_raw_distribution(llama):
    """Case 1's repetition penalty < 1 makes the greedy decode pick a prompt token first,
    where Hugging Face's unpenalized decode picks another: that one stays the top logprob,
    and the sampled token's entry, when listed, is its raw logprob."""
    c = _cases("llama")[1]
    assert c["tokens"][0] != c["plain_tokens"][0]
    out = llama.generate([c["prompt"]], _params(c, logprobs=5))[0]
    assert out.token_ids == c["tokens"]
    assert len(out.top_logprobs) == len(out.token_ids)
    assert out.top_logprobs[0][0][0] == c["plain_tokens"][0]
    for tok, lp, top in zip(out.token_ids, out.logprobs, out.top_logprobs, strict=True):
        lps = [x[1] for x in top]
        assert lps == sorted(lps, reverse=True) and lps[0] >= lp - 1e-5
        for i, x in top:
            if i == tok:
                assert x == pytest.approx(lp, abs=1e-5)
    assert len(llama._penalty_slots) == 0


def test_a_preempted_request_gives_its_slot_back_until_it_is_readmitted():
    """Stepping the preemption case by hand: after every step the requests holding a
    penalty slot are running ones (a preempted request waits without one: a request held
    back while others are admitted past it must not keep a slot that they need)."""
    cases = _cases("llama")
    llm = _small_pool_llama(async_scheduling=False)
    ids = [llm.add_request(c["prompt"], _params(c)) for c in cases]
    tokens = {rid: [] for rid in ids}
    while llm.has_unfinished():
        for d in llm.step():
            tokens[d.request_id] += d.token_ids
        running = {seq.request_id for seq in llm._scheduler._running}
        assert set(llm._penalty_slots._held) <= running
    assert llm.stats()["num_preemptions"] > 0
    assert [tokens[rid] for rid in ids] == [c["tokens"] for c in cases]
