"""A released model's preset made from its tiny one: the release's shapes on the tiny
preset's architecture (configs/presets_alibi.py, configs/presets_moe_kin.py)."""

from __future__ import annotations

from configs.model_config import ModelConfig


def at_release_shapes(
    cfg: ModelConfig, name: str, vocab: int, d: int, layers: int, heads: int, **changes
) -> ModelConfig:
    """`cfg` named `name` at a release's shapes: `vocab` tokens, `layers` layers `d` wide,
    `heads` heads of d / heads, each its own KV head, 4 x d wide MLPs, no RoPE on any layer
    where `cfg` has none, in bfloat16; then `changes`."""
    nope = set(cfg.nope_layers) == set(range(cfg.num_layers))
    return cfg.replace(
        name=name,
        vocab_size=vocab,
        hidden_size=d,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=d // heads,
        intermediate_size=4 * d,
        nope_layers=tuple(range(layers)) if nope else cfg.nope_layers,
        dtype="bfloat16",
        **changes,
    )
