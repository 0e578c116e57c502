"""The compressed-tensors quantization configs the engine reads (models/int4_checkpoint.py):
weight-only int4 in the pack-quantized format, symmetric, one scale per group of inputs, as
llm-compressor's W4A16 recipes and Kimi-K2-Thinking write them. Anything else is refused,
naming the field, before any weight is read."""

from __future__ import annotations

_FIELD = "HF config quantization_config"


def int4_group_size(qc: dict) -> int:
    """The group size of a compressed-tensors `quantization_config` the engine reads."""
    if qc.get("format") != "pack-quantized":
        raise ValueError(f"{_FIELD}.format={qc.get('format')!r}: only 'pack-quantized' (int4)")
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
    for key in ("input_activations", "output_activations"):
        if group.get(key) is not None:
            raise ValueError(f"{at}.{key}: must be null (weight-only quantization)")
    w = group.get("weights")
    if not isinstance(w, dict):
        raise ValueError(f"{at}.weights={w!r}: expected a JSON object")
    want = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group"}
    for key, value in want.items():
        if w.get(key) != value:
            raise ValueError(f"{at}.weights.{key}={w.get(key)!r}: only {value!r} is supported")
    for key in ("dynamic", "actorder", "block_structure"):
        if w.get(key) not in (None, False):
            raise ValueError(f"{at}.weights.{key}={w.get(key)!r}: not supported")
    size = w.get("group_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"{at}.weights.group_size={size!r}: expected a positive int")
    return size
