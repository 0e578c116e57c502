"""Timing Pallas paged-attention kernels against the memory roofline and JAX's bundled kernel.

The measurements behind scripts/bench_kernels.py (its flags and table live there; this
module holds what tests call).

Decode rows: every sequence has one query token and `context` keys; achieved bandwidth is
the KV bytes the attention must read (GQA: K and V of every KV head; MLA: the latent rows)
over the kernel time, set beside a timed device-to-device copy (read + write bytes over
time), measured in the same run. `bundled` is jax.experimental.pallas.ops.gpu.paged_attention
(its own [K, N, P, D] page layout, its default tiling) on the same shapes, and its output is
compared with ours. MLA rows come twice: `pallas` is the Triton kernel the engine uses,
`mosaic` the Mosaic GPU (WGMMA) decode kernel (mla_mosaic.py), whose output
is compared with the Triton one's. fp8 rows read float8_e4m3fn pages with a float32 scale
per row (the engine's kv_cache_dtype="fp8"), at the target context only, and count the
scales' bytes too (Triton kernels only).
The prefill row (Triton, and `mosaic`: the Mosaic GPU prefill kernel, output compared) is
one chunk of `prefill_chunk` tokens at the end of a
`prefill_context` context, in TFLOP/s beside a timed bf16 matmul. Times are the median over
`repeats` of the mean over `iters` back-to-back calls of the jitted op (q packing, kernel
and split combine included). `--smoke` runs the same code on tiny shapes, in interpret mode
off GPU, so the script is tested; its numbers mean nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from engine import kv_quant
from pallas_kernels import (
    KernelConfig,
    mla_decode_mosaic,
    mla_paged_attention,
    ragged_paged_attention,
    ragged_paged_attention_mosaic,
)


@dataclasses.dataclass(frozen=True)
class Suite:
    """The shapes one run measures."""

    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    gqa: tuple[int, int, int]  # query heads, KV heads, head dim
    mla: tuple[int, int, int]  # heads, kv_lora_rank, rope dim
    prefill_chunk: int
    prefill_context: int
    matmul: int  # n of the timed [n, n] x [n, n] bf16 matmul
    engine_table: int  # --sweep: page-table width in keys of an engine (max_model_len)
    copy_mib: int
    iters: int
    repeats: int


GPU_SUITE = Suite(
    batches=(1, 16, 64),
    contexts=(2048, 8192, 32768),
    gqa=(32, 8, 128),
    mla=(128, 512, 64),  # DeepSeek-V3 attention heads, one device
    prefill_chunk=2048,
    prefill_context=32768,
    matmul=8192,
    engine_table=131072,
    copy_mib=2048,
    iters=10,
    repeats=3,
)
SMOKE_SUITE = Suite(
    batches=(2,),
    contexts=(64,),
    gqa=(4, 2, 64),  # head dim 64: the smallest the Mosaic GPU GQA kernel takes
    mla=(4, 128, 64),  # the smallest latent the Mosaic GPU kernel takes
    prefill_chunk=16,
    prefill_context=64,
    matmul=64,
    engine_table=256,
    copy_mib=1,
    iters=1,
    repeats=1,
)
# Acceptance targets (issue 5), checked on the row named by (kind, attn, batch, context).
TARGET_BATCH, TARGET_CONTEXT = 64, 8192
# --sweep: KernelConfig overrides timed at the target decode shape, one compilation each.
# Decode tiles hold one token, so fewer rows per program waste less of the dot; longer KV
# blocks and deeper pipelines keep more loads in flight; shorter splits make more programs.
SWEEP = {
    "gqa": (
        dict(block_rows=16, block_kv=64),
        dict(block_rows=16, block_kv=128),
        dict(block_rows=16, block_kv=128, num_stages=3),
        dict(block_rows=16, block_kv=64, kv_split=1024),
        dict(block_rows=32, block_kv=128, num_warps=8, num_stages=3),
        dict(block_rows=64, block_kv=128),
        dict(block_rows=16, block_kv=64, fast_softmax=True),
    ),
    # MosaicMLAConfig overrides: narrower or wider p . c_kv MMAs (registers against MMA
    # size), no double buffering, fewer and longer splits.
    "mosaic": (
        dict(),
        dict(pv_cols=64),
        dict(pv_cols=256),
        dict(num_stages=1),
        dict(target_programs=132),
    ),
    "mla": (
        dict(block_kv=16),
        dict(block_kv=32, num_stages=3),
        dict(block_kv=32, kv_split=1024),
        dict(block_kv=32, kv_split=512),
        dict(block_rows=32, block_kv=32, num_warps=4),
        dict(block_rows=32, block_kv=64, num_warps=4, kv_split=1024),
        dict(block_kv=32, num_stages=3, fast_softmax=True),
    ),
}
# --sweep, at the smaller decode batches: shorter KV splits give more programs and fewer
# dependent block steps each (decode tiling only; the invariant mode keeps its split).
SMALL_SWEEP = {
    # The decode configs' program targets, then fixed splits (target_programs=0)
    "gqa": (
        dict(),
        dict(target_programs=0),
        dict(kv_split=512, max_splits=64, target_programs=0),
        dict(kv_split=256, max_splits=128, target_programs=0),
    ),
    "mla": (
        dict(),
        dict(target_programs=0),
        dict(kv_split=512, max_splits=64, target_programs=0),
        dict(kv_split=256, max_splits=128, target_programs=0),
    ),
    "mosaic": (dict(), dict(min_split=256), dict(min_split=128)),
}
# --sweep, at the target decode shape with the page table an engine passes (max_model_len
# wide, 128k keys; the rows above size it to the context): splits cut from each tile's keys
# (the engine's configs) against the fixed ones the width alone gives (batch-invariant mode:
# one 8192-key split per 8k sequence, a quarter of the programs).
ENGINE_TABLE_SWEEP = {
    "gqa": (dict(), dict(splits_follow_length=False)),
    "mla": (dict(), dict(splits_follow_length=False)),
}
# --sweep: the Mosaic GPU prefill kernel's MosaicGQAConfig (all fit Hopper's shared memory).
MOSAIC_PREFILL_SWEEP = (
    dict(block_kv=64),
    dict(block_kv=64, num_stages=3),
    dict(block_kv=128, num_stages=1),
    dict(block_kv=256, num_stages=1),
)
# --sweep: the prefill chunk (GQA) under other tilings: bigger query tiles re-read KV less;
# fast_softmax cuts the elementwise work per score (exp2, no mask on fully visible blocks);
# 8k-key splits write and re-read a quarter of the f32 partials (16 x 32 MiB at 2048 x 32
# heads: 1 GiB of HBM traffic, 0.27 ms at the H200's copy rate, in a 4.35 ms step), and
# still run 4 x 1024 programs.
PREFILL_SWEEP = (
    dict(block_rows=16),
    dict(kv_split=8192),
    dict(block_rows=64, block_kv=128, num_stages=3),
    dict(block_rows=128, num_warps=8),
    dict(block_rows=128, block_kv=128, num_warps=8),
    dict(fast_softmax=True),
    dict(block_rows=128, num_warps=8, fast_softmax=True),
    dict(block_rows=128, block_kv=128, num_warps=8, fast_softmax=True),
)


def time_call(fn, args, iters: int, repeats: int, warm_up: bool = True) -> float:
    """Median over repeats of the mean seconds per call (after one warm-up call, unless the
    caller has just run fn on these args: an interpret-mode Mosaic call is ~0.6 s on CPU)."""
    if warm_up:
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / iters)
    return statistics.median(times)


def _log_row(row: dict) -> dict:
    """Prints the row as one JSON line as soon as it is measured: a run cut off by its time
    limit (a rationed GPU call) still leaves every finished row in its log."""
    print("row " + json.dumps(row), flush=True)
    return row


def _attempt(rows: list[dict], what: dict, measure) -> None:
    """rows += measure(), or a row naming the error: one failing shape or kernel does not
    cost the rest of a (short, rationed) GPU run."""
    try:
        rows.append(_log_row(measure()))
    except Exception as e:  # noqa: BLE001 - recorded in the table and the JSON
        rows.append(_log_row(dict(what, seconds=None, error=f"{type(e).__name__}: {e}"[:2000])))
        print(f"FAILED {what}: {rows[-1]['error'][:500]}", file=sys.stderr, flush=True)


def _timed_bw(rows, fn, args, what: dict, num_bytes: int, *, suite, copy_gbps) -> None:
    """rows += the bandwidth row of timing fn(*args) (`what` names kind, attn, impl, ...)."""

    def measure():
        seconds = time_call(fn, args, suite.iters, suite.repeats)
        return _bw_row(what, what["attn"], what["impl"], num_bytes, seconds, copy_gbps)

    _attempt(rows, what, measure)


def _valid_configs(base: KernelConfig, overrides_list, label: str):
    """(config) for each override set `base` takes; a smoke suite's shapes may not take all."""
    for overrides in overrides_list:
        try:
            yield dataclasses.replace(base, **overrides)
        except ValueError as e:
            print(f"sweep {label} {overrides}: {e}", file=sys.stderr)


