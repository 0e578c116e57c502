"""Ragged GQA paged attention for prefill chunks on Hopper tensor cores (Pallas, Mosaic GPU).

Same contract as ragged_paged_attention (any ragged step, causal within each span), built
for prefill chunks, where the Triton kernel reached 32% of the matmul rate on an H200
(docs/benchmarks.md). A program takes 128 query rows, the (token, head) pairs of
128 / group consecutive tokens of one span for the query heads that share one KV head, and
walks that span's keys in blocks:

- warpgroup 2 (producer) copies each block's K and V rows page by page with TMA into a ring
  of `num_stages` shared-memory slots (one barrier per slot for "full", one for "free");
- warpgroups 0 and 1 each own 64 of the rows: s = q . K^T and o += p . V as warpgroup MMAs
  from shared memory, with an online softmax in base 2 (FlashAttention-2 and -3, Dao et al.
  2023, 2024) and per-row causal limits.

A decode tile has one token, so 128 rows carry `group` useful ones: callers send decode
steps to the Triton kernel. Each program writes its own [128, Dh] output tile (normalized,
in the query dtype) and XLA scatters the rows back to their tokens, so a tile that overhangs
its span never writes over another program's tokens.

In a span's last, partial key block warpgroup 0 zeroes the value rows past the block's last
visible key before either consumer multiplies by them (a barrier orders the two), so NaN in
unowned cache slots never reaches the output; their scores are masked to -inf.

Interpret mode runs in Pallas' GPU interpreter on CPU; gpu_lowering.lower_for_gpu lowers
the kernel for an H200 on CPU.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels.gqa_attention import ragged_paged_attention_ref
from pallas_kernels.mosaic_common import (
    LOG2E,
    Interpret,
    check_page_size,
    check_smem,
    check_wgmma_dtypes,
    kernel_params,
    produce_ring,
    tiled_smem,
    zero_rows_from,
)
from pallas_kernels.ragged_flash import UnsupportedShapeError, plan_tiles

ROWS = 128  # query rows per program: two consumer warpgroups of WGMMA's 64 rows
WG_ROWS = 64

# Same semantics as the Triton kernel, hence the same plain-jnp twin.
ragged_paged_attention_mosaic_ref = ragged_paged_attention_ref


@dataclasses.dataclass(frozen=True)
class MosaicGQAConfig:
    """Static tiling of the Mosaic GPU GQA prefill kernel (one compilation per value)."""

    block_kv: int = 128  # keys per step, a multiple of 64 (WGMMA's K for p . V)
    num_stages: int = 2  # K/V blocks in flight

    def __post_init__(self):
        if self.block_kv < 64 or self.block_kv % 64 or self.block_kv > 256:
            raise ValueError(
                f"MosaicGQAConfig.block_kv={self.block_kv}: must be 64, 128, 192 or 256"
            )
        if self.num_stages < 1:
            raise ValueError(f"MosaicGQAConfig.num_stages={self.num_stages}: must be >= 1")


MOSAIC_GQA_CONFIG = MosaicGQAConfig()


def _smem_bytes(head_dim: int, config: MosaicGQAConfig) -> int:
    """q tile, the K and V rings, both consumers' p, row limits, scratch and barriers."""
    kv = 2 * config.num_stages * config.block_kv * head_dim * 2
    return ROWS * head_dim * 2 + kv + ROWS * config.block_kv * 2 + ROWS * 4 + 1024


