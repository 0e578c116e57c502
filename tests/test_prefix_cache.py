"""Prefix caching (LLM(enable_prefix_caching=True), engine/prefix_cache.py).

The host half: the index and the free list with exact page ids, the scheduler's admissions
step by step, and random workloads of requests with shared prefixes on a fake device whose
"KV" slots hold the whole prefix that produced them, so a page taken from the cache with
the wrong content (or overwritten while still read) fails an assertion. The engine half:
requests that hit the cache still give the Hugging Face fixtures' greedy tokens, and in
batch-invariant mode the same bits as without a hit (GQA and MLA).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import random

import numpy as np
import pytest

from configs.presets import get_preset
from engine import LLM, SamplingParams, kv_budget, penalties
from engine.kv_pages import PageManager, window_pool_pages
from engine.prefix_cache import PrefixCache, WindowCache
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence, SequenceStatus
from tests.sampler_cases import POOL
from tests.scheduler_cases import (
    EOS,
    VOCAB,
    Params,
    next_token,
    reference,
    run_async,
    run_fed,
)

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
PAGE = 4


@dataclasses.dataclass(frozen=True)
class CacheParams(Params):
    """The scheduler's view of a request, with the two settings that keep it off the cache."""

    prompt_logprobs: bool = False
    penalized: bool = False


def reader(tokens):
    return lambda start, stop: tuple(tokens[start:stop])


def cached_scheduler(num_pages: int, budget=16, max_num_seqs=4, max_model_len=40) -> Scheduler:
    pages = PageManager(num_pages, PAGE)
    return Scheduler(
        pages,
        budget,
        max_num_seqs,
        max_model_len,
        eos_token_ids=(EOS,),
        prefix_cache=PrefixCache(pages),
    )


def seq_of(rid: str, prompt, **params) -> Sequence:
    params.setdefault("ignore_eos", True)
    return Sequence(rid, tuple(prompt), CacheParams(**params))


