"""KV offloading to host memory (LLM(kv_offloading_size=GiB), engine/kv_offload.py).

The host half: the tier's index and copies with exact page ids; the device half's copies on
a small cache, bit for bit; random workloads of shared prefixes on
test_prefix_cache's content-checking fake device, with a device pool so small that most
hits come back from the host tier (a page read with the wrong rows fails an assertion).
The engine half: requests on pages copied back from the host give the Hugging Face
fixtures' greedy tokens, and in batch-invariant mode the bits they give cold (GQA, MLA,
fp8 pages).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import LLM, SamplingParams
from engine.kv_offload import HostPage, HostTier, KVOffload
from engine.kv_pages import PageManager
from engine.kv_transfer import windowed_leaves
from engine.prefix_cache import PrefixCache, WindowCache
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from engine.server import Server
from tests.sampler_cases import POOL
from tests.scheduler_cases import EOS, reference
from tests.test_prefix_cache import (
    FIXTURES,
    PAGE,
    ContentDevice,
    HybridContentDevice,
    _bits,
    _check_pages,
    _reference,
    _workload,
    arrivals,
    hybrid_scheduler,
    reader,
    run_checked,
    run_workload,
)

# ---- the tier's bookkeeping -----------------------------------------------------------------


def _indexed(pages: PageManager, cache: PrefixCache, tokens) -> list[int]:
    """Compute `tokens` into new pages, index them and free them (tail first)."""
    held = pages.allocate(len(tokens) // pages.page_size)
    cache.register(held, reader(tokens), len(tokens), [])
    pages.free(held[::-1])
    return held


def test_evicted_pages_go_to_the_host_and_come_back_into_new_pages():
    pages = PageManager(4, 2)
    tier = HostTier(capacity=3)
    cache = PrefixCache(pages, tier)
    tokens = (5, 6, 7, 8, 9, 10, 11, 12)
    held = _indexed(pages, cache, tokens)  # pages 0-3 hold blocks 1-4; free list 3, 2, 1, 0
    assert cache.match(reader(tokens), 7) == ([0, 1, 2], [1, 2, 3])
    taken = pages.allocate(2)  # the tail's pages 3 and 2 go to the host
    assert taken == [held[3], held[2]] and len(cache) == 2 and len(tier) == 2
    copies = tier.drain()
    assert [(kind, page) for kind, page, _ in copies] == [("out", 3), ("out", 2)]
    assert [e.key for _, _, e in copies] == [(3, (11, 12)), (2, (9, 10))]
    assert tier.drain() == []
    hits, blocks = cache.match(reader(tokens), 8)  # the device's two, then the host's two
    assert hits[:2] == [0, 1] and blocks == [1, 2, 3, 4]
    assert [type(h) for h in hits[2:]] == [HostPage, HostPage]
    assert cache.num_free(hits, blocks) == (4, 0)  # two free device pages, two new ones
    pages.free(taken)
    got = cache.take(hits)
    # Device hits held first; then new pages (the free ones left: 3, 2) for the host's.
    assert got == [0, 1, 3, 2] and [pages.refcount(p) for p in got] == [1, 1, 1, 1]
    assert [(kind, page) for kind, page, _ in tier.drain()] == [("in", 3), ("in", 2)]
    assert cache.match(reader(tokens), 8) == ([0, 1, 3, 2], [1, 2, 3, 4])  # all on device
    # Given up again: the host has those rows (nothing copied), and keeps at most 3 pages.
    pages.free(got[::-1])
    pages.allocate(4)
    copies = tier.drain()
    assert [(kind, page) for kind, page, _ in copies] == [("out", 1), ("out", 0)]
    assert len(tier) == 3 and tier.get((0, (5, 6))) is not None
    # Pages 2 and 3 (keys 4 and 3) went first, so key 4 is the least recently used: dropped.
    assert tier.get((3, (11, 12))) is None and tier.get((2, (9, 10))) is not None
    assert tier.reset() == 3 and len(tier) == 0


def test_pages_computed_again_keep_the_host_block_so_later_pages_stay_reachable():
    pages = PageManager(2, 2)
    tier = HostTier(capacity=8)
    cache = PrefixCache(pages, tier)
    tokens = (1, 2, 3, 4)
    _indexed(pages, cache, tokens)
    pages.free(pages.allocate(2))  # both to the host
    assert len(cache) == 0 and len(tier) == 2
    # A request that does not read the cache computes the first page again.
    held = pages.allocate(1)
    blocks = []
    cache.register(held, reader(tokens), 2, blocks)
    assert blocks == [1]  # the host's block id: its second page is found after it
    hits, found = cache.match(reader(tokens), 4)
    assert hits[0] == held[0] and isinstance(hits[1], HostPage) and found == [1, 2]


def test_a_host_page_before_a_free_device_page_does_not_evict_it_when_taken():
    pages = PageManager(3, 2)
    tier = HostTier(capacity=8)
    cache = PrefixCache(pages, tier)
    tokens = (1, 2, 3, 4)
    _indexed(pages, cache, tokens)  # pages 0, 1; free list 2, 1, 0
    pages.reclaim(1)
    others = pages.allocate(2)  # pages 2 and 0: the head page goes to the host
    pages.free([1])
    pages.free(others)  # free list 1, 2, 0: the device hit is the next page allocate gives
    hits, blocks = cache.match(reader(tokens), 4)
    assert isinstance(hits[0], HostPage) and hits[1] == 1 and blocks == [1, 2]
    assert cache.take(hits) == [2, 1]  # page 1 held first; the host page's rows into 2
    assert cache.match(reader(tokens), 4) == ([2, 1], [1, 2])


def test_each_page_takes_its_own_pools_bytes_of_the_tier():
    """A hybrid model's windowed pages are smaller (here 3 units against 5): the tier keeps
    what fits in its bytes, least recently used out first, however many pages that is."""
    tier = HostTier(capacity=16, costs=(5, 3))

    def held():
        return [
            k
            for k in [("window", i) for i in range(6)] + [(0, (i,)) for i in range(4)]
            if tier.get(k) is not None
        ]

    for i in range(3):
        tier.store(i, ("window", i), i, window=True)
    tier.store(3, (0, (1,)), 1)
    assert len(tier) == 4 and tier.used == 14  # 3 + 3 + 3 + 5
    tier.store(4, (0, (2,)), 2)  # 19 units: the oldest page goes
    assert held() == [("window", 1), ("window", 2), (0, (1,)), (0, (2,))] and tier.used == 16
    tier.store(5, ("window", 5), 5, window=True)
    assert tier.used == 16 and tier.get(("window", 1)) is None
    tier.store(6, (0, (3,)), 3)  # 21 units: two pages go for this one
    assert held() == [("window", 5), (0, (2,)), (0, (3,))] and tier.used == 13
    kinds = [kind for kind, _, _ in tier.drain()]
    assert kinds == ["window out"] * 3 + ["out"] * 2 + ["window out", "out"]
    assert tier.reset() == 3 and tier.used == 0


def _cache(offset: float, num_pages: int = 5, page: int = 2):
    """A cache of two leaves (float32, bfloat16) whose every row differs."""
    base = jnp.arange(num_pages * page * 3, dtype=jnp.float32).reshape(num_pages, page, 3)
    return [(base + offset, (base * 0.5 - offset).astype(jnp.bfloat16))]


def test_copies_move_pages_bit_for_bit_in_the_order_they_were_recorded():
    tier = HostTier(capacity=4)
    kv = _cache(0.25)
    offload = KVOffload(tier, kv, num_pages=5)
    a, b, c = (HostPage((0, (i,)), i) for i in range(3))
    want = [np.asarray(leaf[p]) for p in (1, 3, 4) for leaf in kv[0]]
    tier._copies += [("out", 1, a), ("out", 3, b), ("out", 4, c)]  # three out: one call
    kv = offload.flush(kv)
    assert a.rows is None  # on its way to the host
    # Page 3 is written over by a copy in of a's rows, then copied out again as it is now.
    d = HostPage((0, (9,)), 9)
    tier._copies += [("in", 3, a), ("in", 0, c), ("out", 3, d)]
    kv = offload.flush(kv)
    got = [r for e in (a, b, c) for r in e.rows]
    assert [x.dtype for x in got[:2]] == [np.float32, jnp.bfloat16]
    for x, y in zip(got, want, strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(np.asarray(kv[0][0][3]), want[0])
    np.testing.assert_array_equal(np.asarray(kv[0][1][0]), want[5])
    kv = offload.flush(kv)  # d's rows arrive: page 3 as a's copy in left it
    np.testing.assert_array_equal(d.rows[1], want[1])
    others = [0, 1, 2, 4]  # every other page as it was (page 0 now holds c's rows)
    before = _cache(0.25)
    for p in others[1:]:
        np.testing.assert_array_equal(np.asarray(kv[0][0][p]), np.asarray(before[0][0][p]))
    assert offload.stats()["kv_offload_stored_pages"] == 4
    assert offload.stats()["kv_offload_loaded_pages"] == 2


# ---- random workloads ---------------------------------------------------------------------


class OffloadDevice(ContentDevice):
    """test_prefix_cache's fake device, which also runs the host tier's copies before each
    step as the engine does (KVOffload.flush): a page's slots out to its HostPage, or
    back."""

    def __init__(self, page_size, seqs, tier: HostTier):
        super().__init__(page_size, seqs)
        self.tier = tier
        self.loaded = 0

    def run(self, out):
        for kind, page, entry in self.tier.drain():
            slots = range(page * self.page_size, (page + 1) * self.page_size)
            if kind == "out":
                entry.rows = [self.slots.get(s) for s in slots]
            else:
                self.loaded += 1
                for s, row in zip(slots, entry.rows, strict=True):
                    self.slots[s] = row
        return super().run(out)


@pytest.mark.parametrize("capacity", [2, 64])
@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_random_shared_prefix_workload_over_a_host_tier(seed, ahead, capacity):
    """Every request finishes with its reference output; with 10 device pages (a
    sequence's most) many of the prefixes found come back from the host tier (a wrong row
    fails the fake device's check); all pages come back."""
    rng = random.Random(seed)
    tier = HostTier(capacity)
    pages = PageManager(10, PAGE)
    sched = Scheduler(pages, 16, 4, 40, eos_token_ids=(EOS,), prefix_cache=PrefixCache(pages, tier))
    seqs: dict[str, Sequence] = {}
    dev = OffloadDevice(PAGE, seqs, tier)
    pending = _workload(rng)
    run_workload(sched, dev, seqs, pending, ahead, arrivals(sched, seqs, pending))
    for rid, seq in seqs.items():
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 40), rid
    _check_pages(sched, seqs)
    assert sched.stats()["num_pages_free"] == 10 and len(tier) <= capacity
    if capacity > 2:
        assert dev.loaded > 0


