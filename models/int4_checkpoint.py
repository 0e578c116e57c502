"""int4 weight-only checkpoints: how each format (configs/int4_schemes.py) stores a
quantized Linear `X.weight` [out, in] (G = ceil(in / group) groups of inputs per row):

- compressed-tensors pack-quantized (llm-compressor's W4A16 recipes, Kimi-K2-Thinking):
    X.weight_packed  int32 [out, ceil(in / 8)]: eight 4-bit values per word, element j of a
                     row in bits 4 (j % 8) .. 4 (j % 8) + 3 of word j // 8, each as q + 8
    X.weight_scale   float [out, G]; X.weight_shape int [2]: (out, in)
    X.weight_zero_point  (asymmetric only) int32 [ceil(out / 8), G]: z + 8, packed as the
                     values but along the outputs
  and the weight is (q - z) * scale of its group (symmetric: z = 0), q and z in [-8, 7];
- GPTQ (AutoGPTQ / GPTQModel):
    X.qweight  int32 [ceil(in / 8), out]: packed as above but along the inputs (rows)
    X.qzeros   int32 [G, ceil(out / 8)]: zero points, packed along the outputs; in the v1
               format (checkpoint_format "gptq") each word is stored minus 0x11111111
    X.scales   float16 [G, out]; X.g_idx int32 [in]: each input's group
  and the weight is (code - zero) * scale of the input's group;
- AWQ GEMM (AutoAWQ / GPTQModel):
    X.qweight  int32 [in, ceil(out / 8)], X.qzeros int32 [G, ceil(out / 8)]: packed along
               the outputs, the eight nibbles of a word (low first) holding outputs
               0, 2, 4, 6, 1, 3, 5, 7 of its eight
    X.scales   float16 [G, out]
  and the weight is (code - zero) * scale of its group.

A checkpoint may leave some Linears float (compressed-tensors' `ignore`, GPTQ's unquantized
router and lm_head). Every format is read into `Int4Parts`: the values as q - 8 in [-8, 7],
zero points as z - 8, so (value - zero) * scale is the weight and a symmetric format's zero
is 0. In memory (ModelConfig.quantization="int4", models/quantization.py) the values are
kept packed two to a byte, low nibble first, along the weight's last contracted axis.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from configs.int4_schemes import Int4Scheme

# compressed-tensors' tensors of X.weight are X.weight + suffix; GPTQ's and AWQ's are X.<name>.
PACKED_SUFFIX = "_packed"
SCALE_SUFFIX = "_scale"
SHAPE_SUFFIX = "_shape"
ZERO_SUFFIX = "_zero_point"
GPTQ_QWEIGHT = "qweight"
AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # output c of eight is nibble AWQ_REVERSE_ORDER[c]
V1_ZEROS = 0x11111111  # GPTQ v1: every zero point stored minus one


@dataclasses.dataclass(frozen=True)
class Int4Parts:
    """A stored int4 Linear [out, in], read: weight = (values - zero) * scale of the group."""

    values: np.ndarray  # int8 [out, in]: q - 8, in [-8, 7]
    scale: np.ndarray  # float32 [out, G]
    zero: np.ndarray | None = None  # int8 [out, G]: z - 8 (None: 0, symmetric)
    g_idx: np.ndarray | None = None  # int32 [in]: each input's group (None: i // group)

    def dequantize(self, group: int, dtype) -> np.ndarray:
        """The weight as `dtype` [out, in]: computed in float32, then cast."""
        cols = self.values.shape[1]
        groups = np.arange(cols) // group if self.g_idx is None else self.g_idx
        q = self.values.astype(np.float32)
        if self.zero is not None:
            q = q - self.zero[:, groups].astype(np.float32)
        return (q * np.asarray(self.scale, np.float32)[:, groups]).astype(dtype)


def module_of(name: str) -> str:
    """'X' of a weight name 'X.weight'."""
    return name[: -len(".weight")] if name.endswith(".weight") else name


def stored_names(name: str, shape: tuple[int, int], scheme: Int4Scheme) -> dict:
    """{tensor name: (shape, dtype kind)} of the tensors a format stores weight `name` of
    `shape` [out, in] as."""
    out, cols = shape
    groups = scheme.groups(cols)
    if scheme.method == "compressed-tensors":
        names = {
            name + PACKED_SUFFIX: ((out, -(-cols // 8)), "int32"),
            name + SCALE_SUFFIX: ((out, groups), "float"),
            name + SHAPE_SUFFIX: ((2,), "int"),
        }
        if scheme.zero_point:
            names[name + ZERO_SUFFIX] = ((-(-out // 8), groups), "int32")
        return names
    x = module_of(name) + "."
    packed = (-(-cols // 8), out) if scheme.method == "gptq" else (cols, -(-out // 8))
    names = {
        x + GPTQ_QWEIGHT: (packed, "int32"),
        x + "qzeros": ((groups, -(-out // 8)), "int32"),
        x + "scales": ((groups, out), "float"),
    }
    if scheme.method == "gptq":
        names[x + "g_idx"] = ((cols,), "int32")
    return names


def packed_name(name: str, has) -> str | None:
    """The tensor that holds weight `name`'s packed values (X.weight_packed, or GPTQ's and
    AWQ's X.qweight); None when the weight is not stored packed (`has(tensor name)`: in the
    checkpoint)."""
    if has(name):
        return None
    for packed in (name + PACKED_SUFFIX, module_of(name) + "." + GPTQ_QWEIGHT):
        if has(packed):
            return packed
    return None


def _nibbles(words: np.ndarray) -> np.ndarray:
    """int32 [rows, w] -> uint8 [rows, 8 w]: each word's eight 4-bit values, low first."""
    words = np.ascontiguousarray(words, dtype="<i4")
    b = words.view(np.uint8).reshape(words.shape[0], -1)  # 4 bytes a word, low first
    return np.stack([b & 0xF, b >> 4], axis=-1).reshape(words.shape[0], -1)