class ContentDevice:
    """A fake model whose KV slot holds (position, every token up to it): what a real K/V
    row depends on. Each query reads its keys back through its page table and checks that
    each holds exactly the prefix of the sequence reading it."""

    def __init__(self, page_size: int, seqs: dict[str, Sequence]):
        self.page_size = page_size
        self.seqs = seqs
        self.slots: dict[int, tuple[int, tuple[int, ...]]] = {}

    def run(self, out: SchedulerOutput) -> dict[str, tuple[int, float]]:
        sampled = {}
        for it in out.items:
            # Positions before the item's are known tokens (those in flight were updated).
            context = self.seqs[it.request_id].all_token_ids[: it.start_pos] + it.token_ids
            for pos in range(it.start_pos, it.kv_len_after):
                self.slots[self._slot(it.page_ids, pos)] = (pos, context[: pos + 1])
            for pos in range(it.kv_len_after):
                got = self.slots.get(self._slot(it.page_ids, pos))
                assert got == (pos, context[: pos + 1]), f"{it.request_id}: wrong KV at {pos}"
            if it.sample:
                tok = next_token(list(context))
                sampled[it.request_id] = (tok, -tok / 100)
        return sampled

    def _slot(self, page_ids, pos: int) -> int:
        return page_ids[pos // self.page_size] * self.page_size + pos % self.page_size


def run_sync(sched: Scheduler, dev: ContentDevice) -> SchedulerOutput:
    out = sched.schedule()
    if out.items:
        sched.update(out, dev.run(out))
    return out


def finish(sched: Scheduler, dev: ContentDevice) -> None:
    for _ in range(500):
        if not sched.has_unfinished():
            return
        run_sync(sched, dev)
    raise AssertionError("no progress")


# ---- the index and the free list --------------------------------------------------------


def test_free_pages_stay_indexed_until_allocated_again_tail_first():
    pages = PageManager(4, 2)
    cache = PrefixCache(pages)
    tokens = (5, 6, 7, 8, 9)
    table, blocks = tuple(pages.allocate(3)), []
    cache.register(table, reader(tokens), 5, blocks)  # two full pages; the third is not
    assert (len(cache), blocks) == (2, [1, 2])
    assert cache.match(reader(tokens), 5) == ([0, 1], [1, 2])
    assert cache.match(reader(tokens), 3) == ([0], [1])  # whole pages within the limit
    assert cache.match(reader((5, 6, 9, 9)), 4) == ([0], [1])
    assert cache.match(reader((6, 5, 7, 8)), 4) == ([], [])
    pages.free(table[::-1])  # free order: 3, 2, 1, 0 (the tail first)
    assert (pages.num_free, len(cache), cache.num_free([0, 1], [1, 2])) == (4, 2, (2, 0))
    assert pages.allocate(2) == [3, 2]  # never indexed: nothing evicted
    assert pages.allocate(1) == [1]  # the prefix's tail goes first
    assert cache.match(reader(tokens), 5) == ([0], [1])
    cache.take([0])  # a hit on a free page takes it back off the free list
    assert (pages.refcount(0), pages.num_free, len(cache)) == (1, 0, 1)
    cache.take([0])  # and on a held one adds a holder
    assert pages.refcount(0) == 2
    with pytest.raises(ValueError, match="page=0: is held"):
        pages.reclaim(0)
    with pytest.raises(ValueError, match="already indexed"):
        PrefixCache(pages)
    assert cache.reset() == 1
    assert cache.match(reader(tokens), 5) == ([], [])


def test_the_same_content_computed_twice_is_indexed_once():
    pages = PageManager(4, 2)
    cache = PrefixCache(pages)
    a, b = (tuple(pages.allocate(2)) for _ in range(2))
    blocks_a, blocks_b = [], []
    cache.register(a, reader((1, 2, 3, 4)), 4, blocks_a)
    cache.register(b, reader((1, 2, 3, 5)), 4, blocks_b)
    assert blocks_b[0] == blocks_a[0] and blocks_b[1] != blocks_a[1]
    assert len(cache) == 3  # b's first page duplicates a's and is left out
    assert cache.match(reader((1, 2, 3, 5)), 4) == ([a[0], b[1]], blocks_b)


# ---- admissions, step by step -----------------------------------------------------------


def test_a_request_takes_the_full_pages_of_its_longest_cached_prefix():
    sched = cached_scheduler(12)
    seqs = {}
    dev = ContentDevice(PAGE, seqs)
    first = seqs["a"] = seq_of("a", range(1, 11), max_tokens=3)  # 10 + 2 fed = 12 KV
    sched.add(first)
    finish(sched, dev)
    stats = sched.stats()
    assert (stats["prefix_cache_pages"], stats["num_pages_free"]) == (3, 12)
    assert (stats["prefix_cache_queries"], stats["prefix_cache_hits"]) == (10, 0)
    a_pages = (0, 1, 2)

    # Shares 9 tokens: two whole pages; a prompt of exactly 8 takes only one (its last
    # token's logits must be computed); a whole output page counts as prefix too.
    b = seqs["b"] = seq_of("b", [*range(1, 10), 42, 43], max_tokens=2)
    c = seqs["c"] = seq_of("c", range(1, 9), max_tokens=1)
    d = seqs["d"] = seq_of("d", (*range(1, 11), *first.output_token_ids[:2], 7), max_tokens=1)
    for seq in (b, c, d):
        sched.add(seq)
    out = run_sync(sched, dev)
    assert [
        (it.request_id, it.start_pos, it.page_ids[: it.start_pos // PAGE]) for it in out.items
    ] == [
        ("b", 8, a_pages[:2]),
        ("c", 4, a_pages[:1]),
        ("d", 12, a_pages),
    ]
    assert [s.num_cached_tokens for s in (b, c, d)] == [8, 4, 12]
    stats = sched.stats()
    assert stats["prefix_cache_hits"] == 24
    assert stats["prefix_cache_queries"] == 10 + 11 + 8 + 13
    finish(sched, dev)
    for seq in seqs.values():
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 40)
    assert sched.stats()["num_pages_free"] == 12


def test_a_step_built_ahead_takes_the_pages_the_step_in_flight_fills():
    sched = cached_scheduler(12)
    seqs = {}
    dev = ContentDevice(PAGE, seqs)
    a = seqs["a"] = seq_of("a", range(1, 11), max_tokens=3)
    sched.add(a)
    step1 = sched.schedule()
    sampled1 = dev.run(step1)
    b = seqs["b"] = seq_of("b", range(1, 12), max_tokens=2)
    sched.add(b)
    step2 = sched.schedule_ahead()  # step 1 still in flight: its two full pages are taken
    assert [(it.request_id, it.start_pos, it.feed_index) for it in step2.items] == [
        ("a", 10, 0),
        ("b", 8, -1),
    ]
    assert b.page_ids[:2] == a.page_ids[:2] and b.num_cached_tokens == 8
    in_flight = (step2, run_fed(dev, step2, (step1, sampled1)))
    sched.update(step1, sampled1)
    sched.update(*in_flight)
    run_async(sched, dev)
    for seq in (a, b):
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 40)


@pytest.mark.parametrize("why, reads", [("prompt_logprobs", False), ("penalized", True)])
def test_requests_that_need_their_whole_prompt_do_not_read_the_cache(why, reads):
    """Prompt logprobs need every prompt position's logits; a penalized request reads the
    cache (its device penalty row is seeded with the tokens before its first step:
    tests/test_penalties.py)."""
    sched = cached_scheduler(12)
    seqs = {}
    dev = ContentDevice(PAGE, seqs)
    seqs["a"] = seq_of("a", range(1, 11), max_tokens=1)
    sched.add(seqs["a"])
    finish(sched, dev)
    b = seqs["b"] = seq_of("b", range(1, 11), max_tokens=1, **{why: True})
    sched.add(b)
    out = run_sync(sched, dev)
    if reads:
        assert out.items[0].start_pos == 8 and b.num_cached_tokens == 8
        return
    assert [(it.start_pos, len(it.token_ids)) for it in out.items] == [(0, 10)]
    assert (b.num_cached_tokens, sched.stats()["prefix_cache_queries"]) == (0, 10)
    # What it computed is still indexed for others.
    c = seqs["c"] = seq_of("c", range(1, 11), max_tokens=1)
    sched.add(c)
    assert run_sync(sched, dev).items[0].start_pos == 8


def test_a_preempted_request_takes_its_own_pages_back():
    sched = cached_scheduler(6, budget=16, max_num_seqs=2)
    seqs = {}
    dev = ContentDevice(PAGE, seqs)
    a = seqs["a"] = seq_of("a", range(1, 9), max_tokens=12)
    b = seqs["b"] = seq_of("b", range(20, 28), max_tokens=12)
    sched.add(a)
    sched.add(b)
    while not b.num_preemptions:
        run_sync(sched, dev)
    assert b.status is SequenceStatus.WAITING and b.page_ids == ()
    finish(sched, dev)
    assert b.num_cached_tokens > 0  # its recompute took pages it had computed
    for seq in (a, b):
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 40)
    assert sched.stats()["num_pages_free"] == 6


