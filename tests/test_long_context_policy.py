"""Long-prefill policy in the scheduler: decode slowdown bound from step times, room for short
requests, the cap on concurrent long prefills, preemption with several partial prefills.

Host only: the fake device of test_scheduler.py checks every KV read, and step times come
from a cost model (fixed + per token + per attended key), as on a real device.
"""

import random

import pytest
from test_scheduler import EOS, FakeDevice, Params, make_seq, reference

from engine.kv_pages import PageManager
from engine.scheduler import Scheduler
from engine.sequence import Sequence, SequenceStatus
from long_context.policy import LongPrefillController, LongPrefillPolicy, policy_for_processes


def step_seconds(out) -> float:
    """A step's time: fixed cost, then each token and each (query token, key) pair."""
    keys = sum(it.start_pos + i + 1 for it in out.items for i in range(len(it.token_ids)))
    return 1.0 + 0.02 * out.num_batched_tokens + 0.00005 * keys


def run_step(sched, dev, seconds=step_seconds):
    out = sched.schedule()
    if out.items:
        sched.update(out, dev.run(out), seconds(out))
    return out


def long_scheduler(*seqs, policy=None, num_pages=512, budget=256, max_num_seqs=8):
    policy = policy or LongPrefillPolicy(long_prompt_tokens=100, probe_every=8)
    sched = Scheduler(
        PageManager(num_pages, 16), budget, max_num_seqs, 4096, (EOS,), long_prefill=policy
    )
    for seq in seqs:
        sched.add(seq)
    return sched


def kinds(out, long_ids):
    """(decodes, long prefill tokens, other prefill tokens) of a step."""
    decodes = sum(len(i.token_ids) == 1 and i.sample for i in out.items)
    long = sum(len(i.token_ids) for i in out.items if i.request_id in long_ids)
    return decodes, long, out.num_batched_tokens - decodes - long


def test_long_prefill_keeps_decode_steps_within_the_slowdown():
    decoders = [make_seq(f"d{k}", 8, base=10 * k + 1, max_tokens=1000) for k in range(4)]
    sched, dev = long_scheduler(*decoders), FakeDevice(16)
    for _ in range(3):
        run_step(sched, dev)
    long = make_seq("long", 2000, base=3, max_tokens=2)
    sched.add(long)
    times, chunks = [], []
    while long.num_output_tokens == 0:
        out = run_step(sched, dev)
        decodes, long_tokens, other = kinds(out, {"long"})
        assert decodes == 4 and other == 0  # the decoders are never left out
        times.append(step_seconds(out))
        chunks.append(long_tokens)
        assert len(times) < 2000, "the long prefill must finish"
    decode_only = [t for t, c in zip(times, chunks, strict=True) if c == 0]
    with_long = [t for t, c in zip(times, chunks, strict=True) if c > 0]
    # The decode-only time was measured before "long" arrived, so it starts at the initial
    # chunk; one probe step per 8 re-measures it.
    assert chunks[0] == 16 and 0 < len(decode_only) <= len(times) // 8
    # Steered by measured times, the step stays near the bound (max_decode_slowdown=2),
    # overshooting a little while the chunk grows, and uses most of what the bound allows
    # (chunks are whole multiples of chunk_quantum=8).
    assert max(with_long) / min(decode_only) <= 2.2
    assert sum(with_long) / len(with_long) / min(decode_only) > 1.6
    assert all(c % 8 == 0 for c in chunks[:-1])
    # The chunk shrinks as the context (and the cost per token) grows.
    assert max(chunks[:20]) > 2 * max(chunks[-20:]) > 0
    for seq in decoders + [long]:
        assert seq.output_token_ids == reference(seq, 4096)[0][: seq.num_output_tokens]


def test_without_decodes_a_long_prefill_takes_the_budget_but_lets_short_requests_in():
    long = make_seq("long", 1000, max_tokens=1)
    sched, dev = long_scheduler(long), FakeDevice(16)
    out = run_step(sched, dev)
    assert [(i.request_id, len(i.token_ids)) for i in out.items] == [("long", 256)]
    short = make_seq("short", 40, base=7, max_tokens=3)
    sched.add(short)
    out = run_step(sched, dev)
    # The long chunk leaves room for the short prompt, which is admitted behind it.
    assert [(i.request_id, i.start_pos, len(i.token_ids)) for i in out.items] == [
        ("long", 256, 216),
        ("short", 0, 40),
    ]
    while sched.has_unfinished():
        run_step(sched, dev)
    for seq in (long, short):
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 4096)