def check_gqa_mosaic_supported(
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    k_scales: jax.Array | None = None,
    v_scales: jax.Array | None = None,
    config: MosaicGQAConfig = MOSAIC_GQA_CONFIG,
) -> None:
    """Raises UnsupportedShapeError for what this kernel does not take."""
    if k_pages.ndim != 4 or v_pages.ndim != 4 or k_pages.shape[:3] != v_pages.shape[:3]:
        raise ValueError(
            f"k_pages {k_pages.shape}, v_pages {v_pages.shape}: expected [N, P, K, Dh] and "
            "[N, P, K, Dv]"
        )
    if v_pages.shape[3] != k_pages.shape[3]:
        raise UnsupportedShapeError(f"v_pages {v_pages.shape}: values as wide as the keys only")
    num_heads, head_dim = q.shape[1:]
    num_kv_heads = k_pages.shape[2]
    if num_heads % num_kv_heads or k_pages.shape[3] != head_dim:
        raise ValueError(
            f"q {q.shape} and pages {k_pages.shape}: heads must be a multiple of num kv heads "
            "and head dims equal"
        )
    if k_scales is not None or v_scales is not None:
        raise UnsupportedShapeError("fp8 pages: the Mosaic GPU GQA kernel reads bf16/f16 only")
    check_wgmma_dtypes("GQA", q, k_pages, v_pages)
    group = num_heads // num_kv_heads
    if WG_ROWS % group:
        raise UnsupportedShapeError(
            f"{group} query heads per KV head: the kernel needs a group dividing {WG_ROWS}"
        )
    if head_dim % 64 or head_dim > 256:
        raise UnsupportedShapeError(
            f"head_dim={head_dim}: the kernel needs a multiple of 64 up to 256"
        )
    check_page_size(k_pages.shape[1], config.block_kv)
    check_smem(
        _smem_bytes(head_dim, config),
        f"head_dim={head_dim} with block_kv={config.block_kv}, num_stages={config.num_stages}",
    )


def ragged_paged_attention_mosaic(
    q: jax.Array,  # [T, H, Dh]
    k_pages: jax.Array,  # [N, P, K, Dh]
    v_pages: jax.Array,  # [N, P, K, Dh]
    cu_q_lens: jax.Array,  # [S + 1] int32; tokens at or past cu_q_lens[S] are padding
    positions: jax.Array,  # [T] int32
    kv_lens: jax.Array,  # [S] int32, KV length including this step's tokens
    page_table: jax.Array,  # [S, Pmax] int32
    *,
    scale: float,
    config: MosaicGQAConfig = MOSAIC_GQA_CONFIG,
    interpret: Interpret = False,
) -> jax.Array:  # [T, H, Dh]
    """Causal GQA of ragged query spans over their paged K/V (already written)."""
    check_gqa_mosaic_supported(q, k_pages, v_pages, config=config)
    num_tokens, num_heads, head_dim = q.shape
    num_pages, page_size, num_kv_heads, _ = k_pages.shape
    group = num_heads // num_kv_heads
    block_q = ROWS // group  # tokens per tile
    if positions.shape != (num_tokens,):
        raise ValueError(f"positions {positions.shape}: expected [T] = [{num_tokens}]")
    plan = plan_tiles(cu_q_lens, positions, kv_lens, page_table, block_q)
    t_pad = plan.num_tokens_padded
    num_tiles = plan.seq.shape[0]

    # Per tile: its rows' key limits (0 past the span's end) and the keys the tile walks.
    offsets = jnp.arange(block_q, dtype=jnp.int32)
    token = plan.start[:, None] + offsets  # [NT, block_q]
    in_tile = token < plan.end[:, None]
    limit = jnp.where(in_tile, plan.limit[jnp.minimum(token, t_pad - 1)], 0)
    row_limit = jnp.repeat(limit, group, axis=1).astype(jnp.int32)  # [NT, ROWS]
    tile_keys = jnp.max(limit, axis=1).astype(jnp.int32)

    # Each tile's rows for KV head k: (token, head) for its `group` query heads (HF repeat_kv
    # order), gathered here because a TMA copy into a tiled buffer needs a row offset that is
    # a multiple of 8, which a tile starting at token 5 with 4 heads a token is not.
    qg = q.reshape(num_tokens, num_kv_heads, group, head_dim).transpose(1, 0, 2, 3)
    qg = qg[:, jnp.clip(token, 0, num_tokens - 1)]  # [K, NT, block_q, G, Dh]
    qg = qg.reshape(num_kv_heads, num_tiles, ROWS, head_dim)
    pages = jnp.clip(page_table, 0, num_pages - 1).astype(jnp.int32)

    tiles_out = _gqa_call(
        plan.seq,
        tile_keys,
        row_limit,
        pages,
        qg,
        k_pages,
        v_pages,
        page_size=page_size,
        scale=float(scale),
        config=config,
        interpret=interpret,
    )  # [K, NT, ROWS, Dh]

    # Scatter each tile's rows back to their tokens; rows past a span's end are dropped.
    dest = jnp.where(in_tile, token, t_pad)  # out of range: dropped
    tiles_out = tiles_out.reshape(num_kv_heads, num_tiles, block_q, group, head_dim)
    tiles_out = tiles_out.transpose(1, 2, 0, 3, 4)  # [NT, block_q, K, G, Dh]
    o = jnp.zeros((t_pad, num_kv_heads, group, head_dim), q.dtype)
    o = o.at[dest].set(tiles_out, mode="drop")[:num_tokens]
    o = o.reshape(num_tokens, num_heads, head_dim)
    valid = jnp.arange(num_tokens) < cu_q_lens[-1]
    return jnp.where(valid[:, None, None], o, 0).astype(q.dtype)