def test_samples_share_their_first_ones_pages_and_do_not_count_as_lookups():
    sched = cached_scheduler(12)
    seqs = {}
    dev = ContentDevice(PAGE, seqs)
    first = seqs["r"] = seq_of("r", range(1, 11), max_tokens=2)
    later = seqs["r/1"] = Sequence(
        "r/1", first.prompt_token_ids, first.sampling_params, fork_of=first
    )
    for seq in (first, later):
        sched.add(seq)
    finish(sched, dev)
    stats = sched.stats()
    assert (stats["num_prompt_tokens_shared"], stats["prefix_cache_queries"]) == (8, 10)
    assert later.output_token_ids == first.output_token_ids


def test_the_cache_indexes_its_own_pools_and_no_window_on_every_layer():
    pages, windowed = PageManager(8, PAGE), PageManager(8, PAGE)
    bad = {
        "a window on every layer": dict(sliding_window=6, prefix_cache=PrefixCache(pages)),
        "another pool": dict(prefix_cache=PrefixCache(PageManager(8, PAGE))),
        "no window cache": dict(sliding_window=6, window_pages=windowed),
        "another window pool": dict(
            sliding_window=6,
            window_pages=windowed,
            windows=WindowCache(PageManager(8, PAGE), 6),
        ),
    }
    for why, kwargs in bad.items():
        pages.on_reuse = None
        windows = kwargs.pop("windows", None)
        kwargs.setdefault("prefix_cache", PrefixCache(pages, windows=windows))
        with pytest.raises(ValueError, match="prefix_cache: must index page_manager, and win"):
            Scheduler(pages, 16, 4, 40, **kwargs)
            raise AssertionError(why)
    with pytest.raises(ValueError, match="already indexed"):
        WindowCache(pages, 6)
    with pytest.raises(ValueError, match="window=0: must be >= 1"):
        WindowCache(windowed, 0)


