"""Linear-attention (gated DeltaNet, KDA, Mamba-2) models in the engine: their recurrent
state rows, and the features refused for them.

Each running sequence holds one row of every linear layer's state arrays (Scheduler
state_slots, Sequence.state_slot) besides its KV pages, which only the full-attention
layers use. A sequence's state sums up every token before it and cannot be rebuilt from
pages. Prefix caching keeps snapshots of it at block boundaries (engine/state_cache.py).
Speculative decoding keeps `drafts` more rows per sequence: a step feeding drafts runs
that span row by row and leaves the state after each of its first `drafts` rows there
(Segments.drafting), so however many drafts are kept, the next step starts from the
state after them (a copy into the sequence's row, before it). KV transfer stores a
prompt's state with its rows (engine/kv_transfer.py). A later sample of a request computes
its prompt itself instead of sharing its first one's pages (Scheduler._donor).

Rows of each layer's state arrays: 0 (padding sequences'), 1 .. S (running sequences),
then the snapshots', then S x drafts.
"""

from __future__ import annotations

import jax.numpy as jnp

from configs.model_config import ModelConfig


def state_rows(cfg: ModelConfig, max_num_seqs: int, num_snapshots: int = 0, drafts: int = 0) -> int:
    """Rows of each linear layer's state arrays: one per running sequence and row 0, the
    padding sequences' (held by none), then `num_snapshots` rows of prefix caching's state
    snapshots (engine/state_cache.py) and `drafts` per sequence (speculative decoding); 0
    for a model without such layers."""
    if not cfg.linear_attention_layers:
        return 0
    return max_num_seqs * (1 + drafts) + 1 + num_snapshots


class StateRows:
    """The scheduler's side of the state rows: a free list of the sequences' rows
    1..num_slots (admission waits for one; 0: a model without linear layers, whose calls
    here do nothing), `snapshots` (a StateCache, or None) and `drafts` rows per sequence
    row (speculative decoding), after the snapshots'."""

    def __init__(self, num_slots: int, snapshots=None, drafts: int = 0):
        self.num_slots = num_slots
        self._free = list(range(num_slots, 0, -1))
        self.snapshots, self.drafts = snapshots, drafts
        self._first_draft = num_slots + 1 + (0 if snapshots is None else snapshots.num_rows)

    def can_admit(self) -> bool:
        return bool(self._free) or not self.num_slots

    def admit(self, seq) -> None:
        if self.num_slots:
            seq.state_slot = self._free.pop()

    def release(self, seq) -> None:
        """`seq`'s row back (a later holder starts it from zero: never read)."""
        if seq.state_slot:
            self._free.append(seq.state_slot)
        seq.state_slot = seq.state_from = 0

    def item_fields(self, seq, start: int, stop: int, num_drafts: int) -> dict:
        """A step item's ScheduledItem fields for positions start .. stop - 1 (the last
        `num_drafts` of them drafts): its row, the row copied there first (Sequence
        state_from, taken off it), the rows the step leaves states in (after each draft but
        the last; else prefix caching's snapshots)."""
        if not self.num_slots:
            return {}
        fields = {"state_slot": seq.state_slot, "state_from": seq.state_from}
        if num_drafts:
            base = self._first_draft + (seq.state_slot - 1) * self.drafts
            fields["state_snapshots"] = tuple((j + 1, base + j) for j in range(num_drafts))
        elif self.snapshots is not None:
            fields["state_snapshots"] = self.snapshots.boundary_rows(seq, start, stop)
        if self.snapshots is not None:
            self.snapshots.count_restore(seq.state_from)
        seq.state_from = 0
        return fields

    def kept(self, seq, item, num_kept: int) -> None:
        """A drafting step applied: `num_kept` of its fed tokens kept (the first, then the
        drafts accepted); short of all, the next step starts from the state after them."""
        if self.num_slots and num_kept <= item.num_drafts:
            seq.state_from = item.state_snapshots[num_kept - 1][1]

    def cancel(self, item, seq) -> None:
        """A step item that never ran: its snapshot rows back, its copy made again."""
        if self.snapshots is not None:
            self.snapshots.cancel(item, seq)
        seq.state_from = item.state_from


def check_model_engine(
    cfg: ModelConfig, transfer, kv_dtype, lora: bool, prefix: tuple
) -> ModelConfig:
    """`cfg` as the engine runs it, or ValueError naming the LLM option a model family
    cannot take yet, before any weight is read. `prefix`: (enable_prefix_caching,
    mamba_block_size, num_state_snapshots, page_size).

    (A linear-attention model's KV transfer stores its state rows too: engine/kv_transfer.py.
    LoRA adapts its attention and MLP projections, models/lora.py;
    weights held quantized are held so there too, the DeltaNet and KDA projections in the
    model dtype: models/quantization.py.)

    DeepSeek-V4 (models/deepseek_v4.py) runs with a float KV cache, no LoRA or KV
    transfer, and a page_size that each compression rate divides or is a multiple of; its
    per-token rows get a pool of their own (ModelConfig.v4_window_pool; prefix caching
    indexes its pages too, engine/prefix_cache.WindowCache)."""
    page_size = prefix[3]
    if cfg.model_type == "nemotron_h" and lora:  # (PEFT names its blocks, not our layers)
        raise ValueError("enable_lora: not supported for nemotron_h yet")
    if cfg.parallel_hybrid and lora:  # (PEFT names its layers, each two of ours)
        raise ValueError("enable_lora: not supported for falcon_h1 yet")
    if cfg.cross_attention_layers and lora:  # (PEFT numbers the cross-attention layers too)
        raise ValueError("enable_lora: not supported for Llama 3.2 Vision (mllama) yet")
    if cfg.attention_free and lora:  # (no attention or MLP projection to adapt)
        raise ValueError(f"enable_lora: not supported for {cfg.model_type} (Mamba's mixers) yet")
    if not cfg.is_dsv4:
        return cfg
    refused = {
        "kv_cache_dtype": kv_dtype is not None and jnp.dtype(kv_dtype).name,
        "enable_lora": lora,
        "kv_transfer_config": transfer is not None,
    }
    for option, value in refused.items():
        if value:
            raise ValueError(f"{option}: not supported for DeepSeek-V4 yet (got {value!r})")
    for ratio in (cfg.csa_ratio, cfg.hca_ratio):
        if page_size % ratio and ratio % page_size:
            raise ValueError(
                f"page_size={page_size}: DeepSeek-V4 needs it a divisor or a multiple of each "
                f"compression rate (csa {cfg.csa_ratio}, hca {cfg.hca_ratio})"
            )
    return cfg
