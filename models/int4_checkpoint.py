"""int4 weight-only checkpoints in compressed-tensors' pack-quantized format: what
llm-compressor's W4A16 recipes write (GPTQ / AWQ / round-to-nearest) and Kimi-K2-Thinking
ships for its routed experts.

A quantized Linear `X.weight` [out, in] is stored as
  X.weight_packed  int32 [out, ceil(in / 8)]: eight 4-bit values per word, element j of a row
                   in bits 4 (j % 8) .. 4 (j % 8) + 3 of word j // 8, each as q + 8 (0..15)
  X.weight_scale   float [out, in / group]: one scale per group of `group` inputs
  X.weight_shape   int [2]: (out, in)
and the weight is q * scale of its group (symmetric: no zero point). The config says so in
`quantization_config` (quant_method "compressed-tensors", format "pack-quantized"; checked by
configs/compressed_tensors.py); a checkpoint may leave some Linears float (its `ignore` list).

In memory (ModelConfig.quantization="int4", models/quantization.py) the values are kept
packed two to a byte, low nibble first, along the weight's last contracted axis.
"""

from __future__ import annotations

import numpy as np

PACKED_SUFFIX = "_packed"
SCALE_SUFFIX = "_scale"
SHAPE_SUFFIX = "_shape"
SUFFIXES = (PACKED_SUFFIX, SCALE_SUFFIX, SHAPE_SUFFIX)


def packed_shape(shape: tuple[int, int]) -> tuple[int, int]:
    """The int32 words of a weight [out, in]."""
    return shape[0], -(-shape[1] // 8)


def group_scale_shape(shape: tuple[int, int], group: int) -> tuple[int, int]:
    return shape[0], -(-shape[1] // group)


def unpack_words(packed: np.ndarray, cols: int) -> np.ndarray:
    """int32 [rows, words] -> int8 [rows, cols] values in [-8, 7]."""
    words = np.ascontiguousarray(packed, dtype="<i4")
    nibbles = words.view(np.uint8).reshape(words.shape[0], -1)  # 4 bytes a word, low first
    values = np.stack([nibbles & 0xF, nibbles >> 4], axis=-1).reshape(words.shape[0], -1)
    return (values[:, :cols].astype(np.int8) - 8).astype(np.int8)


def dequantize(packed: np.ndarray, scale: np.ndarray, group: int, cols: int, dtype) -> np.ndarray:
    """A stored weight as `dtype` [out, in]: q * scale in float32, then cast."""
    q = unpack_words(packed, cols).astype(np.float32)
    spread = np.repeat(np.asarray(scale, np.float32), group, axis=1)[:, :cols]
    return (q * spread).astype(dtype)


def pack_pairs(values: np.ndarray, axis: int) -> np.ndarray:
    """int8 values in [-8, 7] -> uint8, two along `axis` per byte (low nibble first; an odd
    length padded with a zero value)."""
    values = np.moveaxis(np.asarray(values, np.int8), axis, -1).astype(np.int16) + 8
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.full(values.shape[:-1] + (1,), 8, np.int16)], -1)
    packed = values[..., 0::2] | (values[..., 1::2] << 4)
    return np.moveaxis(packed.astype(np.uint8), -1, axis)