# ---- a hybrid model's windowed pages -----------------------------------------------------


def test_window_pages_are_indexed_under_the_main_blocks_and_cut_a_match():
    """Pages of 2, a 3-key window: a query right after n pages reads from place n - 1 on.
    A match keeps its longest prefix whose window pages are still indexed; a new sequence's
    table holds them there, the places before released; a page given back behind a window
    is not indexed afterwards (another sequence may hold it)."""
    main, windowed = PageManager(8, 2), PageManager(5, 2)
    windows = WindowCache(windowed, 3)
    cache = PrefixCache(main, windows=windows)
    assert [windows.first_read(n) for n in range(5)] == [0, 0, 1, 2, 3]
    a = seq_of("a", range(1, 10))
    a.page_ids, a.window_page_ids = tuple(main.allocate(5)), tuple(windowed.allocate(4))
    cache.index(a, 8)  # four full pages: blocks 1-4, and the four window pages under them
    assert (a.prefix_blocks, len(windows)) == ([1, 2, 3, 4], 4)
    b = seq_of("b", range(1, 10))
    assert cache.lookup(b) == ([0, 1, 2, 3], [1, 2, 3, 4])
    assert windows.take([1, 2, 3, 4]) == ((3, 3, 3, 3), 3)  # place 3 held once more
    assert windowed.refcount(3) == 2
    windowed.free([3])
    windowed.free([3, 2, 1, 0])  # a finishes, last page first: free list 4, 3, 2, 1, 0
    assert windowed.allocate(2) == [4, 3]  # place 3 reused: evicted
    assert len(windows) == 3
    assert cache.lookup(b) == ([0, 1, 2], [1, 2, 3])  # its place 2 (page 2) is indexed
    c = seq_of("c", (1, 2, 3, 4, 5))
    assert cache.lookup(c) == ([0, 1], [1, 2])
    assert windowed.allocate(3) == [2, 1, 0]
    assert cache.lookup(b) == ([], []) and len(windows) == 0
    # A sequence indexing pages it gave back behind its window: those places are left out.
    d = seq_of("d", range(20, 29))
    d.page_ids, d.window_page_ids = tuple(main.allocate(3)), (4, 3, 2)
    d.num_released_window_pages = 2
    cache.index(d, 6)
    assert len(d.prefix_blocks) == 3 and len(windows) == 1
    assert cache.lookup(seq_of("e", range(20, 28))) == ([5, 6, 7], [5, 6, 7])  # place 2
    assert cache.lookup(seq_of("f", range(20, 25))) == ([], [])  # places 1, 0: released
    assert cache.reset() == 4 + 3 and len(windows) == 0  # (the main pool's pages)


# ---- random workloads of shared prefixes -------------------------------------------------


