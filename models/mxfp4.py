"""MXFP4 expert weights (OpenAI's gpt-oss checkpoints), dequantized on load.

The format is the OCP Microscaling (MX) spec's MXFP4: blocks of 32 e2m1 values (1 sign,
2 exponent, 1 mantissa bit; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6) sharing one e8m0 scale byte
`s` that stands for 2^(s - 127); s = 255 is NaN in the spec. A gpt-oss checkpoint
(`quantization_config.quant_method == "mxfp4"`) stores each fused expert weight `w` as
`w_blocks: [E, N, G, 16]` uint8 (two values a byte, the low nibble first) beside
`w_scales: [E, N, G]` uint8, and each row of N holds G * 32 values of the contracted side.
transformers 5.24 (integrations/mxfp4.py, `_convert_moe_packed_tensors`, which its
`Mxfp4Config(dequantize=True)` load runs) decodes a row to [G * 32] and swaps the last two
axes, so `gate_up_proj: [E, hidden, 2 * inter]` (gate = [..., ::2], up = [..., 1::2]) and
`down_proj: [E, inter, hidden]` come out as its bf16 GptOssExperts holds them.
tests/fixtures/make_mxfp4_fixture.py records that load's output.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BLOCK_SIZE = 32  # values sharing one scale (OCP MX spec)
BLOCK_BYTES = BLOCK_SIZE // 2
SCALE_BIAS = 127  # e8m0: scale byte s stands for 2^(s - 127)
SCALE_NAN = 255  # e8m0's one NaN encoding
BLOCKS_SUFFIX = "_blocks"
SCALES_SUFFIX = "_scales"

# e2m1 by nibble (bit 3 the sign), transformers' FP4_VALUES.
FP4_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    np.float32,
)
# Both values of a byte, the low nibble's first, as one 8-byte item: one lookup decodes a byte.
_BYTE_VALUES = np.stack([FP4_VALUES[np.arange(256) & 0x0F], FP4_VALUES[np.arange(256) >> 4]], 1)
_BYTE_PAIRS = _BYTE_VALUES.view(np.uint64).reshape(256)
# 2^(s - 127) for s = 0..254; float32 holds each (2^-127 as a subnormal).
_SCALE_FACTORS = np.ldexp(np.ones(SCALE_NAN, np.float32), np.arange(SCALE_NAN) - SCALE_BIAS)
_TRANSPOSE_ROWS = 256  # rows per band of gpt_oss_expert_weight's transpose
_OUT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(ml_dtypes.bfloat16))


def _check(blocks: np.ndarray, scales: np.ndarray, dtype, expert: bool = False) -> np.dtype:
    """Raises ValueError on inputs the format (or, with `expert`, a gpt-oss expert weight)
    does not allow; returns the output dtype."""
    for name, a in (("blocks", blocks), ("scales", scales)):
        if not isinstance(a, np.ndarray) or a.dtype != np.uint8:
            got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
            raise ValueError(f"mxfp4 {name}: {got}, expected a uint8 numpy array")
    if expert and blocks.ndim != 4:
        raise ValueError(f"mxfp4 expert blocks: shape {blocks.shape}, expected [E, N, G, 16]")
    if blocks.ndim < 2 or blocks.shape[-1] != BLOCK_BYTES:
        raise ValueError(
            f"mxfp4 blocks: shape {blocks.shape}, expected [..., G, {BLOCK_BYTES}] "
            f"({BLOCK_BYTES} bytes = {BLOCK_SIZE} fp4 values per block)"
        )
    if scales.shape != blocks.shape[:-1]:
        raise ValueError(
            f"mxfp4 scales: shape {scales.shape} does not match blocks {blocks.shape}, "
            f"expected {blocks.shape[:-1]}"
        )
    out = np.dtype(dtype)
    if out not in _OUT_DTYPES:
        raise ValueError(f"mxfp4 dtype: {out}, expected one of {[str(d) for d in _OUT_DTYPES]}")
    # transformers would decode 255 as 2^128 (0.5 -> 2^127, 1 -> inf); no real weight has it.
    if (scales == SCALE_NAN).any():
        at = tuple(int(i) for i in np.argwhere(scales == SCALE_NAN)[0])
        raise ValueError(
            f"mxfp4 scales: byte {SCALE_NAN} (e8m0 NaN) at index {at}, expected 0..{SCALE_NAN - 1}"
        )
    return out


def e8m0_values(scales: np.ndarray) -> np.ndarray:
    """float32 2^(s - 127) of e8m0 (ue8m0) scale bytes `scales` (uint8, 0..254)."""
    if scales.dtype != np.uint8:
        raise ValueError(f"e8m0 scales: {scales.dtype}, expected uint8")
    if (scales == SCALE_NAN).any():
        at = tuple(int(i) for i in np.argwhere(scales == SCALE_NAN)[0])
        raise ValueError(f"e8m0 scales: byte {SCALE_NAN} (NaN) at index {at}")
    return _SCALE_FACTORS[scales]


def _decode(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float32 [..., G * 32] of blocks [..., G, 16] and scales [..., G], checked."""
    values = _BYTE_PAIRS[blocks].view(np.float32).reshape(*scales.shape, BLOCK_SIZE)
    # Exact, so bitwise torch.ldexp's result: each value has 2 significant bits and the
    # smallest, 0.5 * 2^-127, is a float32 subnormal; a product of 2^128 or more (4 at s = 253,
    # 2 at s = 254) rounds to +-inf, as ldexp gives.
    with np.errstate(over="ignore"):
        values *= _SCALE_FACTORS[scales][..., None]
    return values.reshape(*scales.shape[:-1], -1)


