"""The long-context benchmark code runs end to end on a tiny model (its figures are not
checked here: timing belongs in scripts/bench_long_context.py)."""

import math
import types

import jax.numpy as jnp
import numpy as np
import pytest
from absl import app, flags

from configs.presets import get_preset
from engine import paged_attention
from engine.sampling_params import StreamDelta
from long_context import latency
from long_context.latency import (
    measure_itl,
    measure_ttft,
    plot_itl_vs_ttft,
    time_attention,
    time_host_step,
    time_mla_attention,
    time_pack,
    time_window_attention,
)
from long_context.policy import LongPrefillPolicy


def test_latency_measurements_run_on_a_tiny_model(tmp_path):
    # Contexts of at most 128 tokens: a page table of one KV block, whose attention
    # compiles 2-3x faster than a wider one's (the code paths measured are the same).
    ttft = measure_ttft("tiny-llama", prompt_len=100, budget=32)
    assert ttft["steps"] == 4 and ttft["ttft_s"] > 0  # ceil(100 / 32) chunks
    assert ttft["peak_rss_bytes"] > ttft["weight_bytes"] + ttft["kv_pool_bytes"]

    policy = LongPrefillPolicy(long_prompt_tokens=64)
    itl = measure_itl(
        "tiny-llama",
        120,
        budget=32,
        policy=policy,
        num_streams=2,
        stream_prompt_len=32,
        stream_tokens=90,
    )
    for window in ("itl_with", "itl_without"):
        assert itl[window]["n"] + itl[window]["dropped"] >= 2 * (itl["steps"] - 1)
    assert itl["policy"] == "max_decode_slowdown=2" and itl["steps"] >= 120 // 32

    rows = [itl | dict(series="default", label="64")]
    plot_itl_vs_ttft(rows, str(tmp_path / "itl.png"), "tiny")
    assert (tmp_path / "itl.png").stat().st_size > 1000

    timing = time_attention(paged_attention, [(1, 40), (30, 70)], kv_block_tokens=32, repeats=1)
    assert timing["seconds"] > 0 and timing["temp_bytes"] > 0
    windowed = time_attention(
        paged_attention, [(1, 40), (30, 70)], kv_block_tokens=32, repeats=1, window=8
    )
    assert windowed["seconds"] > 0

    # A 200-token span is expanded at DeepSeek-V3's heads (break-even ~171 rows), a decode
    # is not; both forms agree.
    mla = time_mla_attention([(1, 40), (200, 230)], 1, repeats=1)
    assert mla["expanded"] and mla["max_abs_diff"] < 1e-5
    assert mla["absorbed"]["seconds"] > 0 and mla["engine"]["seconds"] > 0

    for carried in (True, False):
        assert time_pack(4, 100, 1024, carried, steps=2) > 0

    for window in (None, 8):  # (8: a hybrid model's second pool and table)
        host = time_host_step(3, 40, steps=4, window=window)  # raises unless 3 decodes a step
        assert host["schedule_s"] > 0 and host["pack_s"] > 0 and host["update_s"] > 0


def test_bench_rejects_an_unknown_part(tmp_path):
    from scripts import bench_long_context

    out = tmp_path / "lc.json"
    flags.FLAGS(["bench_long_context", "--part=ttft,bogus", f"--json_out={out}"])
    try:
        with pytest.raises(app.UsageError, match="--part=ttft,bogus: bogus is not one of"):
            bench_long_context.main([])
    finally:
        flags.FLAGS.unparse_flags()
    assert not out.exists()


def test_window_benchmark_runs_and_rejects_bad_windows(tmp_path, monkeypatch):
    import long_context.latency as latency
    from scripts import bench_long_context

    monkeypatch.setattr(latency, "WINDOW_SCENARIOS", {"2 decodes at 300": [(1, 300)] * 2})
    rows = time_window_attention([None, 16], repeats=1)
    assert [r["scenario"] for r in rows] == ["2 decodes at 300"]
    assert rows[0]["None"]["seconds"] > 0 and rows[0]["16"]["seconds"] > 0
    out = tmp_path / "lc.json"
    for bad in ("0", "4k", ""):
        flags.FLAGS(
            ["bench_long_context", "--part=window", f"--windows={bad}", f"--json_out={out}"]
        )
        try:
            with pytest.raises(app.UsageError, match="--windows"):
                bench_long_context.main([])
        finally:
            flags.FLAGS.unparse_flags()
    assert not out.exists()