def _workload(rng: random.Random, n: int = 24) -> list[tuple[int, Sequence]]:
    """Requests drawn from three system prompts (and none), some of them repeats, arriving
    at random steps."""
    systems = [(), *(tuple(rng.randrange(1, VOCAB) for _ in range(k)) for k in (5, 9, 14))]
    made = []
    for k in range(n):
        if made and rng.random() < 0.2:
            prompt = rng.choice(made)[1].prompt_token_ids  # a repeat
        else:
            suffix = tuple(rng.randrange(1, VOCAB) for _ in range(rng.randint(1, 12)))
            prompt = rng.choice(systems) + suffix
        params = CacheParams(
            max_tokens=rng.choice([1, 2, 5, 9, 20]),
            ignore_eos=rng.random() < 0.5,
            penalized=rng.random() < 0.1,
        )
        made.append((rng.randint(0, 40), Sequence(f"r{k}", prompt, params)))
    return sorted(made, key=lambda x: x[0])


def _check_pages(sched: Scheduler, seqs: dict[str, Sequence]) -> None:
    """Every page's refcount is the number of tables holding it (running, or aborted and
    not yet released); in a windowed pool, from the table's first place not released."""
    pools = [(sched.pages, "page_ids", "num_released_pages")]
    if sched.window_pages is not None:
        pools.append((sched.window_pages, "window_page_ids", "num_released_window_pages"))
    for pages, ids, released in pools:
        held = {}
        for s in seqs.values():
            if s.status is SequenceStatus.RUNNING or (s.finish_reason and s.page_ids):
                for p in getattr(s, ids)[getattr(s, released) :]:
                    held[p] = held.get(p, 0) + 1
        for page in range(pages.num_total):
            assert pages.refcount(page) == held.get(page, 0), (ids, page)
        assert pages.num_free == pages.num_total - len(held)


def arrivals(sched: Scheduler, seqs: dict, pending: list):
    """run_workload's `on_step` that adds the `pending` requests whose step has come."""

    def on_step(num_steps: int) -> None:
        while pending and pending[0][0] <= num_steps:
            seq = pending.pop(0)[1]
            seqs[seq.request_id] = seq
            sched.add(seq)

    return on_step


def run_workload(sched: Scheduler, dev, seqs: dict, pending: list, ahead: bool, on_step) -> None:
    """Run the `pending` (arrival step, sequence) workload to its end, `on_step(n)` adding
    the arrivals (and what else a test does) before each step: steps built ahead (arrival
    steps counted from each idle start, as the async workload's), or one by one with every
    page's refcount checked after each."""
    if ahead:
        while pending:
            on_step(0)
            run_async(sched, dev, on_step)
            if pending:  # idle until the next arrival
                pending[0] = (0, pending[0][1])
    num_steps = 0
    while pending or sched.has_unfinished():
        on_step(num_steps)
        run_sync(sched, dev)
        _check_pages(sched, seqs)
        num_steps += 1
        assert num_steps < 3000, "no progress"


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_random_shared_prefix_workload(seed, ahead):
    """Every request finishes with its reference output though many start on cached pages
    of others (a 12-page pool, so pages are evicted and requests preempted as well); all
    pages come back."""
    rng = random.Random(seed)
    sched = cached_scheduler(12)
    seqs: dict[str, Sequence] = {}
    dev = ContentDevice(PAGE, seqs)
    pending = _workload(rng)
    aborted = set()

    def on_step(num_steps: int) -> None:
        while pending and pending[0][0] <= num_steps:
            seq = pending.pop(0)[1]
            seqs[seq.request_id] = seq
            sched.add(seq)
        active = [s for s in seqs.values() if not s.is_finished]
        if active and rng.random() < 0.03:
            victim = rng.choice(active)
            assert sched.abort(victim.request_id)
            aborted.add(victim.request_id)

    run_workload(sched, dev, seqs, pending, ahead, on_step)
    for rid, seq in seqs.items():
        tokens, reason = reference(seq, 40)
        if rid in aborted:
            assert seq.output_token_ids == tokens[: seq.num_output_tokens]
        else:
            assert (seq.output_token_ids, seq.finish_reason) == (tokens, reason), rid
    _check_pages(sched, seqs)
    stats = sched.stats()
    assert stats["num_pages_free"] == 12 and stats["num_running"] == 0
    assert stats["prefix_cache_hits"] > 0 and stats["num_preemptions"] > 0
    assert stats["prefix_cache_pages"] <= 12