def test_max_long_prefills_holds_later_long_prompts_and_lets_short_ones_pass():
    policy = LongPrefillPolicy(long_prompt_tokens=100, max_long_prefills=1)
    a, b = make_seq("a", 600, max_tokens=1), make_seq("b", 300, base=5, max_tokens=1)
    c = make_seq("c", 30, base=9, max_tokens=2)
    sched, dev = long_scheduler(a, b, c, policy=policy), FakeDevice(16)
    steps = []
    while sched.has_unfinished():
        out = run_step(sched, dev)
        steps.append([(i.request_id, i.start_pos, len(i.token_ids)) for i in out.items])
    assert steps == [
        [("a", 0, 226), ("c", 0, 30)],  # "c" passes the held-back "b", with room left for it
        [("c", 30, 1)],  # "c" decodes; no decode-only time known yet: "a" sits out (probe)
        [("a", 226, 256)],
        [("a", 482, 118), ("b", 0, 138)],  # "b" starts in the step that ends "a"'s prefill
        [("b", 138, 162)],
    ]
    assert b.status is SequenceStatus.FINISHED and a.num_preemptions == 0
    for seq in (a, b, c):
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 4096)
    # Without the cap both long prompts prefill together from the start.
    a2, b2 = make_seq("a", 600, max_tokens=1), make_seq("b", 300, base=5, max_tokens=1)
    uncapped = LongPrefillPolicy(long_prompt_tokens=100, max_long_prefills=None)
    sched = long_scheduler(a2, b2, policy=uncapped, budget=1024)
    assert {i.request_id for i in sched.schedule().items} == {"a", "b"}


def test_steady_short_arrivals_cannot_starve_a_long_prompt():
    """A probe step (the long prompt left out to time the decodes alone) admits nobody
    behind it: a short request arriving every step would otherwise spoil every probe, and
    with no decode-only time measured the long prompt would get no tokens at all."""
    decoder = make_seq("d", 8, max_tokens=10_000)
    sched, dev = long_scheduler(decoder), FakeDevice(16)
    run_step(sched, dev)  # "d" decodes from now on; nothing is measured yet
    long = make_seq("long", 1000, base=3, max_tokens=1)
    sched.add(long)
    shorts, admitted_in_probe = [], 0
    for k in range(200):
        short = make_seq(f"s{k}", 4, base=5 + k % 40, max_tokens=1)
        shorts.append(short)
        sched.add(short)
        out = run_step(sched, dev)
        decodes, long_tokens, other = kinds(out, {"long"})
        if long.num_computed_tokens < long.num_prompt_tokens and long_tokens == 0:
            admitted_in_probe += other  # a step without the long prompt: a probe
        if long.is_finished:
            break
    assert long.is_finished, f"long prompt starved: {long.num_computed_tokens} tokens computed"
    assert admitted_in_probe == 0
    for _ in range(100):  # the shorts held back by probe steps are served after them
        if all(s.is_finished for s in shorts):
            break
        run_step(sched, dev)
    for seq in [long, *shorts]:
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 4096)


def test_token_budget_only_schedules_exactly_like_no_policy():
    def trace(policy):
        seqs = [make_seq(f"r{k}", n, base=k + 1, max_tokens=m) for k, (n, m) in
                enumerate([(300, 5), (20, 9), (700, 2), (5, 30), (150, 4)])]  # fmt: skip
        pm = PageManager(48, 16)
        sched = Scheduler(pm, 128, 4, 2048, (EOS,), long_prefill=policy)
        for seq in seqs:
            sched.add(seq)
        dev, steps = FakeDevice(16), []
        while sched.has_unfinished():
            out = run_step(sched, dev)
            steps.append([(i.request_id, i.start_pos, len(i.token_ids)) for i in out.items])
            steps[-1].append(out.preempted)
        return steps

    assert trace(LongPrefillPolicy.token_budget_only()) == trace(None)


