"""fp8 weights in memory: `LLM(quantization="fp8")` (vLLM's name for it).

Each projection matrix of attention, MLP and experts is held as float8_e4m3fn with one float32
scale per block, DeepSeek-V3's release format: a block's values are stored = e4m3(w / s) and
read back as stored * s. About half the bytes of bf16 weights (a quarter of float32), which
is what lets DeepSeek-V3 (671B parameters: 1.34 TB in bf16, 0.68 TB in fp8) fit on one
8 x H200 node.

- A checkpoint stored that way (quantization_config quant_method "fp8") keeps its own bytes
  and scales: nothing is rounded twice, and each weight reads back bitwise as the loader's
  dequantization (models/fp8_checkpoint.py) computes it. Its float tensors (layers the
  checkpoint left unquantized: `modules_to_not_convert`) stay float, as in vLLM.
- Any other weights are quantized on load with s = max|w| / 448 per block
  (`ModelConfig.quantization_block`, 128 x 128 unless the checkpoint names its own).
- Embeddings, lm_head, routers, norms and biases stay in the model dtype, and so do the
  linear-attention layers' projections (gated DeltaNet, KDA: an fp8 checkpoint's are
  dequantized on load; 1.2B of Qwen3-Next-80B's 79.7B parameters).

Weight-only: activations and matmuls stay in the model dtype. `dequantize_tree` turns a
layer's weights back into that dtype at the top of the layer (models/transformer.py), inside
the jitted step, so only one layer's float weights exist at a time on top of the fp8 ones.

Layout. A weight `[*lead, *K, *N]` (lead: the expert axis of routed experts; K: the axes a
matmul contracts, e.g. [H, Dv] of wo; N: the output axes) is blocked as the matrix
[*lead, prod(K), prod(N)], in blocks of `block = (bk, bn)` (the last block of a side may be
partial, as DeepSeek-V3's 576-row kv_a_proj). An HF fp8 weight is a torch Linear
[out, in] with scale_inv [ceil(out / bm), ceil(in / bn)]: here it is transposed, so the
scale grid is the transposed one and block = (bn, bm).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from models.int4_checkpoint import pack_pairs
from models.tree import decoder_layers, with_decoder_layers

QUANTIZATIONS = ("fp8", "int4")
INT4_MAX = 7  # symmetric int4: values in [-8, 7], scale = max|w| / 7 per block
# int4 weights: one scale per group of this many inputs of an output (HF [rows, cols]), as
# llm-compressor's W4A16 recipes; an int4 checkpoint keeps its own group size.
INT4_DEFAULT_BLOCK = (1, 128)
FP8 = jnp.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn
SCALE_DTYPE = jnp.float32
DEFAULT_BLOCK = (128, 128)  # HF's [rows (out), cols (in)], as weight_block_size

# Which leaves are quantized, and how many of their leading axes each matmul contracts (after
# the expert axis of routed experts). Everything else stays in the model dtype.
ATTN_WEIGHTS = {"wq": 1, "wk": 1, "wv": 1, "wo": 2, "wq_a": 1, "wq_b": 1, "wkv_a": 1, "wkv_b": 1}
MLP_WEIGHTS = {"w_gate": 1, "w_up": 1, "w_down": 1}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class QuantizedWeight:
    """A weight as fp8 `data` [*lead, *K, *N] and float32 `scale` [*lead, ceil(K/bk),
    ceil(N/bn)] (K, N: the products of the contracted and output axes). int4 as a GPTQ / AWQ
    checkpoint stores it also has `zero` (int8 zero points minus 8, the scale's shape: the
    weight is (value - zero) * scale) and, with act order, `g_idx` (int32 [*lead, K]: the
    scale row of each contracted index, in place of k // bk)."""

    data: Any
    scale: Any
    lead: int = dataclasses.field(metadata=dict(static=True), default=0)
    k_dims: int = dataclasses.field(metadata=dict(static=True), default=1)
    block: tuple[int, int] = dataclasses.field(metadata=dict(static=True), default=(128, 128))
    # 8: `data` is float8_e4m3fn values; 4: int4 values in [-8, 7], stored + 8 two to a
    # uint8 byte (low nibble first) along the last contracted axis (models/int4_checkpoint.py)
    bits: int = dataclasses.field(metadata=dict(static=True), default=8)
    zero: Any = None
    g_idx: Any = None

    @property
    def packed_axis(self) -> int:
        return self.lead + self.k_dims - 1

    @property
    def shape(self) -> tuple[int, ...]:
        """The weight's shape (int4: the packed axis counted in values, not bytes)."""
        shape = list(self.data.shape)
        if self.bits == 4:
            shape[self.packed_axis] *= 2
        return tuple(shape)


def is_quantized(x: Any) -> bool:
    return isinstance(x, QuantizedWeight)


# vLLM's --quantization names for serving a checkpoint in its own format -> the quant_method
# its config must have; held here as quantization="int4" (compressed-tensors' float-quantized
# format: "fp8", configs/fp8_schemes.py).
VLLM_INT4_NAMES = {
    "gptq": "gptq",
    "gptq_marlin": "gptq",
    "awq": "awq",
    "awq_marlin": "awq",
    "compressed-tensors": "compressed-tensors",
}


def check_quantization(quantization: str | None) -> str | None:
    """`quantization` itself when it is None, one of QUANTIZATIONS or of VLLM_INT4_NAMES,
    else a ValueError."""
    if quantization is not None and quantization not in (*QUANTIZATIONS, *VLLM_INT4_NAMES):
        raise ValueError(
            f"quantization={quantization!r}: expected None or one of {list(QUANTIZATIONS)} "
            f"(or vLLM's name of a checkpoint's own format: {list(VLLM_INT4_NAMES)})"
        )
    return quantization


def matrix_dims(shape: tuple[int, ...], lead: int, k_dims: int) -> tuple[int, int]:
    """(K, N): the blocked matrix's sides."""
    return math.prod(shape[lead : lead + k_dims]), math.prod(shape[lead + k_dims :])


def scale_shape(shape: tuple[int, ...], lead: int, k_dims: int, block: tuple[int, int]):
    k, n = matrix_dims(shape, lead, k_dims)
    return (*shape[:lead], -(-k // block[0]), -(-n // block[1]))


def our_block(hf_block: tuple[int, int]) -> tuple[int, int]:
    """The (bk, bn) block of a weight whose HF Linear is blocked [bm (out), bn (in)]."""
    return hf_block[1], hf_block[0]


def _blocks(m: np.ndarray, block: tuple[int, int]) -> tuple[np.ndarray, tuple[int, int]]:
    """[*L, K, N] zero-padded and viewed as [*L, K/bk, bk, N/bn, bn]; and (K, N)."""
    *lead, k, n = m.shape
    pk, pn = -(-k // block[0]) * block[0], -(-n // block[1]) * block[1]
    padded = np.zeros((*lead, pk, pn), m.dtype)
    padded[..., :k, :n] = m
    return padded.reshape(*lead, pk // block[0], block[0], pn // block[1], block[1]), (k, n)


def quantize(
    w: np.ndarray,
    lead: int = 0,
    k_dims: int = 1,
    block: tuple[int, int] = (128, 128),
    bits: int = 8,
) -> QuantizedWeight:
    """Host-side: each block of `w` (any float dtype) as e4m3(w / s), s = max|w| / 448 in
    float32 (an all-zero block gets s = 1); bits=4: as round(w / s) in [-8, 7], s = max|w| /
    7 (round to nearest, packed: the last contracted axis must be even)."""
    shape = tuple(w.shape)
    k, n = matrix_dims(shape, lead, k_dims)
    m = np.asarray(w, np.float32).reshape(*shape[:lead], k, n)
    blocks, _ = _blocks(m, block)
    amax = np.abs(blocks).max(axis=(-3, -1))  # [*L, K/bk, N/bn]
    top = np.float32(FP8_MAX if bits == 8 else INT4_MAX)
    scale = np.where(amax > 0, amax / top, np.float32(1)).astype(np.float32)
    spread = _spread(scale, block, k, n)
    if bits == 8:
        data = np.clip(m / spread, -FP8_MAX, FP8_MAX).astype(FP8).reshape(shape)
        return QuantizedWeight(data, scale, lead, k_dims, block)
    values = np.clip(np.round(m / spread), -INT4_MAX - 1, INT4_MAX).astype(np.int8)
    return pack_int4(values.reshape(shape), scale, lead, k_dims, block)


def pack_int4(
    values: np.ndarray, scale: np.ndarray, lead: int, k_dims: int, block, zero=None, g_idx=None
):
    """int4 `values` (int8 in [-8, 7], the weight's shape), their scales (and zero points,
    group indices: QuantizedWeight's), held packed."""
    axis = lead + k_dims - 1
    if values.shape[axis] % 2:
        raise ValueError(
            f"int4 weight of shape {values.shape}: axis {axis} ({values.shape[axis]}) must be "
            "even (two values to a byte)"
        )
    return QuantizedWeight(pack_pairs(values, axis), scale, lead, k_dims, block, 4, zero, g_idx)


def unpack_int4(data: jax.Array, axis: int) -> jax.Array:
    """uint8 bytes -> int8 values in [-8, 7], twice as many along `axis` (jnp; in a jit)."""
    low = (data & 0xF).astype(jnp.int8) - 8
    high = (data >> 4).astype(jnp.int8) - 8
    both = jnp.stack([low, high], axis=axis + 1)
    shape = list(data.shape)
    shape[axis] *= 2
    return both.reshape(shape)


def _spread(scale, block: tuple[int, int], k: int, n: int, xp=np):
    """[*L, K/bk, N/bn] -> [*L, K, N]: each value over its block."""
    s = xp.repeat(scale, block[0], axis=-2)[..., :k, :]
    return xp.repeat(s, block[1], axis=-1)[..., :n]


def _gather(per_group, g_idx, block: tuple[int, int], n: int):
    """[*L, G, N/bn] -> [*L, K, N]: row g_idx[k] for each contracted index k."""
    rows = jnp.take_along_axis(per_group, g_idx[..., None].astype(jnp.int32), axis=-2)
    return jnp.repeat(rows, block[1], axis=-1)[..., :n]


def dequantize(w: QuantizedWeight, dtype) -> jax.Array:
    """(stored - zero) * scale per block, computed in float32 and cast to `dtype` (jnp; in a
    jit)."""
    shape = w.shape
    k, n = matrix_dims(shape, w.lead, w.k_dims)
    data = unpack_int4(w.data, w.packed_axis) if w.bits == 4 else w.data
    m = data.reshape(*shape[: w.lead], k, n).astype(jnp.float32)

    def spread(per_block):
        per_block = per_block.astype(jnp.float32)
        if w.g_idx is None:
            return _spread(per_block, w.block, k, n, jnp)
        return _gather(per_block, w.g_idx, w.block, n)

    if w.zero is not None:
        m = m - spread(w.zero)
    m = m * spread(w.scale)
    return m.astype(dtype).reshape(shape)


def dequantize_tree(tree, dtype):
    """`tree` with every QuantizedWeight turned into a `dtype` array (others unchanged)."""
    return jax.tree.map(
        lambda x: dequantize(x, dtype) if is_quantized(x) else x, tree, is_leaf=is_quantized
    )


def layout_of(group: str, name: str) -> tuple[int, int] | None:
    """(lead, k_dims) of params leaf `name` in a layer's `group` (attn / mlp / moe / shared),
    None when it is not quantized."""
    if group == "attn":
        return (0, ATTN_WEIGHTS[name]) if name in ATTN_WEIGHTS else None
    if group in ("mlp", "shared") and name in MLP_WEIGHTS:
        return 0, MLP_WEIGHTS[name]
    if group == "moe" and name in MLP_WEIGHTS:
        return 1, MLP_WEIGHTS[name]
    return None


def leaf_name(i: int, group: str, name: str) -> str:
    """'layers.3.moe.shared.w_up': how ModelConfig.quantization_skip names a leaf."""
    return f"layers.{i}.moe.shared.{name}" if group == "shared" else f"layers.{i}.{group}.{name}"


def quantized_leaves(layers: list[dict], skip: tuple[str, ...] = ()):
    """(layer index, group path, name, (lead, k_dims)) of every leaf to quantize, in order;
    `layers` is the params (or specs) tree's "layers" list."""
    for i, layer in enumerate(layers):
        for group in ("attn", "mlp", "moe"):
            sub = layer.get(group)
            if sub is None:
                continue
            nested = [(group, sub)] + ([("shared", sub["shared"])] if "shared" in sub else [])
            for g, d in nested:
                for name in d:
                    layout = layout_of(g, name)
                    if layout is not None and leaf_name(i, g, name) not in skip:
                        yield i, g, name, layout


def _container(layer: dict, group: str) -> dict:
    return layer["moe"]["shared"] if group == "shared" else layer[group]


def _copy_dicts(d: dict) -> dict:
    return {k: _copy_dicts(v) if isinstance(v, dict) else v for k, v in d.items()}


def map_quantized(tree: dict, fn, skip: tuple[str, ...] = ()) -> dict:
    """A copy of the params (or specs) `tree` with fn(leaf, lead, k_dims, name) in place of
    each leaf to quantize, the MTP module's layer's too (lists and dicts copied, other
    leaves shared)."""
    layers = [_copy_dicts(layer) for layer in decoder_layers(tree)]
    for i, group, name, (lead, k_dims) in quantized_leaves(layers, skip):
        d = _container(layers[i], group)
        d[name] = fn(d[name], lead, k_dims, leaf_name(i, group, name))
    return with_decoder_layers(tree, layers)


def held_block(cfg_block: tuple[int, int], quantization: str | None) -> tuple[int, int]:
    """The HF [rows, cols] block weights are held in for `quantization`: the config's (an fp8
    checkpoint's blocks, an int4 checkpoint's (1, group)), except that int4 of any other
    weights takes groups of 128 inputs (INT4_DEFAULT_BLOCK)."""
    if quantization == "int4" and cfg_block[0] != 1:
        return INT4_DEFAULT_BLOCK
    return cfg_block


def bits_of(quantization: str | None) -> int:
    return 4 if quantization == "int4" else 8


def quantize_params(
    params: dict, block: tuple[int, int], skip: tuple[str, ...] = (), bits: int = 8, cfg=None
) -> dict:
    """Host-side: `params` (float arrays) with every weight to quantize as a QuantizedWeight
    (fp8, or bits=4: int4; `cfg`, a ModelConfig, gives the bits in its place); leaves that
    already are one stay as they are. A config that holds int4 as GPTQ / AWQ checkpoints
    store it (quantization_zero_point, quantization_act_order) gets the weights it
    quantizes itself zero points of 0 and group indices in order, so every leaf has them."""
    zero_point = act_order = False
    if cfg is not None:
        bits = bits_of(cfg.quantization)
        zero_point, act_order = cfg.quantization_zero_point, cfg.quantization_act_order

    def one(x, lead, k_dims, name):
        del name
        if is_quantized(x):
            return x
        return with_gptq_fields(
            quantize(np.asarray(x), lead, k_dims, block, bits), zero_point, act_order
        )

    return map_quantized(params, one, skip)


def with_gptq_fields(w, zero_point: bool = True, act_order: bool = True):
    """An int4 QuantizedWeight (host or device arrays) laid out as a GPTQ / AWQ checkpoint is
    held, the same weight: zero points of 0 where it has none (`zero_point`), group indices
    in order (`act_order`); anything else unchanged."""
    if not is_quantized(w) or w.bits != 4:
        return w
    xp = np if isinstance(w.scale, np.ndarray) else jnp
    if zero_point and w.zero is None:
        w = dataclasses.replace(w, zero=xp.zeros(w.scale.shape, np.int8))
    if act_order and w.g_idx is None:
        k, _ = matrix_dims(w.shape, w.lead, w.k_dims)
        rows = groups_in_order((*w.shape[: w.lead], k), w.block[0])
        w = dataclasses.replace(w, g_idx=xp.asarray(rows))
    return w


def groups_in_order(shape: tuple[int, ...], group: int) -> np.ndarray:
    """int32 group indices of `shape` [*lead, K]: each contracted index k in its own
    position's group, k // group (a g_idx without act order)."""
    rows = np.arange(shape[-1], dtype=np.int32) // group
    return np.ascontiguousarray(np.broadcast_to(rows, shape))
