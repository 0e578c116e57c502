"""Scheduler: exact batches, page ids, preemption, abort, stop rules, random workloads.

A fake device stands in for the model (tests/scheduler_cases.py): it keeps a paged "KV
cache" of (request, life, position, token) slots and produces the next token from the tokens
it reads back through the page table, so a wrong page table, position, or a reused page that
still belongs to someone else changes the output or fails an assertion.
"""

import random

import pytest

from engine.kv_pages import PageManager, pages_for_tokens
from engine.scheduler import Scheduler
from engine.sequence import Sequence, SequenceStatus
from tests.scheduler_cases import (
    EOS,
    VOCAB,
    FakeDevice,
    Params,
    make_seq,
    new_scheduler,
    reference,
    run_async,
    run_fed,
    step,
    summary,
    workload_scheduler,
)


def test_admission_limited_by_pages():
    a, b, c = (make_seq(r, 6, max_tokens=4) for r in "abc")
    sched = new_scheduler(4, 4, a, b, c)
    out = sched.schedule()
    assert summary(out) == [("a", 0, 6, (0, 1), True), ("b", 0, 6, (2, 3), True)]
    assert out.items[0].token_ids == a.prompt_token_ids
    assert out.num_batched_tokens == 12
    stats = dict(num_running=2, num_waiting=1, num_preemptions=0, num_prompt_tokens_shared=0)
    stats |= {"num_loaded_kv_tokens": 0}
    assert sched.stats() == stats | {"num_pages_free": 0, "num_pages_total": 4}


def test_strict_fcfs_head_blocks_smaller_request():
    seqs = [make_seq(rid, n, max_tokens=1) for rid, n in [("a", 8), ("b", 12), ("c", 2)]]
    sched = new_scheduler(4, 4, *seqs)
    out = sched.schedule()
    assert summary(out) == [("a", 0, 8, (0, 1), True)]
    assert sched.stats()["num_pages_free"] == 2  # enough for "c", not for "b"
    assert sched.stats()["num_waiting"] == 2


def test_max_num_seqs_and_decodes_before_prefills():
    a, b, c = make_seq("a", 3, max_tokens=1), make_seq("b", 2), make_seq("c", 2)
    sched, dev = new_scheduler(32, 4, a, b, c, budget=8, max_num_seqs=2), FakeDevice(4)
    out, res = step(sched, dev)
    assert summary(out) == [("a", 0, 3, (0,), True), ("b", 0, 2, (1,), True)]
    assert [(r.request_id, r.finished, r.finish_reason) for r in res] == [
        ("a", True, "length"), ("b", False, None)]  # fmt: skip
    out, _ = step(sched, dev)
    # The decode comes first, then the newly admitted prompt; a's page 0 is reused last.
    assert summary(out) == [("b", 2, 1, (1,), True), ("c", 0, 2, (2,), True)]
    assert out.items[0].token_ids == (b.output_token_ids[0],)
    assert out.items[0].num_generated == 1 and out.items[1].num_generated == 0


def test_long_prompt_is_chunked_while_decodes_continue():
    d = make_seq("d", 4, max_tokens=100)
    sched = new_scheduler(64, 16, d, budget=64, max_num_seqs=4, max_model_len=512)
    dev = FakeDevice(16)
    out, _ = step(sched, dev)
    assert summary(out) == [("d", 0, 4, (0,), True)]
    long = make_seq("long", 200, max_tokens=2)
    sched.add(long)
    chunks = []
    for k in range(4):
        out, res = step(sched, dev)
        # The running decode is never frozen by the long prefill.
        assert summary(out)[0] == ("d", 4 + k, 1, (0,), True)
        assert [r.request_id for r in res] == ["d"] + (["long"] if k == 3 else [])
        _, start, n, pages, sample = summary(out)[1]
        chunks.append((start, n, len(pages), sample))
        assert out.num_batched_tokens == 1 + n
    assert [c[:2] for c in chunks] == [(0, 63), (63, 63), (126, 63), (189, 11)]
    assert [c[2:] for c in chunks] == [(4, False), (8, False), (12, False), (13, True)]
    assert out.items[1].page_ids == tuple(range(1, 14))
    assert out.items[1].token_ids == long.prompt_token_ids[189:]
    assert d.num_output_tokens == 5 and long.num_output_tokens == 1
    out, _ = step(sched, dev)
    assert summary(out) == [("d", 8, 1, (0,), True), ("long", 200, 1, tuple(range(1, 14)), True)]


