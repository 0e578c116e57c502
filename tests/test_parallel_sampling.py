"""Parallel sampling (SamplingParams.n): later samples share sample 0's prompt pages.

The scheduler half checks the pages, positions and refcounts step by step; the engine half
holds every sample of an n-sample request to the same request run alone with that sample's
seed (the sharing must not show in any token or logprob), and checks abort, streaming,
prompt logprobs and the engine's pages after each call.
"""

import pytest

from engine import LLM, SamplingParams
from engine.kv_pages import PageManager
from engine.scheduler import Scheduler
from engine.sequence import Sequence, SequenceStatus
from long_context.policy import LongPrefillPolicy
from tests.sampler_cases import POOL
from tests.scheduler_cases import Params, reference
from tests.test_prefix_cache import HybridContentDevice

PAGE = 4
PROMPT = tuple(range(1, 11))  # 10 tokens: two whole pages (8 positions) can be shared


def samples_of(n: int, prompt=PROMPT, **params) -> list[Sequence]:
    params.setdefault("ignore_eos", True)
    first = Sequence("r", prompt, Params(**params))
    return [first] + [
        Sequence(f"r/{k}", prompt, Params(**params), fork_of=first) for k in range(1, n)
    ]


def run(sched: Scheduler, out, token: int = 7) -> None:
    sched.update(out, {it.request_id: (token, -1.0) for it in out.items if it.sample})


def test_later_samples_share_the_first_ones_whole_prompt_pages():
    pages = PageManager(32, PAGE)
    sched = Scheduler(pages, max_num_batched_tokens=64, max_num_seqs=8, max_model_len=64)
    first, a, b = seqs = samples_of(3, max_tokens=3)
    for seq in seqs:
        sched.add(seq)
    assert first.forks == [a, b]

    # Step 1: sample 0 stops its prefill at the shared pages; the others wait for them.
    out = sched.schedule()
    assert [(it.request_id, it.token_ids, it.sample) for it in out.items] == [
        ("r", PROMPT[:8], False)
    ]
    assert a.status is b.status is SequenceStatus.WAITING
    run(sched, out)

    # Step 2: every sample computes the last two prompt tokens and draws its first token.
    out = sched.schedule()
    assert [(it.request_id, it.start_pos, it.token_ids, it.sample) for it in out.items] == [
        (rid, 8, PROMPT[8:], True) for rid in ("r", "r/1", "r/2")
    ]
    shared = first.page_ids[:2]
    assert a.page_ids[:2] == b.page_ids[:2] == shared
    assert [pages.refcount(p) for p in shared] == [3, 3]
    assert len({first.page_ids[2], a.page_ids[2], b.page_ids[2]}) == 3  # own third pages
    assert sched.stats()["num_prompt_tokens_shared"] == 16
    assert pages.num_free == 32 - 2 - 3
    run(sched, out)

    while sched.has_unfinished():
        run(sched, sched.schedule())
    assert all(s.finish_reason == "length" and len(s.output_token_ids) == 3 for s in seqs)
    assert pages.num_free == 32


def test_preempting_a_sample_drops_only_its_own_hold_on_the_shared_pages():
    pages = PageManager(6, PAGE)
    sched = Scheduler(pages, max_num_batched_tokens=16, max_num_seqs=4, max_model_len=64)
    first, later = samples_of(2, max_tokens=8)
    for seq in (first, later):
        sched.add(seq)
    run(sched, sched.schedule())
    run(sched, sched.schedule())  # both at 11 tokens: 2 shared pages + one own page each
    assert pages.num_free == 2
    out = sched.schedule()
    while not out.preempted:  # decodes grow into fresh pages until one must go
        run(sched, out)
        out = sched.schedule()
    assert out.preempted == ("r/1",)
    assert later.num_shared_tokens == 0 and later.page_ids == ()
    assert [pages.refcount(p) for p in first.page_ids[:2]] == [1, 1]
    run(sched, out)
    while sched.has_unfinished():
        run(sched, sched.schedule())
    assert [len(s.output_token_ids) for s in (first, later)] == [8, 8]
    assert pages.num_free == 6


