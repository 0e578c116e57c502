"""fp8 (e4m3) KV pages with one float32 scale per cached row.

`LLM(kv_cache_dtype="fp8")` stores each layer's pages as `QuantizedPages`: the data in
`float8_e4m3fn` and, per token, a scale for every row the cache keeps (per KV head for
GQA K and V, per token for the MLA latent `[c_kv | k_pe]`). A row is stored as
`round_e4m3(x / s)` (its bits kept as uint8) with `s = max|x| / 448`, so its largest element
lands on e4m3's largest finite value and every element keeps e4m3's 3 mantissa bits relative
to itself (above e4m3's subnormal range, `s * 2**-6`). The cost is 4 bytes of scale per
row: GQA head_dim 128 takes 132 bytes per row instead of 256 (bf16), MLA 580 per token
instead of 1,152.

Per-token scales (rather than one scale per tensor, as checkpoints with calibrated k/v scales
use) need no calibration and cannot overflow: every row is scaled by its own maximum when it
is written. Quantization reads nothing but the row itself, so batch-invariant mode stays
bitwise invariant with fp8 pages.

Attention reads `data * scale` per key. The XLA path dequantizes each gathered block; the
Pallas kernels upcast the fp8 block to the query dtype (exact: every e4m3 value is a bf16
value) and apply the key scales to the score columns and the value scales to the
probabilities before the p.v product, so no dequantized block is ever formed.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from configs.model_config import ModelConfig

FP8_DTYPE = jnp.dtype(jnp.float8_e4m3fn)
FP8_MAX = float(jnp.finfo(FP8_DTYPE).max)  # 448
# The pages hold the e4m3 bit patterns as uint8: XLA:CPU scatters a float8 array by
# converting all of it to a wider float and back (measured, jax 0.11.2: 33 ms per write into
# an 8 MiB pool, against 0.01 ms for uint8), so every write would copy the whole cache.
STORAGE_DTYPE = jnp.dtype(jnp.uint8)
SCALE_DTYPE = jnp.dtype(jnp.float32)
# kv_cache_dtype names LLM takes: "auto" keeps the model's dtype.
KV_CACHE_DTYPES = {"auto": None, "fp8": FP8_DTYPE, "fp8_e4m3": FP8_DTYPE}


class QuantizedPages(NamedTuple):
    """A paged cache array stored in fp8 with one scale per row (a pytree of two arrays)."""

    data: jax.Array  # [N, P, ..., W] uint8, float8_e4m3fn bit patterns
    scale: jax.Array  # [N, P, ...] float32, the scale of each W-wide row

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    def fp8(self) -> jax.Array:
        """The data as a float8_e4m3fn array (a bitcast, no copy)."""
        return lax.bitcast_convert_type(self.data, FP8_DTYPE)


def resolve_kv_cache_dtype(kv_cache_dtype: str):
    """The page dtype for an LLM `kv_cache_dtype` name (None: the model's own dtype)."""
    if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(
            f"kv_cache_dtype={kv_cache_dtype!r}: expected one of {sorted(KV_CACHE_DTYPES)}"
        )
    return KV_CACHE_DTYPES[kv_cache_dtype]


def quantize_rows(x: jax.Array) -> QuantizedPages:
    """x [..., W] -> (fp8 data [..., W], float32 scale [...]) with x ~= data * scale.

    An all-zero row gets scale 0 and zeros. Values are clipped to +-448 before the cast: a
    quotient an ulp past 448 still rounds to 448, but e4m3fn has no inf, so one from 464 on
    (a subnormal scale's quotient, where a backend does not flush it) would become NaN.
    """
    x = x.astype(jnp.float32)
    amax = jnp.max(jnp.abs(x), axis=-1)
    scale = amax / FP8_MAX
    safe = jnp.where(scale > 0, scale, 1.0)[..., None]
    data = jnp.clip(x / safe, -FP8_MAX, FP8_MAX).astype(FP8_DTYPE)
    return QuantizedPages(lax.bitcast_convert_type(data, STORAGE_DTYPE), scale.astype(SCALE_DTYPE))


def dequantize(pages: QuantizedPages, dtype=jnp.float32) -> jax.Array:
    """data * scale in `dtype` (float32 by default), the shape of `pages.data`."""
    return (pages.fp8().astype(jnp.float32) * pages.scale[..., None]).astype(dtype)


def is_quantized(pages) -> bool:
    return isinstance(pages, QuantizedPages)


def zeros(shape: tuple[int, ...]) -> QuantizedPages:
    """Empty quantized pages of data shape [N, P, ..., W]."""
    return QuantizedPages(jnp.zeros(shape, STORAGE_DTYPE), jnp.zeros(shape[:-1], SCALE_DTYPE))


def cache_row_shapes(cfg: ModelConfig, layer: int = 0) -> tuple[tuple[int, ...], ...]:
    """Row shape of each of layer `layer`'s cache arrays for one token: GQA (K, Dh) for K
    and (K, Dv) for V, MLA (R + Dr,) for the latent (and (Di,) for a sparse-attention indexer's key;
    ModelConfig.layer_kv_widths); none for a gated DeltaNet layer (its state is per
    sequence: engine/linear_state.py) or a layer reading an earlier one's (kv_source_layers)."""
    if cfg.is_mla or cfg.is_dsv4:  # (DeepSeek-V4: its per-token rows; entries per page)
        return tuple((w,) for w in cfg.layer_kv_widths(layer))
    if cfg.is_linear_layer(layer) or cfg.kv_source(layer) != layer:
        return ()
    k = cfg.layer_num_kv_heads(layer)
    return (k, cfg.layer_head_dim(layer)), (k, cfg.layer_v_head_dim(layer))


def bytes_per_token(cfg: ModelConfig, dtype=None, layers=None) -> int:
    """Cache bytes of one token over all layers (or those in `layers`: a hybrid model's
    pool's) in page dtype `dtype` (None: the model's); fp8 pages add one 4-byte scale per
    row."""
    dtype = jnp.dtype(cfg.dtype if dtype is None else dtype)
    total = 0
    for layer in range(cfg.num_kv_layers) if layers is None else layers:
        for row in cache_row_shapes(cfg, layer):
            total += math.prod(row) * dtype.itemsize
            if dtype == FP8_DTYPE:
                total += math.prod(row[:-1]) * SCALE_DTYPE.itemsize
    return total