def test_an_unchanged_page_table_is_handed_out_as_the_same_tuple():
    # runner.PageRows reuses a row whose table is the very tuple it had: the scheduler must
    # rebind a table when (and only when) it changes, never edit one it handed out.
    a = make_seq("a", 5, max_tokens=8)
    sched, dev = new_scheduler(8, 4, a), FakeDevice(4)
    # The prompt (positions 0-4), then decodes of positions 5..9.
    tables = [step(sched, dev)[0].items[0].page_ids for _ in range(6)]
    assert tables[0] == (0, 1) and tables[0] is tables[1] is tables[2] is tables[3]  # 5-7 fit
    assert tables[4] == (0, 1, 2) and tables[4] is tables[5]  # position 8 took a page
    assert tables[5] is a.page_ids and tables[0] == (0, 1)  # the older tuple is untouched


def test_decode_preempts_newest_which_recomputes_later():
    a, b = make_seq("a", 7, max_tokens=4), make_seq("b", 7, 20, max_tokens=3)
    c = make_seq("c", 2, max_tokens=1)
    sched, dev = new_scheduler(4, 4, a, b, c), FakeDevice(4)
    out, _ = step(sched, dev)
    assert summary(out) == [("a", 0, 7, (0, 1), True), ("b", 0, 7, (2, 3), True)]
    out, _ = step(sched, dev)  # both decode position 7, inside their second page
    assert summary(out) == [("a", 7, 1, (0, 1), True), ("b", 7, 1, (2, 3), True)]
    out, _ = step(sched, dev)  # "a" needs a third page: the newest running ("b") goes
    assert summary(out) == [("a", 8, 1, (0, 1, 2), True)]
    assert out.preempted == ("b",)
    assert b.status is SequenceStatus.WAITING and b.page_ids == ()
    assert (b.num_computed_tokens, b.num_preemptions) == (0, 1)
    assert b.num_output_tokens == 2  # generated tokens are kept and replayed
    assert sched.stats()["num_preemptions"] == 1
    out, res = step(sched, dev)  # "b" heads the queue (before "c") but needs 3 pages, 1 free
    assert summary(out) == [("a", 9, 1, (0, 1, 2), True)]
    assert out.preempted == ()
    assert res[0].finished and a.finish_reason == "length"
    out, res = step(sched, dev)  # recompute: prompt + 2 outputs as one prefill, then sample
    assert summary(out) == [("b", 0, 9, (3, 0, 1), True), ("c", 0, 2, (2,), True)]
    assert out.items[0].token_ids == b.prompt_token_ids + tuple(b.output_token_ids[:2])
    assert out.items[0].num_generated == 2
    assert b.num_computed_tokens == 9 and b.finish_reason == "length"
    assert (b.output_token_ids, "length") == reference(b, 64)
    assert (a.output_token_ids, "length") == reference(a, 64)


def test_newest_decode_preempts_itself():
    a, b = make_seq("a", 6, max_tokens=4), make_seq("b", 8, max_tokens=4)
    sched, dev = new_scheduler(4, 4, a, b), FakeDevice(4)
    step(sched, dev)
    out, _ = step(sched, dev)
    assert summary(out) == [("a", 6, 1, (0, 1), True)]
    assert out.preempted == ("b",)
    assert sched.stats()["num_pages_free"] == 2


def test_partial_prefill_short_of_pages_preempts_itself():
    a, b = make_seq("a", 4, max_tokens=9), make_seq("b", 14, 30, max_tokens=2)
    sched, dev = new_scheduler(4, 4, a, b, budget=8, max_num_seqs=2), FakeDevice(4)
    out, _ = step(sched, dev)
    assert summary(out) == [("a", 0, 4, (0,), True), ("b", 0, 4, (1,), False)]
    out, _ = step(sched, dev)  # "b" needs 2 more pages for 7 tokens, only 1 left after "a"
    assert summary(out) == [("a", 4, 1, (0, 2), True)]
    assert out.preempted == ("b",)
    out, _ = step(sched, dev)
    assert summary(out) == [("a", 5, 1, (0, 2), True), ("b", 0, 7, (3, 1), False)]
    for _ in range(30):  # steps on a finished scheduler are empty no-ops
        step(sched, dev)
    assert not sched.has_unfinished()
    assert b.num_preemptions >= 2
    assert (b.output_token_ids, b.finish_reason) == reference(b, 64)
    assert sched.stats()["num_pages_free"] == 4


