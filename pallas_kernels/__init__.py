"""Pallas GPU kernels over the paged KV cache, each with a plain-jnp `_ref` twin.

- `ragged_paged_attention` (gqa_attention.py): GQA/MHA over ragged query spans, prefill
  chunks and decodes in one call.
- `mla_paged_attention` (mla_attention.py): absorbed MLA over the latent cache.
- `write_kv` (kv_write.py): scatters new K/V or latent rows into pages by slot.
- `mla_decode_mosaic` (mla_mosaic.py): MLA decode on Hopper's warpgroup MMA (Mosaic GPU).
- `ragged_paged_attention_mosaic` (gqa_mosaic.py): GQA prefill chunks on the same (Mosaic GPU).
- benchmark.py (not imported here): the timing behind scripts/bench_kernels.py.

The attention kernels also read fp8 pages (float8_e4m3fn, or its bits as uint8 as the
engine keeps them) with a float32 scale per cached row (engine/kv_quant.py).

Every kernel takes `interpret=True` to run on CPU (Pallas' HLO interpreter for the Triton
kernels, its GPU interpreter for the Mosaic GPU one); engine/attention_ops.py sets it
whenever the backend is not a GPU.

Backend, per kernel (docs/benchmarks.md has the measurements and the full argument):
- Triton for the ragged GQA kernel, the general MLA kernel and the KV write. Paged attention
  is a gather: each key row lives wherever the page table says. In the Triton lowering a
  whole-array ref is a pointer and a gather through the page table is pointer arithmetic,
  so any page size works, a block may span pages, decodes and prefill chunks share one
  call, and head dims that are not powers of two are read with clamped column indices. GQA
  decode meets its bandwidth target on it. Against it: Triton is deprecated in JAX 0.11.
- Mosaic GPU for MLA decode (`mla_decode_mosaic`, mla_mosaic.py): the Triton MLA kernel is
  compute-bound at 11-14% of the matmul rate with 128 heads, and a token's 64-128 heads fill
  WGMMA's 64-row tiles. Written after the H200 runs: checked in the GPU interpreter and
  lowered for an H200 on CPU (`gpu_lowering.lower_for_gpu` runs Pallas' Mosaic GPU lowering
  too), not yet compiled or timed on a GPU, so the engine does not use it yet.
- Mosaic GPU for GQA prefill chunks (`ragged_paged_attention_mosaic`, gqa_mosaic.py): the
  Triton kernel reached 32% of the matmul rate on a 2k chunk; 128 rows of (token, head) per
  program as two warpgroups' WGMMA tiles over TMA-fed K/V blocks. Same status as the MLA one.
"""

# The first interpret-mode lowering imports Pallas' TPU interpreter, which adds a value to
# JAX's tracing context, so whatever was jitted before misses the cache and compiles twice
# (measured, jax 0.11.2). Importing it up front keeps the context fixed.
import jax.experimental.pallas.tpu  # noqa: F401

from pallas_kernels.gqa_attention import (
    check_gqa_supported,
    ragged_paged_attention,
    ragged_paged_attention_ref,
)
from pallas_kernels.gqa_mosaic import (
    MOSAIC_GQA_CONFIG,
    MosaicGQAConfig,
    check_gqa_mosaic_supported,
    ragged_paged_attention_mosaic,
    ragged_paged_attention_mosaic_ref,
)
from pallas_kernels.kv_write import write_kv, write_kv_ref
from pallas_kernels.mla_attention import (
    check_mla_supported,
    mla_paged_attention,
    mla_paged_attention_ref,
)
from pallas_kernels.mla_mosaic import (
    MOSAIC_MLA_CONFIG,
    MosaicMLAConfig,
    check_mla_mosaic_supported,
    mla_decode_mosaic,
    mla_decode_mosaic_ref,
)
from pallas_kernels.ragged_flash import (
    GQA_CONFIG,
    GQA_DECODE_CONFIG,
    MLA_CONFIG,
    MLA_DECODE_CONFIG,
    MLA_HOPPER_CONFIG,
    MLA_HOPPER_DECODE_CONFIG,
    KernelConfig,
    UnsupportedShapeError,
)

__all__ = [
    "GQA_CONFIG",
    "GQA_DECODE_CONFIG",
    "MLA_CONFIG",
    "MLA_DECODE_CONFIG",
    "MLA_HOPPER_CONFIG",
    "MLA_HOPPER_DECODE_CONFIG",
    "MOSAIC_GQA_CONFIG",
    "MOSAIC_MLA_CONFIG",
    "KernelConfig",
    "MosaicGQAConfig",
    "MosaicMLAConfig",
    "UnsupportedShapeError",
    "check_gqa_mosaic_supported",
    "check_gqa_supported",
    "check_mla_mosaic_supported",
    "check_mla_supported",
    "mla_decode_mosaic",
    "mla_decode_mosaic_ref",
    "mla_paged_attention",
    "mla_paged_attention_ref",
    "ragged_paged_attention",
    "ragged_paged_attention_mosaic",
    "ragged_paged_attention_mosaic_ref",
    "ragged_paged_attention_ref",
    "write_kv",
    "write_kv_ref",
]