@pytest.mark.parametrize("seed", range(4))
def test_random_workload_with_long_prompts_and_a_tiny_pool(seed):
    """Several partial prefills at once, preemption of already scheduled sequences, probes,
    aborts: every request still finishes with its reference output, no KV leaks."""
    rng = random.Random(seed)
    policy = LongPrefillPolicy(long_prompt_tokens=24, max_long_prefills=rng.choice([1, 2, None]))
    sched = Scheduler(PageManager(24, 4), 32, 6, 80, (EOS,), long_prefill=policy)
    dev = FakeDevice(4)
    seqs, pending, aborted = {}, [], set()
    for k in range(30):
        n = rng.choice([rng.randint(1, 12), rng.randint(24, 60)])
        prompt = tuple(rng.randrange(1, 50) for _ in range(n))
        params = Params(max_tokens=rng.choice([1, 3, 8, 20]), ignore_eos=rng.random() < 0.5)
        pending.append((rng.randint(0, 80), k, Sequence(f"r{k}", prompt, params)))
    pending.sort()
    num_steps, preempted_scheduled = 0, 0
    while pending or sched.has_unfinished():
        while pending and pending[0][0] <= num_steps:
            seq = pending.pop(0)[2]
            seqs[seq.request_id] = seq
            sched.add(seq)
        out = sched.schedule()
        ids = [i.request_id for i in out.items]
        assert len(ids) == len(set(ids)) and not set(ids) & set(out.preempted)
        assert out.num_batched_tokens == sum(len(i.token_ids) for i in out.items) <= 32
        pages = [p for i in out.items for p in i.page_ids]
        assert len(pages) == len(set(pages))
        preempted_scheduled += bool(out.preempted and out.items)
        active = [s for s in seqs.values() if not s.is_finished]
        if active and rng.random() < 0.03:
            victim = rng.choice(active)
            assert sched.abort(victim.request_id)
            aborted.add(victim.request_id)
        if out.items:
            sched.update(out, dev.run(out), step_seconds(out) * rng.uniform(0.8, 1.25))
        num_steps += 1
        assert num_steps < 5000, "no progress: starvation or livelock"
    assert sched.stats()["num_preemptions"] > 0
    for rid, seq in seqs.items():
        ref_tokens, ref_reason = reference(seq, 80)
        if rid in aborted:
            assert seq.output_token_ids == ref_tokens[: seq.num_output_tokens]
        else:
            assert (seq.output_token_ids, seq.finish_reason) == (ref_tokens, ref_reason), rid
    assert sched.stats()["num_pages_free"] == 24


def test_controller_probes_and_bad_policies():
    ctl = LongPrefillController(LongPrefillPolicy(probe_every=2, smoothing=0.5))
    assert ctl.allowance(has_decodes=False) is None  # nobody to protect
    assert ctl.allowance(has_decodes=True) == 0  # no decode-only time yet: probe
    ctl.observe(4, 0, 0, 1.0)
    assert ctl.base_seconds == 1.0 and ctl.allowance(True) == 16  # initial_chunk_tokens
    ctl.observe(4, 16, 0, 2.6)  # 0.1 s per long token: 1 s of allowed extra time fits 10
    assert ctl.token_seconds == pytest.approx(0.1) and ctl.allowance(True) == 8  # quantum
    ctl.observe(4, 8, 0, 1.4)  # 0.05 s per token now: averaged to 0.075
    assert ctl.allowance(True) == 0  # probe_every steps with a long chunk: re-measure
    ctl.observe(4, 0, 3, 5.0)  # spoiled by other prefill tokens: not a decode-only time
    assert ctl.base_seconds == 1.0 and ctl.allowance(True) == 8  # 1 / 0.075 = 13 -> 8
    ctl.observe(4, 8, 0, 1.2)  # 0.025 s per token: 20 would fit, but at most twice the last
    assert ctl.allowance(True) == 16
    ctl.observe(4, 0, 0, 2.0)
    assert ctl.base_seconds == 1.5
    for kwargs, field in [
        (dict(long_prompt_tokens=0), "long_prompt_tokens"),
        (dict(max_long_prefills=0), "max_long_prefills"),
        (dict(max_decode_slowdown=1.0), "max_decode_slowdown"),
        (dict(max_decode_slowdown=float("nan")), "max_decode_slowdown"),
        (dict(probe_every=0), "probe_every"),
        (dict(smoothing=0.0), "smoothing"),
    ]:
        with pytest.raises(ValueError, match=field):
            LongPrefillPolicy(**kwargs)


def test_times_that_are_not_times_are_not_measurements():
    ctl = LongPrefillController(LongPrefillPolicy())
    for bad in (float("nan"), float("inf"), -1.0):
        ctl.observe(4, 0, 0, bad)  # a decode-only step
        assert ctl.base_seconds is None and ctl.allowance(True) == 0  # still to be measured
    ctl.observe(4, 0, 0, 1.0)
    ctl.observe(4, 16, 0, float("nan"))
    assert ctl.base_seconds == 1.0 and ctl.token_seconds is None
    assert ctl.allowance(True) == 16  # the initial chunk, never NaN tokens