class HybridContentDevice(ContentDevice):
    """ContentDevice with a windowed layer too: each item also writes its keys through its
    window_page_ids and reads back, from the first key its first query sees, those of the
    sequence reading them."""

    def __init__(self, page_size: int, seqs: dict[str, Sequence], window: int):
        super().__init__(page_size, seqs)
        self.window, self.windowed = window, ContentDevice(page_size, seqs)

    def run(self, out: SchedulerOutput) -> dict[str, tuple[int, float]]:
        for it in out.items:
            context = self.seqs[it.request_id].all_token_ids[: it.start_pos] + it.token_ids
            slots = self.windowed.slots
            slot = functools.partial(self.windowed._slot, it.window_page_ids)
            for pos in range(it.start_pos, it.kv_len_after):
                slots[slot(pos)] = (pos, context[: pos + 1])
            for pos in range(max(0, it.start_pos + 1 - self.window), it.kv_len_after):
                assert slots.get(slot(pos)) == (pos, context[: pos + 1]), f"{it.request_id}: {pos}"
        return super().run(out)


def hybrid_scheduler(cache: PrefixCache) -> Scheduler:
    """The workloads' scheduler (a 16-token budget, 4 sequences of 40 at most) for a hybrid
    model with a 6-key window, over the pools `cache` and its WindowCache index."""
    return Scheduler(
        cache.pages,
        16,
        4,
        40,
        eos_token_ids=(EOS,),
        sliding_window=6,
        window_pages=cache.windows.pages,
        prefix_cache=cache,
    )


def run_checked(sched: Scheduler, device, rng: random.Random, ahead: bool):
    """_workload's requests run to their end on `device(seqs)`, each with its reference
    output and every page's refcount right after: (the scheduler's stats, the device)."""
    seqs: dict[str, Sequence] = {}
    pending, dev = _workload(rng), device(seqs)
    run_workload(sched, dev, seqs, pending, ahead, arrivals(sched, seqs, pending))
    for rid, seq in seqs.items():
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 40), rid
    _check_pages(sched, seqs)
    return sched.stats(), dev


class CountedWindows(WindowCache):
    """A WindowCache that records how many released places each admission's table starts
    with."""

    def __init__(self, *args):
        super().__init__(*args)
        self.released = []

    def take(self, blocks):
        table, first = super().take(blocks)
        self.released.append(first)
        return table, first


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_random_shared_prefix_workload_of_a_hybrid_model(seed, ahead):
    """The workload above on a hybrid model: full attention in 20 pages, a 6-key window in
    a pool of 10 (a 16-token chunk and its 5 keys before: 6 pages), both indexed. Requests
    start on cached pages whose last window is still there, the places before it released
    (never read); the device checks every key either layer reads; all pages come back."""
    rng = random.Random(seed)
    main, windowed = PageManager(20, PAGE), PageManager(10, PAGE)
    windows = CountedWindows(windowed, 6)
    sched = hybrid_scheduler(PrefixCache(main, windows=windows))
    device = functools.partial(HybridContentDevice, PAGE, window=6)
    stats, _ = run_checked(sched, device, rng, ahead)
    assert stats["num_pages_free"] == 20 and stats["num_window_pages_free"] == 10
    assert stats["prefix_cache_hits"] > 0 and max(windows.released) > 0
    assert stats["num_preemptions"] > 0 or ahead  # (steps built ahead rarely preempt)
    assert 0 < stats["prefix_cache_window_pages"] <= 10