def test_abort_frees_pages_at_next_schedule():
    a, b, c = make_seq("a", 5), make_seq("b", 3), make_seq("c", 25, max_tokens=1)
    sched, dev = new_scheduler(8, 4, a, b, c), FakeDevice(4)
    out = sched.schedule()
    assert summary(out) == [("a", 0, 5, (0, 1), True), ("b", 0, 3, (2,), True)]
    # "a" aborts while its step is in flight: its pages stay held until the next schedule().
    assert sched.abort("a")
    assert not sched.abort("a") and not sched.abort("nope")
    assert a.status is SequenceStatus.FINISHED and a.finish_reason == "abort"
    assert sched.stats()["num_pages_free"] == 5
    res = sched.update(out, dev.run(out))
    assert [r.request_id for r in res] == ["b"] and a.num_output_tokens == 0
    assert sched.abort("c")  # waiting: gone at once, holds no pages
    assert sched.stats()["num_waiting"] == 0
    out = sched.schedule()
    assert out.finished_aborted == ("a", "c")
    assert summary(out) == [("b", 3, 1, (2,), True)]
    assert sched.stats()["num_pages_free"] == 7
    sched.update(out, dev.run(out))
    sched.abort("b")
    assert sched.has_unfinished()  # one more schedule() releases the pages
    out = sched.schedule()
    assert out.items == () and out.finished_aborted == ("b",)
    assert not sched.has_unfinished()
    assert sched.stats()["num_pages_free"] == 8


@pytest.mark.parametrize(
    ("params", "tokens", "reason", "stop_reason"),
    [
        (Params(max_tokens=5), [7, EOS], "stop", None),
        (Params(max_tokens=3, ignore_eos=True), [7, EOS, 8], "length", None),
        (Params(stop_token_ids=(9,), ignore_eos=True), [7, 9], "stop", 9),
        (Params(max_tokens=2), [7, EOS], "stop", None),  # "stop" wins over "length"
        (Params(max_tokens=None), [7, 8, 9], "length", None),  # 6 + 3 = max_model_len
        (Params(stop=("8><9",), ignore_eos=True), [7, 8, 9], "stop", "8><9"),  # two tokens
        (Params(stop=("<1>", "9"), ignore_eos=True), [7, 8, 9], "stop", "9"),  # output only
        (Params(max_tokens=2, stop=("8>",)), [7, 8], "stop", "8>"),  # not "length"
        (Params(stop=("<5", "8>"), stop_token_ids=(8,)), [7, 8], "stop", 8),  # the id first
        # min_tokens: no stop of any kind among the first min_tokens tokens.
        (Params(min_tokens=2, stop_token_ids=(9,)), [9, EOS, 9], "stop", 9),
        (Params(min_tokens=1), [EOS, EOS], "stop", None),
        (Params(min_tokens=2, max_tokens=2), [EOS, 7], "length", None),
        (Params(min_tokens=2, stop=("<7>",)), [7, 7, 8], "length", None),  # only within them
        (Params(min_tokens=1, stop=("<8>",)), [8, 8], "stop", "<8>"),  # the second one counts
        (Params(min_tokens=2, stop=("7><8",)), [7, 7, 8], "stop", "7><8"),  # straddles
        (Params(min_tokens=1, stop=("<7>",), max_tokens=3), [7, 8, 9], "length", None),
    ],
)
def test_stop_conditions(params, tokens, reason, stop_reason):
    """The request stops exactly after `tokens`: one fewer, or one more step, fails."""
    sched = new_scheduler(4, 4, max_num_seqs=2, max_model_len=9)
    seq = Sequence("r", (1, 2, 3, 4, 5, 6), params)
    sched.add(seq)
    results = []
    for tok in tokens:  # update() raises if the request already finished (no items)
        results += sched.update(sched.schedule(), {"r": (tok, -0.5)})
    assert (seq.output_token_ids, seq.finish_reason) == (tokens, reason)
    assert seq.output_logprobs == [-0.5] * len(tokens)
    assert [r.new_token_ids for r in results] == [(t,) for t in tokens]
    assert [r.finished for r in results] == [False] * (len(tokens) - 1) + [True]
    assert results[-1].finish_reason == reason
    assert results[-1].stop_reason == stop_reason
    assert not sched.has_unfinished() and sched.stats()["num_pages_free"] == 4