class _Clock:
    """A stand-in for the `time` module whose perf_counter returns scripted readings."""

    def __init__(self, readings):
        self.readings = iter(readings)

    def perf_counter(self) -> float:
        return next(self.readings)


def test_percentiles_are_in_milliseconds_and_empty_windows_are_nan():
    # 101 samples of 1..101 ms: numpy's linear percentiles land on samples 51 and 100.
    got = latency._percentiles([i / 1000 for i in range(101, 0, -1)])
    assert got["n"] == 101
    assert got["p50_ms"] == pytest.approx(51) and got["p99_ms"] == pytest.approx(100)
    assert got["max_ms"] == pytest.approx(101)
    empty = latency._percentiles([])
    assert empty["n"] == 0 and all(math.isnan(empty[k]) for k in ("p50_ms", "p99_ms", "max_ms"))


def test_stream_clock_samples_gaps_between_tokens_and_drops_compiling_steps():
    clock = latency._StreamClock(["a", "b"])

    def step(now, compiled, **tokens):
        deltas = [StreamDelta(rid, t, (0.0,) * len(t), None) for rid, t in tokens.items()]
        clock.record(deltas, now, compiled)

    step(1.0, False, a=(5,), b=(6,), c=(7,))  # first tokens: no gap yet; "c" is not a stream
    step(1.5, True, a=(5,), b=())  # a compiling step: a's gap is dropped, b got no token
    step(1.75, False, a=(5,), b=(6,))
    assert sorted(clock.samples) == [0.25, 0.75] and clock.dropped == 1


