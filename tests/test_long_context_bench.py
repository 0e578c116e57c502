"""The long-context benchmark code runs end to end on a tiny model (its figures are not
checked here: timing belongs in scripts/bench_long_context.py)."""

import pytest
from absl import app, flags

from engine import paged_attention
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
    ttft = measure_ttft("tiny-llama", prompt_len=200, budget=64)
    assert ttft["steps"] == 4 and ttft["ttft_s"] > 0  # ceil(200 / 64) chunks
    assert ttft["peak_rss_bytes"] > ttft["weight_bytes"] + ttft["kv_pool_bytes"]

    policy = LongPrefillPolicy(long_prompt_tokens=128)
    itl = measure_itl("tiny-llama", 400, budget=64, policy=policy, num_streams=2, stream_tokens=300)
    for window in ("itl_with", "itl_without"):
        assert itl[window]["n"] + itl[window]["dropped"] >= 2 * (itl["steps"] - 1)
    assert itl["policy"] == "max_decode_slowdown=2" and itl["steps"] >= 300 // 64

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

    host = time_host_step(3, 40, steps=4)  # raises unless every timed step is 3 decodes
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
