"""The fp8 (e4m3) weight checkpoint formats the engine reads (models/fp8_checkpoint.py),
from a config's `quantization_config`:

- quant_method "fp8" (DeepSeek-V3/R1, Qwen3-*-FP8, MiniMax-M2): a float32
  `<weight>_scale_inv` per [bm, bn] block (`weight_block_size`); DeepSeek-V4's release
  names it `<module>.scale` and stores it as ue8m0 (`scale_fmt`: a byte b meaning
  2^(b - 127)), and its experts as FP4 (`expert_dtype` "fp4": e2m1 values two a byte,
  int8 [out, in / 2], a ue8m0 `.scale` per 32 inputs; models/fp8_checkpoint.py), which
  the engine dequantizes on load (quantization="fp8" holds them in fp8 blocks again);
- compressed-tensors "float-quantized" (llm-compressor's FP8 / FP8_DYNAMIC / FP8_BLOCK
  recipes, the RedHatAI *-FP8-dynamic releases): a `<weight>_scale` per output channel
  ([out, 1], strategy "channel"), per tensor ([1], "tensor") or per block ("block", its
  `block_structure`).

The engine holds fp8 weights in blocks (models/quantization.py): a block checkpoint in its own
blocks; a per-channel one in blocks of one output row by 128 inputs, every block of a row
given the row's scale, and a per-tensor one in 128 x 128 blocks that all hold its scale. The
stored bytes are kept either way, and each weight reads back bitwise as stored * scale.
Activations are not quantized (dynamic activation schemes only: the weights dequantized are
the model the checkpoint describes, as transformers computes it); static activation scales
are refused, naming the field.
"""

from __future__ import annotations

import dataclasses

from configs.int4_schemes import PER_CHANNEL_GROUP, config_group

_FIELD = "HF config quantization_config"
# (rows, cols) of HF [out, in] the engine holds a per-channel / per-tensor checkpoint in
# (per channel: as an int4 one, configs/int4_schemes.py).
CHANNEL_BLOCK = (1, PER_CHANNEL_GROUP)
TENSOR_BLOCK = (128, 128)


@dataclasses.dataclass(frozen=True)
class Fp8Scheme:
    """How a checkpoint stores its fp8 Linears."""

    strategy: str  # "block", "channel" or "tensor"
    block: tuple[int, int]  # HF [rows, cols] of a stored scale ("block"); else the held blocks
    scale_suffix: str  # the scale tensor's name: weight name + this
    fp4_experts: bool = False  # expert_dtype "fp4" (DeepSeek-V4): int8-packed e2m1 experts

    def scale_name(self, name: str, has) -> str:
        """The scale tensor of weight `name`: `name + scale_suffix`, or where the checkpoint
        (`has(tensor name)`) holds only DeepSeek-V4's spelling, `<module>.scale`."""
        v4 = name.removesuffix(".weight") + ".scale"
        if name.endswith(".weight") and not has(name + self.scale_suffix) and has(v4):
            return v4
        return name + self.scale_suffix

    @property
    def held_block(self) -> tuple[int, int]:
        return {"channel": CHANNEL_BLOCK, "tensor": TENSOR_BLOCK}.get(self.strategy, self.block)

    def stored_scale_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The stored scale's shape for a weight of `shape` [..., out, in]."""
        *lead, rows, cols = shape
        if self.strategy == "channel":
            return (*lead, rows, 1)
        if self.strategy == "tensor":
            return (*lead, 1)
        return (*lead, -(-rows // self.block[0]), -(-cols // self.block[1]))


def is_float_quantized(qc) -> bool:
    """Whether `quantization_config` is compressed-tensors' fp8 format."""
    return (
        isinstance(qc, dict)
        and qc.get("quant_method") == "compressed-tensors"
        and qc.get("format") == "float-quantized"
    )


def _positive_pair(value, at: str) -> tuple[int, int]:
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in value)
    ):
        raise ValueError(f"{at}={value!r}: expected two positive ints [rows, cols]")
    return int(value[0]), int(value[1])


def compressed_tensors_fp8(qc: dict) -> Fp8Scheme:
    """The scheme of a compressed-tensors float-quantized `quantization_config`."""
    at, group = config_group(qc)
    if group.get("output_activations") is not None:
        raise ValueError(f"{at}.output_activations: must be null")
    act = group.get("input_activations")
    if act is not None and not (isinstance(act, dict) and act.get("dynamic") is True):
        # Static scales quantize activations as stored: not what a dequantized model computes.
        raise ValueError(
            f"{at}.input_activations: only null or dynamic (static activation scales are "
            "not supported)"
        )
    w = group.get("weights")
    if not isinstance(w, dict):
        raise ValueError(f"{at}.weights={w!r}: expected a JSON object")
    for key, value in (("num_bits", 8), ("type", "float"), ("symmetric", True)):
        if w.get(key, value) != value:
            raise ValueError(f"{at}.weights.{key}={w.get(key)!r}: only {value!r} is supported")
    if w.get("dynamic") not in (None, False):
        raise ValueError(f"{at}.weights.dynamic={w.get('dynamic')!r}: not supported")
    strategy = w.get("strategy")
    if strategy == "block":
        block = _positive_pair(w.get("block_structure"), f"{at}.weights.block_structure")
        return Fp8Scheme("block", block, "_scale")
    if strategy not in ("channel", "tensor"):
        raise ValueError(f"{at}.weights.strategy={strategy!r}: only 'channel', 'tensor' or 'block'")
    return Fp8Scheme(strategy, CHANNEL_BLOCK if strategy == "channel" else TENSOR_BLOCK, "_scale")


def deepseek_fp8(qc: dict, expert_dtype=None) -> Fp8Scheme:
    """The scheme of a quant_method "fp8" `quantization_config` (transformers'
    FineGrainedFP8Config; its defaults for the fields a checkpoint leaves out).
    `expert_dtype`: the config's top-level one (DeepSeek-V4's; V4.1 has it in `qc`)."""
    q = {"fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": (128, 128)}
    q = {k: qc.get(k, v) for k, v in q.items()}
    experts = qc.get("expert_dtype", expert_dtype or "fp8")
    for key, value, allowed in (
        ("scale_fmt", qc.get("scale_fmt", "float"), ("float", "ue8m0")),
        ("expert_dtype", experts, ("fp8", "fp4")),
    ):
        if value not in allowed:
            raise ValueError(f"{_FIELD}.{key}={value!r}: one of {list(allowed)}")
    # (MiniMax-M2's config spells it as torch's dtype, float8_e4m3fn: the same format;
    # transformers reads neither, the weights' own dtype says.)
    if q["fmt"] not in ("e4m3", "float8_e4m3fn"):
        raise ValueError(f"{_FIELD}.fmt={q['fmt']!r}: only 'e4m3' (float8_e4m3fn)")
    scheme = q["activation_scheme"]
    if not (isinstance(scheme, str) and scheme.lower() == "dynamic"):  # transformers lowercases
        # Static schemes quantize activations with stored scales: not what a dequantized
        # model computes.
        raise ValueError(
            f"{_FIELD}.activation_scheme={q['activation_scheme']!r}: only 'dynamic' is supported"
        )
    block = _positive_pair(q["weight_block_size"], f"{_FIELD}.weight_block_size")
    return Fp8Scheme("block", block, "_scale_inv", fp4_experts=experts == "fp4")
