"""fp8 checkpoint weights (DeepSeek-V3/R1, Qwen3-*-FP8; compressed-tensors' per-channel,
per-tensor and block scales: configs/fp8_schemes.py), dequantized on load or held as stored.

Such a checkpoint stores a linear weight `w: [..., R, C]` as float8_e4m3fn beside a float
`w_scale_inv: [..., ceil(R / bm), ceil(C / bn)]`, [bm, bn] being the config's
`quantization_config.weight_block_size`; the weight is `w[i, j] * scale_inv[i // bm, j // bn]`
(DeepSeek-V3's `weight_dequant`; the last block of a side may be partial, e.g. 576 = 4.5 x 128
rows in DeepSeek-V3's kv_a_proj_with_mqa). transformers' `Fp8Dequantize` computes the same where
the blocks divide the weight (tests/fixtures/make_fp8_weight_fixtures.py). compressed-tensors
names the scale `w_scale` and may store it per output channel or per tensor (`held_scale`
spreads it over the blocks the engine holds).

The safetensors numpy API cannot return fp8 tensors (numpy has no such dtype), so they are
read from the file's own layout: an 8-byte little-endian header size, a JSON header of
`{name: {dtype, shape, data_offsets}}`, then the data.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from configs.fp8_schemes import Fp8Scheme
from models.mxfp4 import dequantize_mxfp4

FP8_DTYPE = "F8_E4M3"  # safetensors' name for float8_e4m3fn
SCALE_SUFFIX = "_scale_inv"
# DeepSeek-V4's release: ue8m0 scales (float8_e8m0fnu, a byte b meaning 2^(b - 127)) and FP4
# experts, int8 [out, in / 2] of e2m1 values two a byte (the low nibble first: the MXFP4
# encoding, models/mxfp4.py) with a ue8m0 scale per FP4_GROUP inputs, [out, in / FP4_GROUP]
# (transformers' Fp8Dequantize unpacks and scales them alike).
E8M0_DTYPE = "F8_E8M0"
FP4_DTYPE = "I8"
FP4_GROUP = 32


def scale_shape(shape: tuple[int, ...], block: tuple[int, int]) -> tuple[int, ...]:
    """The scale grid of a weight of `shape`: one value per (possibly partial) block."""
    *lead, rows, cols = shape
    return (*lead, math.ceil(rows / block[0]), math.ceil(cols / block[1]))


def held_scale(stored: np.ndarray, shape: tuple[int, ...], scheme: Fp8Scheme) -> np.ndarray:
    """A weight's stored float32 scales as the grid of the blocks it is held in
    (`scheme.held_block`, scale_shape): a block checkpoint's as they are; a per-channel
    one's [..., out, 1] repeated along each row's blocks; a per-tensor one's [..., 1] (or
    [...]) in every block."""
    if scheme.strategy == "block":
        return stored
    grid = scale_shape(shape, scheme.held_block)
    if scheme.strategy == "tensor":
        stored = stored.reshape(*shape[:-2], 1, 1)
    return np.ascontiguousarray(np.broadcast_to(stored, grid))


class Fp8Reader:
    """Reads F8_E4M3 tensors, parsing each file's header once."""

    def __init__(self):
        self._layouts: dict[Path, tuple[int, dict]] = {}

    def _layout(self, path: Path) -> tuple[int, dict]:
        if path not in self._layouts:
            with open(path, "rb") as f:
                (header_len,) = struct.unpack("<Q", f.read(8))
                self._layouts[path] = (8 + header_len, json.loads(f.read(header_len)))
        return self._layouts[path]

    def read(self, path: Path, name: str) -> np.ndarray:
        """Tensor `name` of safetensors file `path` as a float8_e4m3fn numpy array."""
        return self.read_bytes(path, name, (FP8_DTYPE,)).view(jnp.float8_e4m3fn)

    def read_bytes(self, path: Path, name: str, dtypes: tuple[str, ...]) -> np.ndarray:
        """The bytes (uint8, its shape) of one-byte tensor `name`, stored as one of `dtypes`
        (F8_E4M3, F8_E8M0: dtypes numpy cannot hold, so safetensors' numpy API cannot
        return them)."""
        start, header = self._layout(path)
        entry = header[name]
        if entry["dtype"] not in dtypes:
            want = " or ".join(dtypes)
            raise ValueError(f"checkpoint tensor {name!r}: dtype {entry['dtype']}, not {want}")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        if end - begin != math.prod(shape):
            raise ValueError(f"checkpoint tensor {name!r}: {end - begin} bytes for shape {shape}")
        raw = np.fromfile(path, dtype=np.uint8, count=end - begin, offset=start + begin)
        if raw.size != end - begin:
            raise ValueError(f"checkpoint file {str(path)!r}: truncated inside tensor {name!r}")
        return raw.reshape(shape)


def fp4_shapes(shape: tuple[int, ...]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(packed, scale) shapes an FP4 weight of `shape` [out, in] is stored in."""
    out, k = shape
    if k % FP4_GROUP:
        raise ValueError(f"FP4 weight of shape {tuple(shape)}: in = {k} not a multiple of 32")
    return (out, k // 2), (out, k // FP4_GROUP)


def dequantize_fp4(packed: np.ndarray, scales: np.ndarray, dtype=np.float32) -> np.ndarray:
    """[out, in] of an FP4 weight: `packed` [out, in / 2] (int8 or uint8 bytes), `scales`
    [out, in / 32] ue8m0 bytes; exact in float32 and bfloat16 (as MXFP4's values)."""
    out, half = packed.shape
    blocks = np.ascontiguousarray(packed).view(np.uint8).reshape(out, -1, FP4_GROUP // 2)
    return dequantize_mxfp4(blocks, scales, dtype).reshape(out, 2 * half)


def dequantize(
    w: np.ndarray, scale: np.ndarray, block: tuple[int, int], dtype=np.float32
) -> np.ndarray:
    """`w * scale` with each scale value spread over its [bm, bn] block, computed in float32
    and stored as `dtype`.

    Args:
      w: [..., R, C] fp8 weight.
      scale: [..., ceil(R / bm), ceil(C / bn)] float scale_inv.
    """
    rows, cols = w.shape[-2:]
    out = np.empty(w.shape, dtype)
    # One [R, C] matrix at a time: a fused [E, R, C] expert tensor never needs float32 copies
    # of the whole of it.
    for idx in np.ndindex(*w.shape[:-2]):
        s = np.asarray(scale[idx], np.float32)
        s = np.repeat(np.repeat(s, block[0], axis=0)[:rows], block[1], axis=1)[:, :cols]
        out[idx] = w[idx].astype(np.float32) * s
    return out
