"""The params (or specs, or shardings) tree's decoder layers, the MTP module's included.

A tree holds its decoder layers in "layers" and, when the model drafts with its MTP module
(engine/mtp.py), one more decoder layer at ["mtp"]["layer"]: index num_layers, as its
checkpoint names it. Code that treats every decoder layer alike (quantization, expert
placement) walks `decoder_layers` and rebuilds the tree with `with_decoder_layers`.
"""

from __future__ import annotations


def decoder_layers(tree: dict) -> list[dict]:
    """The tree's decoder layers in order, the MTP module's last when it has one."""
    return list(tree["layers"]) + ([tree["mtp"]["layer"]] if "mtp" in tree else [])


def with_decoder_layers(tree: dict, layers: list[dict]) -> dict:
    """`tree` with `layers` (decoder_layers' order) in place of its decoder layers."""
    out = {**tree, "layers": list(layers[: len(tree["layers"])])}
    if "mtp" in tree:
        out["mtp"] = {**tree["mtp"], "layer": layers[-1]}
    return out
