"""Pallas GPU kernels over the paged KV cache, each with a plain-jnp `_ref` twin.

- `ragged_paged_attention` (gqa_attention.py): GQA/MHA over ragged query spans, prefill
  chunks and decodes in one call.
- `mla_paged_attention` (mla_attention.py): absorbed MLA over the latent cache.
- `write_kv` (kv_write.py): scatters new K/V or latent rows into pages by slot.

The attention kernels also read fp8 pages (float8_e4m3fn, or its bits as uint8 as the
engine keeps them) with a float32 scale per cached row (engine/kv_quant.py).

Every kernel takes `interpret=True` to run on CPU (Pallas' HLO interpreter); engine/
attention_ops.py sets it whenever the backend is not a GPU.

Backend: the Triton lowering, for all three kernels, chosen without a GPU to measure on.
- Paged attention is a gather: each key row lives wherever the page table says. In the
  Triton lowering a whole-array ref is a pointer and a gather through the page table is
  pointer arithmetic, so any page size works, a block may span pages, and head dims that
  are not powers of two are read with clamped column indices. Mosaic GPU would stage pages
  through shared memory with per-page TMA copies and barriers, and its WGMMA wants 64-row
  tiles, which decode (1 token x 1-8 heads per KV head) fills mostly with padding.
- It can be checked here: `gpu_lowering.lower_for_gpu` runs the complete Pallas-to-Triton
  lowering for an H200 on a CPU-only machine (tests do), while the Mosaic GPU lowering needs
  the CUDA plugin's bindings, so a Mosaic GPU kernel would reach a GPU untested.
- Against it: the Triton backend is deprecated in JAX 0.11 (it warns) in favour of Mosaic
  GPU. A Mosaic GPU MLA kernel, where 64-128 heads do fill WGMMA tiles, is the first thing
  to try once a GPU can measure it (scripts/bench_kernels.py compares against the copy
  bandwidth and JAX's bundled kernel).
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
    MLA_HOPPER_CONFIG,
    KernelConfig,
    UnsupportedShapeError,
)

__all__ = [
    "GQA_CONFIG",
    "GQA_DECODE_CONFIG",
    "MLA_CONFIG",
    "MLA_HOPPER_CONFIG",
    "MOSAIC_MLA_CONFIG",
    "KernelConfig",
    "MosaicMLAConfig",
    "UnsupportedShapeError",
    "check_gqa_supported",
    "check_mla_mosaic_supported",
    "check_mla_supported",
    "mla_decode_mosaic",
    "mla_decode_mosaic_ref",
    "mla_paged_attention",
    "mla_paged_attention_ref",
    "ragged_paged_attention",
    "ragged_paged_attention_ref",
    "write_kv",
    "write_kv_ref",
]