# ---- the engine ---------------------------------------------------------------------------


def _reference(arch: str) -> dict:
    return json.loads((FIXTURES / arch / "reference.json").read_text())


def _bits(logprobs) -> list[int]:
    return np.asarray(logprobs, np.float32).view(np.uint32).tolist()


GREEDY = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)


def test_requests_on_cached_pages_give_the_hf_greedy_tokens():
    ref = _reference("llama")
    # test_parallel_sampling's engine shape (sampler_cases.POOL): the same step programs.
    llm = LLM(
        model=str(FIXTURES / "llama"),
        max_num_seqs=8,
        max_num_batched_tokens=64,
        enable_prefix_caching=True,
        **POOL,
    )
    for cold in (True, False):
        outs = llm.generate(ref["prompts"], GREEDY)
        for out, tokens, logprobs in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
            assert out.token_ids == tokens
            np.testing.assert_allclose(out.logprobs, logprobs, atol=2e-3, rtol=0)
        # Prompts of 5, 17 and 33 tokens: warm, their whole pages short of the last token.
        assert [o.num_cached_tokens for o in outs] == ([0, 0, 0] if cold else [0, 16, 32])
    # A follow-up turn: the prompt and 8 of its greedy tokens (pages the decodes filled).
    prompt, tokens = ref["prompts"][2], ref["greedy_tokens"][2]
    (out,) = llm.generate([prompt + tokens[:8]], dataclasses.replace(GREEDY, max_tokens=8))
    assert out.num_cached_tokens == 32
    assert out.token_ids == tokens[8:]
    np.testing.assert_allclose(out.logprobs, ref["logprobs"][2][8:], atol=2e-3, rtol=0)
    stats = llm.stats()
    assert stats["prefix_cache_hits"] == 48 + 32
    assert stats["num_pages_free"] == stats["num_pages_total"]
    # A request with prompt logprobs computes its whole prompt.
    llm.generate([prompt], SamplingParams(max_tokens=2, prompt_logprobs=True))
    assert llm.stats()["prefix_cache_hits"] == 48 + 32
    assert llm.reset_prefix_cache()
    (out,) = llm.generate([prompt], dataclasses.replace(GREEDY, max_tokens=1))
    assert out.num_cached_tokens == 0 and out.token_ids == tokens[:1]


@pytest.mark.parametrize("arch", ["llama", "deepseek_v3"])
def test_a_hit_keeps_the_batch_invariant_bits(arch):
    """The same request, cold and on cached pages (its own prompt's, or a longer prompt's
    whose first page it shares), bitwise alike; GQA and MLA (absorbed)."""
    # test_batch_invariance's decode-vs-prefill engine shape: its step programs.
    llm = LLM(
        model=str(FIXTURES / arch),
        batch_invariant=True,
        max_model_len=128,
        num_pages=8,
        max_num_batched_tokens=64,
        enable_prefix_caching=True,
    )
    probe = _reference(arch)["prompts"][1]  # 17 tokens: one whole page
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    (cold,) = llm.generate([probe], params)
    (warm,) = llm.generate([probe], params)
    assert (cold.num_cached_tokens, warm.num_cached_tokens) == (0, 16)
    assert warm.token_ids == cold.token_ids and _bits(warm.logprobs) == _bits(cold.logprobs)
    for j in (3, 11):
        rest = dataclasses.replace(params, max_tokens=12 - j)
        (out,) = llm.generate([probe + cold.token_ids[:j]], rest)
        assert out.num_cached_tokens == 16
        assert out.token_ids == cold.token_ids[j:]
        assert _bits(out.logprobs) == _bits(cold.logprobs[j:])


