"""MLA decode over the paged latent cache on Hopper tensor cores (Pallas, Mosaic GPU lowering).

Same contract as mla_paged_attention (absorbed queries, output in latent space, any ragged
step), built for decode: one program per (64-head block, KV split, token), so a prefill
chunk's tokens would each re-read their keys, and callers send only decode steps here.

Why a second MLA kernel: with DeepSeek-V3's 128 heads, absorbed decode does 242 FLOP per
byte of latent cache, above an H200's ridge point, and the Triton kernel reached 11-14% of
the matmul rate (docs/benchmarks.md). Here the heads of a token are WGMMA's 64 rows, so both
products run as warpgroup MMAs from shared memory, and the latent pages arrive by TMA:

- warpgroup 2 (producer) copies each 64-key block page by page into a ring of
  `num_stages` shared-memory slots (one TMA copy per page piece, one barrier per slot);
- warpgroup 0 computes s = [q_lat|q_pe] . [c_kv|k_pe]^T (M 64, N 64, K = R + Dr), the
  online softmax (FlashAttention, Dao et al. 2022), and p . c_kv for the first R/2 latent
  columns; it hands p (bf16) and the rescale factor to warpgroup 1 through shared memory;
- warpgroup 1 computes p . c_kv for the other R/2 columns.

The output is split between the two consumers because a [64, R] float32 accumulator is
R/2 registers a thread for one warpgroup (256 at R = 512, over the limit of 255). This
split follows FlashMLA (DeepSeek, 2025); the code is written from its description.

Each program writes its unnormalized accumulator, row max and row sum; XLA merges the KV
splits (ragged_flash.combine_splits). The split count is static, chosen from the step shape
to fill the GPU, and each token cuts its own keys into that many (so an engine's page
table, max_model_len wide, does not leave a short decode one split): results depend on the
batch shape, so the kernel is not for the batch-invariant mode.

Keys past a token's limit are masked out of s, and in the last, partial block each consumer
zeroes the rows past the limit in its half of c_kv before p . c_kv, so NaN in unowned cache
slots never reaches the output (0 * NaN would). Warpgroup 1 zeroes its half only once p is
ready: warpgroup 0's scores read every column of the block.

Interpret mode (`interpret=True`) runs the kernel on CPU in Pallas' GPU interpreter, which
simulates the warpgroups, shared memory, TMA and barriers; gpu_lowering.lower_for_gpu
lowers it for an H200 on CPU.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels.mla_attention import mla_paged_attention_ref
from pallas_kernels.mosaic_common import (
    LOG2E,
    REDUCTION_SCRATCH,
    Interpret,
    check_page_size,
    check_smem,
    check_wgmma_dtypes,
    kernel_params,
    produce_ring,
    tiled_smem,
    zero_rows_from,
)
from pallas_kernels.ragged_flash import UnsupportedShapeError, combine_splits

HEAD_ROWS = 64  # WGMMA's M: the heads of one token a program computes (padded with zeros)
BLOCK_KV = 64  # keys per step: WGMMA's K for p . c_kv from shared memory is a multiple of 64
BARRIER_BYTES = 8 * 16  # mbarriers, generously

# Same semantics as the Triton kernel, hence the same plain-jnp twin.
mla_decode_mosaic_ref = mla_paged_attention_ref


@dataclasses.dataclass(frozen=True)
class MosaicMLAConfig:
    """Static tiling of the Mosaic GPU MLA decode (one compilation per distinct value)."""

    num_stages: int = 2  # latent blocks in flight; q + stages x [64, R + Dr] bf16 in smem
    target_programs: int = 264  # split the KV until about this many programs run (2 x SMs)
    min_split: int = 512  # keys per split at least: each split writes an f32 [64, R] partial
    pv_cols: int = 128  # latent columns per p . c_kv MMA (accumulator registers per step)

    def __post_init__(self):
        if self.num_stages < 1:
            raise ValueError(f"MosaicMLAConfig.num_stages={self.num_stages}: must be >= 1")
        if self.target_programs < 1:
            raise ValueError(
                f"MosaicMLAConfig.target_programs={self.target_programs}: must be >= 1"
            )
        if self.min_split < BLOCK_KV or self.min_split % BLOCK_KV:
            raise ValueError(
                f"MosaicMLAConfig.min_split={self.min_split}: must be a positive multiple of "
                f"{BLOCK_KV}"
            )
        if self.pv_cols not in (64, 128, 256):
            raise ValueError(f"MosaicMLAConfig.pv_cols={self.pv_cols}: must be 64, 128 or 256")

    def split_size(self, num_tokens: int, head_blocks: int, max_len: int) -> int:
        """Keys per KV split: enough splits to reach `target_programs`, each >= min_split."""
        programs = max(1, num_tokens * head_blocks)
        num_splits = max(1, -(-self.target_programs // programs))
        return self._split_for(max_len, num_splits, max)

    def token_splits(self, limit: jax.Array, num_splits: int) -> jax.Array:
        """Keys per split of each token ([T] int32): its own keys (`limit`, [T]) cut into at
        most `num_splits` pieces of at least min_split. An engine's page table spans
        max_model_len, so split_size alone would leave an 8k decode in a 128k table one
        split where an 8k table gives it three."""
        size = self._split_for(jnp.maximum(limit, 1), num_splits, jnp.maximum)
        return size.astype(jnp.int32)

    def _split_for(self, keys, num_splits: int, maximum):
        """`keys` (an int, or an int array with jnp.maximum) in `num_splits` pieces of
        whole 64-key blocks, each at least min_split."""
        per_split = -(-keys // num_splits)
        return maximum(self.min_split, -(-per_split // BLOCK_KV) * BLOCK_KV)


MOSAIC_MLA_CONFIG = MosaicMLAConfig()


def check_mla_mosaic_supported(
    q_lat: jax.Array,
    q_pe: jax.Array,
    latent_pages: jax.Array,
    latent_scales: jax.Array | None = None,
    config: MosaicMLAConfig = MOSAIC_MLA_CONFIG,
) -> None:
    """Raises UnsupportedShapeError for what this kernel does not take (callers use the
    Triton kernel or XLA instead)."""
    rank, rope_dim = q_lat.shape[-1], q_pe.shape[-1]
    if latent_pages.ndim != 3 or rank + rope_dim != latent_pages.shape[-1]:
        raise ValueError(
            f"latent_pages {latent_pages.shape}: expected [N, P, R + Dr] with kv_lora_rank "
            f"{rank} + rope dim {rope_dim}"
        )
    if latent_scales is not None:
        raise UnsupportedShapeError("fp8 pages: the Mosaic GPU MLA kernel reads bf16/f16 only")
    check_wgmma_dtypes("MLA", q_lat, q_pe, latent_pages)
    if rank % 128 or rank > 512 or rope_dim % 64:
        raise UnsupportedShapeError(
            f"kv_lora_rank={rank}, rope dim={rope_dim}: the kernel needs a rank that is a "
            "multiple of 128 up to 512 (two consumers of 64-column tiles) and a rope dim "
            "that is a multiple of 64"
        )
    if (rank // 2) % _pv_cols(rank, config):
        raise UnsupportedShapeError(
            f"kv_lora_rank={rank}: half of it is not a multiple of pv_cols={config.pv_cols}"
        )
    check_page_size(latent_pages.shape[1], BLOCK_KV)
    check_smem(
        _smem_bytes(rank + rope_dim, config.num_stages),
        f"rank + rope dim = {rank + rope_dim} with num_stages={config.num_stages}",
    )


def _pv_cols(rank: int, config: MosaicMLAConfig) -> int:
    """Latent columns per p . c_kv MMA: config.pv_cols, at most a consumer's half."""
    return min(config.pv_cols, rank // 2)


def _smem_bytes(row_dim: int, num_stages: int) -> int:
    """q tile, the latent ring, p, the rescale vector, reduction scratch and barriers."""
    buffers = (1 + num_stages) * HEAD_ROWS * row_dim * 2 + HEAD_ROWS * BLOCK_KV * 2
    return buffers + HEAD_ROWS * 4 + REDUCTION_SCRATCH + BARRIER_BYTES


def mla_decode_mosaic(
    q_lat: jax.Array,  # [T, H, R], W_UK folded in
    q_pe: jax.Array,  # [T, H, Dr], roped
    latent_pages: jax.Array,  # [N, P, R + Dr], rows [c_kv | k_pe]
    cu_q_lens: jax.Array,  # [S + 1] int32; tokens at or past cu_q_lens[S] are padding
    positions: jax.Array,  # [T] int32
    kv_lens: jax.Array,  # [S] int32
    page_table: jax.Array,  # [S, Pmax] int32
    *,
    scale: float,
    config: MosaicMLAConfig = MOSAIC_MLA_CONFIG,
    interpret: Interpret = False,
) -> jax.Array:  # [T, H, R]
    """Absorbed MLA of each token over its sequence's paged latents (already written)."""
    check_mla_mosaic_supported(q_lat, q_pe, latent_pages, config=config)
    num_tokens, num_heads, rank = q_lat.shape
    num_pages, page_size, row_dim = latent_pages.shape
    num_seqs, max_pages = page_table.shape
    if positions.shape != (num_tokens,):
        raise ValueError(f"positions {positions.shape}: expected [T] = [{num_tokens}]")
    head_blocks = -(-num_heads // HEAD_ROWS)
    max_len = max_pages * page_size
    num_splits = -(-max_len // config.split_size(num_tokens, head_blocks, max_len))

    token = jnp.arange(num_tokens, dtype=jnp.int32)
    seq = jnp.searchsorted(cu_q_lens, token, side="right", method="compare_all") - 1
    seq = jnp.clip(seq, 0, num_seqs - 1).astype(jnp.int32)
    limit = jnp.minimum(positions + 1, kv_lens[seq])
    limit = jnp.where(token < cu_q_lens[-1], limit, 0).astype(jnp.int32)
    split_blocks = config.token_splits(limit, num_splits) // BLOCK_KV
    q = jnp.concatenate([q_lat, q_pe], axis=-1)
    q = jnp.pad(q, ((0, 0), (0, head_blocks * HEAD_ROWS - num_heads), (0, 0)))
    pages = jnp.clip(page_table, 0, num_pages - 1).astype(jnp.int32)

    acc, row_max, row_sum = _mla_decode_call(
        seq,
        limit,
        split_blocks,
        pages,
        q,
        latent_pages,
        rank=rank,
        page_size=page_size,
        num_splits=num_splits,
        head_blocks=head_blocks,
        scale=float(scale),
        config=config,
        interpret=interpret,
    )
    seen = row_sum > 0  # base-2 row max: lse = max / log2(e) + ln(sum)
    row_sum = jnp.where(seen, row_sum, 1.0)
    lse = jnp.where(seen, row_max / LOG2E + jnp.log(row_sum), -jnp.inf)
    o = acc / row_sum[..., None]
    o = combine_splits(o, lse)[:, :num_heads]
    return o.astype(q_lat.dtype)


def _mla_decode_call(
    seq: jax.Array,  # [T] int32, page-table row of each token
    limit: jax.Array,  # [T] int32, keys each token sees (0: padding)
    split_blocks: jax.Array,  # [T] int32, key blocks per split of each token
    page_table: jax.Array,  # [S, Pmax] int32, clipped to valid page ids
    q: jax.Array,  # [T, Hp, R + Dr], heads padded to a multiple of 64
    latent_pages: jax.Array,  # [N, P, R + Dr]
    *,
    rank: int,
    page_size: int,
    num_splits: int,
    head_blocks: int,
    scale: float,
    config: MosaicMLAConfig,
    interpret: Interpret,
) -> tuple[jax.Array, jax.Array, jax.Array]:  # acc [NS, T, Hp, R], m, l [NS, T, Hp] f32
    num_tokens, _, row_dim = q.shape
    max_pages = page_table.shape[1]
    dtype = q.dtype
    stages = config.num_stages
    half = rank // 2
    piece = min(page_size, BLOCK_KV)  # rows of one TMA copy: a page, or a 64-row part of one
    copies = BLOCK_KV // piece
    pv_cols = _pv_cols(rank, config)
    chunks = half // pv_cols
    c = scale * LOG2E  # softmax in base 2: exp2 of pre-scaled scores (FlashAttention-3)

    def kernel(
        seq_ref, limit_ref, split_ref, table_ref, q_ref, pages_ref, acc_ref, m_ref, l_ref, *scoped
    ):
        q_smem, kv_smem, p_smem, alpha_smem = scoped[:4]
        q_bar, kv_full, kv_free, p_full, p_free = scoped[4:]
        wg = lax.axis_index("wg")
        hb, split, t = lax.axis_index("hb"), lax.axis_index("split"), lax.axis_index("t")
        s_idx, lim, split_blocks = seq_ref[t], limit_ref[t], split_ref[t]
        kv_split = split_blocks * BLOCK_KV
        start = split * kv_split
        n_keys = jnp.clip(lim - start, 0, kv_split)
        n_blocks = (n_keys + BLOCK_KV - 1) // BLOCK_KV
        last_valid = n_keys - (n_blocks - 1) * BLOCK_KV  # keys of the last block
        rows = pl.ds(hb * HEAD_ROWS, HEAD_ROWS)

        def fetch(b, slot):
            for i in range(copies):
                key = start + b * BLOCK_KV + i * piece
                column = jnp.minimum(key // page_size, max_pages - 1)
                src = pages_ref.at[table_ref[s_idx, column], pl.ds(key % page_size, piece)]
                dst = kv_smem.at[slot, pl.ds(i * piece, piece)]
                plgpu.copy_gmem_to_smem(src, dst, kv_full.at[slot])

        def zero_tail_rows(slot, b, col0):
            @pl.when((b == n_blocks - 1) & (last_valid < BLOCK_KV))
            def _():
                zero_rows_from(kv_smem, slot, last_valid, col0, half)

        def p_times_v(slot, acc, alpha, col0):
            out = []
            for j in range(chunks):
                cols = pl.ds(col0 + j * pv_cols, pv_cols)

                def mma(acc_ref, cols=cols):
                    plgpu.wgmma(acc_ref, p_smem, kv_smem.at[slot, :, cols])
                    return acc_ref[...]

                pv = pl.run_scoped(mma, plgpu.ACC((HEAD_ROWS, pv_cols), jnp.float32))
                out.append(acc[j] * lax.broadcast_in_dim(alpha, acc[j].shape, [0]) + pv)
            return tuple(out)

        def zeros_acc():
            zero = jnp.zeros((HEAD_ROWS, pv_cols), jnp.float32)
            return tuple(plgpu.layout_cast(zero, plgpu.Layout.WGMMA) for _ in range(chunks))

        def store(acc, col0):
            for j in range(chunks):
                cols = pl.ds(col0 + j * pv_cols, pv_cols)
                acc_ref.at[split, t, rows, cols][...] = acc[j]

        @pl.when(wg == 0)
        def _scores_and_first_half():
            plgpu.set_max_registers(232, action="increase")
            plgpu.copy_gmem_to_smem(q_ref.at[t, rows], q_smem, q_bar.at[0])
            plgpu.barrier_wait(q_bar.at[0])
            reduced = plgpu.Layout.WGMMA.reduce(1)
            m0 = plgpu.layout_cast(jnp.full((HEAD_ROWS,), -jnp.inf, jnp.float32), reduced)
            l0 = plgpu.layout_cast(jnp.zeros((HEAD_ROWS,), jnp.float32), reduced)

            def body(b, carry):
                m_i, l_i, acc = carry
                slot = lax.rem(b, stages)
                plgpu.barrier_wait(kv_full.at[slot])
                zero_tail_rows(slot, b, 0)

                def qk(s_ref):
                    plgpu.wgmma(s_ref, q_smem, kv_smem.at[slot].transpose((1, 0)))
                    return s_ref[...]

                s = pl.run_scoped(qk, plgpu.ACC((HEAD_ROWS, BLOCK_KV), jnp.float32))
                key = plgpu.broadcasted_iota(
                    jnp.int32, (HEAD_ROWS, BLOCK_KV), 1, layout=plgpu.Layout.WGMMA
                )
                s = jnp.where(key < n_keys - b * BLOCK_KV, s * c, -jnp.inf)
                m_new = jnp.maximum(m_i, s.max(axis=1))
                alpha = jnp.exp2(m_i - m_new)
                p = jnp.exp2(s - lax.broadcast_in_dim(m_new, s.shape, [0]))
                l_i = l_i * alpha + p.sum(axis=1)

                @pl.when(b > 0)
                def _():
                    plgpu.barrier_wait(p_free.at[0])  # warpgroup 1 is done with the last p

                p_smem[...] = p.astype(dtype)
                alpha_smem[...] = alpha
                plgpu.commit_smem()
                plgpu.barrier_arrive(p_full.at[0])
                acc = p_times_v(slot, acc, alpha, 0)
                plgpu.barrier_arrive(kv_free.at[slot])
                return m_new, l_i, acc

            m_i, l_i, acc = lax.fori_loop(0, n_blocks, body, (m0, l0, zeros_acc()))

            @pl.when(n_blocks > 0)
            def _():
                plgpu.barrier_wait(p_free.at[0])  # observe every phase before the barrier goes

            store(acc, 0)
            m_ref.at[split, t, rows][...] = m_i
            l_ref.at[split, t, rows][...] = l_i

        @pl.when(wg == 1)
        def _second_half():
            plgpu.set_max_registers(232, action="increase")

            def body(b, acc):
                slot = lax.rem(b, stages)
                plgpu.barrier_wait(kv_full.at[slot])
                # Zeroing waits for p: warpgroup 0's s = q . [c_kv|k_pe]^T reads these
                # columns too (tests/test_pallas_mosaic.py's race check found it).
                plgpu.barrier_wait(p_full.at[0])
                zero_tail_rows(slot, b, half)
                alpha = plgpu.load(alpha_smem, layout=plgpu.Layout.WGMMA.reduce(1))
                acc = p_times_v(slot, acc, alpha, half)
                plgpu.barrier_arrive(p_free.at[0])
                plgpu.barrier_arrive(kv_free.at[slot])
                return acc

            store(lax.fori_loop(0, n_blocks, body, zeros_acc()), half)

        @pl.when(wg == 2)
        def _producer():
            produce_ring(fetch, n_blocks, stages, kv_free)

    def entry(*refs):
        pl.run_scoped(
            lambda *scoped: kernel(*refs, *scoped),
            tiled_smem((HEAD_ROWS, row_dim), dtype),
            tiled_smem((stages, BLOCK_KV, row_dim), dtype),
            tiled_smem((HEAD_ROWS, BLOCK_KV), dtype),
            plgpu.SMEM((HEAD_ROWS,), jnp.float32),
            plgpu.Barrier(num_barriers=1),
            plgpu.Barrier(num_arrivals=copies, num_barriers=stages),
            plgpu.Barrier(num_arrivals=2, num_barriers=stages),
            plgpu.Barrier(num_barriers=1),
            plgpu.Barrier(num_barriers=1),
            collective_axes="wg",
        )

    hp = q.shape[1]
    return plgpu.kernel(
        entry,
        out_type=(
            jax.ShapeDtypeStruct((num_splits, num_tokens, hp, rank), jnp.float32),
            jax.ShapeDtypeStruct((num_splits, num_tokens, hp), jnp.float32),
            jax.ShapeDtypeStruct((num_splits, num_tokens, hp), jnp.float32),
        ),
        grid=(head_blocks, num_splits, num_tokens),
        grid_names=("hb", "split", "t"),
        num_threads=3,
        thread_name="wg",
        **kernel_params(interpret),
    )(seq, limit, split_blocks, page_table, q, latent_pages)