def _noisy_trace(policy, noise_seed: int) -> list:
    """The steps one process schedules when its step times carry +-3% noise of its own."""
    rnd = random.Random(noise_seed)
    decoders = [make_seq(f"d{k}", 8, base=10 * k + 1, max_tokens=300) for k in range(4)]
    sched, dev = long_scheduler(*decoders, policy=policy), FakeDevice(16)
    trace = []
    for i in range(300):
        if i == 3:
            sched.add(make_seq("long", 2000, base=3, max_tokens=2))
        out = run_step(sched, dev, lambda out: step_seconds(out) * (1 + 0.03 * rnd.random()))
        trace.append([(it.request_id, len(it.token_ids)) for it in out.items])
    return trace


def test_processes_of_one_mesh_schedule_alike_whatever_their_clocks():
    """The multi-process policy the engine takes has no clock in it: two processes measuring
    different step times build the same steps (with the clock, they part ways)."""
    timed = LongPrefillPolicy(long_prompt_tokens=100, probe_every=8)
    assert _noisy_trace(timed, 0) != _noisy_trace(timed, 1)
    clockless = timed.without_clock()
    assert _noisy_trace(clockless, 0) == _noisy_trace(clockless, 1)
    assert policy_for_processes(None, 1) == LongPrefillPolicy()
    assert policy_for_processes(None, 2) == LongPrefillPolicy().without_clock()
    assert policy_for_processes(clockless, 2) is clockless
    with pytest.raises(ValueError, match="long_prefill.max_decode_slowdown"):
        policy_for_processes(timed, 2)


# ---- edges found by mutation testing -------------------------------------------------------


def test_room_for_a_short_request_is_at_most_half_the_budget_and_only_if_it_can_run():
    long = make_seq("long", 1000, max_tokens=1)
    policy = LongPrefillPolicy(long_prompt_tokens=300, probe_every=8)
    sched, dev = long_scheduler(long, policy=policy), FakeDevice(16)
    run_step(sched, dev)
    sched.add(make_seq("short", 200, base=7, max_tokens=1))
    out = run_step(sched, dev)
    # The long prefill keeps half the budget even for a short prompt longer than that.
    assert [(i.request_id, len(i.token_ids)) for i in out.items] == [("long", 128), ("short", 128)]
    # With max_num_seqs running the short prompt cannot be admitted: no room is held back.
    long = make_seq("long", 1000, max_tokens=1)
    sched, dev = long_scheduler(long, max_num_seqs=1), FakeDevice(16)
    run_step(sched, dev)
    sched.add(make_seq("short", 40, base=7, max_tokens=1))
    out = run_step(sched, dev)
    assert [(i.request_id, len(i.token_ids)) for i in out.items] == [("long", 256)]


def test_long_prefills_share_one_allowance():
    """With no cap on long prefills, the slowdown allowance bounds their tokens together."""
    policy = LongPrefillPolicy(long_prompt_tokens=100, max_long_prefills=None, probe_every=8)
    d = make_seq("d", 8, max_tokens=1000)
    sched, dev = long_scheduler(d, policy=policy), FakeDevice(16)
    for _ in range(3):
        run_step(sched, dev)
    sched.add(make_seq("x", 300, base=3, max_tokens=1))
    sched.add(make_seq("y", 300, base=5, max_tokens=1))
    out = run_step(sched, dev)
    assert kinds(out, {"x", "y"}) == (1, 16, 0)  # initial_chunk_tokens, for both together


def test_schedule_ahead_undoes_admissions_when_a_long_chunk_needs_the_step_time():
    """A long prompt's chunk depends on the in-flight step's time: schedule_ahead falls back,
    and a short prompt it admitted before that is waiting again (so it can be aborted)."""
    policy = LongPrefillPolicy(long_prompt_tokens=16)
    a = make_seq("a", 8, max_tokens=3)
    sched, dev = long_scheduler(a, policy=policy), FakeDevice(16)
    out1 = sched.schedule()
    s1 = dev.run(out1)
    s, big = make_seq("s", 4, base=20, max_tokens=2), make_seq("L", 40, base=30, max_tokens=2)
    sched.add(s)
    sched.add(big)
    free = sched.pages.num_free
    assert sched.schedule_ahead() is None
    assert s.status is SequenceStatus.WAITING and s.page_ids == ()
    assert sched.pages.num_free == free and sched.stats()["num_waiting"] == 2
    assert sched.abort("s")
    sched.update(out1, s1, 1.0)
    while sched.has_unfinished():
        run_step(sched, dev)
    for seq in (a, big):
        assert (seq.output_token_ids, seq.finish_reason) == reference(seq, 4096)