def _centered(codes: np.ndarray) -> np.ndarray:
    """4-bit codes (0..15) as int8 values in [-8, 7]."""
    return (codes.astype(np.int16) - 8).astype(np.int8)


def unpack_words(packed: np.ndarray, cols: int) -> np.ndarray:
    """int32 [rows, words] -> int8 [rows, cols] values in [-8, 7] (stored + 8)."""
    return _centered(_nibbles(packed)[:, :cols])


def read_parts(read, name: str, shape: tuple[int, int], scheme: Int4Scheme) -> Int4Parts:
    """Weight `name` [out, in] as stored in `scheme`'s format, via `read(tensor name)`; a
    per-channel one's scale and zero point repeated over groups of `scheme.held_group`."""
    parts = _stored_parts(read, name, shape, scheme)
    if scheme.group:
        return parts
    grid = (shape[0], -(-shape[1] // scheme.held_group))
    spread = lambda a: None if a is None else np.ascontiguousarray(np.broadcast_to(a, grid))  # noqa: E731
    return Int4Parts(parts.values, spread(parts.scale), spread(parts.zero))


def _stored_parts(read, name: str, shape: tuple[int, int], scheme: Int4Scheme) -> Int4Parts:
    out, cols = shape
    if scheme.method == "compressed-tensors":
        packed, scale = read(name + PACKED_SUFFIX), read(name + SCALE_SUFFIX)
        zero = None
        if scheme.zero_point:  # packed along the outputs: [ceil(out / 8), G]
            zero = unpack_words(np.ascontiguousarray(read(name + ZERO_SUFFIX).T), out).T
        return Int4Parts(unpack_words(packed, cols), np.asarray(scale, np.float32), zero)
    x = module_of(name) + "."
    qweight, qzeros = read(x + GPTQ_QWEIGHT), read(x + "qzeros")
    scale = np.asarray(read(x + "scales"), np.float32).T  # [out, G]
    if scheme.zeros_minus_one:
        qzeros = (qzeros.astype(np.int64) + V1_ZEROS).astype(np.uint32).view(np.int32)
    zero = _nibbles(qzeros)[:, :out]  # [G, out]
    if scheme.method == "awq":
        order = np.asarray(AWQ_REVERSE_ORDER)
        unscramble = (np.arange(-(-out // 8) * 8).reshape(-1, 8)[:, order]).ravel()[:out]
        codes, zero = _nibbles(qweight)[:, unscramble], zero[:, unscramble]  # [in, out]
        return Int4Parts(_centered(codes.T), scale, _centered(zero.T))
    codes = _nibbles(np.ascontiguousarray(qweight.T))[:, :cols]  # [out, in]
    g_idx = np.asarray(read(x + "g_idx"), np.int32)
    group = scheme.group or cols
    check_g_idx(g_idx, x + "g_idx", scale.shape[1], group, scheme.act_order)
    g_idx = g_idx if scheme.act_order else None
    return Int4Parts(_centered(codes), scale, _centered(zero.T), g_idx)


def check_g_idx(g_idx: np.ndarray, name: str, groups: int, group: int, act_order: bool) -> None:
    """A GPTQ g_idx names groups that exist, and without act order the inputs' own."""
    if g_idx.min(initial=0) < 0 or g_idx.max(initial=0) >= groups:
        raise ValueError(f"checkpoint tensor {name!r}: group indices outside [0, {groups})")
    if not act_order and not np.array_equal(g_idx, np.arange(g_idx.size) // group):
        raise ValueError(
            f"checkpoint tensor {name!r}: inputs out of group order, but the config's "
            "quantization_config.desc_act is false"
        )


def pack_pairs(values: np.ndarray, axis: int) -> np.ndarray:
    """int8 values in [-8, 7] -> uint8, two along `axis` per byte (low nibble first; an odd
    length padded with a zero value)."""
    values = np.moveaxis(np.asarray(values, np.int8), axis, -1).astype(np.int16) + 8
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.full(values.shape[:-1] + (1,), 8, np.int16)], -1)
    packed = values[..., 0::2] | (values[..., 1::2] << 4)
    return np.moveaxis(packed.astype(np.uint8), -1, axis)