@pytest.mark.parametrize("arch", ["gpt_oss", "llama4"])
def test_a_hybrid_models_hits_give_the_hf_tokens_and_keep_the_bits(arch):
    """gpt-oss (an 8-key window on every other layer) and Llama 4 (8-token chunks on three
    layers of four), pages of 4, batch-invariant: the fixture's prompts give Hugging Face's
    greedy tokens cold; again, and as a follow-up turn (a prompt and 8 of its tokens), on
    cached pages whose windowed layers' tables start with released places (a hit of n
    pages reads the windowed pool from place n - 2 on), bitwise the cold tokens and
    logprobs."""
    ref = _reference(arch)
    llm = LLM(
        model=str(FIXTURES / arch),
        batch_invariant=True,
        page_size=4,
        num_pages=64,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        max_model_len=128,
        enable_prefix_caching=True,
    )
    cold = llm.generate(ref["prompts"], GREEDY)
    for out, tokens, logprobs in zip(cold, ref["greedy_tokens"], ref["logprobs"], strict=True):
        assert out.token_ids == tokens
        np.testing.assert_allclose(out.logprobs, logprobs, atol=2e-3, rtol=0)
    warm = llm.generate(ref["prompts"], GREEDY)
    assert [o.num_cached_tokens for o in warm] == [4, 16, 32]
    for a, b in zip(cold, warm, strict=True):
        assert b.token_ids == a.token_ids and _bits(b.logprobs) == _bits(a.logprobs)
    prompt, first = ref["prompts"][2], cold[2]
    (out,) = llm.generate([prompt + first.token_ids[:8]], dataclasses.replace(GREEDY, max_tokens=8))
    assert out.num_cached_tokens == 40
    assert out.token_ids == first.token_ids[8:] and _bits(out.logprobs) == _bits(first.logprobs[8:])
    stats = llm.stats()
    assert stats["prefix_cache_window_pages"] > 0
    assert stats["num_pages_free"] == 64
    assert stats["num_window_pages_free"] == stats["num_window_pages_total"]


def test_swa_full_tokens_ratio_sizes_the_windowed_pool():
    """SGLang's swa_full_tokens_ratio: the windowed pool gets that fraction of the full
    pool's pages when that is more than the running sequences' windows need (so a cache
    keeps windows longer); from a memory budget both pools share it. tiny-gpt-oss, float32:
    one full and one windowed layer, 2 KV heads x 16 x (K + V) x 4 B = 256 B a token each."""
    cfg = get_preset("tiny-gpt-oss")
    assert kv_budget.kv_pool_bytes(cfg, 1, 1, 1, None) == 2 * 256
    least = window_pool_pages(cfg.hybrid_window, 16, 4, 64)  # 4 x (32 + 8 - 2) + 128: 19
    sized = functools.partial(kv_budget.window_pages_for, cfg, 16, 4, 64)
    assert (sized(None), sized(100), sized(100, 0.1), sized(100, 0.5), sized(10, 1.0)) == (
        least,
        least,
        least,
        50,
        10,
    )
    budget, page = 1 << 20, 16 * 256
    left = budget - penalties.state_bytes(4, cfg.vocab_size)
    n, w = kv_budget.pools_from_budget(cfg, budget, 16, None, 4, 1000, least)
    assert (n, w) == (left // page - least, least)
    n, w = kv_budget.pools_from_budget(cfg, budget, 16, None, 4, 1000, least, None, 0.5)
    assert w == int(0.5 * (left // (1.5 * page))) and n == (left - w * page) // page
    for bad in (0, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match=f"swa_full_tokens_ratio={bad!r}: must be a number"):
            kv_budget.check_window_ratio(cfg, bad)
    with pytest.raises(ValueError, match="swa_full_tokens_ratio=0.5: only for a model whose"):
        LLM(model=str(FIXTURES / "llama"), swa_full_tokens_ratio=0.5)


def test_sliding_window_models_and_non_bools_are_refused():
    with pytest.raises(ValueError, match="enable_prefix_caching=True: not supported for mistral"):
        LLM(model=str(FIXTURES / "mistral"), enable_prefix_caching=True)
    with pytest.raises(ValueError, match="enable_prefix_caching"):
        LLM(model=str(FIXTURES / "llama"), enable_prefix_caching="yes")