def test_step_timed_counts_only_steps_that_compiled():
    class FakeLLM:
        compiles = 0

        def stats(self):
            return {"num_compiles": self.compiles}

        def step(self):
            self.compiles += self.next_compiles
            return [StreamDelta("a", (1,), (0.0,), None)]

    llm, clock = FakeLLM(), latency._StreamClock(["a"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(latency, "time", _Clock([0.0, 2.0, 5.0, 5.5]))
        llm.next_compiles = 1
        assert latency._step_timed(llm, clock)[1] == 2.0
        llm.next_compiles = 0
        assert latency._step_timed(llm, clock)[1] == 0.0
    assert clock.samples == [3.5] and clock.dropped == 0


@pytest.mark.parametrize(
    "args, match",
    [
        ((0, 16, 100), "num_streams=0"),
        ((1, 4, 100), "stream_tokens=4"),  # the 4 warm-up tokens would be all it decodes
        ((1, 16, 0), "prompt_len=0"),
    ],
)
def test_itl_arguments_are_checked(args, match):
    with pytest.raises(ValueError, match=f"^{match}: must be"):
        latency.check_itl_args(*args)
    latency.check_itl_args(1, 5, 1)  # the smallest measurable run


def test_policy_descriptions():
    assert latency._describe(LongPrefillPolicy.token_budget_only()) == "token budget only"
    assert latency._describe(LongPrefillPolicy(max_decode_slowdown=3)) == "max_decode_slowdown=3"


def test_paged_batch_lays_out_each_sequence_in_its_own_pages():
    # A decode at 32 keys (2 pages of 16) and a 3-token chunk ending at key 20 (2 pages).
    (cu, positions, kv_lens, table), used = latency.paged_batch([(1, 32), (3, 20)], 16)
    assert cu.tolist() == [0, 1, 4] and kv_lens.tolist() == [32, 20]
    assert positions.tolist() == [31, 17, 18, 19]
    assert table.tolist() == [[0, 1], [2, 3]] and used == 4


def test_time_attention_keeps_the_best_repeat_and_blocks_whole_pages(monkeypatch):
    seen = {}

    class Module:
        build_metadata = staticmethod(paged_attention.build_metadata)

        @staticmethod
        def paged_attention_gqa(q, k_pages, v_pages, meta, scale, block_pages):
            seen["block_pages"] = block_pages
            return q * scale

    monkeypatch.setattr(latency, "time", _Clock([0.0, 3.0, 10.0, 11.0, 20.0, 22.0]))
    got = latency.time_attention(Module, [(1, 40)], kv_block_tokens=40, repeats=3)
    assert got["seconds"] == 1.0 and seen["block_pages"] == 2  # 40 tokens: 2 whole pages


def test_time_pack_is_the_mean_of_its_steps(monkeypatch):
    monkeypatch.setattr(latency, "time", _Clock([0.0, 1.0, 10.0, 13.0]))
    assert latency.time_pack(2, 40, 64, carried=True, steps=2) == 2.0


def test_time_host_step_reports_medians(monkeypatch):
    # Five readings a step (start, scheduled, packed, updating, done); step 0 is the prefill.
    readings = []
    for step, (sched, pack, update) in enumerate([(50, 50, 50), (1, 4, 7), (2, 5, 8), (9, 6, 3)]):
        t = 100.0 * step
        readings += [t, t + sched, t + sched + pack, t + 60, t + 60 + update]
    monkeypatch.setattr(latency, "time", _Clock(readings))
    got = latency.time_host_step(2, 8, steps=3)
    assert (got["schedule_s"], got["pack_s"], got["update_s"]) == (2.0, 5.0, 7.0)


class _FakeEngine:
    """Just enough of LLM for measure_ttft and measure_itl, on a clock it advances itself: a
    request prefills `budget` tokens a step, then decodes a token a step; a step takes 1 ms
    per request in it, and the first step with a long prompt in it compiles for a second."""

    made: list = []

    def __init__(self, **kwargs):
        self.kwargs, self.budget = kwargs, kwargs["max_num_batched_tokens"]
        _FakeEngine.made.append(self)
        self.config = get_preset("tiny-llama")
        self.kv_dtype = jnp.dtype(jnp.float32)
        self.params = {"w": np.zeros(10, np.float32)}
        self.now, self.steps, self.compiles, self.next_id = 0.0, 0, 0, 0
        self.requests, self.generated = {}, []  # id -> [prefill steps left, tokens left]
        # The module reads this engine's clock (the fixture's monkeypatch puts `time` back).
        latency.time = types.SimpleNamespace(perf_counter=lambda: self.now)

    def add_request(self, prompt, params):
        rid, self.next_id = str(self.next_id), self.next_id + 1
        self.requests[rid] = [-(-len(prompt) // self.budget), params.max_tokens, len(prompt)]
        return rid

    def abort(self, rid):
        del self.requests[rid]

    def stats(self):
        return {"num_steps": self.steps, "num_compiles": self.compiles}

    def step(self):
        self.steps += 1
        self.now += 1e-3 * len(self.requests)
        if any(r[2] > 256 for r in self.requests.values()) and not self.compiles:
            self.compiles, self.now = 1, self.now + 1.0
        deltas = []
        for rid, r in list(self.requests.items()):
            r[0] -= 1
            if r[0] < 0 or (r[0] == 0 and r[2]):  # the last prefill chunk samples a token
                r[0], r[2] = 0, 0
                r[1] -= 1
                deltas.append(StreamDelta(rid, (7,), (0.0,), None if r[1] else "length"))
                if not r[1]:
                    del self.requests[rid]
        return deltas

    def generate(self, prompts, params):
        self.generated.append(len(prompts[0]))
        self.steps += -(-len(prompts[0]) // self.budget)
        return [types.SimpleNamespace(token_ids=[7])]


@pytest.fixture
def fake_engine(monkeypatch):
    _FakeEngine.made = []
    monkeypatch.setattr(latency, "LLM", _FakeEngine)
    monkeypatch.setattr(latency, "time", types.SimpleNamespace(perf_counter=lambda: 0.0))
    return _FakeEngine


@pytest.mark.parametrize("prompt_len, warm_len", [(200, 72), (128, 64), (50, 50)])
def test_ttft_warm_up_covers_a_full_and_the_last_chunk(fake_engine, prompt_len, warm_len):
    # 200 tokens in chunks of 64 are 64, 64, 64, 8: the warm-up prompt of 64 + 8 compiles both.
    got = latency.measure_ttft("tiny-llama", prompt_len=prompt_len, budget=64)
    (llm,) = fake_engine.made
    assert llm.generated == [warm_len, prompt_len]
    pages = -(-prompt_len // 16) + 1  # the prompt's pages and one more
    assert llm.kwargs["num_pages"] == pages and llm.kwargs["max_model_len"] == prompt_len
    # tiny-llama, float32: 2 layers x (K and V) x 2 KV heads x 40 x 4 bytes per token
    assert got["kv_pool_bytes"] == pages * 16 * 2 * 2 * 2 * 40 * 4
    assert got["steps"] == -(-prompt_len // 64) and got["weight_bytes"] == 40


def test_itl_windows_on_a_fake_engine(fake_engine):
    got = latency.measure_itl("tiny-llama", 400, budget=64, policy=None, num_streams=2,
                              stream_tokens=300)  # fmt: skip
    (llm,) = fake_engine.made
    # 400 tokens in chunks of 64: the 7th step samples the first token.
    assert got["steps"] == 7 and got["policy"] == "max_decode_slowdown=2"
    assert llm.kwargs["max_model_len"] == 128 + 300 + 1
    assert llm.kwargs["num_pages"] == -(-(400 + 2 * 428) // 16) + 1
    # 7 steps of 3 ms (2 streams + the prompt), the first of them compiling for 1 s more:
    # TTFT leaves out that whole step.
    assert got["ttft_s"] == pytest.approx(0.018) and got["compile_s"] == pytest.approx(1.003)
    # With the prompt: the compiling first step is each stream's first token seen (no gap),
    # then 6 gaps of 3 ms per stream. Without: the restarted streams alone, 2 ms.
    assert got["itl_with"]["n"] == 12 and got["itl_with"]["p50_ms"] == pytest.approx(3)
    assert got["itl_without"]["n"] == 12 and got["itl_without"]["max_ms"] == pytest.approx(2)
    assert not llm.requests  # every stream aborted at the end


def test_bench_flags_take_the_documented_attention_configs_and_report_crashes(monkeypatch):
    """A decode block:query tile:prefill block triple may repeat a size (docs/benchmarks.md
    times 128:128:512); a malformed one is refused by name. A TTFT child that refused its
    input (exit 1, main's one line) is reported as that line; one that crashed (killed, or
    a traceback) as a crash with its log."""
    import subprocess

    from scripts import bench_long_context

    good = "128:256:512,128:128:512,128:256:256"
    flags.FLAGS(["bench_long_context", "--part=attention", f"--attention_configs={good}"])
    try:
        bench_long_context._check_flags()
        for bad in ("128:256", "128:0:512", "a:b:c"):
            flags.FLAGS["attention_configs"].value = [bad]
            with pytest.raises(ValueError, match=f"--attention_configs={bad}: expected"):
                bench_long_context._check_flags()
    finally:
        flags.FLAGS.unparse_flags()

    def child(returncode, stderr):
        done = subprocess.CompletedProcess([], returncode, stdout="", stderr=stderr)
        monkeypatch.setattr(subprocess, "run", lambda *a, **k: done)

    child(1, "W0101 a warning\nbench_long_context: --budget=0: must be >= 1\n")
    with pytest.raises(ValueError, match="m at 8 tokens: bench_long_context: --budget=0"):
        bench_long_context._ttft_in_subprocess("m", 8, 0, "auto")
    for returncode, stderr in ((-9, "W0101 a warning\n"), (1, "Traceback ...\nKeyError: 3\n")):
        child(returncode, stderr)
        with pytest.raises(RuntimeError, match="failed:"):
            bench_long_context._ttft_in_subprocess("m", 8, 64, "auto")