def test_stop_strings_are_refused_without_a_tokenizer():
    sched = Scheduler(PageManager(4, 4), 64, 8, 64)  # no detokenize
    with pytest.raises(ValueError, match=r"stop=\('x',\): stop strings need the model's"):
        sched.add(make_seq("s", 3, max_tokens=1, stop=("x",)))
    assert not sched.has_unfinished() and sched.stats()["num_pages_free"] == 4
    sched.add(make_seq("t", 3, max_tokens=1))  # a request without them is queued
    assert sched.has_unfinished()


def test_check_fits_and_add_validation():
    sched = new_scheduler(4, 4)  # 16 KV tokens, max_model_len 64
    zero = make_seq("z", 3, max_tokens=0)  # finishes at once, never queued
    sched.add(zero)
    assert zero.status is SequenceStatus.FINISHED and zero.finish_reason == "length"
    assert not sched.has_unfinished() and sched.schedule().items == ()
    assert [sched.max_kv_len(10, m) for m in (0, 1, 5, None)] == [0, 10, 14, 63]
    assert sched.max_kv_len(64, 5) == 64
    sched.check_fits(10, 7)  # KV up to 16 tokens = 4 pages
    with pytest.raises(ValueError, match="17 KV tokens = 5 pages, but num_pages=4"):
        sched.check_fits(10, 8)
    with pytest.raises(ValueError, match="max_model_len=64"):
        sched.check_fits(65, 1)
    with pytest.raises(ValueError, match="max_tokens=-1"):
        sched.check_fits(3, -1)
    with pytest.raises(ValueError, match="num_pages=4"):
        sched.add(make_seq("big", 10, max_tokens=None))
    assert not sched.has_unfinished()
    sched.add(make_seq("x", 2, max_tokens=2))
    with pytest.raises(ValueError, match="'x': already queued"):
        sched.add(make_seq("x", 2, max_tokens=2))
    with pytest.raises(ValueError, match="must not be empty"):
        make_seq("e", 0)
    with pytest.raises(ValueError, match="max_num_batched_tokens=4: must be >= max_num_seqs=8"):
        Scheduler(PageManager(4, 4), 4, 8, 64)
    with pytest.raises(ValueError, match="max_model_len=0"):
        Scheduler(PageManager(4, 4), 8, 8, 0)


def test_update_protocol_is_enforced():
    sched = new_scheduler(4, 4, make_seq("a", 3, max_tokens=2))
    out = sched.schedule()
    with pytest.raises(RuntimeError, match="before update"):
        sched.schedule()
    with pytest.raises(ValueError, match="no token for request_id='a'"):
        sched.update(out, {})
    with pytest.raises(ValueError, match="not the output of the latest"):
        sched.update(out, {"a": (1, 0.0)})


def _check_schedule(out, sched, seqs, decode_ids):
    """Structural checks on one step; `decode_ids`: running with one token left before it."""
    budget = sched.max_num_batched_tokens
    assert out.num_batched_tokens == sum(len(i.token_ids) for i in out.items) <= budget
    assert len(out.items) <= sched.max_num_seqs
    decode_ids = [r for r in decode_ids if r not in out.preempted]
    ids = [i.request_id for i in out.items]
    assert ids[: len(decode_ids)] == sorted(decode_ids, key=lambda r: seqs[r].arrival)
    assert ids[len(decode_ids) :] == sorted(ids[len(decode_ids) :], key=lambda r: seqs[r].arrival)
    # Pages given back behind a sliding window keep their ids in the table.
    all_pages = [p for i in out.items for p in i.page_ids[seqs[i.request_id].num_released_pages :]]
    assert len(all_pages) == len(set(all_pages))
    window_pages = [
        p
        for i in out.items
        for p in i.window_page_ids[seqs[i.request_id].num_released_window_pages :]
    ]
    assert len(window_pages) == len(set(window_pages))
    for it in out.items:
        seq = seqs[it.request_id]
        assert it.start_pos == seq.num_computed_tokens
        assert len(it.page_ids) == pages_for_tokens(it.kv_len_after, sched.pages.page_size)
        hybrid = sched.window_pages is not None
        assert len(it.window_page_ids) == (len(it.page_ids) if hybrid else 0)
        assert it.sample == (it.kv_len_after == seq.num_tokens)