def test_after_the_first_sample_a_running_sibling_shares_and_then_nobody():
    """max_num_seqs=2: sample 0 (1 token) and sample 1 (2 tokens) run first; sample 2 comes
    in when sample 0 is done and shares sample 1's pages; sample 3 finds no one running."""
    pages = PageManager(32, PAGE)
    sched = Scheduler(pages, max_num_batched_tokens=64, max_num_seqs=2, max_model_len=64)
    first = Sequence("r", PROMPT, Params(max_tokens=1, ignore_eos=True))
    seqs = [first] + [
        Sequence(f"r/{k}", PROMPT, Params(max_tokens=m, ignore_eos=True), fork_of=first)
        for k, m in ((1, 2), (2, 1), (3, 1))
    ]
    for seq in seqs:
        sched.add(seq)
    steps = []
    while sched.has_unfinished():
        out = sched.schedule()
        steps.append([(it.request_id, it.start_pos, len(it.token_ids)) for it in out.items])
        run(sched, out)
    assert steps == [
        [("r", 0, 8)],
        [("r", 8, 2), ("r/1", 8, 2)],
        [("r/1", 10, 1), ("r/2", 8, 2)],
        [("r/3", 0, 10)],
    ]
    assert sched.stats()["num_prompt_tokens_shared"] == 16
    assert pages.num_free == 32


@pytest.mark.parametrize("prompt,window", [(PROMPT[:4], None), (PROMPT, 6)])
def test_nothing_to_share_or_a_window_means_each_sample_computes_its_prompt(prompt, window):
    """A prompt of one page has no whole page before its last token; a sliding window's
    pool gives pages back behind it, so its pages are not shared."""
    sched = Scheduler(
        PageManager(32, PAGE), 64, max_num_seqs=8, max_model_len=64, sliding_window=window
    )
    for seq in samples_of(3, prompt=prompt):
        sched.add(seq)
    out = sched.schedule()
    assert [(it.start_pos, it.token_ids) for it in out.items] == [(0, prompt)] * 3


def test_a_hybrid_models_samples_share_the_first_ones_last_window():
    """A full-attention pool and a 6-key windowed one (gpt-oss's layout): later samples of
    an 18-token prompt share sample 0's 4 whole pages in the first and, in the second, those
    its first query's window reads (keys 11-16 for the query at 16: places 2 and 3), the
    places before them released. Every key either layer reads holds the sample's own prefix
    (test_prefix_cache's fake device), every sample gives its reference, all pages come
    back."""
    prompt = tuple(range(1, 19))
    main, windowed = PageManager(32, PAGE), PageManager(16, PAGE)
    sched = Scheduler(main, 64, 8, 64, sliding_window=6, window_pages=windowed)
    first, a, b = seqs = samples_of(3, prompt=prompt, max_tokens=6)
    dev = HybridContentDevice(PAGE, {s.request_id: s for s in seqs}, 6)
    for seq in seqs:
        sched.add(seq)
    out = sched.schedule()
    assert [(it.request_id, len(it.token_ids)) for it in out.items] == [("r", 16)]
    sched.update(out, dev.run(out))
    out = sched.schedule()
    assert [(it.request_id, it.start_pos) for it in out.items] == [
        ("r", 16),
        ("r/1", 16),
        ("r/2", 16),
    ]
    held = first.window_page_ids[2:4]
    for seq in (a, b):
        assert seq.page_ids[:4] == first.page_ids[:4]
        assert seq.window_page_ids[:4] == (held[0], held[0], *held)
        assert seq.num_released_window_pages == 2
    assert [windowed.refcount(p) for p in held] == [3, 3]
    sched.update(out, dev.run(out))
    while sched.has_unfinished():
        out = sched.schedule()
        sched.update(out, dev.run(out))
    for seq in seqs:
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 64)
    stats = sched.stats()
    assert stats["num_prompt_tokens_shared"] == 2 * 16
    assert (stats["num_pages_free"], stats["num_window_pages_free"]) == (32, 16)


