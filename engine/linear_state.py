"""Linear-attention (gated DeltaNet) models in the engine: their recurrent state rows, and
the features refused for them.

Each running sequence holds one row of every DeltaNet layer's state arrays (Scheduler
state_slots, Sequence.state_slot) besides its KV pages, which only the full-attention
layers use. A sequence's state sums up every token before it and cannot be rebuilt from
pages: prefix caching keeps snapshots of it (engine/state_cache.py); whatever else starts
a sequence anywhere but at position 0 (a transferred prefix) or takes tokens back (drafts
that are rejected) is refused here; a later sample of a request computes its prompt itself
instead of sharing its first one's pages (Scheduler._donor).
"""

from __future__ import annotations

from configs.model_config import ModelConfig


def state_rows(cfg: ModelConfig, max_num_seqs: int, num_snapshots: int = 0) -> int:
    """Rows of each DeltaNet layer's state arrays: one per running sequence and row 0,
    the padding sequences' (held by none), then `num_snapshots` rows of prefix caching's
    state snapshots (engine/state_cache.py); 0 for a model without such layers."""
    return max_num_seqs + 1 + num_snapshots if cfg.linear_attention_layers else 0


def check_linear_engine(cfg: ModelConfig, speculative, transfer, lora: bool):
    """ValueError naming the first engine option set (LLM's speculative_config,
    kv_transfer_config, enable_lora) that a linear-attention model cannot use. (Weights
    held quantized are held so in its attention and MLP layers; the DeltaNet and KDA
    projections stay in the model dtype, an fp8 checkpoint's dequantized on load:
    models/quantization.quantized_leaves.)"""
    if not cfg.linear_attention_layers:
        return
    why = f"not supported for {cfg.model_type}'s linear-attention layers"
    for name, on in (
        ("speculative_config", speculative is not None),
        ("kv_transfer_config", transfer is not None),
        ("enable_lora", lora),
    ):
        if on:
            raise ValueError(f"{name}: {why} (a sequence's recurrent state is not in its pages)")