def _gqa_call(
    tile_seq: jax.Array,  # [NT] int32
    tile_keys: jax.Array,  # [NT] int32, keys the tile's last row sees (0: unused tile)
    row_limit: jax.Array,  # [NT, ROWS] int32
    page_table: jax.Array,  # [S, Pmax] int32, clipped to valid page ids
    qg: jax.Array,  # [K, NT, ROWS, Dh], each tile's query rows
    k_pages: jax.Array,  # [N, P, K, Dh]
    v_pages: jax.Array,  # [N, P, K, Dh]
    *,
    page_size: int,
    scale: float,
    config: MosaicGQAConfig,
    interpret: Interpret,
) -> jax.Array:  # [K, NT, ROWS, Dh] in q's dtype
    num_kv_heads, num_tiles, _, head_dim = qg.shape
    max_pages = page_table.shape[1]
    dtype = qg.dtype
    stages, block_kv = config.num_stages, config.block_kv
    piece = min(page_size, block_kv)  # rows of one TMA copy
    copies = block_kv // piece
    c = scale * LOG2E
    reduced = plgpu.Layout.WGMMA.reduce(1)

    def kernel(seq_ref, keys_ref, limit_ref, table_ref, q_ref, k_ref, v_ref, o_ref,
               *scoped):  # fmt: skip
        q_smem, k_smem, v_smem, p_smem, limit_smem = scoped[:5]
        q_bar, kv_full, kv_free, v_zeroed = scoped[5:]
        wg = lax.axis_index("wg")
        kh, tile = lax.axis_index("kh"), lax.axis_index("tile")
        s_idx, n_keys = seq_ref[tile], keys_ref[tile]
        n_blocks = (n_keys + block_kv - 1) // block_kv
        last_valid = n_keys - (n_blocks - 1) * block_kv

        def fetch(b, slot):
            for i in range(copies):
                key = b * block_kv + i * piece
                page = table_ref[s_idx, jnp.minimum(key // page_size, max_pages - 1)]
                rows = pl.ds(key % page_size, piece)
                dst = pl.ds(i * piece, piece)
                plgpu.copy_gmem_to_smem(
                    k_ref.at[page, rows, kh], k_smem.at[slot, dst], kv_full.at[slot]
                )
                plgpu.copy_gmem_to_smem(
                    v_ref.at[page, rows, kh], v_smem.at[slot, dst], kv_full.at[slot]
                )

        @pl.when(wg < 2)
        def _consumer():
            plgpu.set_max_registers(232, action="increase")

            @pl.when(wg == 0)
            def _():
                plgpu.copy_gmem_to_smem(q_ref.at[kh, tile], q_smem, q_bar.at[0])
                plgpu.copy_gmem_to_smem(limit_ref.at[tile], limit_smem, q_bar.at[0])

            plgpu.barrier_wait(q_bar.at[0])
            mine = pl.ds(wg * WG_ROWS, WG_ROWS)
            limits = plgpu.load(limit_smem.at[mine], layout=reduced)
            m0 = plgpu.layout_cast(jnp.full((WG_ROWS,), -jnp.inf, jnp.float32), reduced)
            l0 = plgpu.layout_cast(jnp.zeros((WG_ROWS,), jnp.float32), reduced)
            acc0 = plgpu.layout_cast(
                jnp.zeros((WG_ROWS, head_dim), jnp.float32), plgpu.Layout.WGMMA
            )

            def body(b, carry):
                m_i, l_i, acc = carry
                slot = lax.rem(b, stages)
                plgpu.barrier_wait(kv_full.at[slot])
                partial = (b == n_blocks - 1) & (last_valid < block_kv)

                @pl.when(partial & (wg == 0))
                def _():
                    zero_rows_from(v_smem, slot, last_valid, 0, head_dim)
                    plgpu.barrier_arrive(v_zeroed.at[0])

                def qk(s_ref):
                    plgpu.wgmma(s_ref, q_smem.at[mine], k_smem.at[slot].transpose((1, 0)))
                    return s_ref[...]

                s = pl.run_scoped(qk, plgpu.ACC((WG_ROWS, block_kv), jnp.float32))
                key = b * block_kv + plgpu.broadcasted_iota(
                    jnp.int32, (WG_ROWS, block_kv), 1, layout=plgpu.Layout.WGMMA
                )
                visible = key < lax.broadcast_in_dim(limits, s.shape, [0])
                s = jnp.where(visible, s * c, -jnp.inf)
                m_new = jnp.maximum(m_i, s.max(axis=1))
                m_use = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # rows with no key yet
                alpha = jnp.exp2(m_i - m_use)
                p = jnp.exp2(s - lax.broadcast_in_dim(m_use, s.shape, [0]))
                l_i = l_i * alpha + p.sum(axis=1)
                p_smem.at[wg][...] = p.astype(dtype)
                plgpu.commit_smem()

                @pl.when(partial & (wg == 1))
                def _():
                    plgpu.barrier_wait(v_zeroed.at[0])

                def pv(o_ref_):
                    plgpu.wgmma(o_ref_, p_smem.at[wg], v_smem.at[slot])
                    return o_ref_[...]

                o = pl.run_scoped(pv, plgpu.ACC((WG_ROWS, head_dim), jnp.float32))
                acc = acc * lax.broadcast_in_dim(alpha, acc.shape, [0]) + o
                plgpu.barrier_arrive(kv_free.at[slot])
                return m_new, l_i, acc

            _, l_i, acc = lax.fori_loop(0, n_blocks, body, (m0, l0, acc0))
            seen = l_i > 0
            inv = jnp.where(seen, 1.0 / jnp.where(seen, l_i, 1.0), 0.0)
            out = acc * lax.broadcast_in_dim(inv, acc.shape, [0])
            o_ref.at[kh, tile, mine][...] = out.astype(dtype)

        @pl.when(wg == 2)
        def _producer():
            produce_ring(fetch, n_blocks, stages, kv_free)

    def entry(*refs):
        pl.run_scoped(
            lambda *scoped: kernel(*refs, *scoped),
            tiled_smem((ROWS, head_dim), dtype),
            tiled_smem((stages, block_kv, head_dim), dtype),
            tiled_smem((stages, block_kv, head_dim), dtype),
            tiled_smem((2, WG_ROWS, block_kv), dtype),
            plgpu.SMEM((ROWS,), jnp.int32),
            plgpu.Barrier(num_arrivals=2, num_barriers=1),
            plgpu.Barrier(num_arrivals=2 * copies, num_barriers=stages),
            plgpu.Barrier(num_arrivals=2, num_barriers=stages),
            plgpu.Barrier(num_barriers=1),
            collective_axes="wg",
        )

    return plgpu.kernel(
        entry,
        out_type=jax.ShapeDtypeStruct((num_kv_heads, num_tiles, ROWS, head_dim), dtype),
        grid=(num_kv_heads, num_tiles),
        grid_names=("kh", "tile"),
        num_threads=3,
        thread_name="wg",
        **kernel_params(interpret),
    )(tile_seq, tile_keys, row_limit, page_table, qg, k_pages, v_pages)