def dequantize_mxfp4(blocks: np.ndarray, scales: np.ndarray, dtype=np.float32) -> np.ndarray:
    """The values of MXFP4 blocks, in storage order (transformers' decode before its transpose).

    Computed in float32, bitwise transformers' float32 result, then cast once to `dtype`
    (float32, float64 or bfloat16; exact in each, since every finite value fits).

    Args:
      blocks: [..., G, 16] uint8; byte j of a block holds values 2j (low nibble) and 2j + 1.
      scales: [..., G] uint8 e8m0 exponents, 0..254.

    Returns:
      [..., G * 32] of `dtype`.
    """
    out_dtype = _check(blocks, scales, dtype)
    out = np.empty((*scales.shape[:-1], scales.shape[-1] * BLOCK_SIZE), out_dtype)
    # One row block at a time: a [E, N, G, 16] expert tensor never needs a float32 copy whole.
    for idx in np.ndindex(*blocks.shape[:-3]):
        out[idx] = _decode(blocks[idx], scales[idx])
    return out


def gpt_oss_expert_weight(blocks: np.ndarray, scales: np.ndarray, dtype=np.float32) -> np.ndarray:
    """A gpt-oss expert weight as its bf16 checkpoint tensor of the name without `_blocks` holds it.

    Args:
      blocks: [E, N, G, 16] uint8 (`...experts.gate_up_proj_blocks`: N = 2 * inter, G * 32 =
        hidden; `...experts.down_proj_blocks`: N = hidden, G * 32 = inter).
      scales: [E, N, G] uint8.

    Returns:
      [E, G * 32, N] of `dtype`: gate_up_proj [E, hidden, 2 * inter] (gate and up interleaved
      on the last axis) or down_proj [E, inter, hidden].
    """
    out_dtype = _check(blocks, scales, dtype, expert=True)
    experts, n, groups, _ = blocks.shape
    out = np.empty((experts, groups * BLOCK_SIZE, n), out_dtype)
    for e in range(experts):
        decoded = _decode(blocks[e], scales[e])  # [N, K]
        # Transposed a band of rows at a time: a whole-matrix strided copy was 2.7x slower
        # (gpt-oss-20b's gate_up, one core: 2.8 s against 1.0 s for 32 experts).
        for i in range(0, n, _TRANSPOSE_ROWS):
            out[e, :, i : i + _TRANSPOSE_ROWS] = decoded[i : i + _TRANSPOSE_ROWS].T
    return out


def mxfp4_shapes(shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(blocks, scales) shapes a checkpoint stores for an expert weight of dequantized `shape`.

    Args:
      shape: [E, K, N] as gpt_oss_expert_weight returns it (K the contracted side).
    """
    if len(shape) != 3:
        raise ValueError(f"mxfp4 expert weight: shape {tuple(shape)}, expected [E, K, N]")
    experts, k, n = shape
    if k % BLOCK_SIZE:
        raise ValueError(
            f"mxfp4 expert weight: shape {tuple(shape)}, K = {k} is not a multiple of {BLOCK_SIZE}"
        )
    groups = k // BLOCK_SIZE
    return (experts, n, groups, BLOCK_BYTES), (experts, n, groups)
