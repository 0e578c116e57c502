"""The ragged paged flash-attention kernel shared by GQA and MLA (Pallas, Triton lowering).

One `pallas_call` serves a whole engine step: decode spans of one token and prefill chunks
of many, each over its own paged KV. The work is cut three ways:

- **Query tiles.** Each sequence's query span is cut into tiles of `block_q` tokens; a
  tile's rows are (token, head) pairs for every query head that shares one KV head, so
  `rows = block_q * heads_per_program` and every key/value row loaded from a page serves
  all of them (the GQA group, or all MLA heads). Tiles never straddle two sequences; a tile
  that overhangs its span computes the extra rows and masks them out of the store.
- **KV splits of fixed size** (`kv_split` keys, aligned to absolute position 0). Each split
  is an independent program writing a partial output and its log-sum-exp; the splits are
  combined afterwards in a fixed order (Flash-Decoding, Dao et al. 2023). Because the split
  size is fixed rather than the number of splits, a token's reduction order depends only on
  its own sequence, never on the batch it shares a step with, and decode and prefill tokens
  take the same path. The price is a float32 partial output per query row and split: splits
  are capped at `max_splits` by lengthening them for long page tables (the table width is
  fixed per engine, so this too is independent of the batch), which bounds that buffer at
  `max_splits` times the step's f32 output (GQA 2048 tokens x 32 heads x 128: 0.5 GiB; MLA
  with 128 unsharded heads and a 2048-token prefill budget: 8 GiB, see docs/benchmarks.md).
  Outside the batch-invariant mode three things make the split follow the step: the
  decode tiling (GQA_DECODE_CONFIG) shortens the splits of steps too small to fill the GPU
  (`target_programs`); every config lengthens the splits of steps whose partials would
  pass `max_partial_bytes` (1 GiB: the MLA prefill above runs unsplit; such steps have
  programs enough without splits); and `splits_follow_length` applies these rules to the
  keys each tile sees instead of the page table's width, which an engine sets to
  max_model_len (a 64 x 8k decode then gets four 2048-key splits in a 128k table too,
  where the width alone gives one of 8192).
- **KV blocks** (`block_kv` keys) inside a split, reduced with an online softmax
  (FlashAttention, Dao et al. 2022). Keys are gathered token by token through the page
  table, so any page size works and a block may span several pages or part of one. With
  `fast_softmax` the softmax runs in base 2 and blocks every row of the tile sees skip the
  causal mask (a second loop body); see KernelConfig.

Everything the kernel addresses by data (page ids, ragged tile starts) is a whole-array
ref indexed inside the kernel: with the Triton lowering such refs are plain pointers, and
a gather through the page table is pointer arithmetic. Shapes the Triton lowering needs as
powers of two (rows, block_kv, head dims >= 16) are padded here; a head dim that is not a
power of two is read with clamped column indices and its padded columns are discarded.

fp8 pages (per-row float32 scales) are upcast block by block to the query dtype; a key's
scale multiplies its score column and a value's scale its probability column before p.v, so
no dequantized block is formed.

Masking matches engine.paged_attention: token t sees key j iff j < min(position_t + 1,
kv_len of its sequence), and with a sliding window (GQA) also j > position_t - window; a
token with no visible key gets zeros. A windowed program starts at the first key block any
of its rows sees: earlier blocks would leave its online-softmax state exactly as it is.

ALiBi (GQA; Press et al. 2022, BLOOM's form) adds slope_h * (j - position_t) to the scaled
(and capped) score of row (t, h) against key j. The relative form equals HF's slope_h * j
(softmax is shift-invariant per row) and keeps the bias small and exact at long contexts.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

SUPPORTED_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
FP8_DTYPE = jnp.float8_e4m3fn  # page dtype with per-row float32 scales (or its bits, uint8)
LOG2E = math.log2(math.e)
LN2 = math.log(2.0)


class UnsupportedShapeError(ValueError):
    """The kernels do not handle this shape or dtype; callers fall back to the XLA path."""


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def padded_dim(n: int) -> int:
    """Width a head dim is loaded at: a power of two, at least 16 (Triton's dot minimum)."""
    return max(16, next_pow2(n))


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Static tiling of the ragged attention kernels (one compilation per distinct value)."""

    block_rows: int = 64  # query rows (tokens x heads) per program; a power of two >= 16
    block_kv: int = 64  # keys per online-softmax step; a power of two >= 16
    kv_split: int = 2048  # keys per split, a multiple of block_kv; fixed for batch invariance
    max_splits: int = 16  # longer page tables get proportionally longer splits (memory bound)
    # > 0: also at most this many bytes of f32 partials (output and log-sum-exp) per call.
    # Only steps with very many query rows reach it (an unsharded 128-head MLA prefill of
    # 2048 tokens has 0.5 GiB per split); their splits lengthen instead. The bound then
    # depends on the step's token count, so batch-invariant mode drops it (0).
    max_partial_bytes: int = 1 << 30
    max_heads_per_program: int = 64  # query heads of one KV head that share a program
    num_warps: int = 4  # Triton warps per program
    num_stages: int = 2  # Triton software-pipelining depth of the KV loop
    target_programs: int = 0  # > 0: shorter splits until about this many programs (decode)
    min_split: int = 256  # keys per split at least when target_programs shortens them
    # True: base-2 online softmax (scores times scale * log2(e), then one exp2 each, where
    # jnp.exp lowers to libdevice's longer expf in Pallas' Triton lowering), and the key
    # blocks that every row of a tile sees skip the causal mask and the value select.
    # Fewer elementwise instructions per score; written for the prefill chunk and not yet
    # timed on a GPU (bench_kernels --sweep times it), so the engine's configs keep False.
    # A block takes one of two loop bodies depending on the tile's other rows, so a
    # token's last bits may depend on the batch: batch-invariant mode never takes it.
    fast_softmax: bool = False
    # True: each query tile cuts the keys it sees (the most any of its tokens sees) into
    # splits by the rules of split_size, rather than the page table's width: an engine's table spans
    # max_model_len, so a 128k engine would split an 8k decode into one 8192-key piece
    # where an 8k table gives four of 2048 (the measured shape). The split then follows
    # the step (a chunk's last token, the sequence's length), so batch-invariant mode
    # keeps False: fixed splits aligned to position 0, the same for every step.
    splits_follow_length: bool = True

    def __post_init__(self):
        for name in ("block_rows", "block_kv", "max_heads_per_program"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"KernelConfig.{name}={value}: must be a power of two")
        for name in ("block_rows", "block_kv"):
            if getattr(self, name) < 16:
                raise ValueError(f"KernelConfig.{name}={getattr(self, name)}: must be >= 16")
        if self.num_warps < 1 or self.num_warps & (self.num_warps - 1):
            raise ValueError(f"KernelConfig.num_warps={self.num_warps}: must be a power of two")
        if self.num_stages < 1:
            raise ValueError(f"KernelConfig.num_stages={self.num_stages}: must be >= 1")
        if self.kv_split < self.block_kv or self.kv_split % self.block_kv:
            raise ValueError(
                f"KernelConfig.kv_split={self.kv_split}: must be a positive multiple of "
                f"block_kv={self.block_kv}"
            )
        if self.max_splits < 1:
            raise ValueError(f"KernelConfig.max_splits={self.max_splits}: must be >= 1")
        if self.max_partial_bytes < 0:
            raise ValueError(
                f"KernelConfig.max_partial_bytes={self.max_partial_bytes}: must be >= 0"
            )
        if self.target_programs < 0:
            raise ValueError(f"KernelConfig.target_programs={self.target_programs}: must be >= 0")
        if self.target_programs and (self.min_split < 1 or self.min_split % self.block_kv):
            raise ValueError(
                f"KernelConfig.min_split={self.min_split}: must be a positive multiple of "
                f"block_kv={self.block_kv}"
            )

    def split_size(self, max_len: int, programs: int = 0, split_bytes: int = 0) -> int:
        """Keys per split for page tables of `max_len` keys.

        Each split keeps a float32 partial output per query row (`split_bytes` of them in
        all), so the number of splits is capped at `max_splits`, and at `max_partial_bytes`
        worth of partials. `max_len` (page-table width x page size) is fixed by the engine,
        not by the batch, so the split size is too, unless `target_programs` is set: then a
        step of fewer `programs` (query tiles x KV heads) gets shorter splits, down to
        `min_split`, so that small decode batches still fill the GPU (Flash-Decoding); or
        unless the step is large enough to reach `max_partial_bytes`. Either makes the split
        depend on the batch, which the batch-invariant mode's configs never allow.
        """
        return self._split_rule(max_len, programs, split_bytes, max, min)

    def tile_splits(
        self,
        keys: jax.Array,  # [NT] int32, keys each query tile sees (0: unused tile)
        max_len: int,
        programs: int = 0,
        split_bytes: int = 0,
    ) -> tuple[int, jax.Array]:  # (splits in the grid, [NT] int32 keys per split)
        """Each tile's split size, and the number of splits the kernel's grid must hold.

        With `splits_follow_length` a tile's keys are split by split_size's rules applied
        to its own key count, never into more pieces than the page table's width would be
        (so the grid and the partials keep their size); without it every tile takes
        split_size(max_len), fixed by the engine.
        """
        fixed = self.split_size(max_len, programs, split_bytes)
        num_splits = -(-max_len // fixed)
        if not self.splits_follow_length:
            return num_splits, jnp.full(keys.shape, fixed, jnp.int32)
        keys = jnp.maximum(keys, 1)
        size = self._split_rule(keys, programs, split_bytes, jnp.maximum, jnp.minimum)
        size = jnp.maximum(size, self._keys_per_split(keys, num_splits))
        return num_splits, size.astype(jnp.int32)

    def _split_rule(self, length, programs: int, split_bytes: int, maximum, minimum):
        """split_size's rules for `length` keys: an int, or an int array (with jnp's
        maximum and minimum)."""
        size = maximum(self.kv_split, self._keys_per_split(length, self.max_splits))
        if self.target_programs and 0 < programs < self.target_programs:
            short = self._keys_per_split(length, -(-self.target_programs // programs))
            size = minimum(size, maximum(self.min_split, short))
        if self.max_partial_bytes and split_bytes > 0:
            splits = max(1, self.max_partial_bytes // split_bytes)
            size = maximum(size, self._keys_per_split(length, splits))
        return size

    def _keys_per_split(self, length, splits: int):
        """The shortest whole number of key blocks that covers `length` in `splits` splits."""
        return -(-length // splits // self.block_kv) * self.block_kv


# GQA (head_dim 128, bf16): q [64, 128], K and V blocks [64, 128] double-buffered in shared
# memory and a [64, 128] f32 accumulator fit one warpgroup (4 warps) comfortably.
GQA_CONFIG = KernelConfig()
# Decode-only steps (no more tokens than sequences): a tile holds one token, so with 4 query
# heads per KV head 16 rows compute 4 useful rows where 64 rows compute the same 4. Measured
# on an H200 (docs/benchmarks.md): 64 x 8k decode at 80-84% of copy bandwidth against 66%
# with GQA_CONFIG. Same block_kv, so the same key order within a split.
# Splits are also shortened until about 1024 programs (query tiles x KV heads x splits) run.
# In the H200 table the steps with 2048 programs (64 x 8k, 16 x 32k) reached 84-87% of copy
# and those with 512 or fewer 1-39% (16 x 2k: 128 programs of 32 block steps, 370 us, where
# the bundled kernel's 16 splits took 97 us). Chosen from that table, not yet timed
# (bench_kernels --sweep times it against fixed splits at the smaller batches). The step's
# batch then sets the split, which is why batch-invariant mode keeps GQA_CONFIG.
GQA_DECODE_CONFIG = dataclasses.replace(GQA_CONFIG, block_rows=16, target_programs=1024)
# MLA (R 512 + Dr 64): the [64, 512] f32 accumulator needs two warpgroups (8 warps, 128
# registers a thread), and q [64, 576] plus two [32, 576] latent blocks stay under Hopper's
# 227 KiB of shared memory per block.
MLA_CONFIG = KernelConfig(block_kv=32, num_warps=8)
# On Hopper (227 KiB of shared memory per block) a third latent block in flight fits (q 72
# KiB + 3 x 36 KiB): 1.32 ms against 1.72 ms at 64 x 8k on an H200 (two runs each,
# docs/benchmarks.md). Ampere's 163 KiB does not take it.
MLA_HOPPER_CONFIG = dataclasses.replace(MLA_CONFIG, num_stages=3)
# Decode-only MLA steps: a token's 128 heads make two programs, so batches of 1-16 ran 2-32
# programs a split on the H200's 132 SMs (1 x 2k: two programs walking 64 key blocks each,
# 326 us for 4.7 MB). As GQA_DECODE_CONFIG does, their splits shorten until about two
# programs per SM run (an 8-warp program with up to 180 KiB of shared memory has its SM to
# itself): 1 x 2k 32 programs of 4 blocks, 16 x 8k 288 of 29 (928-key splits). At 64 x 8k
# (128 programs, four 2048-key splits) nothing changes: the target's splits would be
# longer. Not yet timed (bench_kernels --sweep times it against fixed splits at the smaller
# batches).
MLA_DECODE_CONFIG = dataclasses.replace(MLA_CONFIG, target_programs=264, min_split=128)
MLA_HOPPER_DECODE_CONFIG = dataclasses.replace(MLA_DECODE_CONFIG, num_stages=3)


class TilePlan(NamedTuple):
    """Where each query tile sits (traceable; built from the step's ragged metadata)."""

    seq: jax.Array  # [NT] int32, page-table row of the tile
    start: jax.Array  # [NT] int32, first token of the tile
    end: jax.Array  # [NT] int32, end of the tile's sequence span; end <= start = unused tile
    limit: jax.Array  # [T_pad] int32, keys visible to each token (0 for padding)
    keys: jax.Array  # [NT] int32, most keys a token of the tile sees (0 = unused tile)
    num_tokens_padded: int  # T_pad = T + block_q, so a tile's rows never run off the array
    # [T_pad] int32, first key each token sees under a sliding window; None: no window
    first: jax.Array | None = None
    # [T_pad] int32, absolute position of each token (0 for padding): the query position
    # ALiBi measures from. Not limit - 1: limit is also capped by the sequence's kv_len.
    position: jax.Array | None = None


def plan_tiles(
    cu_q_lens: jax.Array,  # [S + 1] int32
    positions: jax.Array,  # [T] int32
    kv_lens: jax.Array,  # [S] int32
    page_table: jax.Array,  # [S, Pmax] int32
    block_q: int,
    window: int | None = None,
) -> TilePlan:
    """Cuts every sequence's query span into tiles of `block_q` tokens; with a sliding
    `window`, a token at position p sees keys from max(p - window + 1, 0)."""
    if window is not None and (not isinstance(window, int) or window < 1):
        raise ValueError(f"window={window!r}: must be an integer >= 1 or None")
    num_tokens = positions.shape[0]
    num_seqs = kv_lens.shape[0] if kv_lens.ndim == 1 else 0
    if (
        num_seqs < 1
        or cu_q_lens.shape != (num_seqs + 1,)
        or page_table.ndim != 2
        or page_table.shape[0] != num_seqs
        or page_table.shape[1] < 1
        or positions.ndim != 1
    ):
        raise ValueError(
            f"cu_q_lens {cu_q_lens.shape}, kv_lens {kv_lens.shape}, page_table "
            f"{page_table.shape}, positions {positions.shape}: expected [S + 1], [S], "
            "[S, Pmax], [T] with S, Pmax >= 1"
        )
    cu_q_lens = cu_q_lens.astype(jnp.int32)
    q_lens = jnp.maximum(cu_q_lens[1:] - cu_q_lens[:-1], 0)
    cu_tiles = jnp.concatenate(
        [jnp.zeros(1, jnp.int32), jnp.cumsum((q_lens + block_q - 1) // block_q, dtype=jnp.int32)]
    )
    # Sum over sequences of ceil(q_len / block_q) < T / block_q + S.
    max_tiles = -(-num_tokens // block_q) + num_seqs
    tiles = jnp.arange(max_tiles, dtype=jnp.int32)
    # compare_all: one elementwise pass, where the default binary search is a while loop of
    # log2(S) dependent steps in front of every kernel call (not yet timed on a GPU).
    seq = jnp.searchsorted(cu_tiles, tiles, side="right", method="compare_all")
    seq = jnp.clip(seq - 1, 0, num_seqs - 1)
    used = tiles < cu_tiles[-1]
    start = jnp.where(used, cu_q_lens[seq] + (tiles - cu_tiles[seq]) * block_q, 0)
    end = jnp.where(used, cu_q_lens[seq + 1], 0)

    token = jnp.arange(num_tokens, dtype=jnp.int32)
    token_seq = jnp.searchsorted(cu_q_lens, token, side="right", method="compare_all")
    token_seq = jnp.clip(token_seq - 1, 0, num_seqs - 1)
    in_span = token < cu_q_lens[-1]
    limit = jnp.where(in_span, jnp.minimum(positions + 1, kv_lens[token_seq]), 0)
    padded = num_tokens + block_q
    limit = jnp.pad(jnp.maximum(limit, 0).astype(jnp.int32), (0, block_q))
    rows = start[:, None] + jnp.arange(block_q, dtype=jnp.int32)  # [NT, block_q]
    keys = jnp.max(jnp.where(rows < end[:, None], limit[rows], 0), axis=1)
    first = None
    if window is not None:
        first = jnp.maximum(positions.astype(jnp.int32) + 1 - window, 0)
        first = jnp.pad(first, (0, block_q))
    position = jnp.pad(positions.astype(jnp.int32), (0, block_q))
    return TilePlan(seq.astype(jnp.int32), start, end, limit, keys, padded, first, position)


class KVBlock(NamedTuple):
    """One block of keys as a kernel's `load_kv` returns it."""

    keys: list  # key parts [[BK, Dk_i]], dotted with the matching query parts and summed
    values: jax.Array  # [BK, Dv]
    key_scale: jax.Array | None = None  # [BK] f32 per key (fp8 pages), None: unscaled
    value_scale: jax.Array | None = None  # [BK] f32 per value row


# load_kv(kv_refs, kv_head, pages [BK], offsets [BK]) -> KVBlock
LoadKV = Callable[[Sequence, jax.Array, jax.Array, jax.Array], KVBlock]


def column_index(width: int, padded: int, offset: int = 0):
    """Columns [offset, offset + width) read at `padded` width: a slice when no padding is
    needed, else clamped indices (the duplicated columns meet zero query columns or are
    cropped from the output, so they never reach a result)."""
    if width == padded:
        return pl.ds(offset, width)
    return offset + jnp.minimum(lax.iota(jnp.int32, padded), width - 1)


def gather_rows(ref, lead: tuple, cols):
    """ref[*lead, cols] for per-key index vectors in `lead` ([BK] each) -> [BK, width]."""
    if isinstance(cols, pl.Slice):
        return ref[(*lead, cols)]
    lead = tuple(i[:, None] if getattr(i, "ndim", 0) else i for i in lead)
    return ref[(*lead, cols[None, :])]


# Triton's default for a float32 dot is TF32 (about 1e-3 relative error); HIGHEST keeps
# float32 pages in full precision and changes nothing for bf16/fp16 inputs.
_DOT_PRECISION = (lax.Precision.HIGHEST, lax.Precision.HIGHEST)


def _dot_nt(a: jax.Array, b: jax.Array) -> jax.Array:  # [M, D] x [N, D] -> [M, N] f32
    return lax.dot_general(
        a,
        b,
        (((1,), (1,)), ((), ())),
        precision=_DOT_PRECISION,
        preferred_element_type=jnp.float32,
    )


def _flash_kernel(
    tile_seq_ref,  # [NT]
    tile_start_ref,  # [NT]
    tile_end_ref,  # [NT]
    tile_split_ref,  # [NT], keys per KV split
    limit_ref,  # [T_pad]
    page_table_ref,  # [S, Pmax]
    *refs,  # (first [T_pad] if windowed), (position [T_pad], slopes [Q, Gb] if alibi),
    # q parts [Q, T_pad * Gb, Dq_i] ..., kv refs ..., o [NS, Q, R, Dv], lse [NS, Q, R]
    windowed: bool,
    alibi: bool,
    num_q_parts: int,
    load_kv: LoadKV,
    heads_per_program: int,
    head_blocks: int,
    block_q: int,
    block_kv: int,
    page_size: int,
    num_pages: int,
    scale: float,
    fast_softmax: bool,
    softcap: float = 0.0,
):
    first_ref, refs = (refs[0], refs[1:]) if windowed else (None, refs)
    position_ref, slope_ref, refs = (*refs[:2], refs[2:]) if alibi else (None, None, refs)
    q_refs, kv_refs = refs[:num_q_parts], refs[num_q_parts:-2]
    o_ref, lse_ref = refs[-2:]
    group, tile, split = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    rows = block_q * heads_per_program
    max_pages = page_table_ref.shape[1]

    seq = tile_seq_ref[tile]
    t0 = tile_start_ref[tile]
    # Indices are non-negative: lax.div/rem skip floor division's sign fix-ups.
    row_token = t0 + lax.div(lax.iota(jnp.int32, rows), heads_per_program)
    row_ok = row_token < tile_end_ref[tile]
    limit = jnp.where(row_ok, limit_ref[row_token], 0)  # [rows]
    kv_split = tile_split_ref[tile]
    lo = split * kv_split
    # Keys past the page table's last column do not exist (the XLA path never visits them).
    hi = jnp.minimum(jnp.max(limit), jnp.minimum(lo + kv_split, max_pages * page_size))
    num_blocks = lax.div(jnp.maximum(hi - lo, 0) + block_kv - 1, block_kv)
    first_block = 0
    if windowed:  # [rows] first key of each row's window; rows that store nothing: none
        first = jnp.where(row_ok, first_ref[row_token], jnp.iinfo(jnp.int32).max)
        tile_first = jnp.min(first)
        first_block = jnp.minimum(lax.div(jnp.maximum(tile_first - lo, 0), block_kv), num_blocks)

    if alibi:  # row r is head slot r % Gb of the program's query group
        q_pos = position_ref[row_token]  # [rows]
        slope = slope_ref[group, lax.rem(lax.iota(jnp.int32, rows), heads_per_program)]
        slope = slope * LOG2E if fast_softmax else slope  # [rows], in the softmax's base

    r0 = t0 * heads_per_program
    qs = [q_ref[group, pl.ds(r0, rows), :] for q_ref in q_refs]
    kv_head = lax.div(group, head_blocks)

    def body(b, carry, masked=True):
        m, denom, acc = carry  # [rows], [rows], [rows, Dv] f32
        pos = lo + b * block_kv + lax.iota(jnp.int32, block_kv)  # [BK] absolute key positions
        col = jnp.minimum(lax.div(pos, page_size), max_pages - 1)
        # Table columns past a sequence's pages may hold anything: clip to stay in bounds.
        pages = jnp.clip(page_table_ref[seq, col], 0, num_pages - 1)
        block = load_kv(kv_refs, kv_head, pages, lax.rem(pos, page_size))
        keys, values = block.keys, block.values
        s = _dot_nt(qs[0], keys[0])
        for q, k in zip(qs[1:], keys[1:], strict=True):
            s += _dot_nt(q, k)
        if block.key_scale is not None:  # fp8 pages: q . (k * s_k) = (q . k) * s_k
            s = s * block.key_scale[None, :]
        # fast_softmax works in base 2: exp(x * scale) = exp2(x * scale * log2(e)).
        if softcap:  # Gemma 2: the scaled score squashed to softcap * tanh(s / softcap)
            s = softcap * jnp.tanh(s * (scale / softcap))
            s = s * LOG2E if fast_softmax else s
        else:
            s = s * (scale * LOG2E if fast_softmax else scale)
        if alibi:  # <= 0 on visible keys for positive slopes; int distance, exact below 2**24
            s = s + slope[:, None] * (pos[None, :] - q_pos[:, None]).astype(jnp.float32)
        if masked:
            visible = pos[None, :] < limit[:, None]
            if windowed:
                visible &= pos[None, :] >= first[:, None]
            s = jnp.where(visible, s, -jnp.inf)
        m_new = jnp.maximum(m, jnp.max(s, axis=1))
        # A row that has seen no key keeps max -inf; shifting by 0 keeps exp() at 0, not NaN.
        m_shift = jnp.where(m_new == -jnp.inf, 0.0, m_new)
        exp = jnp.exp2 if fast_softmax else jnp.exp
        alpha = exp(m - m_shift)
        p = exp(s - m_shift[:, None])
        value_scale = block.value_scale
        if masked:
            # Stale rows past the tile's keys may hold inf/NaN, and 0 * inf = NaN; with a
            # window so may the rows before every row's window (pages given back).
            live = pos < hi
            if windowed:
                live &= pos >= tile_first
            values = jnp.where(live[:, None], values, jnp.zeros_like(values))
            if value_scale is not None:
                value_scale = jnp.where(live, value_scale, 0.0)
        p_v, v_unit = p, None
        if value_scale is not None:  # fp8 pages: sum_j p_j (v_j s_j) = (p * s) . v
            if values.dtype == jnp.float16:
                # A row scale is ~max|v| / 448, and float16 is normal only above 6e-5: p * s
                # lost a diffuse tail's keys (9% of the output, 2k keys). Take s relative to
                # the block's largest and put that back, in float32, after the dot.
                v_unit = jnp.max(value_scale)
                v_unit = jnp.where(v_unit > 0, v_unit, 1.0)
                value_scale = value_scale / v_unit
            p_v = p * value_scale[None, :]
        pv = lax.dot_general(
            p_v.astype(values.dtype),
            values,
            (((1,), (0,)), ((), ())),
            precision=_DOT_PRECISION,
            preferred_element_type=jnp.float32,
        )
        if v_unit is not None:
            pv = pv * v_unit
        return m_new, alpha * denom + jnp.sum(p, axis=1), alpha[:, None] * acc + pv

    value_dim = o_ref.shape[-1]
    init = (
        jnp.full((rows,), -jnp.inf, jnp.float32),
        jnp.zeros((rows,), jnp.float32),
        jnp.zeros((rows, value_dim), jnp.float32),
    )
    if fast_softmax and not windowed:
        # Blocks that end at or before every (stored) row's limit need no mask.
        first_limit = jnp.min(jnp.where(row_ok, limit, jnp.iinfo(jnp.int32).max))
        num_full = jnp.minimum(lax.div(jnp.maximum(first_limit - lo, 0), block_kv), num_blocks)
        carry = lax.fori_loop(0, num_full, functools.partial(body, masked=False), init)
        m, denom, acc = lax.fori_loop(num_full, num_blocks, body, carry)
        m = m * LN2  # back to natural-log units for the split combine
    else:
        m, denom, acc = lax.fori_loop(first_block, num_blocks, body, init)
        if fast_softmax:
            m = m * LN2
    seen = denom > 0
    out = acc / jnp.where(seen, denom, 1.0)[:, None]
    lse = jnp.where(seen, m + jnp.log(jnp.where(seen, denom, 1.0)), -jnp.inf)
    pl_triton.store(o_ref.at[split, group, pl.ds(r0, rows), :], out, mask=row_ok[:, None])
    pl_triton.store(lse_ref.at[split, group, pl.ds(r0, rows)], lse, mask=row_ok)


def combine_splits(
    o: jax.Array,  # [NS, ..., Dv] f32, each split's normalized output
    lse: jax.Array,  # [NS, ...] f32, each split's log-sum-exp (-inf = no keys)
    sinks: jax.Array | None = None,  # [...] f32: a logit per row that joins the softmax
) -> jax.Array:  # [..., Dv] f32
    """Merges the splits in split order; a row with no key anywhere gets zeros.

    Splits are added one after another: an empty split adds exactly 0, so the result does
    not depend on how many splits the static shape allows. A row's sink (gpt-oss) counts as
    one more split whose output is zero: it only adds exp(sink) to the denominator.
    """
    m = jnp.max(lse, axis=0)
    if sinks is not None:
        m = jnp.maximum(m, sinks)
    m = jnp.where(m == -jnp.inf, 0.0, m)
    num = jnp.zeros(o.shape[1:], jnp.float32)
    den = jnp.zeros(lse.shape[1:], jnp.float32)
    for s in range(o.shape[0]):
        w = jnp.exp(lse[s] - m)
        # Rows no program of this split wrote may hold NaN: select, never multiply.
        num = num + jnp.where((w > 0)[..., None], w[..., None] * o[s], 0.0)
        den = den + w
    if sinks is not None:
        den = den + jnp.exp(sinks - m)
    return jnp.where((den > 0)[..., None], num / jnp.where(den > 0, den, 1.0)[..., None], 0.0)


def ragged_flash(
    q_parts: Sequence[jax.Array],  # each [Q, T_pad * Gb, Dq_i]; Q = K * head_blocks
    kv_arrays: Sequence[jax.Array],  # the paged cache arrays load_kv reads
    load_kv: LoadKV,
    plan: TilePlan,
    page_table: jax.Array,  # [S, Pmax] int32
    *,
    value_dim: int,
    heads_per_program: int,
    head_blocks: int,
    block_q: int,
    page_size: int,
    num_pages: int,
    scale: float,
    config: KernelConfig,
    interpret: bool,
    name: str,
    sinks: jax.Array | None = None,  # [Q, T_pad * Gb] f32, a sink logit per query row
    softcap: float = 0.0,  # > 0: scaled scores squashed to softcap * tanh(s / softcap)
    alibi: jax.Array | None = None,  # [Q, Gb] f32, ALiBi slope of each head slot of a group
) -> jax.Array:  # [Q, T_pad * Gb, Dv] f32
    """Runs the kernel over (query group, tile, split) and merges the splits (and the rows'
    sinks, `combine_splits`)."""
    num_groups, num_rows, _ = q_parts[0].shape
    num_tiles = plan.seq.shape[0]
    max_len = page_table.shape[1] * page_size
    # Programs that do work: a decode step uses one tile per sequence, at most S.
    programs = num_groups * min(num_tiles, page_table.shape[0])
    # Each split's partials: a normalized f32 output and a log-sum-exp per query row.
    split_bytes = num_groups * num_rows * (value_dim + 1) * 4
    num_splits, tile_split = config.tile_splits(plan.keys, max_len, programs, split_bytes)
    windowed = plan.first is not None
    if alibi is not None and alibi.shape != (num_groups, heads_per_program):
        raise ValueError(
            f"alibi {alibi.shape}: expected [Q, Gb] = [{num_groups}, {heads_per_program}]"
        )
    kernel = functools.partial(
        _flash_kernel,
        windowed=windowed,
        alibi=alibi is not None,
        num_q_parts=len(q_parts),
        load_kv=load_kv,
        heads_per_program=heads_per_program,
        head_blocks=head_blocks,
        block_q=block_q,
        block_kv=config.block_kv,
        page_size=page_size,
        num_pages=num_pages,
        scale=float(scale),
        fast_softmax=config.fast_softmax,
        softcap=float(softcap),
    )
    o, lse = pl.pallas_call(
        kernel,
        grid=(num_groups, num_tiles, num_splits),
        out_shape=[
            jax.ShapeDtypeStruct((num_splits, num_groups, num_rows, value_dim), jnp.float32),
            jax.ShapeDtypeStruct((num_splits, num_groups, num_rows), jnp.float32),
        ],
        compiler_params=pl_triton.CompilerParams(
            num_warps=config.num_warps, num_stages=config.num_stages
        ),
        interpret=interpret,
        name=name,
    )(
        plan.seq,
        plan.start,
        plan.end,
        tile_split,
        plan.limit,
        page_table.astype(jnp.int32),
        *([plan.first] if windowed else []),
        *([plan.position, alibi.astype(jnp.float32)] if alibi is not None else []),
        *q_parts,
        *kv_arrays,
    )
    return combine_splits(o, lse, sinks)


def check_dtypes(queries: Sequence[jax.Array], pages: Sequence[jax.Array], scales=()) -> None:
    """Queries and pages share one supported dtype; or the pages are fp8 (float8_e4m3fn, or
    its bits as uint8), each with a float32 scale per row (`scales`, shaped like its pages
    without the last axis)."""
    q_dtypes = {jnp.dtype(a.dtype) for a in queries}
    supported = [jnp.dtype(d) for d in SUPPORTED_DTYPES]
    if len(q_dtypes) != 1 or next(iter(q_dtypes)) not in supported:
        raise UnsupportedShapeError(
            f"query dtypes {sorted(str(d) for d in q_dtypes)}: the Pallas kernels need one dtype "
            f"among {[d.name for d in supported]}"
        )
    page_dtypes = {jnp.dtype(a.dtype) for a in pages}
    if page_dtypes in ({jnp.dtype(FP8_DTYPE)}, {jnp.dtype(jnp.uint8)}):
        if len(scales) != len(pages) or any(x is None for x in scales):
            raise ValueError("fp8 (float8_e4m3fn or uint8 bits) pages need their per-row scales")
        for page, scale in zip(pages, scales, strict=True):
            if scale.shape != page.shape[:-1] or jnp.dtype(scale.dtype) != jnp.float32:
                raise ValueError(
                    f"scales {scale.shape} {scale.dtype}: expected float32 {page.shape[:-1]} "
                    f"(one per row of the pages {page.shape})"
                )
        return
    if any(x is not None for x in scales):
        raise ValueError(f"scales given for {sorted(str(d) for d in page_dtypes)} pages")
    if page_dtypes != q_dtypes:
        raise UnsupportedShapeError(
            f"dtypes {sorted(str(d) for d in q_dtypes | page_dtypes)}: the Pallas kernels need "
            f"the queries' dtype for the pages, or float8_e4m3fn pages with scales"
        )


def load_rows(ref, lead: tuple, cols, dtype) -> jax.Array:
    """gather_rows cast to the compute dtype (fp8 pages: exact for bf16, f16 and f32).

    uint8 pages hold e4m3 bit patterns (engine/kv_quant.py keeps them so, as XLA scatters
    them in place): bitcast inside the kernel, so no converted copy of the cache is made.
    """
    rows = gather_rows(ref, lead, cols)
    if rows.dtype == jnp.uint8:
        rows = lax.bitcast_convert_type(rows, FP8_DTYPE)
    return rows.astype(dtype)


def dequantize_pages(pages: jax.Array, scales: jax.Array) -> jax.Array:
    """fp8 pages (float8_e4m3fn or uint8 bits) times their row scales, in float32 (_ref twins)."""
    if pages.dtype == jnp.uint8:
        pages = lax.bitcast_convert_type(pages, FP8_DTYPE)
    return pages.astype(jnp.float32) * scales[..., None]