def _check_state(sched, seqs) -> list[str]:
    """State checks after a step; returns the ids that must decode first next step."""
    running = [s for s in seqs.values() if s.status is SequenceStatus.RUNNING]
    running.sort(key=lambda s: s.arrival)
    waiting = [s for s in seqs.values() if s.status is SequenceStatus.WAITING and s.arrival >= 0]
    assert sched.stats()["num_running"] == len(running)
    if running and waiting:
        assert running[-1].arrival < min(s.arrival for s in waiting)
    partial = [s for s in running if s.num_tokens - s.num_computed_tokens > 1]
    assert partial in ([], running[-1:])  # at most one, and it is the newest
    # Aborted sequences hold their pages until the next schedule().
    holders = running + [s for s in seqs.values() if s.finish_reason == "abort" and s.page_ids]
    held = [p for s in holders for p in s.page_ids[s.num_released_pages :]]
    assert len(held) == len(set(held))
    assert len(held) == sched.pages.num_total - sched.pages.num_free
    hybrid = sched.window_pages is not None
    window_held = [p for s in holders for p in s.window_page_ids[s.num_released_window_pages :]]
    assert len(window_held) == len(set(window_held))
    if hybrid:
        assert len(window_held) == sched.window_pages.num_total - sched.window_pages.num_free
    for s in running:
        c = s.num_computed_tokens
        assert len(s.page_ids) == pages_for_tokens(c, 4)
        assert len(s.window_page_ids) == (pages_for_tokens(c, 4) if hybrid else 0)
        behind = max(0, c + 1 - 6) // 4
        if sched.sliding_window is None or hybrid:  # the main pool keeps every page
            assert s.num_released_pages == 0
        else:
            assert s.num_released_pages == behind
        assert s.num_released_window_pages == (behind if hybrid else 0)
    return [s.request_id for s in running if s.num_tokens - s.num_computed_tokens == 1]


def _check_workload_done(sched, seqs, aborted, max_model_len, window, hybrid) -> dict:
    """A random workload's end: each request's output is the reference's (an aborted one's,
    a prefix), every page is back in its pool, nothing is queued. Returns the stats."""
    assert len(seqs) == 24
    for rid, seq in seqs.items():
        ref_tokens, ref_reason = reference(
            seq, max_model_len, window=6 if window else None, hybrid=hybrid
        )
        if rid in aborted:
            assert seq.finish_reason == "abort"
            assert seq.output_token_ids == ref_tokens[: seq.num_output_tokens]
        else:
            assert (seq.output_token_ids, seq.finish_reason) == (ref_tokens, ref_reason), rid
            assert seq.output_logprobs == [-t / 100 for t in ref_tokens]
        assert seq.page_ids == seq.window_page_ids == ()
    stats = sched.stats()
    assert stats["num_pages_free"] == stats["num_pages_total"] == sched.pages.num_total
    assert stats.get("num_window_pages_free") == stats.get("num_window_pages_total")
    assert stats["num_running"] == stats["num_waiting"] == 0
    return stats