def test_a_step_built_ahead_and_undone_gives_the_shared_pages_back():
    """schedule_ahead admits a sample onto the in-flight prefill's pages, then a long
    prompt behind it needs the in-flight step's time: the step is undone, the sample is
    a fresh waiting one again, and the next synchronous step shares the pages anew."""
    pages = PageManager(32, PAGE)
    policy = LongPrefillPolicy(long_prompt_tokens=16)
    sched = Scheduler(pages, 8, max_num_seqs=4, max_model_len=64, long_prefill=policy)
    first, later = samples_of(2, max_tokens=2)
    long = Sequence("long", tuple(range(20)), Params(ignore_eos=True))
    for seq in (first, later, long):
        sched.add(seq)
    step1 = sched.schedule()
    assert [it.token_ids for it in step1.items] == [PROMPT[:8]]
    assert sched.schedule_ahead() is None
    assert later.status is SequenceStatus.WAITING
    assert (later.page_ids, later.num_computed_tokens, later.num_shared_tokens) == ((), 0, 0)
    assert [pages.refcount(p) for p in first.page_ids] == [1, 1]
    assert sched.stats()["num_prompt_tokens_shared"] == 0
    run(sched, step1)
    out = sched.schedule()
    assert [(it.request_id, it.start_pos) for it in out.items][:2] == [("r", 8), ("r/1", 8)]
    assert sched.stats()["num_prompt_tokens_shared"] == 8


def test_a_fork_must_have_its_first_samples_prompt():
    sched = Scheduler(PageManager(32, PAGE), 64, max_num_seqs=8, max_model_len=64)
    first = Sequence("r", PROMPT, Params())
    sched.add(first)
    with pytest.raises(ValueError, match="fork_of has another prompt"):
        sched.add(Sequence("r/1", PROMPT[:-1], Params(), fork_of=first))


# ---- the engine -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm():
    # test_sampling_options' engine (sampler_cases.POOL: 32 pages of 16, 128-token
    # sequences): the same step programs, compiled once in a `make test` run.
    return LLM(model="tests/fixtures/llama", max_num_seqs=8, max_num_batched_tokens=64, **POOL)


PAGES = POOL["num_pages"]
PROMPT_IDS = list(range(1, 20))  # 19 tokens: one page of 16 shared


def alone(llm, params: SamplingParams, seeds) -> list:
    """Each sample as a request of its own (n=1) with that sample's seed."""
    return llm.generate(
        [PROMPT_IDS] * len(seeds), [SamplingParams(**{**params, "seed": s}) for s in seeds]
    )


def assert_same_samples(got, want) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.token_ids == w.token_ids
        assert g.finish_reason == w.finish_reason
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-5)


def test_each_sample_equals_its_seed_alone_and_the_prompt_is_computed_once(llm):
    params = dict(temperature=1.0, max_tokens=6)
    shared = llm.stats()["num_prompt_tokens_shared"]
    (out,) = llm.generate([PROMPT_IDS], SamplingParams(n=4, seed=2**32 - 2, **params))
    assert [s.request_id for s in out.samples] == [out.request_id] + [
        f"{out.request_id}/{k}" for k in (1, 2, 3)
    ]
    assert out.samples[0] is out
    assert llm.stats()["num_prompt_tokens_shared"] - shared == 3 * 16
    assert_same_samples(out.samples, alone(llm, params, [2**32 - 2, 2**32 - 1, 0, 1]))
    assert len({tuple(s.token_ids) for s in out.samples}) > 1  # they are different draws
    assert llm.stats()["num_pages_free"] == PAGES


def test_a_hybrid_models_samples_share_the_prompt_and_give_the_hf_tokens():
    """gpt-oss (an 8-key window on layer 0), pages of 4: 3 greedy samples of a 33-token
    prompt share its 8 whole pages, the windowed layer's from place 6 on (keys 25-31 for
    the query at 32); each gives the Hugging Face fixture's tokens."""
    import json
    import pathlib

    fixture = pathlib.Path(__file__).parent / "fixtures" / "gpt_oss"
    ref = json.loads((fixture / "reference.json").read_text())
    llm = LLM(
        model=str(fixture), page_size=4, num_pages=64, max_num_batched_tokens=64, max_model_len=128
    )
    greedy = SamplingParams(n=3, temperature=0.0, max_tokens=16, ignore_eos=True)
    (out,) = llm.generate([ref["prompts"][2]], greedy)
    assert [s.token_ids for s in out.samples] == [ref["greedy_tokens"][2]] * 3
    stats = llm.stats()
    assert stats["num_prompt_tokens_shared"] == 2 * 32
    assert stats["num_pages_free"] == 64
    assert stats["num_window_pages_free"] == stats["num_window_pages_total"]