def bench_copy(suite: Suite) -> dict:
    # Random data, never zeros or ones: constant inputs can run faster than real ones.
    x = jax.random.normal(jax.random.key(7), (suite.copy_mib << 18,), jnp.float32)
    seconds = time_call(jax.jit(lambda a: a + 0.0), (x,), suite.iters, suite.repeats)
    moved = 2 * x.nbytes  # read + write
    return dict(kind="copy", impl="xla", bytes=moved, seconds=seconds, gbps=moved / seconds / 1e9)


def bench_matmul(suite: Suite) -> dict:
    n = suite.matmul
    a, b = jax.random.normal(jax.random.key(8), (2, n, n), jnp.bfloat16)
    seconds = time_call(jax.jit(jnp.matmul), (a, b), suite.iters, suite.repeats)
    flops = 2 * n**3
    return dict(kind="matmul", impl="xla", n=n, seconds=seconds, tflops=flops / seconds / 1e12)


def _decode_batch(batch: int, context: int, page_size: int, num_pages: int, rng, table_len=0):
    """One query token per sequence over `context` keys, in a page table of `table_len`
    keys (0: the context), its unused columns 0 as the engine's runner leaves them."""
    pages_per_seq = context // page_size
    table = rng.permutation(num_pages)[: batch * pages_per_seq].reshape(batch, pages_per_seq)
    table = np.pad(table, ((0, 0), (0, max(0, table_len // page_size - pages_per_seq))))
    return (
        jnp.arange(batch + 1, dtype=jnp.int32),  # cu_q_lens: one token per sequence
        jnp.full((batch,), context - 1, jnp.int32),  # positions
        jnp.full((batch,), context, jnp.int32),  # kv_lens
        jnp.asarray(table, jnp.int32),
    )


def _bundled_kernel(interpret: bool, pages_per_seq: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from jax.experimental.pallas.ops.gpu import paged_attention as bundled
    # Its default tiling, shrunk only where a tiny smoke shape needs it to divide.
    k_splits = math.gcd(16, pages_per_seq)
    per_block = math.gcd(8, pages_per_seq // k_splits)
    return functools.partial(
        bundled.paged_attention,
        k_splits=k_splits,
        pages_per_compute_block=per_block,
        interpret=interpret,
    )


def bench_decode(
    suite, configs, page_size, interpret, bundled, fp8, copy_gbps, rng, mosaic=True
) -> list[dict]:
    """GQA (ours and bundled) and MLA (Triton, and with `mosaic` Mosaic GPU) decode at every
    batch x context; with `fp8`, both Triton kernels over fp8 pages at the target context
    (or the suite's longest)."""
    h, kh, d = suite.gqa
    mh, rank, rope = suite.mla
    dtype = jnp.bfloat16
    num_pages = max(suite.batches) * max(suite.contexts) // page_size
    key = jax.random.key(0)
    kk, kv, kl, kq = jax.random.split(key, 4)
    k_pages = jax.random.normal(kk, (num_pages, page_size, kh, d), dtype)
    v_pages = jax.random.normal(kv, (num_pages, page_size, kh, d), dtype)
    latent = jax.random.normal(kl, (num_pages, page_size, rank + rope), dtype)
    # The bundled kernel's page layout, [K, N, P, D]: one copy for every shape.
    bundled_pages = [jnp.transpose(x, (2, 0, 1, 3)) for x in (k_pages, v_pages)] if bundled else []
    fp8_context = TARGET_CONTEXT if TARGET_CONTEXT in suite.contexts else max(suite.contexts)
    if fp8:
        k8, v8, lat8 = (kv_quant.quantize_rows(x) for x in (k_pages, v_pages, latent))
    scale = d**-0.5
    gqa = jax.jit(
        functools.partial(
            ragged_paged_attention, scale=scale, config=configs["gqa"], interpret=interpret
        )
    )
    mla_scale = (128 + 64) ** -0.5  # DeepSeek-V3's qk_head_dim
    mla = jax.jit(
        functools.partial(
            mla_paged_attention, scale=mla_scale, config=configs["mla"], interpret=interpret
        )
    )
    mla_mosaic = None
    if mosaic:  # --nomosaic: no Mosaic config given
        mla_mosaic = jax.jit(
            functools.partial(
                mla_decode_mosaic, scale=mla_scale, config=configs["mosaic"], interpret=interpret
            )
        )
    rows = []
    timed = functools.partial(_timed_bw, rows, suite=suite, copy_gbps=copy_gbps)
    for batch in suite.batches:
        q = jax.random.normal(kq, (batch, h, d), dtype)
        q_lat = jax.random.normal(kq, (batch, mh, rank), dtype)
        q_pe = jax.random.normal(kq, (batch, mh, rope), dtype)
        for context in suite.contexts:
            meta = _decode_batch(batch, context, page_size, num_pages, rng)
            common = dict(
                kind="decode", batch=batch, context=context, page_size=page_size, kv="bf16"
            )
            kv_bytes = batch * context * kh * d * 2 * jnp.dtype(dtype).itemsize
            args = (q, k_pages, v_pages, *meta)
            timed(gqa, args, dict(common, attn="gqa", impl="pallas"), kv_bytes)
            if bundled:

                def theirs(q=q, args=args, meta=meta, kv_bytes=kv_bytes, common=common):
                    # The bundled kernel has no softmax scale: it gets the query pre-scaled.
                    q_scaled = (q.astype(jnp.float32) * scale).astype(dtype)
                    out, seconds = _bench_bundled(q_scaled, *bundled_pages, meta, suite, interpret)
                    row = _bw_row(common, "gqa", "bundled", kv_bytes, seconds, copy_gbps)
                    row["max_abs_diff_vs_pallas"] = float(
                        jnp.max(jnp.abs(out.astype(jnp.float32) - gqa(*args).astype(jnp.float32)))
                    )
                    return row

                _attempt(rows, dict(common, attn="gqa", impl="bundled"), theirs)

            lat_bytes = batch * context * (rank + rope) * jnp.dtype(dtype).itemsize
            mla_args = (q_lat, q_pe, latent, *meta)
            timed(mla, mla_args, dict(common, attn="mla", impl="pallas"), lat_bytes)
            if mosaic:
                what = dict(common, attn="mla", impl="mosaic")
                _attempt(
                    rows,
                    what,
                    functools.partial(
                        _compared_row, mla_mosaic, mla, mla_args, what, lat_bytes, suite, copy_gbps
                    ),
                )

            if fp8 and context == fp8_context:
                common = dict(common, kv="fp8", impl="pallas")
                # one byte per element, plus a 4-byte scale per (token, KV head) row
                timed(
                    functools.partial(gqa, k_scales=k8.scale, v_scales=v8.scale),
                    (q, k8.fp8(), v8.fp8(), *meta),
                    dict(common, attn="gqa"),
                    batch * context * kh * (d + 4) * 2,
                )
                timed(
                    functools.partial(mla, latent_scales=lat8.scale),
                    (q_lat, q_pe, lat8.fp8(), *meta),
                    dict(common, attn="mla"),
                    batch * context * (rank + rope + 4),
                )
    return rows


def bench_sweep(suite, configs, page_size, interpret, copy_gbps, rng) -> list[dict]:
    """Each SWEEP config of both kernels at the target decode shape, then that shape in an
    engine's page table (ENGINE_TABLE_SWEEP), MLA with a tensor-parallel share of the heads,
    then each SMALL_SWEEP config at the suite's smaller batches, largest first (bf16 pages)."""
    batch = TARGET_BATCH if TARGET_BATCH in suite.batches else max(suite.batches)
    context = TARGET_CONTEXT if TARGET_CONTEXT in suite.contexts else max(suite.contexts)

    def at(suite, sweep, batch, table_len=0):
        return _sweep_shape(
            suite, configs, sweep, batch, context, page_size, interpret, copy_gbps, rng, table_len
        )

    rows = at(suite, SWEEP, batch)
    rows += at(suite, ENGINE_TABLE_SWEEP, batch, table_len=suite.engine_table)
    # MLA with its heads split 8 ways (tensor parallel): 30 FLOP per latent byte instead of
    # 242 at 128 heads, so memory-bound; the engine's config, and 16-row tiles (a decode
    # tile holds one token, 16 heads: 64 rows would be three quarters padding, as for GQA).
    mh, rank, rope = suite.mla
    tp8 = dataclasses.replace(suite, mla=(max(1, mh // 8), rank, rope))
    tp8_sweep = {
        "mla": ({}, dict(block_rows=16), dict(block_rows=16, num_warps=4)),
        "mosaic": ({},),
    }
    rows += at(tp8, tp8_sweep, batch)
    for small in sorted((b for b in suite.batches if b < batch), reverse=True):
        rows += at(suite, SMALL_SWEEP, small)
    return rows


def _sweep_shape(
    suite, configs, sweep, batch, context, page_size, interpret, copy_gbps, rng, table_len=0
) -> list[dict]:
    h, kh, d = suite.gqa
    mh, rank, rope = suite.mla
    num_pages = batch * context // page_size
    kk, kv, kl, kq = jax.random.split(jax.random.key(2), 4)
    dtype = jnp.bfloat16
    k_pages = jax.random.normal(kk, (num_pages, page_size, kh, d), dtype)
    v_pages = jax.random.normal(kv, (num_pages, page_size, kh, d), dtype)
    latent = jax.random.normal(kl, (num_pages, page_size, rank + rope), dtype)
    meta = _decode_batch(batch, context, page_size, num_pages, rng, table_len)
    gqa_args = (jax.random.normal(kq, (batch, h, d), dtype), k_pages, v_pages, *meta)
    q_lat = jax.random.normal(kq, (batch, mh, rank), dtype)
    mla_args = (q_lat, jax.random.normal(kq, (batch, mh, rope), dtype), latent, *meta)
    common = dict(
        kind="sweep", batch=batch, context=context, page_size=page_size, kv="bf16", mla_heads=mh
    )
    if table_len:
        common["table"] = table_len
    gqa_bytes = batch * context * kh * d * 2 * jnp.dtype(dtype).itemsize
    mla_bytes = batch * context * (rank + rope) * jnp.dtype(dtype).itemsize
    mla_kwargs = dict(scale=(128 + 64) ** -0.5)
    cases = {  # sweep key: (attn, impl, kernel, kwargs, args, bytes)
        "gqa": ("gqa", "pallas", ragged_paged_attention, dict(scale=d**-0.5), gqa_args, gqa_bytes),
        "mla": ("mla", "pallas", mla_paged_attention, mla_kwargs, mla_args, mla_bytes),
        "mosaic": ("mla", "mosaic", mla_decode_mosaic, mla_kwargs, mla_args, mla_bytes),
    }
    rows = []
    for name, (attn, impl, kernel, kwargs, args, num_bytes) in cases.items():
        first = []  # the first config's output, which every other config must reproduce
        if name not in configs:  # --nomosaic
            continue
        for config in _valid_configs(configs[name], sweep.get(name, ()), name):
            what = dict(common, attn=attn, impl=impl, config=dataclasses.asdict(config))
            fn = jax.jit(functools.partial(kernel, **kwargs, config=config, interpret=interpret))
            _attempt(
                rows,
                what,
                functools.partial(_sweep_row, fn, args, what, num_bytes, suite, copy_gbps, first),
            )
    return rows


def _compared_row(fn, theirs, args, what, num_bytes, suite, copy_gbps) -> dict:
    """The bandwidth row of fn, with its largest difference from `theirs` on the same args."""
    diff = fn(*args).astype(jnp.float32) - theirs(*args).astype(jnp.float32)
    max_diff = float(jnp.max(jnp.abs(diff)))  # (both compiled and run: the warm-up)
    seconds = time_call(fn, args, suite.iters, suite.repeats, warm_up=False)
    row = _bw_row(what, what["attn"], what["impl"], num_bytes, seconds, copy_gbps)
    row["max_abs_diff_vs_pallas"] = max_diff
    return row


def _sweep_row(fn, args, what, num_bytes, suite, copy_gbps, first: list) -> dict:
    out = jax.block_until_ready(fn(*args).astype(jnp.float32))  # (the warm-up)
    if not first:
        first.append(out)
    seconds = time_call(fn, args, suite.iters, suite.repeats, warm_up=False)
    row = _bw_row(what, what["attn"], what["impl"], num_bytes, seconds, copy_gbps)
    row["max_abs_diff_vs_first"] = float(jnp.max(jnp.abs(out - first[0])))
    return row


def _bw_row(common, attn, impl, num_bytes, seconds, copy_gbps) -> dict:
    gbps = num_bytes / seconds / 1e9
    return dict(
        common,
        attn=attn,
        impl=impl,
        bytes=num_bytes,
        seconds=seconds,
        gbps=gbps,
        frac_of_copy=gbps / copy_gbps,
    )


def _bench_bundled(q, k_pages, v_pages, meta, suite, interpret) -> tuple[jax.Array, float]:
    """JAX's bundled kernel on the same decode (pages [K, N, P, D]): (output, seconds)."""
    _, _, kv_lens, table = meta
    fn = jax.jit(_bundled_kernel(interpret, table.shape[1]))
    args = (q, k_pages, v_pages, table, kv_lens)
    seconds = time_call(fn, args, suite.iters, suite.repeats)
    return fn(*args), seconds


def bench_prefill(
    suite,
    config,
    page_size,
    interpret,
    matmul_tflops,
    rng,
    kernel=ragged_paged_attention,
    impl="pallas",
    reference=None,
) -> dict:
    """One prefill chunk at the end of a long context (GQA shapes), causal inside the chunk;
    `reference` (a function of the same args) adds the largest difference from its output."""
    h, kh, d = suite.gqa
    chunk, context = suite.prefill_chunk, suite.prefill_context
    num_pages = context // page_size
    key = jax.random.key(1)
    kk, kv, kq = jax.random.split(key, 3)
    k_pages = jax.random.normal(kk, (num_pages, page_size, kh, d), jnp.bfloat16)
    v_pages = jax.random.normal(kv, (num_pages, page_size, kh, d), jnp.bfloat16)
    q = jax.random.normal(kq, (chunk, h, d), jnp.bfloat16)
    positions = jnp.arange(context - chunk, context, dtype=jnp.int32)
    table = jnp.asarray(rng.permutation(num_pages)[None, :], jnp.int32)
    args = (
        q,
        k_pages,
        v_pages,
        jnp.array([0, chunk], jnp.int32),
        positions,
        jnp.array([context], jnp.int32),
        table,
    )
    fn = jax.jit(functools.partial(kernel, scale=d**-0.5, config=config, interpret=interpret))
    seconds = time_call(fn, args, suite.iters, suite.repeats)
    # QK^T and PV, 2 flops per multiply-add, over the keys each query sees.
    visible = int(np.sum(np.arange(context - chunk, context) + 1))
    flops = 4 * h * d * visible
    tflops = flops / seconds / 1e12
    row = dict(
        kind="prefill",
        attn="gqa",
        impl=impl,
        chunk=chunk,
        context=context,
        page_size=page_size,
        seconds=seconds,
        tflops=tflops,
        frac_of_matmul=tflops / matmul_tflops,
    )
    if reference is not None:
        diff = fn(*args).astype(jnp.float32) - reference(*args).astype(jnp.float32)
        row["max_abs_diff_vs_pallas"] = float(jnp.max(jnp.abs(diff)))
    return row


def _prefill_sweep_row(suite, config, page_size, interpret, matmul, rng, **kernel) -> dict:
    row = bench_prefill(suite, config, page_size, interpret, matmul["tflops"], rng, **kernel)
    return dict(row, kind="sweep", config=dataclasses.asdict(config))


def _find(rows, **want):
    for r in rows:
        if all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def targets(rows: list[dict]) -> dict:
    """The acceptance checks of issue 5 on the rows this run measured (None = not measured)."""
    at = dict(kind="decode", batch=TARGET_BATCH, context=TARGET_CONTEXT, kv="bf16")
    gqa = _find(rows, attn="gqa", impl="pallas", **at)
    gqa = gqa if gqa and gqa.get("seconds") else None
    # MLA: the faster of the Triton and the Mosaic GPU kernel (both rows are in the table)
    mla = [_find(rows, attn="mla", impl=impl, **at) for impl in ("pallas", "mosaic")]
    mla = max((r for r in mla if r and r.get("seconds")), key=lambda r: r["gbps"], default=None)
    speedups = []
    for r in rows:
        if r.get("impl") == "bundled":
            shape = dict(
                kind="decode", attn="gqa", batch=r["batch"], context=r["context"], kv="bf16"
            )
            ours = _find(rows, impl="pallas", **shape)
            if r["seconds"] and ours and ours["seconds"]:
                speedups.append(r["seconds"] / ours["seconds"])
    # prefill: the faster of the Triton and the Mosaic GPU kernel
    prefill = [_find(rows, kind="prefill", impl=impl) for impl in ("pallas", "mosaic")]
    prefill = max(
        (r for r in prefill if r and r.get("seconds")), key=lambda r: r["tflops"], default=None
    )
    return {
        "gqa_decode_frac_of_copy>=0.80": gqa and gqa["frac_of_copy"],
        "mla_decode_frac_of_copy>=0.75": mla and mla["frac_of_copy"],
        "min_speedup_vs_bundled>=1.3": min(speedups) if speedups else None,
        "prefill_frac_of_matmul>=0.40": prefill and prefill.get("frac_of_matmul"),
    }


def run(
    suite: Suite,
    configs: dict,
    page_size: int,
    interpret: bool,
    bundled: bool,
    fp8: bool = True,
    sweep: bool = False,
    prefill: bool = True,
    mosaic: bool = True,
) -> dict:
    """All rows; `configs` maps "gqa", "gqa_prefill" and "mla" to their KernelConfig, and
    (with `mosaic`) "mosaic" to the MosaicMLAConfig and "mosaic_prefill" to the
    MosaicGQAConfig."""
    rng = np.random.default_rng(0)
    copy = _log_row(bench_copy(suite))
    matmul = _log_row(bench_matmul(suite))
    rows = [copy, matmul]
    rows += bench_decode(
        suite, configs, page_size, interpret, bundled, fp8, copy["gbps"], rng, mosaic
    )
    if prefill:
        _attempt(
            rows,
            dict(kind="prefill", attn="gqa", impl="pallas"),
            lambda: bench_prefill(
                suite, configs["gqa_prefill"], page_size, interpret, matmul["tflops"], rng
            ),
        )
    mosaic_prefill = dict(kernel=ragged_paged_attention_mosaic, impl="mosaic")
    if prefill and mosaic:
        d = suite.gqa[2]
        triton = jax.jit(
            functools.partial(
                ragged_paged_attention,
                scale=d**-0.5,
                config=configs["gqa_prefill"],
                interpret=interpret,
            )
        )
        _attempt(
            rows,
            dict(kind="prefill", attn="gqa", impl="mosaic"),
            lambda: bench_prefill(
                suite,
                configs["mosaic_prefill"],
                page_size,
                interpret,
                matmul["tflops"],
                rng,
                reference=triton,
                **mosaic_prefill,
            ),
        )
    if sweep:  # the prefill chunk's tilings first: a run cut off by its time limit loses
        # the decode sweep's small batches, which matter least, rather than these
        for config in _valid_configs(configs["gqa_prefill"], PREFILL_SWEEP, "prefill"):
            what = dict(kind="sweep", attn="gqa", impl="pallas", chunk=suite.prefill_chunk)
            _attempt(
                rows,
                dict(what, config=dataclasses.asdict(config)),
                functools.partial(
                    _prefill_sweep_row, suite, config, page_size, interpret, matmul, rng
                ),
            )
        if mosaic:
            base = configs["mosaic_prefill"]
            for config in _valid_configs(base, MOSAIC_PREFILL_SWEEP, "mosaic prefill"):
                what = dict(kind="sweep", attn="gqa", impl="mosaic", chunk=suite.prefill_chunk)
                _attempt(
                    rows,
                    dict(what, config=dataclasses.asdict(config)),
                    functools.partial(
                        _prefill_sweep_row,
                        suite,
                        config,
                        page_size,
                        interpret,
                        matmul,
                        rng,
                        **mosaic_prefill,
                    ),
                )
        rows += bench_sweep(suite, configs, page_size, interpret, copy["gbps"], rng)
    device = jax.devices()[0]
    return dict(
        device=getattr(device, "device_kind", device.platform),
        backend=jax.default_backend(),
        jax=jax.__version__,
        interpret=interpret,
        configs={k: dataclasses.asdict(v) for k, v in configs.items()},
        suite=dataclasses.asdict(suite),
        rows=rows,
        targets=targets(rows),
    )


def _fmt(value, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def format_table(result: dict) -> str:
    lines = [
        f"device={result['device']} jax={result['jax']} interpret={result['interpret']}",
        f"{'kind':8} {'attn':4} {'impl':8} {'kv':4} {'batch':>5} {'ctx':>6} {'us':>10} "
        f"{'GB/s':>8} {'%copy':>6} {'TFLOP/s':>8} {'%mm':>5}",
    ]
    for r in result["rows"]:
        line = (
            f"{r['kind']:8} {r.get('attn', ''):4} {r['impl']:8} {r.get('kv', ''):4} "
            f"{r.get('batch', ''):>5} "
            f"{r.get('context', ''):>6} {_fmt(r['seconds'], '.1f', 1e6):>10} "
            f"{_fmt(r.get('gbps'), '.1f'):>8} {_fmt(r.get('frac_of_copy'), '.1f', 100):>6} "
            f"{_fmt(r.get('tflops'), '.2f'):>8} {_fmt(r.get('frac_of_matmul'), '.1f', 100):>5}"
        )
        if "config" in r:
            keys = ("block_rows", "block_kv", "kv_split", "num_warps", "num_stages")
            if "pv_cols" in r["config"]:  # MosaicMLAConfig
                keys = ("num_stages", "pv_cols", "min_split", "target_programs")
            elif r["impl"] == "mosaic":  # MosaicGQAConfig
                keys = ("block_kv", "num_stages")
            # Triton: the fields a sweep varies that are off by default, when set
            keys += tuple(k for k in ("target_programs", "fast_softmax") if r["config"].get(k))
            if r["config"].get("splits_follow_length") is False:
                keys += ("splits_follow_length",)
            line += " " + ",".join(f"{k}={r['config'][k]}" for k in keys)
            if "table" in r:
                line += f",table={r['table']}"
            if r.get("attn") == "mla" and "mla_heads" in r:
                line += f",heads={r['mla_heads']}"
        if "error" in r:
            line += f"  ERROR {r['error'][:160]}"
        lines.append(line)
    for name, value in result["targets"].items():
        if result["interpret"]:  # a code check on CPU: its times mean nothing
            value = None
        lines.append(f"target {name}: {'not measured' if value is None else f'{value:.3f}'}")
    return "\n".join(lines)


def check_suite(suite: Suite, page_size: int) -> str | None:
    """Why the flags do not make a suite (None: they do). Contexts, decode and prefill, must
    be whole pages: a page table is context // page_size wide, too short for a remainder."""
    if page_size < 1 or min(suite.batches, default=0) < 1:
        return f"--page_size={page_size}, --batches={list(suite.batches)}: must be >= 1"
    bad = [c for c in (*suite.contexts, suite.prefill_context) if c < 1 or c % page_size]
    if bad:
        return f"contexts {bad}: every context must be a positive multiple of --page_size"
    return None