# ---- the engine ---------------------------------------------------------------------------


class HybridOffloadDevice(HybridContentDevice):
    """test_prefix_cache's fake hybrid device, running the tier's copies of either pool
    (a windowed page's kinds: "window out", "window in") before each step."""

    def __init__(self, page_size, seqs, window: int, tier: HostTier):
        super().__init__(page_size, seqs, window)
        self.tier = tier
        self.loaded = collections.Counter()

    def run(self, out):
        for kind, page, entry in self.tier.drain():
            slots = self.windowed.slots if kind.startswith("window") else self.slots
            places = range(page * self.page_size, (page + 1) * self.page_size)
            if kind.endswith("out"):
                entry.rows = [slots.get(s) for s in places]
            else:
                self.loaded[kind] += 1
                for s, row in zip(places, entry.rows, strict=True):
                    slots[s] = row
        return super().run(out)


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_a_hybrid_models_windowed_pages_go_to_the_host_and_back(seed, ahead):
    """The shared-prefix workload on a hybrid model (full attention in 12 pages, a 6-key
    window in 8 of its own) over a host tier: either pool's evicted pages go there, and
    hits take them back into their own pool (the device checks every key either layer
    reads); all pages come back."""
    rng = random.Random(seed)
    tier = HostTier(64)
    main, windowed = PageManager(12, PAGE), PageManager(8, PAGE)
    sched = hybrid_scheduler(PrefixCache(main, tier, windows=WindowCache(windowed, 6, tier)))
    device = functools.partial(HybridOffloadDevice, PAGE, window=6, tier=tier)
    stats, dev = run_checked(sched, device, rng, ahead)
    assert stats["num_pages_free"] == 12 and stats["num_window_pages_free"] == 8
    assert dev.loaded["in"] > 0 and dev.loaded["window in"] > 0