@pytest.mark.parametrize("window", [None, 6, "hybrid"])
@pytest.mark.parametrize("seed", range(6))
def test_random_workload_tiny_pool(seed, window):
    """Every request finishes with its reference output; all pages come back. With a
    6-token sliding window, pages behind it go back to the pool as sequences advance (a
    hybrid model's: those of its windowed layers' own pool)."""
    rng = random.Random(seed)
    max_model_len = 40
    sched, dev = workload_scheduler(window)
    hybrid = window == "hybrid"
    seqs: dict[str, Sequence] = {}
    pending = []
    for k in range(24):
        params = Params(
            max_tokens=rng.choice([None, 1, 2, 5, 9, 20]),
            stop_token_ids=tuple(rng.sample(range(1, VOCAB), rng.choice([0, 0, 1]))),
            ignore_eos=rng.random() < 0.3,
        )
        prompt = tuple(rng.randrange(1, VOCAB) for _ in range(rng.randint(1, 30)))
        pending.append((rng.randint(0, 60), Sequence(f"r{k}", prompt, params)))
    pending.sort(key=lambda x: x[0])
    aborted, chunked, num_steps, decode_ids, released = set(), 0, 0, [], 0
    while pending or sched.has_unfinished():
        while pending and pending[0][0] <= num_steps:
            seq = pending.pop(0)[1]
            seqs[seq.request_id] = seq
            sched.add(seq)
        out = sched.schedule()
        _check_schedule(out, sched, seqs, decode_ids)
        chunked += sum(not i.sample for i in out.items)
        active = [s for s in seqs.values() if not s.is_finished]
        if active and rng.random() < 0.05:  # abort while the step is in flight
            victim = rng.choice(active)
            assert sched.abort(victim.request_id)
            aborted.add(victim.request_id)
        if out.items:
            sched.update(out, dev.run(out))
        decode_ids = _check_state(sched, seqs)
        released = max(
            released,
            sum(s.num_released_pages + s.num_released_window_pages for s in seqs.values()),
        )
        num_steps += 1
        assert num_steps < 3000, "no progress: starvation or livelock"
    stats = _check_workload_done(sched, seqs, aborted, max_model_len, window, hybrid)
    assert all(s.num_released_pages == s.num_released_window_pages == 0 for s in seqs.values())
    assert stats.get("num_window_pages_total") == (6 if hybrid else None)
    # The workload must actually exercise preemption and chunking (and the window).
    assert stats["num_preemptions"] > 0 and chunked > 0
    assert (released > 0) == (window is not None)


# ---- async scheduling: schedule_ahead while the previous step is in flight ---------------


def test_schedule_ahead_feeds_placeholders_and_counts_pending():
    a, b = make_seq("a", 3, max_tokens=3), make_seq("b", 2, 10, max_tokens=5)
    c = make_seq("c", 2, 20, max_tokens=1)
    sched, dev = new_scheduler(8, 4, a, b, c), FakeDevice(4)
    out1 = sched.schedule()
    assert summary(out1) == [
        ("a", 0, 3, (0,), True),
        ("b", 0, 2, (1,), True),
        ("c", 0, 2, (2,), True),
    ]
    assert [it.feed_index for it in out1.items] == [-1, -1, -1]
    s1 = run_fed(dev, out1, None)
    out2 = sched.schedule_ahead()
    # "c" stops at max_tokens=1 whatever step 1 samples: not scheduled ahead.
    assert summary(out2) == [("a", 3, 1, (0,), True), ("b", 2, 1, (1,), True)]
    assert [(it.token_ids, it.feed_index, it.num_generated) for it in out2.items] == [
        ((0,), 0, 1),
        ((0,), 1, 1),
    ]
    assert (a.num_pending_samples, a.num_inflight_tokens, a.num_computed_tokens) == (2, 4, 0)
    with pytest.raises(RuntimeError, match="exactly one step in flight"):
        sched.schedule_ahead()
    with pytest.raises(RuntimeError, match="before update"):
        sched.schedule()
    s2 = run_fed(dev, out2, (out1, s1))
    res = sched.update(out1, s1)
    assert [(r.request_id, r.finished) for r in res] == [("a", False), ("b", False), ("c", True)]
    assert (a.num_pending_samples, a.num_inflight_tokens, a.num_computed_tokens) == (1, 1, 3)
    out3 = sched.schedule_ahead()  # "a" may still sample its third token: one more decode
    assert summary(out3) == [("a", 4, 1, (0, 3), True), ("b", 3, 1, (1,), True)]
    assert [it.feed_index for it in out3.items] == [0, 1]
    assert [it.num_generated for it in out3.items] == [2, 2]
    s3 = run_fed(dev, out3, (out2, s2))
    sched.update(out2, s2)
    out4 = sched.schedule_ahead()  # "a" finishes by length at step 3: only "b"
    assert summary(out4) == [("b", 4, 1, (1, 4), True)]  # page 3 is still a's
    s4 = run_fed(dev, out4, (out3, s3))
    sched.update(out3, s3)
    sched.update(out4, s4)
    assert a.finish_reason == "length" and a.page_ids == ()
    run_async(sched, dev)
    for seq in (a, b, c):
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 64)
    assert sched.num_scheduled_ahead >= 3
    assert sched.stats()["num_pages_free"] == 8


