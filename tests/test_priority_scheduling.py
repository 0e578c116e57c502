"""Priority scheduling (LLM(scheduling_policy="priority"), Scheduler(policy="priority")).

On the host with exact page ids: admission takes the best (priority, arrival) first,
preemption the worst running, FCFS ignores priorities; random workloads with priorities
still give every request its reference output. The engine: priorities reach the scheduler
from generate / add_request, the outputs stay the fixture's, and bad priorities are
refused before anything is queued.
"""

from __future__ import annotations

import json
import pathlib
import random
import threading

import pytest

from engine import LLM, SamplingParams
from engine.kv_pages import PageManager
from engine.scheduler import Scheduler
from engine.server import Server
from tests.sampler_cases import POOL
from tests.scheduler_cases import (
    EOS,
    FakeDevice,
    make_seq,
    reference,
    run_to_the_end,
    step,
    summary,
)
from tests.test_server import post

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def ranked(rid: str, priority: int, n_prompt: int = 6, base: int = 1, **params):
    seq = make_seq(rid, n_prompt, base, **params)
    seq.priority = priority
    return seq


def scheduler(num_pages: int, policy: str = "priority", budget: int = 64) -> Scheduler:
    return Scheduler(PageManager(num_pages, 4), budget, 8, 64, eos_token_ids=(EOS,), policy=policy)


def test_admission_takes_the_best_priority_first_and_arrival_breaks_ties():
    sched, dev = scheduler(4), FakeDevice(4)
    for seq in (
        ranked("a", 5, max_tokens=2),
        ranked("b", 1, base=10, max_tokens=2),
        ranked("c", 1, base=20, max_tokens=2),
    ):
        sched.add(seq)
    out, _ = step(sched, dev)  # two fit (2 pages each): b, then c (same priority, later)
    assert summary(out) == [("b", 0, 6, (0, 1), True), ("c", 0, 6, (2, 3), True)]
    # FCFS: arrival order alone.
    sched = scheduler(4, "fcfs")
    for seq in (
        ranked("a", 5, max_tokens=2),
        ranked("b", 1, base=10, max_tokens=2),
        ranked("c", 1, base=20, max_tokens=2),
    ):
        sched.add(seq)
    out, _ = step(sched, dev)
    assert [it.request_id for it in out.items] == ["a", "b"]


def test_preemption_takes_the_worst_priority_not_the_newest():
    a = ranked("a", 5, n_prompt=7, max_tokens=4)  # admitted first, lower priority
    sched, dev = scheduler(4), FakeDevice(4)
    sched.add(a)
    step(sched, dev)
    b = ranked("b", 0, n_prompt=7, base=20, max_tokens=3)
    sched.add(b)
    out, _ = step(sched, dev)  # b admitted behind a's decode; running: b, a
    assert [it.request_id for it in out.items] == ["a", "b"]
    # a needs a third page and none is free: it goes itself (under FCFS, b would: the
    # newest admitted), while b decodes on.
    out, _ = step(sched, dev)
    assert out.preempted == ("a",)
    assert summary(out) == [("b", 7, 1, (2, 3), True)]
    while sched.has_unfinished():
        step(sched, dev)
    for seq in (a, b):
        assert (seq.output_token_ids, "length") == reference(seq, 64)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ahead", [False, True])
def test_random_workload_with_priorities(seed, ahead):
    rnd = random.Random(seed)
    sched, dev = scheduler(10, budget=16), FakeDevice(4)
    seqs = [
        ranked(f"r{i}", rnd.randint(0, 3), rnd.randint(1, 20), rnd.randint(1, 40), max_tokens=8)
        for i in range(12)
    ]
    run_to_the_end(sched, dev, seqs, ahead, 64)
    assert sched.stats()["num_pages_free"] == 10


def test_the_engine_takes_priorities():
    ref = json.loads((FIXTURES / "llama" / "reference.json").read_text())
    shape = dict(model=str(FIXTURES / "llama"), max_num_seqs=8, max_num_batched_tokens=64)
    llm = LLM(**shape, **POOL, scheduling_policy="priority")
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    outs = llm.generate(ref["prompts"], params, priority=[2, 0, 1])
    assert [o.token_ids for o in outs] == [t[:8] for t in ref["greedy_tokens"]]
    rid = llm.add_request(ref["prompts"][0], params, priority=-3)
    assert llm._scheduler._active[rid].priority == -3
    llm.abort(rid)
    llm.step()
    for call, match in (
        (lambda: llm.generate(ref["prompts"], params, priority=[1]), "priority: 1 given for 3"),
        (lambda: llm.generate(ref["prompts"][0], params, priority=1.5), "priority=1.5"),
        (lambda: LLM(**shape, **POOL).generate([1, 2], params, priority=1), "scheduling_policy"),
        (lambda: LLM(**shape, scheduling_policy="lifo"), "scheduling_policy='lifo'"),
    ):
        with pytest.raises(ValueError, match=match):
            call()
    stats = llm.stats()
    assert (stats["num_waiting"], stats["num_running"]) == (0, 0)
    # The API's "priority" field (vLLM's extra).
    srv = Server(("127.0.0.1", 0), llm, "llama")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        body = {"prompt": ref["prompts"][1], "max_tokens": 8, "temperature": 0, "logprobs": 0}
        status, out = post(srv, "/v1/completions", {**body, "priority": 4})
        assert status == 200 and out["choices"][0]["logprobs"]["tokens"]
        status, out = post(srv, "/v1/completions", {**body, "priority": "high"})
        assert status == 400 and "priority='high'" in out["error"]["message"]
    finally:
        srv.shutdown()
        srv.close()
