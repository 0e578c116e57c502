"""Long-context latency measurements behind scripts/bench_long_context.py.

- `measure_ttft`: one long prompt alone: time to first token, and the process's peak RSS
  against the weights and the KV pool it holds.
- `measure_itl`: `num_streams` requests decode; their inter-token latency (ITL) while a long
  prompt prefills (until its first token, whose TTFT is the other side of the trade-off),
  and over as many steps of the same streams without it.
- `time_pack`: the host's share of a decode step at long context, packing the batch
  (engine/runner.pack), whose page tables grow with the context.
- `time_host_step`: the host's whole share of a decode step, no model: the scheduler's
  schedule and update around runner.pack.
Steps that compiled a new shape bucket are left out of the ITL samples (and counted).
"""

from __future__ import annotations

import resource
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from configs.presets import get_preset
from engine import LLM, SamplingParams, kv_quant, mla_expanded, runner
from engine import paged_attention as pa
from engine import step as engine_step
from engine.attention_ops import get_attention_ops
from engine.kv_pages import PageManager, pages_for_tokens
from engine.scheduler import ScheduledItem, Scheduler
from engine.sequence import Sequence
from long_context.policy import LongPrefillPolicy
from models.attention import AttnInputs


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _weight_bytes(llm: LLM) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(llm.params))


def measure_ttft(
    model: str, prompt_len: int, budget: int, seed: int = 0, kv_cache_dtype: str = "auto"
) -> dict:
    """TTFT of one `prompt_len`-token prompt, chunked by `budget`, after a warm-up prompt
    has compiled the step's shapes; peak RSS of the whole process (run it alone)."""
    page_size = 16
    num_pages = pages_for_tokens(prompt_len, page_size) + 1
    llm = LLM(
        model=model,
        max_num_batched_tokens=budget,
        max_num_seqs=1,
        max_model_len=prompt_len,
        num_pages=num_pages,
        page_size=page_size,
        kv_cache_dtype=kv_cache_dtype,
    )
    rng = np.random.default_rng(seed)
    vocab = llm.config.vocab_size
    one = SamplingParams(temperature=0.0, max_tokens=1)
    start = time.perf_counter()
    # Compiles the full-chunk and last-chunk buckets the long prompt will use.
    warm_len = min(prompt_len, budget + prompt_len % budget if prompt_len % budget else budget)
    llm.generate([rng.integers(3, vocab, warm_len).tolist()], one)
    compile_s = time.perf_counter() - start
    prompt = rng.integers(3, vocab, prompt_len).tolist()
    steps_before = llm.stats()["num_steps"]
    start = time.perf_counter()
    (out,) = llm.generate([prompt], one)
    ttft = time.perf_counter() - start
    assert len(out.token_ids) == 1
    return dict(
        model=model,
        prompt_len=prompt_len,
        budget=budget,
        kv_cache_dtype=llm.kv_dtype.name,
        ttft_s=ttft,
        warmup_s=compile_s,
        steps=llm.stats()["num_steps"] - steps_before,
        weight_bytes=_weight_bytes(llm),
        kv_pool_bytes=num_pages * page_size * kv_quant.bytes_per_token(llm.config, llm.kv_dtype),
        peak_rss_bytes=peak_rss_bytes(),
    )


def _percentiles(samples: list[float]) -> dict:
    if not samples:
        return dict(n=0, p50_ms=float("nan"), p99_ms=float("nan"), max_ms=float("nan"))
    ms = 1e3 * np.asarray(samples)
    return dict(
        n=len(ms),
        p50_ms=float(np.percentile(ms, 50)),
        p99_ms=float(np.percentile(ms, 99)),
        max_ms=float(ms.max()),
    )


class _StreamClock:
    """Arrival times of the decode streams' tokens -> inter-token latencies."""

    def __init__(self, ids: list[str]):
        self.last = dict.fromkeys(ids)
        self.samples: list[float] = []
        self.dropped = 0

    def record(self, deltas, now: float, compiled: bool) -> None:
        for d in deltas:
            if d.request_id in self.last and d.token_ids:
                prev, self.last[d.request_id] = self.last[d.request_id], now
                if prev is None:
                    continue
                if compiled:
                    self.dropped += 1
                else:
                    self.samples.append(now - prev)


