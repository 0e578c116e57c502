"""The Mosaic GPU kernels (MLA decode, GQA prefill) against their plain-jnp twins, and
lowered for an H200.

On CPU the kernels run in Pallas' GPU interpreter, which simulates their three warpgroups,
shared memory, TMA copies and barriers (and fails on a barrier phase no thread observed),
here with its race detector on (`race_checked`); the same cases run compiled under
`@pytest.mark.gpu` on a GPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from test_pallas_attention import _check, _meta, ragged_batch, random_pages

from pallas_kernels import UnsupportedShapeError
from pallas_kernels.gpu_lowering import lower_for_gpu
from pallas_kernels.gqa_mosaic import (
    MOSAIC_GQA_CONFIG,
    MosaicGQAConfig,
    check_gqa_mosaic_supported,
    ragged_paged_attention_mosaic,
    ragged_paged_attention_mosaic_ref,
)
from pallas_kernels.mla_mosaic import (
    MOSAIC_MLA_CONFIG,
    MosaicMLAConfig,
    check_mla_mosaic_supported,
    mla_decode_mosaic,
    mla_decode_mosaic_ref,
)
from pallas_kernels.mosaic_common import tiled_smem

ON_GPU = jax.default_backend() == "gpu"
RANK, ROPE = 128, 64  # the smallest latent the kernel takes: two 64-column halves
MODES = [
    pytest.param(True, id="interpret"),
    pytest.param(False, id="gpu", marks=pytest.mark.gpu),
]
ref = jax.jit(mla_decode_mosaic_ref, static_argnames="scale")
gqa_ref = jax.jit(ragged_paged_attention_mosaic_ref, static_argnames="scale")


def _skip_unless_runnable(interpret: bool):
    if not interpret and not ON_GPU:
        pytest.skip("needs a GPU")


@pytest.fixture
def race_checked(monkeypatch):
    """The interpreter's parameters with its race detector on, and WGMMA's shared-memory
    operands checked as reads too; returns (params, races_found: () -> bool).

    The interpreter (jax 0.11.2) checks loads, stores and TMA copies against each other,
    not the operands of a WGMMA, which are most of these kernels' shared-memory reads. Here
    a WGMMA's operands are checked as reads at the reading warpgroup's async-proxy clock
    (WGMMA reads through the async proxy, as TMA writes): a store reaches them only through
    `commit_smem` (fence.proxy.async) and a barrier, and a TMA refill of the slot is ordered
    after them only by a barrier the reader arrived on afterwards. Not caught: arriving
    before a WGMMA has finished (the interpreter runs one to completion when it is issued).
    `test_race_check_sees_wgmma_reads` shows it failing where it should.
    """
    wgmma = gpu_callbacks.wgmma

    def checked_wgmma(**kw):
        memory = gpu_callbacks._get_shared_memory()
        thread = kw["thread"]
        if memory.detect_races:
            with memory.lock:  # a new event of the thread in both proxies
                memory.clocks[thread].inc(memory.thread_to_vc_position(thread))
                clock = memory.clocks[thread].copy()
            for name in ("a", "b"):
                key = gpu_callbacks.HostAllocationKey.from_array(
                    kw[f"{name}_allocation_key_as_array"]
                )
                transforms = gpu_callbacks._remove_noop_transforms(kw[f"{name}_transforms"])
                access = memory.access(key, jax.tree.map(int, transforms))
                gpu_callbacks.get_races().check_read(
                    thread, clock.async_smem_clock, key, access, source_info=kw.get("source_info")
                )
        return wgmma(**kw)

    monkeypatch.setattr(gpu_callbacks, "wgmma", checked_wgmma)
    return (
        plgpu.InterpretGPUParams(detect_races=True),
        lambda: gpu_callbacks.get_races().races_found,
    )


@pytest.mark.parametrize("order, racy", [("none", True), ("no_fence", True), ("fenced", False)])
def test_race_check_sees_wgmma_reads(race_checked, order, racy):
    """Warpgroup 1 stores a tile that warpgroup 0 then multiplies by WGMMA: with no barrier,
    and with a barrier but no fence between the store and the async proxy, that is a race;
    with commit_smem and a barrier it is not."""
    params, races_found = race_checked

    def kernel(o_ref, tile, ready):
        wg = lax.axis_index("wg")

        @pl.when(wg == 1)
        def _():
            tile[...] = jnp.ones((64, 64), jnp.bfloat16)
            if order == "fenced":
                plgpu.commit_smem()
            if order != "none":
                plgpu.barrier_arrive(ready.at[0])

        @pl.when(wg == 0)
        def _():
            if order != "none":
                plgpu.barrier_wait(ready.at[0])

            def square(acc):
                plgpu.wgmma(acc, tile, tile.T)
                return acc[...]

            o_ref[...] = pl.run_scoped(square, plgpu.ACC((64, 64), jnp.float32))

    def entry(o_ref):
        pl.run_scoped(
            lambda *scoped: kernel(o_ref, *scoped),
            tiled_smem((64, 64), jnp.bfloat16),
            plgpu.Barrier(num_barriers=1),
            collective_axes="wg",
        )

    out = plgpu.kernel(
        entry,
        out_type=jax.ShapeDtypeStruct((64, 64), jnp.float32),
        grid=(1,),
        grid_names=("g",),
        num_threads=2,
        thread_name="wg",
        interpret=params,
    )()
    if order != "none":  # unsynchronized, warpgroup 0 may read the tile before it is set
        np.testing.assert_array_equal(out, 64.0)
    assert races_found() == racy


def decode_batch(seed: int, page_size: int, num_pages: int) -> dict:
    """One token per sequence over contexts of several 64-key blocks (the ring of latent
    slots wraps), on and off block and page boundaries, plus 0-length and padding spans."""
    rng = np.random.default_rng(seed)
    kv_lens = [int(rng.integers(260, 320)), 128, 129, 1, 200, 0, 0]
    q_lens = [1, 1, 1, 1, 0, 1, 0]  # a 0-length span, and a token over an empty cache
    max_pages = -(-max(kv_lens) // page_size)
    table = rng.integers(-2, num_pages + 3, size=(len(kv_lens), max_pages)).astype(np.int32)
    perm, used, owned = rng.permutation(num_pages), 0, set()
    for s, kv in enumerate(kv_lens):
        n = -(-kv // page_size)
        table[s, :n] = perm[used : used + n]
        used += n
        owned |= {int(table[s, j // page_size]) * page_size + j % page_size for j in range(kv)}
    assert used <= num_pages
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    num_tokens = 8  # padded: tokens past cu[-1] are padding
    positions = np.zeros(num_tokens, np.int32)
    positions[: cu[-1]] = [kv - 1 for kv, q in zip(kv_lens, q_lens, strict=True) if q]
    return dict(
        cu_q_lens=cu,
        positions=positions,
        kv_lens=np.asarray(kv_lens, np.int32),
        page_table=table,
        owned=np.asarray(sorted(owned)),
        num_tokens=num_tokens,
    )


CASES = {
    # name: (batch maker, heads, page size, num pages, config)
    # 2 splits of 192 keys over the table; a token of 129 keys gets 2 of 128, of 128 one
    "decode_h8_p16_2splits": (
        decode_batch,
        8,
        16,
        80,
        MosaicMLAConfig(pv_cols=64, min_split=64, target_programs=16),
    ),
    "decode_h72_p64_3stages_splits": (
        decode_batch,
        72,  # two head blocks, the second mostly padding
        64,
        24,
        MosaicMLAConfig(num_stages=3, min_split=256, target_programs=10**6),
    ),
    "ragged_h3_p8_1stage": (
        ragged_batch,  # prefill chunks too: each token is its own program
        3,
        8,
        48,
        MosaicMLAConfig(num_stages=1, min_split=128, pv_cols=64),
    ),
}


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_mosaic_mla_matches_ref(case, interpret, race_checked):
    _check_mla(*CASES[case], RANK, interpret, race_checked)


@pytest.mark.parametrize("interpret", MODES)
def test_mosaic_mla_at_deepseek_v3_heads(interpret, race_checked):
    """The engine's config at 128 heads (two head blocks) of kv_lora_rank 512: each
    consumer's 256 columns in two p . c_kv products of 128."""
    _check_mla(decode_batch, 128, 16, 80, MOSAIC_MLA_CONFIG, 512, interpret, race_checked)


