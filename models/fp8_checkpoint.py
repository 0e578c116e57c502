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

FP8_DTYPE = "F8_E4M3"  # safetensors' name for float8_e4m3fn
SCALE_SUFFIX = "_scale_inv"


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
        start, header = self._layout(path)
        entry = header[name]
        if entry["dtype"] != FP8_DTYPE:
            raise ValueError(f"checkpoint tensor {name!r}: dtype {entry['dtype']}, not {FP8_DTYPE}")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        if end - begin != math.prod(shape):
            raise ValueError(f"checkpoint tensor {name!r}: {end - begin} bytes for shape {shape}")
        raw = np.fromfile(path, dtype=np.uint8, count=end - begin, offset=start + begin)
        if raw.size != end - begin:
            raise ValueError(f"checkpoint file {str(path)!r}: truncated inside tensor {name!r}")
        return raw.view(jnp.float8_e4m3fn).reshape(shape)


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