def test_schedule_ahead_falls_back_instead_of_preempting():
    a, b = make_seq("a", 7, max_tokens=4), make_seq("b", 7, 20, max_tokens=3)
    sched, dev = new_scheduler(4, 4, a, b), FakeDevice(4)
    out1 = sched.schedule()
    s1 = run_fed(dev, out1, None)
    out2 = sched.schedule_ahead()  # position 7 still fits the second pages
    assert summary(out2) == [("a", 7, 1, (0, 1), True), ("b", 7, 1, (2, 3), True)]
    s2 = run_fed(dev, out2, (out1, s1))
    sched.update(out1, s1)
    free, running = sched.pages.num_free, [s.page_ids[:] for s in (a, b)]
    assert sched.schedule_ahead() is None  # "a" needs a third page: that means preempting
    assert (sched.pages.num_free, [s.page_ids for s in (a, b)]) == (free, running)
    assert sched.stats()["num_preemptions"] == 0
    sched.update(out2, s2)
    out3 = sched.schedule()  # the synchronous order preempts exactly as without async
    assert summary(out3) == [("a", 8, 1, (0, 1, 2), True)]
    assert out3.preempted == ("b",)
    sched.update(out3, dev.run(out3))
    run_async(sched, dev)
    assert (a.output_token_ids, a.finish_reason) == reference(a, 64)
    assert (b.output_token_ids, b.finish_reason) == reference(b, 64)
    assert sched.stats()["num_pages_free"] == 4


def test_stop_while_scheduled_ahead_releases_pages_after_the_later_step():
    probe = make_seq("x", 5, ignore_eos=True)
    first = reference(probe, 64)[0][0]
    a = make_seq("a", 5, max_tokens=8, stop_token_ids=(first,))
    b = make_seq("b", 3, 30, max_tokens=8)
    sched, dev = new_scheduler(8, 4, a, b), FakeDevice(4)
    out1 = sched.schedule()
    s1 = run_fed(dev, out1, None)
    out2 = sched.schedule_ahead()
    assert [it.request_id for it in out2.items] == ["a", "b"]
    s2 = run_fed(dev, out2, (out1, s1))
    free = sched.pages.num_free
    res = sched.update(out1, s1)
    assert [(r.request_id, r.finish_reason) for r in res] == [("a", "stop"), ("b", None)]
    assert a.is_finished and a.page_ids == (0, 1)  # step 2 may still write them
    assert sched.pages.num_free == free
    assert not sched.in_flight_all_finished()  # "b" still gains a token from step 2
    res = sched.update(out2, s2)
    assert [r.request_id for r in res] == ["b"]  # a's step-2 sample is dropped
    assert a.page_ids == () and sched.pages.num_free == free + 2
    assert a.output_token_ids == [first]
    run_async(sched, dev)
    assert (b.output_token_ids, b.finish_reason) == reference(b, 64)
    assert sched.stats()["num_pages_free"] == 8


@pytest.mark.parametrize("window", [None, 6, "hybrid"])
@pytest.mark.parametrize("seed", range(6))
def test_random_workload_scheduled_ahead(seed, window):
    """The tiny-pool workload driven asynchronously: same outputs, all pages back (with a
    sliding window, pages behind it given back while the next step is in flight)."""
    rng = random.Random(seed)
    max_model_len = 40
    sched, dev = workload_scheduler(window)
    hybrid = window == "hybrid"
    released = []
    seqs: dict[str, Sequence] = {}
    pending = []
    for k in range(24):
        params = Params(
            max_tokens=rng.choice([None, 1, 2, 5, 9, 20]),
            stop_token_ids=tuple(rng.sample(range(1, VOCAB), rng.choice([0, 0, 1]))),
            ignore_eos=rng.random() < 0.3,
        )
        prompt = tuple(rng.randrange(1, VOCAB) for _ in range(rng.randint(1, 30)))
        pending.append((rng.randint(0, 20), Sequence(f"r{k}", prompt, params)))
    pending.sort(key=lambda x: x[0])
    aborted = set()

    def on_step(num_steps):
        released.append(
            sum(s.num_released_pages + s.num_released_window_pages for s in seqs.values())
        )
        while pending and pending[0][0] <= num_steps:
            seq = pending.pop(0)[1]
            seqs[seq.request_id] = seq
            sched.add(seq)
        active = [s for s in seqs.values() if not s.is_finished]
        if active and rng.random() < 0.05:  # abort while a step is in flight
            victim = rng.choice(active)
            assert sched.abort(victim.request_id)
            aborted.add(victim.request_id)

    while pending:
        on_step(0)
        run_async(sched, dev, on_step)
        if pending:  # idle until the next arrival
            pending[0] = (0, pending[0][1])
    stats = _check_workload_done(sched, seqs, aborted, max_model_len, window, hybrid)
    assert all(s.num_pending_samples == s.num_inflight_tokens == 0 for s in seqs.values())
    assert stats["num_preemptions"] > 0 and sched.num_scheduled_ahead > 0
    assert (max(released) > 0) == (window is not None)