def _check_mla(make_batch, heads, page_size, num_pages, config, rank, interpret, race_checked):
    _skip_unless_runnable(interpret)
    params, races_found = race_checked
    b = make_batch(7, page_size, num_pages)
    num_tokens = b.get("num_tokens", b["positions"].shape[0])
    rng = np.random.default_rng(3)
    dtype = jnp.bfloat16
    q_lat = jnp.asarray(rng.standard_normal((num_tokens, heads, rank)), dtype)
    q_pe = jnp.asarray(rng.standard_normal((num_tokens, heads, ROPE)), dtype)
    latent = random_pages(rng, (num_pages, page_size, rank + ROPE), b["owned"], dtype)
    scale = 0.5 * (rank + ROPE) ** -0.5
    kernel = functools.partial(
        mla_decode_mosaic, scale=scale, config=config, interpret=interpret and params
    )
    out = jax.jit(kernel)(q_lat, q_pe, latent, *_meta(b))
    assert out.shape == q_lat.shape and out.dtype == dtype
    assert not (interpret and races_found())
    _check(out, ref(q_lat, q_pe, latent, *_meta(b), scale=scale), b, dtype)


def test_split_count_fills_the_gpu_but_keeps_splits_long():
    config = MOSAIC_MLA_CONFIG
    # 64 tokens x 2 head blocks = 128 programs: three splits of an 8k table reach 264.
    assert config.split_size(64, 2, 8192) == 2752
    # One token: as many splits as min_split allows (8k / 512 = 16).
    assert config.split_size(1, 2, 8192) == 512
    # Enough programs already: one split of the whole table.
    assert config.split_size(512, 2, 8192) == 8192
    # Each token cuts its own keys into at most the grid's splits: in a 128k-wide table
    # (an engine's max_model_len) an 8k decode gets three 2752-key splits, as in an 8k one,
    # not one of 43k; a 2k decode three of 704, as split_size(64, 2, 2048) gives.
    num_splits = -(-131072 // config.split_size(64, 2, 131072))
    assert num_splits == 3
    limits = jnp.asarray([8192, 2048, 1, 0], jnp.int32)
    assert config.token_splits(limits, num_splits).tolist() == [2752, 704, 512, 512]
    assert config.split_size(64, 2, 2048) == 704


def test_unsupported_shapes_raise_a_clear_error():
    s = jax.ShapeDtypeStruct
    bf16 = jnp.bfloat16

    def check(rank, rope, page_size, dtype=bf16, scales=None, config=MOSAIC_MLA_CONFIG):
        check_mla_mosaic_supported(
            s((4, 8, rank), dtype),
            s((4, 8, rope), dtype),
            s((16, page_size, rank + rope), dtype),
            scales,
            config,
        )

    check(512, 64, 16)  # DeepSeek-V3
    with pytest.raises(UnsupportedShapeError, match="bfloat16, float16"):
        check(128, 64, 16, jnp.float32)
    with pytest.raises(UnsupportedShapeError, match="multiple of 128"):
        check(96, 64, 16)
    with pytest.raises(UnsupportedShapeError, match="page size 24"):
        check(128, 64, 24)
    with pytest.raises(UnsupportedShapeError, match="page size 96"):
        check(128, 64, 96)
    with pytest.raises(UnsupportedShapeError, match="shared memory"):
        check(512, 64, 16, config=MosaicMLAConfig(num_stages=3))
    with pytest.raises(UnsupportedShapeError, match="fp8"):
        check(128, 64, 16, scales=s((16, 16), jnp.float32))
    with pytest.raises(ValueError, match="min_split"):
        MosaicMLAConfig(min_split=100)


@pytest.mark.parametrize("heads, page_size, pv_cols", [(128, 64, 128), (16, 16, 256)])
def test_lowers_for_an_h200(heads, page_size, pv_cols):
    """DeepSeek-V3's latent (512 + 64) through Pallas' Mosaic GPU lowering and Mosaic's
    layout inference and shared-memory check; only the PTX compile needs a GPU."""
    s, i32 = jax.ShapeDtypeStruct, jnp.int32
    tokens, max_pages = 64, 8192 // page_size
    args = (
        s((tokens, heads, 512), jnp.bfloat16),
        s((tokens, heads, 64), jnp.bfloat16),
        s((tokens * max_pages, page_size, 576), jnp.bfloat16),
        s((tokens + 1,), i32),
        s((tokens,), i32),
        s((tokens,), i32),
        s((tokens, max_pages), i32),
    )
    config = MosaicMLAConfig(pv_cols=pv_cols)
    text = lower_for_gpu(functools.partial(mla_decode_mosaic, scale=0.1, config=config), *args)
    assert "mosaic_gpu" in text


GQA_CASES = {
    # name: (group, KV heads, head dim, page size, num pages, config)
    "g4_d64_p16": (4, 2, 64, 16, 40, MosaicGQAConfig(block_kv=64)),
    "g8_d128_p8_1stage": (8, 1, 128, 8, 48, MosaicGQAConfig(block_kv=64, num_stages=1)),
    "g1_d64_p64_bkv128": (1, 2, 64, 64, 16, MosaicGQAConfig(block_kv=128)),
    # 2 tokens a tile: a prefill chunk spans several tiles
    "g64_d64_p16_3stages": (64, 1, 64, 16, 40, MosaicGQAConfig(block_kv=64, num_stages=3)),
}


@pytest.mark.parametrize("interpret", MODES)
@pytest.mark.parametrize("case", list(GQA_CASES))
def test_mosaic_gqa_matches_ref(case, interpret, race_checked):
    """Ragged steps of prefill chunks, decodes, 0-length and padding spans, KV lengths on and
    off page boundaries, garbage page ids, NaN in every unowned cache slot; no races."""
    _skip_unless_runnable(interpret)
    params, races_found = race_checked
    group, kv_heads, head_dim, page_size, num_pages, config = GQA_CASES[case]
    b = ragged_batch(11, page_size, num_pages)
    num_tokens = b["positions"].shape[0]
    rng = np.random.default_rng(5)
    dtype = jnp.bfloat16
    q = jnp.asarray(rng.standard_normal((num_tokens, group * kv_heads, head_dim)), dtype)
    shape = (num_pages, page_size, kv_heads, head_dim)
    k_pages = random_pages(rng, shape, b["owned"], dtype)
    v_pages = random_pages(rng, shape, b["owned"], dtype)
    scale = head_dim**-0.5
    kernel = functools.partial(
        ragged_paged_attention_mosaic, scale=scale, config=config, interpret=interpret and params
    )
    out = jax.jit(kernel)(q, k_pages, v_pages, *_meta(b))
    assert out.shape == q.shape and out.dtype == dtype
    assert not (interpret and races_found())
    _check(out, gqa_ref(q, k_pages, v_pages, *_meta(b), scale=scale), b, dtype)


def test_mosaic_gqa_refuses_what_it_does_not_take():
    s = jax.ShapeDtypeStruct
    bf16 = jnp.bfloat16

    def check(heads, head_dim, page_size, dtype=bf16, config=MOSAIC_GQA_CONFIG):
        pages = s((16, page_size, 2, head_dim), dtype)
        check_gqa_mosaic_supported(s((4, heads, head_dim), dtype), pages, pages, config=config)

    check(8, 128, 16)  # Llama: group 4
    with pytest.raises(UnsupportedShapeError, match="group dividing 64"):
        check(6, 128, 16)  # group 3
    with pytest.raises(UnsupportedShapeError, match="head_dim=40"):
        check(8, 40, 16)
    with pytest.raises(UnsupportedShapeError, match="bfloat16, float16"):
        check(8, 128, 16, jnp.float32)
    with pytest.raises(UnsupportedShapeError, match="page size 24"):
        check(8, 128, 24)
    with pytest.raises(UnsupportedShapeError, match="shared memory"):
        check(8, 256, 16, config=MosaicGQAConfig(block_kv=256, num_stages=3))
    with pytest.raises(ValueError, match="block_kv"):
        MosaicGQAConfig(block_kv=96)


@pytest.mark.parametrize("block_kv, num_stages", [(128, 2), (64, 3)])
def test_mosaic_gqa_lowers_for_an_h200(block_kv, num_stages):
    """The bench's prefill row: a 2048-token chunk ending a 32k context, Llama-3-8B heads."""
    s, i32 = jax.ShapeDtypeStruct, jnp.int32
    tokens, max_pages = 2048, 2048
    pages = s((max_pages, 16, 8, 128), jnp.bfloat16)
    args = (
        s((tokens, 32, 128), jnp.bfloat16),
        pages,
        pages,
        s((2,), i32),
        s((tokens,), i32),
        s((1,), i32),
        s((1, max_pages), i32),
    )
    config = MosaicGQAConfig(block_kv=block_kv, num_stages=num_stages)
    kernel = functools.partial(ragged_paged_attention_mosaic, scale=0.1, config=config)
    assert "mosaic_gpu" in lower_for_gpu(kernel, *args)
