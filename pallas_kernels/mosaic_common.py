"""What the Mosaic GPU kernels (mla_mosaic.py, gqa_mosaic.py) share.

Hopper's limits, the shape checks both make, and the two pieces of kernel code both run:
the producer warpgroup's TMA ring and the zeroing of cache rows past a sequence's last
visible key.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels.ragged_flash import UnsupportedShapeError

SMEM_BYTES = 227 * 1024  # Hopper's shared memory per block
# Mosaic reserves shared memory for cross-warp reductions (2 KiB by default). The row max
# and sum of a WGMMA tile reduce within each warp's quad, and at DeepSeek-V3's shapes the
# default would push the MLA kernel 56 bytes past SMEM_BYTES.
REDUCTION_SCRATCH = 512
LOG2E = math.log2(math.e)  # the softmax runs in base 2: exp2 of pre-scaled scores
WGMMA_COLS = 64  # one 128-byte swizzled row of bf16: the column tile of every smem buffer


def tiled_smem(shape: tuple[int, ...], dtype) -> plgpu.SMEM:
    """A shared-memory buffer in the tiled, 128-byte swizzled layout WGMMA and TMA read."""
    transforms = (plgpu.TilingTransform((8, WGMMA_COLS)), plgpu.SwizzleTransform(128))
    return plgpu.SMEM(shape, dtype, transforms=transforms)


# A kernel's `interpret`: False (compiled), True (Pallas' GPU interpreter on CPU), or the
# interpreter's own parameters (e.g. InterpretGPUParams(detect_races=True), as the tests use).
Interpret = bool | plgpu.InterpretGPUParams


def kernel_params(interpret: Interpret) -> dict:
    """plgpu.kernel keyword arguments every Mosaic kernel here passes."""
    if not isinstance(interpret, plgpu.InterpretGPUParams):
        interpret = plgpu.InterpretGPUParams() if interpret else False
    return dict(
        compiler_params=plgpu.CompilerParams(
            approx_math=True, reduction_scratch_bytes=REDUCTION_SCRATCH
        ),
        interpret=interpret,
    )


def check_wgmma_dtypes(what: str, *arrays: jax.Array) -> None:
    """WGMMA reads bf16 or f16 operands, all of one type; fp8 pages are refused."""
    dtypes = {jnp.dtype(x.dtype) for x in arrays}
    if dtypes not in ({jnp.dtype(jnp.bfloat16)}, {jnp.dtype(jnp.float16)}):
        raise UnsupportedShapeError(
            f"{what} dtypes {sorted(str(d) for d in dtypes)}: WGMMA needs one of bfloat16, float16"
        )


def check_page_size(page_size: int, block_kv: int) -> None:
    """A key block is whole pages, or whole 64-row-multiple parts of one page."""
    if page_size % 8 or (page_size < block_kv and block_kv % page_size):
        raise UnsupportedShapeError(
            f"page size {page_size}: the kernel needs a multiple of 8 that divides "
            f"block_kv={block_kv} or is a multiple of it"
        )
    if page_size > block_kv and page_size % block_kv:
        raise UnsupportedShapeError(
            f"page size {page_size}: above block_kv={block_kv} it must be a multiple of it"
        )


def check_smem(smem: int, what: str) -> None:
    if smem > SMEM_BYTES:
        raise UnsupportedShapeError(f"{what}: {smem} bytes of shared memory, over {SMEM_BYTES}")


def produce_ring(
    fetch: Callable[[jax.Array | int, jax.Array | int], None],
    n_blocks: jax.Array,
    stages: int,
    kv_free,  # plgpu barrier ref, one barrier per slot, arrived on by every consumer
) -> None:
    """The producer warpgroup's loop: `fetch(block, slot)` for blocks 0..n_blocks-1 into a
    ring of `stages` slots, each refill after its slot's consumers released it.

    It only issues copies, so it first hands its registers down to 40 per thread for the
    consumer warpgroups (which raise theirs to 232). The last `stages` frees are waited on
    after the loop too, so every barrier's phases are observed before the barriers are
    deallocated (the interpreter checks this).
    """
    plgpu.set_max_registers(40, action="decrease")
    for b in range(stages):

        @pl.when(b < n_blocks)
        def _(b=b):
            fetch(b, b)

    @pl.loop(stages, jnp.maximum(n_blocks, stages))
    def _(b):
        slot = lax.rem(b, stages)
        plgpu.barrier_wait(kv_free.at[slot])
        fetch(b, slot)

    @pl.loop(jnp.maximum(n_blocks - stages, 0), n_blocks)
    def _(b):
        plgpu.barrier_wait(kv_free.at[lax.rem(b, stages)])


def zero_rows_from(ring, slot, valid: jax.Array, col0: int, num_cols: int) -> None:
    """Zeroes rows `valid..` of columns [col0, col0 + num_cols) of `ring[slot]` (a
    [stages, rows, cols] shared-memory ring), then makes the stores visible to WGMMA.

    The rows hold stale or never-written cache slots past the last visible key; their
    scores are masked, but 0 * NaN in p . V would still be NaN.
    """
    rows = ring.shape[1]
    row = plgpu.broadcasted_iota(jnp.int32, (rows, WGMMA_COLS), 0, layout=plgpu.Layout.WGMMA)
    for j in range(num_cols // WGMMA_COLS):
        part = ring.at[slot, :, pl.ds(col0 + j * WGMMA_COLS, WGMMA_COLS)]
        part[...] = jnp.where(row < valid, part[...], 0).astype(ring.dtype)
    plgpu.commit_smem()