def _step_timed(llm: LLM, clock: _StreamClock) -> tuple[list, float]:
    """One engine step; (its deltas, its seconds if it compiled a new shape, else 0)."""
    compiles = llm.stats()["num_compiles"]
    start = time.perf_counter()
    deltas = llm.step()
    now = time.perf_counter()
    compiled = llm.stats()["num_compiles"] != compiles
    clock.record(deltas, now, compiled)
    return deltas, now - start if compiled else 0.0


# Tokens each stream decodes before the measurement starts (its prefill is done by then).
WARMUP_TOKENS = 4


def check_itl_args(num_streams: int, stream_tokens: int, prompt_len: int) -> None:
    """ValueError naming the argument that cannot make an ITL measurement."""
    if num_streams < 1:
        raise ValueError(f"num_streams={num_streams}: must be >= 1")
    if stream_tokens <= WARMUP_TOKENS:
        raise ValueError(
            f"stream_tokens={stream_tokens}: must be > {WARMUP_TOKENS} (the streams decode "
            f"{WARMUP_TOKENS} tokens before the long prompt arrives)"
        )
    if prompt_len < 1:
        raise ValueError(f"prompt_len={prompt_len}: must be >= 1")


def _start_streams(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> list[str]:
    """Queue the decode streams and step until each has generated a few tokens."""
    ids = [llm.add_request(p, params) for p in prompts]
    generated = dict.fromkeys(ids, 0)
    while min(generated.values()) < WARMUP_TOKENS:
        for d in llm.step():
            if d.request_id in generated:
                generated[d.request_id] += len(d.token_ids)
    return ids


def measure_itl(
    model: str,
    prompt_len: int,
    budget: int,
    policy: LongPrefillPolicy | None,
    num_streams: int = 8,
    stream_prompt_len: int = 128,
    stream_tokens: int = 16384,
    seed: int = 0,
) -> dict:
    """Decode ITL of `num_streams` streams while a `prompt_len` prompt prefills, and of the
    same streams restarted and decoding as many steps alone (same contexts, so the same
    decode cost). TTFT leaves out the time of steps that compiled a new shape.

    Each stream may generate `stream_tokens`; `policy` None is the engine's default.
    """
    check_itl_args(num_streams, stream_tokens, prompt_len)
    page_size = 16
    stream_len = stream_prompt_len + stream_tokens
    max_model_len = max(prompt_len, stream_len) + 1
    num_pages = pages_for_tokens(prompt_len + num_streams * stream_len, page_size) + 1
    llm = LLM(
        model=model,
        max_num_batched_tokens=budget,
        max_num_seqs=max(16, num_streams + 1),
        max_model_len=max_model_len,
        num_pages=num_pages,
        page_size=page_size,
        long_prefill=policy,
    )
    rng = np.random.default_rng(seed)
    vocab = llm.config.vocab_size
    params = SamplingParams(temperature=0.0, max_tokens=stream_tokens)
    prompts = [rng.integers(3, vocab, stream_prompt_len).tolist() for _ in range(num_streams)]

    ids = _start_streams(llm, prompts, params)
    with_long = _StreamClock(ids)
    long_id = llm.add_request(
        rng.integers(3, vocab, prompt_len).tolist(), SamplingParams(temperature=0.0, max_tokens=1)
    )
    start, compile_s, steps = time.perf_counter(), 0.0, 0
    while True:
        deltas, compiled_s = _step_timed(llm, with_long)
        compile_s += compiled_s
        steps += 1
        if any(d.request_id == long_id and d.token_ids for d in deltas):
            break
    ttft = time.perf_counter() - start - compile_s
    for rid in ids:
        llm.abort(rid)

    ids = _start_streams(llm, prompts, params)
    without = _StreamClock(ids)
    for _ in range(steps):
        _step_timed(llm, without)
    for rid in ids:
        llm.abort(rid)
    llm.step()
    return dict(
        model=model,
        prompt_len=prompt_len,
        budget=budget,
        policy=_describe(LongPrefillPolicy() if policy is None else policy),
        ttft_s=ttft,
        compile_s=compile_s,
        steps=steps,
        itl_without=_percentiles(without.samples) | dict(dropped=without.dropped),
        itl_with=_percentiles(with_long.samples) | dict(dropped=with_long.dropped),
    )


def _describe(policy: LongPrefillPolicy) -> str:
    if policy.max_decode_slowdown is None:
        return "token budget only"
    return f"max_decode_slowdown={policy.max_decode_slowdown:g}"


def plot_itl_vs_ttft(rows: list[dict], path: str, title: str) -> None:
    """Decode ITL while the long prompt prefills against its TTFT, one point per run: p99 in
    ms (each run's own p99 without the prompt as a hollow marker), and their ratio. Rows
    carry "series" (one line each) and "label" (the point's annotation)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for series in dict.fromkeys(r["series"] for r in rows):
        pts = sorted((r for r in rows if r["series"] == series), key=lambda r: r["ttft_s"])
        x = [r["ttft_s"] for r in pts]
        with_ms = [r["itl_with"]["p99_ms"] for r in pts]
        ratio = [r["itl_with"]["p99_ms"] / r["itl_without"]["p99_ms"] for r in pts]
        (line,) = left.plot(x, with_ms, "o-", label=series)
        without_ms = [r["itl_without"]["p99_ms"] for r in pts]
        left.plot(x, without_ms, "o", mfc="none", color=line.get_color())
        right.plot(x, ratio, "o-", color=line.get_color(), label=series)
        for r, xi, yl, yr in zip(pts, x, with_ms, ratio, strict=True):
            for ax, y in ((left, yl), (right, yr)):
                ax.annotate(r["label"], (xi, y), textcoords="offset points", xytext=(4, 4),
                            fontsize=7)  # fmt: skip
    left.plot([], [], "o", mfc="none", color="gray", label="same run, without the prompt")
    right.axhline(3, color="gray", ls="--", label="3x")
    for ax, ylabel in (
        (left, "p99 decode ITL while it prefills (ms)"),
        (right, "p99 ITL with / without the prompt"),
    ):
        ax.set_xlabel("TTFT of the long prompt (s)")
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# Attention microbenchmark: one layer of paged attention, small-llama-long's shape.
ATTENTION_SCENARIOS = {  # name -> [(query tokens, KV length after the step)] per sequence
    "8 decodes at 1k": [(1, 1024)] * 8,
    "64 decodes at 128": [(1, 128)] * 64,
    "2048-token chunk at 0": [(2048, 2048)],
    "256-token chunk at 32k": [(256, 32768)],
    "2048-token chunk at 30k + 8 decodes": [(1, 512)] * 8 + [(2048, 32768)],
    "16-token chunk at 32k + 8 decodes": [(1, 512)] * 8 + [(16, 32768)],
    "2048-token chunk at 126k": [(2048, 131072)],
}


# Sliding-window attention: the same layer with a window (Mistral v0.1: 4096) at long contexts.
WINDOW_SCENARIOS = {  # name -> [(query tokens, KV length after the step)] per sequence
    "8 decodes at 32k": [(1, 32768)] * 8,
    "8 decodes at 8k": [(1, 8192)] * 8,
    "256-token chunk at 32k": [(256, 32768)],
    "2048-token chunk at 30k + 8 decodes": [(1, 512)] * 8 + [(2048, 32768)],
}


def time_window_attention(windows: list[int | None], repeats: int = 3) -> list[dict]:
    """`time_attention` of the engine's paged attention for each WINDOW_SCENARIOS entry
    and window (None: full causal), the engine's decode block (128 keys)."""
    from engine import paged_attention

    rows = []
    for name, scenario in WINDOW_SCENARIOS.items():
        row = dict(scenario=name)
        for window in windows:
            row[str(window)] = time_attention(
                paged_attention, scenario, 128, repeats=repeats, window=window
            )
        rows.append(row)
    return rows


MLA_SCENARIOS = {  # name -> [(query tokens, KV length after the step)] per sequence
    "8 decodes at 1k": [(1, 1024)] * 8,
    "128-token chunk at 8k": [(128, 8192)],
    "512-token chunk at 8k": [(512, 8192)],
    "2048-token chunk at 0": [(2048, 2048)],
    "2048-token chunk at 8k": [(2048, 8192)],
    "2048-token chunk at 6k + 8 decodes": [(1, 512)] * 8 + [(2048, 6144)],
}


def paged_batch(scenario: list[tuple[int, int]], page_size: int):
    """cu_q_lens, positions, kv_lens, page table (pages in order) and pages used."""
    cu, positions, kv_lens, rows = [0], [], [], []
    for q_len, kv_len in scenario:
        cu.append(cu[-1] + q_len)
        positions += range(kv_len - q_len, kv_len)
        kv_lens.append(kv_len)
        rows.append(pages_for_tokens(kv_len, page_size))
    page_table = np.zeros((len(scenario), max(rows)), np.int32)
    used = 0
    for s, n in enumerate(rows):
        page_table[s, :n] = np.arange(used, used + n)
        used += n
    meta = (np.array(cu, np.int32), np.array(positions, np.int32), np.array(kv_lens, np.int32))
    return (*meta, page_table), used


def time_attention(
    module,
    scenario: list[tuple[int, int]],
    kv_block_tokens: int,
    num_kv_heads: int = 2,
    group: int = 2,
    head_dim: int = 32,
    page_size: int = 16,
    repeats: int = 3,
    **options,
) -> dict:
    """Best-of-`repeats` seconds and XLA temp bytes of `module.paged_attention_gqa` (the
    engine's, or an older copy of engine/paged_attention.py) on one step's batch."""
    meta_args, used = paged_batch(scenario, page_size)
    rng = np.random.default_rng(0)
    pages = rng.standard_normal((2, used, page_size, num_kv_heads, head_dim), np.float32)
    q = rng.standard_normal((int(meta_args[0][-1]), num_kv_heads * group, head_dim), np.float32)
    block_pages = max(1, kv_block_tokens // page_size)

    @jax.jit
    def attend(q, k_pages, v_pages, cu, positions, kv_lens, page_table):
        meta = module.build_metadata(cu, positions, kv_lens, page_table, q.shape[0])
        return module.paged_attention_gqa(
            q, k_pages, v_pages, meta, head_dim**-0.5, block_pages, **options
        )

    # On the device first: numpy arguments would be copied to it on every timed call (the
    # whole cache: most of the time of a short step over a long context).
    args = tuple(jax.device_put(a) for a in (q, pages[0], pages[1], *meta_args))
    compiled = attend.lower(*args).compile()
    compiled(*args).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        compiled(*args).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return dict(seconds=best, temp_bytes=compiled.memory_analysis().temp_size_in_bytes)


def time_mla_attention(
    scenario: list[tuple[int, int]],
    num_heads: int = 8,
    page_size: int = 16,
    kv_block_tokens: int = 128,
    repeats: int = 3,
    impl: str = "xla",
    dtype=np.float32,
) -> dict:
    """One MLA layer's attention as the step runs it (engine.step.mla_attention, W_UK and
    W_UV included) at DeepSeek-V3's per-head shapes (latent 512, rope 64, nope 128, value
    128), `num_heads` heads, two ways: absorbed for every token, and as the engine does it,
    with the prefill spans the cost model picks expanded. The two programs run in turn,
    `repeats` times each, so a change in the machine's speed hits both alike.

    Returns, per way, the best seconds and XLA's temp bytes; whether the engine's way
    expanded any span; and the largest difference between the two outputs.
    `impl="pallas"` runs the absorbed part on the Pallas MLA kernel (on a GPU; interpret
    mode elsewhere, slow) and the expanded spans on the XLA path, which the engine does not
    do: its Pallas route stays absorbed until this has been timed on a GPU.
    """
    cfg = get_preset("tiny-deepseek-v3").replace(
        num_heads=num_heads,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    )
    meta_args, num_pages = paged_batch(scenario, page_size)
    num_tokens = int(meta_args[0][-1])
    rng = np.random.default_rng(0)
    latent = rng.standard_normal((num_pages, page_size, 576), np.float32)
    q_nope = rng.standard_normal((num_tokens, num_heads, 128), np.float32)
    q_pe = rng.standard_normal((num_tokens, num_heads, 64), np.float32)
    w_kv_b = rng.standard_normal((512, num_heads, 256), np.float32) / 512**0.5
    args = tuple(jnp.asarray(a, dtype) for a in (q_nope, q_pe, latent, w_kv_b)) + meta_args
    ops = get_attention_ops(impl)._replace(mla_expanded=mla_expanded.paged_attention_mla_expanded)
    expand = engine_step.mla_expansion_may_pay(ops, cfg, num_tokens, len(scenario))

    def program(expand: bool):
        @jax.jit
        def attend(q_nope, q_pe, latent, w_kv_b, cu, positions, kv_lens, page_table):
            meta = pa.build_metadata(cu, positions, kv_lens, page_table, num_tokens)
            x = AttnInputs(q_nope=q_nope, q_pe=q_pe, scale=192**-0.5)
            block = kv_block_tokens // page_size
            split = None
            if expand:
                split = engine_step.mla_split_for(ops, cfg, meta, num_tokens, len(scenario))
            return engine_step.mla_attention(
                ops, {"wkv_b": w_kv_b}, cfg, x, latent, meta, block, split
            )

        return attend.lower(*args).compile()

    ways = {"absorbed": program(False), "engine": program(expand)}
    outs = {k: np.asarray(c(*args).astype(jnp.float32)) for k, c in ways.items()}
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(repeats):
        for k, compiled in ways.items():
            start = time.perf_counter()
            compiled(*args).block_until_ready()
            best[k] = min(best[k], time.perf_counter() - start)
    result = {
        k: dict(seconds=best[k], temp_bytes=c.memory_analysis().temp_size_in_bytes)
        for k, c in ways.items()
    }
    diff = float(np.abs(outs["absorbed"] - outs["engine"]).max())
    return result | dict(expanded=expand, max_abs_diff=diff)


def time_pack(
    num_seqs: int,
    context: int,
    max_model_len: int,
    carried: bool,
    page_size: int = 16,
    steps: int = 20,
) -> float:
    """Mean seconds of runner.pack for `num_seqs` decodes at `context` keys in an engine of
    `max_model_len`, over `steps` steps of fresh ScheduledItems (as the scheduler makes
    them: each holds its sequence's page table, the same tuple while the table does not
    grow), with the engine's carried page rows or without."""
    num_pages = pages_for_tokens(context, page_size)
    tables = [tuple(range(i * num_pages, (i + 1) * num_pages)) for i in range(num_seqs)]
    params = SamplingParams(seed=1)
    buckets = runner.Buckets(max(num_seqs, 1), num_seqs, pages_for_tokens(max_model_len, page_size))
    rows = runner.PageRows() if carried else None

    def items():
        return [
            ScheduledItem(str(i), (5,), context - 1, t, True, params, 3)
            for i, t in enumerate(tables)
        ]

    runner.pack(items(), page_size, buckets, rows)  # the first step converts every table
    total = 0.0
    for _ in range(steps):
        batch = items()
        start = time.perf_counter()
        runner.pack(batch, page_size, buckets, rows)
        total += time.perf_counter() - start
    return total / steps


def time_host_step(
    num_seqs: int, context: int, steps: int = 50, page_size: int = 16, window: int | None = None
) -> dict:
    """Median seconds a step of Scheduler.schedule, runner.pack and Scheduler.update for
    `num_seqs` running decodes from `context`-token prompts, no model (every sample is one
    token id), over `steps` decode steps; the prompts are prefilled in one untimed step.
    The sampled-token dict update() takes is built outside the timed part, as the engine
    builds it from the device's output. `window`: a hybrid model's (ModelConfig.
    hybrid_window), whose windowed layers have a page pool and table of their own."""
    max_len = context + steps + 1
    budget = max(num_seqs * context, num_seqs)
    num_pages = num_seqs * pages_for_tokens(max_len, page_size)
    pages = PageManager(num_pages, page_size)
    window_pages = None if window is None else PageManager(num_pages, page_size)
    sched = Scheduler(
        pages, budget, num_seqs, max_len, sliding_window=window, window_pages=window_pages
    )
    params = SamplingParams(max_tokens=steps + 1, ignore_eos=True, seed=0)
    prompt = tuple(range(1, context + 1))
    for i in range(num_seqs):
        sched.add(Sequence(str(i), prompt, params))
    buckets = runner.Buckets(
        budget, num_seqs, pages_for_tokens(max_len, page_size), window_tables=window is not None
    )
    rows, window_rows = runner.PageRows(), runner.PageRows("window_page_ids")
    times = {"schedule_s": [], "pack_s": [], "update_s": []}
    for step in range(steps + 1):
        start = time.perf_counter()
        out = sched.schedule()
        scheduled = time.perf_counter()
        runner.pack(out.items, page_size, buckets, rows, window_rows)
        packed = time.perf_counter()
        sampled = {it.request_id: (7, -0.5) for it in out.items if it.sample}
        updating = time.perf_counter()
        sched.update(out, sampled)
        done = time.perf_counter()
        if step == 0:  # the prefill step
            continue
        if len(out.items) != num_seqs or out.num_batched_tokens != num_seqs:
            raise RuntimeError(f"step {step}: not {num_seqs} decodes ({out.num_batched_tokens})")
        for name, seconds in zip(
            times, (scheduled - start, packed - scheduled, done - updating), strict=True
        ):
            times[name].append(seconds)
    result = {name: statistics.median(values) for name, values in times.items()}
    return result | dict(num_seqs=num_seqs, context=context, steps=steps, window=window)