GREEDY = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
TINY_GIB = 1 / 1024  # 1 MiB: ~250-500 pages of the fixtures' 16 tokens


def _evict_all(llm: LLM, rng: np.random.Generator, num_pages: int, length: int) -> None:
    """Run prompts of `length` random tokens that take every device page once (the free
    list is first in, first out)."""
    per = -(-length // llm.page_size)
    prompts = [rng.integers(3, 60, length).tolist() for _ in range(-(-num_pages // per))]
    llm.generate(prompts, dataclasses.replace(GREEDY, max_tokens=1))


def test_requests_on_pages_back_from_the_host_give_the_hf_greedy_tokens():
    ref = _reference("llama")
    # test_prefix_cache's engine shape (sampler_cases.POOL): the same step programs.
    llm = LLM(
        model=str(FIXTURES / "llama"),
        max_num_seqs=8,
        max_num_batched_tokens=64,
        enable_prefix_caching=True,
        kv_offloading_size=TINY_GIB,
        **POOL,
    )
    rng = np.random.default_rng(0)
    llm.generate(ref["prompts"], GREEDY)
    _evict_all(llm, rng, POOL["num_pages"], 120)
    stats = llm.stats()
    assert stats["kv_offload_stored_pages"] >= 6 and stats["kv_offload_loaded_pages"] == 0
    outs = llm.generate(ref["prompts"], GREEDY)
    for out, tokens, logprobs in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
        assert out.token_ids == tokens
        np.testing.assert_allclose(out.logprobs, logprobs, atol=2e-3, rtol=0)
    # Prompts of 5, 17 and 33 tokens: their whole pages short of the last token.
    assert [o.num_cached_tokens for o in outs] == [0, 16, 32]
    assert llm.stats()["kv_offload_loaded_pages"] == 3
    assert llm.stats()["num_pages_free"] == POOL["num_pages"]
    srv = Server(("127.0.0.1", 0), llm, "m")  # the API server's /metrics
    metrics = srv.metrics()
    srv.close()
    assert 'moeserve:kv_offload_loaded_pages_total{model_name="m"} 3\n' in metrics
    held = llm.stats()["kv_offload_pages"]
    assert f'moeserve:kv_offload_pages{{model_name="m"}} {held}\n' in metrics
    # New weights (the same here): both tiers forgotten.
    assert llm.reset_prefix_cache() and llm.stats()["kv_offload_pages"] == 0
    (out,) = llm.generate([ref["prompts"][2]], dataclasses.replace(GREEDY, max_tokens=1))
    assert out.num_cached_tokens == 0 and out.token_ids == ref["greedy_tokens"][2][:1]


@pytest.mark.parametrize(
    "arch,kv_cache_dtype",
    [
        ("llama", "auto"),
        ("deepseek_v3", "auto"),
        ("llama", "fp8"),
        ("gpt_oss", "auto"),
        ("deepseek_v4", "auto"),
        ("gemma4", "auto"),
    ],
)
def test_a_host_hit_keeps_the_batch_invariant_bits(arch, kv_cache_dtype):
    """The same request cold, then on its pages back from the host (every device page taken
    by others in between), and a longer prompt sharing them: bitwise alike. gpt-oss: its
    windowed layer's page at place 1 (keys 25-31 for the query at 32) back from the host
    too, into its own pool; DeepSeek-V4 alike (its 8 positions of per-token rows a query
    reads back: the window's keys, the compressors' inputs), its entries' pages into the
    main pool; Gemma 4 as gpt-oss, its two pools' pages of different widths."""
    # test_prefix_cache's batch-invariant engine shape: its step programs.
    llm = LLM(
        model=str(FIXTURES / arch),
        batch_invariant=True,
        max_model_len=128,
        num_pages=8,
        max_num_batched_tokens=64,
        enable_prefix_caching=True,
        kv_offloading_size=TINY_GIB,
        kv_cache_dtype=kv_cache_dtype,
    )
    rng = np.random.default_rng(1)
    probe = _reference(arch)["prompts"][2]  # 33 tokens: two whole pages
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    (cold,) = llm.generate([probe], params)
    for j in (0, 5):
        _evict_all(llm, rng, 8, 120)
        rest = dataclasses.replace(params, max_tokens=12 - j)
        (out,) = llm.generate([probe + cold.token_ids[:j]], rest)
        assert out.num_cached_tokens == 32
        assert out.token_ids == cold.token_ids[j:]
        assert _bits(out.logprobs) == _bits(cold.logprobs[j:])
    hybrid = arch in ("gpt_oss", "deepseek_v4", "gemma4")  # (a windowed page each time)
    assert llm.stats()["kv_offload_loaded_pages"] == (6 if hybrid else 4)
    # The tier counts a page of each pool as the bytes its arrays hold (fp8: with scales).
    leaves, windowed = jax.tree.leaves(llm._kv), windowed_leaves(llm.config, llm._kv)
    per_page = [
        sum(x.nbytes // x.shape[0] for x, w in zip(leaves, windowed, strict=True) if w == pool)
        for pool in (False, True)
    ]
    costs = llm._offload.tier.costs
    assert costs == (tuple(per_page) if hybrid else (per_page[0], per_page[0]))


def test_bad_sizes_are_refused_before_the_weights_are_read():
    model = str(FIXTURES / "llama")
    for size, match in [
        (0, "kv_offloading_size=0: must be > 0"),
        (-1.0, "kv_offloading_size=-1.0: must be > 0"),
        ("1", "kv_offloading_size='1': expected a number"),
        (True, "kv_offloading_size=True: expected a number"),
        (1e-9, "kv_offloading_size=1e-09: holds no page"),
        (1e9, "more than this machine's memory"),
    ]:
        with pytest.raises(ValueError, match=match):
            LLM(model=model, enable_prefix_caching=True, kv_offloading_size=size)
    with pytest.raises(ValueError, match="kv_offloading_size: needs enable_prefix_caching"):
        LLM(model=model, kv_offloading_size=1)


def test_vllms_offloading_connector_spelling_sizes_the_host_tier_in_blocks():
    """kv_transfer_config={"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
    "kv_connector_extra_config": {"num_cpu_blocks": N, "block_size": B}} (vLLM 0.11's
    form): N blocks of B tokens, B a multiple of the page size; no KV store."""
    model = str(FIXTURES / "llama")

    def offloading(**extra):
        return {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": extra,
        }

    llm = LLM(
        model=model,
        num_pages=8,
        enable_prefix_caching=True,
        kv_transfer_config=offloading(num_cpu_blocks=10, block_size=32),
    )
    stats = llm.stats()
    assert stats["kv_offload_capacity_pages"] == 20 and "kv_transfer_saved_prompts" not in stats
    assert llm._transfer is None
    for config, options, match in [
        ({**offloading(num_cpu_blocks=4), "kv_role": "kv_consumer"}, {}, "needs 'kv_both'"),
        (offloading(block_size=16), {}, "num_cpu_blocks: missing"),
        (offloading(num_cpu_blocks=0), {}, r"num_cpu_blocks=0: must be an integer >= 1"),
        (offloading(num_cpu_blocks=4, block_size=24), {}, "block_size=24: must be a multiple"),
        (offloading(num_cpu_blocks=4, path="x"), {}, r"unsupported keys \['path'\]"),
        (offloading(num_cpu_blocks=4), {"kv_offloading_size": 1}, "one or the other"),
    ]:
        with pytest.raises(ValueError, match=match):
            LLM(model=model, enable_prefix_caching=True, kv_transfer_config=config, **options)
    with pytest.raises(ValueError, match="OffloadingConnector.*needs enable_prefix_caching"):
        LLM(model=model, kv_transfer_config=offloading(num_cpu_blocks=4))
