"""The int4 weight-only checkpoint formats the engine reads (models/int4_checkpoint.py),
from a config's `quantization_config`:

- compressed-tensors "pack-quantized" (quant_method "compressed-tensors"): int4 with a scale
  per group of inputs, symmetric (llm-compressor's W4A16 recipes, Kimi-K2-Thinking) or with a
  zero point per group (W4A16_ASYM, its AWQ recipe); GPTQ's actorder "weight" ("static")
  changes only how it was calibrated, not the format;
- GPTQ (quant_method "gptq": AutoGPTQ / GPTQModel, Qwen's *-GPTQ-Int4): a scale and a zero
  point per group, symmetric or not, with act order (`desc_act`: each input's group from a
  stored `g_idx`), zero points stored minus one (checkpoint_format "gptq") or as they are
  ("gptq_v2");
- AWQ (quant_method "awq", version "gemm": AutoAWQ / GPTQModel, the *-AWQ releases): a scale
  and a zero point per group, packed along the outputs in AWQ's order.

Anything else is refused, naming the field, before any weight is read.
"""

from __future__ import annotations

import dataclasses

_FIELD = "HF config quantization_config"
INT4_METHODS = ("compressed-tensors", "gptq", "awq")
PER_CHANNEL_GROUP = 128


@dataclasses.dataclass(frozen=True)
class Int4Scheme:
    """How a checkpoint stores its int4 Linears."""

    method: str  # one of INT4_METHODS
    group: int  # inputs per scale; 0: one per output (GPTQ group_size -1, ct's "channel")
    zero_point: bool = False  # zero points stored (gptq, awq): w = (q - z) * s, else (q - 8) * s
    act_order: bool = False  # gptq desc_act: input i's group is g_idx[i], not i // group
    zeros_minus_one: bool = False  # gptq checkpoint_format "gptq" (v1): stored words + 0x11111111

    @property
    def held_group(self) -> int:
        """Inputs per scale as the engine holds the weights: a per-channel checkpoint's scale
        (and zero point) repeated over groups of PER_CHANNEL_GROUP inputs."""
        return self.group or PER_CHANNEL_GROUP

    def groups(self, cols: int) -> int:
        """Scales an output row of `cols` inputs stores."""
        return -(-cols // self.group) if self.group else 1


def int4_scheme(qc: dict) -> Int4Scheme:
    """The scheme of an int4 `quantization_config` (quant_method one of INT4_METHODS)."""
    method = qc.get("quant_method")
    if method == "compressed-tensors":
        group, symmetric = _compressed_tensors_weights(qc)
        return Int4Scheme(method, group, zero_point=not symmetric)
    if method not in ("gptq", "awq"):
        raise ValueError(f"{_FIELD}.quant_method={method!r}: not an int4 format {INT4_METHODS}")
    if qc.get("bits") != 4:
        raise ValueError(f"{_FIELD}.bits={qc.get('bits')!r}: only 4")
    group = qc.get("group_size")
    if not isinstance(group, int) or isinstance(group, bool) or (group < 1 and group != -1):
        raise ValueError(
            f"{_FIELD}.group_size={group!r}: expected a positive int, or -1 (one scale per "
            "output channel)"
        )
    if method == "awq":
        if group == -1:
            raise ValueError(f"{_FIELD}.group_size=-1: AWQ checkpoints need groups")
        return _awq(qc, group)
    for key, value in (("lm_head", False), ("pack_dtype", "int32")):
        if qc.get(key, value) != value:
            raise ValueError(f"{_FIELD}.{key}={qc.get(key)!r}: only {value!r} is supported")
    if qc.get("dynamic"):
        raise ValueError(f"{_FIELD}.dynamic: per-module overrides are not supported")
    fmt = qc.get("checkpoint_format", "gptq")
    if fmt not in ("gptq", "gptq_v2"):
        raise ValueError(f"{_FIELD}.checkpoint_format={fmt!r}: only 'gptq' or 'gptq_v2'")
    for key in ("desc_act", "sym"):
        if not isinstance(qc.get(key, False), bool):
            raise ValueError(f"{_FIELD}.{key}={qc.get(key)!r}: expected true or false")
    return Int4Scheme(
        method,
        max(group, 0),
        zero_point=True,  # read whatever the checkpoint stores (symmetric: 8), as GPTQModel does
        # (one group: the order inputs were quantized in changes nothing that is stored)
        act_order=qc.get("desc_act", False) and group != -1,
        zeros_minus_one=fmt == "gptq",
    )


def _awq(qc: dict, group: int) -> Int4Scheme:
    version = qc.get("version", "gemm")
    if not isinstance(version, str) or version.lower() != "gemm":
        raise ValueError(
            f"{_FIELD}.version={version!r}: only 'gemm' (gemv, exllama and marlin layouts "
            "are not supported)"
        )
    if qc.get("zero_point", True) is not True:
        raise ValueError(f"{_FIELD}.zero_point={qc.get('zero_point')!r}: only true")
    return Int4Scheme("awq", group, zero_point=True)


def config_group(qc: dict) -> tuple[str, dict]:
    """(its field's name, the group) of a compressed-tensors `quantization_config`'s one
    config group (the engine reads no config with more)."""
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise ValueError(
            f"{_FIELD}.config_groups: expected one group (found "
            f"{len(groups) if isinstance(groups, dict) else groups!r})"
        )
    ((name, group),) = groups.items()
    at = f"{_FIELD}.config_groups.{name}"
    if not isinstance(group, dict):
        raise ValueError(f"{at}={group!r}: expected a JSON object")
    return at, group


def _compressed_tensors_weights(qc: dict) -> tuple[int, bool]:
    """(group size, symmetric) of a compressed-tensors `quantization_config` the engine
    reads."""
    if qc.get("format") != "pack-quantized":
        raise ValueError(f"{_FIELD}.format={qc.get('format')!r}: only 'pack-quantized' (int4)")
    at, group = config_group(qc)
    for key in ("input_activations", "output_activations"):
        if group.get(key) is not None:
            raise ValueError(f"{at}.{key}: must be null (weight-only quantization)")
    w = group.get("weights")
    if not isinstance(w, dict):
        raise ValueError(f"{at}.weights={w!r}: expected a JSON object")
    for key, value in (("num_bits", 4), ("type", "int")):
        if w.get(key) != value:
            raise ValueError(f"{at}.weights.{key}={w.get(key)!r}: only {value!r} is supported")
    if w.get("strategy") not in ("group", "channel"):
        raise ValueError(f"{at}.weights.strategy={w.get('strategy')!r}: only 'group' or 'channel'")
    symmetric = w.get("symmetric", True)
    if not isinstance(symmetric, bool):
        raise ValueError(f"{at}.weights.symmetric={symmetric!r}: expected true or false")
    for key in ("dynamic", "block_structure"):
        if w.get(key) not in (None, False):
            raise ValueError(f"{at}.weights.{key}={w.get(key)!r}: not supported")
    if w.get("actorder") not in (None, False, "weight", "static"):
        # "group" ("dynamic", or true) stored each input's group in weight_g_idx;
        # compressed-tensors itself dropped it (2026).
        raise ValueError(
            f"{at}.weights.actorder={w.get('actorder')!r}: only null, 'weight' or 'static' "
            "(group indices are not read)"
        )
    if w.get("strategy") == "channel":
        return 0, symmetric
    size = w.get("group_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"{at}.weights.group_size={size!r}: expected a positive int")
    return size, symmetric