def test_penalized_samples_share_the_prompt_with_their_rows_seeded(llm):
    """Samples 1 and 2 start at sample 0's last whole page: their penalty rows are seeded
    with the prompt's first 16 tokens (engine/penalties.py), so they draw what each would
    alone."""
    params = dict(temperature=1.0, max_tokens=5, repetition_penalty=1.5, presence_penalty=0.5)
    shared = llm.stats()["num_prompt_tokens_shared"]
    (out,) = llm.generate([PROMPT_IDS], SamplingParams(n=3, seed=11, **params))
    assert llm.stats()["num_prompt_tokens_shared"] - shared == 2 * 16
    assert_same_samples(out.samples, alone(llm, params, [11, 12, 13]))


def test_a_tight_pool_with_preemptions_keeps_every_sample(llm):
    """Eight samples of 19 + 100 tokens need 1 + 8 * 7 pages of the 32: they preempt each
    other, and recompute without sharing when sample 0 is done."""
    params = dict(temperature=0.8, max_tokens=100, ignore_eos=True)
    before = llm.stats()["num_preemptions"]
    (out,) = llm.generate([PROMPT_IDS], SamplingParams(n=8, seed=5, **params))
    assert llm.stats()["num_preemptions"] > before
    assert llm.stats()["num_pages_free"] == PAGES
    assert_same_samples(out.samples, alone(llm, params, range(5, 13)))


def test_prompt_logprobs_are_sample_zeros_on_every_record(llm):
    (out,) = llm.generate([PROMPT_IDS], SamplingParams(n=2, max_tokens=1, prompt_logprobs=2))
    (one,) = llm.generate([PROMPT_IDS], SamplingParams(max_tokens=1, prompt_logprobs=True))
    assert out.samples[1].prompt_logprobs is out.prompt_logprobs
    assert out.samples[1].prompt_top_logprobs is out.prompt_top_logprobs
    assert [len(t) for t in out.prompt_top_logprobs] == [2] * (len(PROMPT_IDS) - 1)
    assert out.prompt_logprobs == pytest.approx(one.prompt_logprobs, abs=1e-5)
    assert out.samples[1].token_ids == out.token_ids == one.token_ids  # greedy: all alike


def test_add_request_streams_each_sample_and_abort_stops_them_all(llm):
    rid = llm.add_request(PROMPT_IDS, SamplingParams(n=3, max_tokens=50, ignore_eos=True), "q")
    assert rid == "q"
    llm.add_request(PROMPT_IDS, SamplingParams(max_tokens=2, ignore_eos=True), "z/2")
    with pytest.raises(ValueError, match="request_id='z/2': already in use"):
        llm.add_request(PROMPT_IDS, SamplingParams(n=3), "z")  # its third sample's id
    seen, finished = set(), {}
    while len(seen) < 4:
        deltas = llm.step()
        seen |= {d.request_id for d in deltas if d.token_ids}
        finished |= {d.request_id: d.finish_reason for d in deltas if d.finish_reason}
    assert seen == {"q", "q/1", "q/2", "z/2"}
    assert llm.abort("q")
    while llm.has_unfinished():
        finished |= {d.request_id: d.finish_reason for d in llm.step() if d.finish_reason}
    assert finished == {"q": "abort", "q/1": "abort", "q/2": "abort", "z/2": "length"}
    assert not llm.abort("q")
    assert llm.stats()["num_pages_free"] == PAGES
    # The ids are free again, and "q/1" alone stops just that sample.
    llm.add_request(PROMPT_IDS, SamplingParams(n=2, max_tokens=3, ignore_eos=True), "q")
    assert llm.abort("q/1")
    finished = {}
    while llm.has_unfinished():
        finished |= {d.request_id: d.finish_reason for d in llm.step() if d.finish_reason}
    assert finished == {"q": "length", "q/1": "abort"}


@pytest.mark.parametrize("n", [0, 129, 2.0, True, None])
def test_n_outside_its_range_is_refused(n):
    with pytest.raises(ValueError, match=r"n=.*must be an integer in \[1, 128\]"):
        SamplingParams(n=n)