# ---- edges found by mutation testing -------------------------------------------------------


def test_limits_are_inclusive():
    """A budget equal to max_num_seqs is valid; a prompt of exactly max_model_len tokens runs
    (one token, then "length"); an empty prompt is refused by check_fits too."""
    Scheduler(PageManager(4, 4), 8, 8, 64)
    sched = new_scheduler(4, 4, max_model_len=9)
    with pytest.raises(ValueError, match="prompt length=0: must be >= 1"):
        sched.check_fits(0, 1)
    sched.check_fits(9, 1)
    seq = make_seq("full", 9, max_tokens=5)
    sched.add(seq)
    out, res = step(sched, FakeDevice(4))
    assert summary(out) == [("full", 0, 9, (0, 1, 2), True)]
    assert [(r.request_id, r.finish_reason) for r in res] == [("full", "length")]


def test_add_refuses_reused_ids_and_used_sequences():
    sched = new_scheduler(8, 4, make_seq("a", 3))
    out = sched.schedule()
    assert sched.abort("a")
    with pytest.raises(ValueError, match="'a': its abort is still being processed"):
        sched.add(make_seq("a", 3))
    used = make_seq("u", 3)
    used.page_ids = (5,)
    with pytest.raises(ValueError, match="'u': must be a new WAITING sequence"):
        sched.add(used)
    # A step is in flight: the aborted request's pages stay held until it is updated.
    assert sched.release_aborted() == ()
    assert sched.pages.num_free == 7 and sched.has_request("a")
    sched.update(out, {})
    assert sched.release_aborted() == ("a",)
    assert sched.pages.num_free == 8 and not sched.has_request("a")
    sched.add(make_seq("a", 3))


def test_cancel_takes_back_only_the_newest_step_and_ahead_waits_for_aborts():
    a, b = make_seq("a", 3, max_tokens=4), make_seq("b", 2, 10, max_tokens=4)
    c = make_seq("c", 2, 20, max_tokens=4)
    sched, dev = new_scheduler(8, 4, a, b, c), FakeDevice(4)
    assert not sched.in_flight_all_finished()  # nothing in flight
    out1 = sched.schedule()
    s1 = run_fed(dev, out1, None)
    out2 = sched.schedule_ahead()
    assert out2 is not None
    with pytest.raises(ValueError, match="not the newest step"):
        sched.cancel(out1)
    sched.cancel(out2)
    sched.update(out1, s1)
    assert sched.abort("b")
    out3 = sched.schedule()
    assert out3.finished_aborted == ("b",)
    assert summary(out3) == [("a", 3, 1, (0,), True), ("c", 2, 1, (2,), True)]
    s3 = run_fed(dev, out3, None)
    # c's pages can only be freed once nothing is in flight: no step is built ahead.
    assert sched.abort("c")
    assert sched.schedule_ahead() is None
    sched.update(out3, s3)
    assert sched.schedule().finished_aborted == ("c",)  # "a" is scheduled here too


def test_schedule_ahead_skips_a_sequence_that_reaches_max_model_len():
    a = make_seq("a", 6, max_tokens=None)
    sched, dev = new_scheduler(4, 4, a, max_model_len=8), FakeDevice(4)
    out1 = sched.schedule()
    s1 = run_fed(dev, out1, None)
    out2 = sched.schedule_ahead()  # a's 7th token is pending: the 8th may follow it
    assert summary(out2) == [("a", 6, 1, (0, 1), True)]
    s2 = run_fed(dev, out2, (out1, s1))
    sched.update(out1, s1)
    # The pending sample makes 8 tokens = max_model_len: a finishes whatever it is.
    assert sched.schedule_ahead() is None
    sched.update(out2, s2)
    assert (a.output_token_ids, a.finish_reason) == reference(a, 8)
