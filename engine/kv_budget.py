"""Sizing the KV page pools: the memory budget, the windowed layers' pool of a hybrid
model, and the check that an explicit pool fits the device (LLM's constructor uses these)."""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp

from configs.model_config import ModelConfig
from engine import kv_quant, linear_state, penalties
from engine.kv_pages import pages_for_budget, window_pool_pages
from long_context.capacity import kv_shard_fraction, state_shard_fraction
from models import deepseek_v4
from sharding.mesh import MeshConfig

# KV memory when num_pages is not given: a fraction of the accelerator's free memory, or a
# fixed budget on CPU (host RAM is shared with everything else).
CPU_KV_BUDGET = 512 << 20
ACCEL_KV_FRACTION = 0.8


def default_backend_kv_budget() -> int:
    """Bytes the KV pools may take on the default device (measured when called: after the
    weights are loaded)."""
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return CPU_KV_BUDGET
    mem = dev.memory_stats() or {}
    free = mem.get("bytes_limit", 0) - mem.get("bytes_in_use", 0)
    return int(free * ACCEL_KV_FRACTION) if free > 0 else CPU_KV_BUDGET


def kv_pool_bytes(
    cfg: ModelConfig, num_pages: int, window_num_pages: int | None, page_size: int, kv_dtype
) -> int:
    """Bytes of the KV pool: `num_pages` for every layer, or for a hybrid model's
    full-attention layers with its windowed layers in `window_num_pages` of their own."""
    if cfg.is_dsv4:
        item = jnp.dtype(cfg.dtype if kv_dtype is None else kv_dtype).itemsize
        return deepseek_v4.pool_bytes(cfg, num_pages, window_num_pages, page_size, item)
    # (Each pool's own layers: Gemma 4's windowed and global layers differ in width.)
    windowed = () if window_num_pages is None else cfg.windowed_layers
    rest = [i for i in range(cfg.num_kv_layers) if i not in windowed]
    full = num_pages * kv_quant.bytes_per_token(cfg, kv_dtype, rest)
    window = (window_num_pages or 0) * kv_quant.bytes_per_token(cfg, kv_dtype, windowed)
    return page_size * (full + window)


def check_window_ratio(cfg: ModelConfig, ratio) -> float | None:
    """`swa_full_tokens_ratio` (SGLang's): None, or a number in (0, 1] for a hybrid model
    (ModelConfig.hybrid_window); ValueError naming it otherwise."""
    if ratio is None:
        return None
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1:
        raise ValueError(f"swa_full_tokens_ratio={ratio!r}: must be a number in (0, 1]")
    if cfg.hybrid_window is None:
        raise ValueError(
            f"swa_full_tokens_ratio={ratio}: only for a model whose sliding-window layers "
            f"keep a pool of their own ({cfg.model_type} has none)"
        )
    return float(ratio)


def window_pages_for(
    cfg: ModelConfig,
    page_size: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_pages: int | None,
    ratio: float | None = None,
) -> int | None:
    """The windowed layers' pool of a hybrid model (None for any other model):
    kv_pages.window_pool_pages, or `ratio` (check_window_ratio) of a given `num_pages` when
    that is more, never more pages than the full-attention pool's `num_pages`."""
    if cfg.hybrid_window is None:
        return None
    pages = window_pool_pages(cfg.hybrid_window, page_size, max_num_seqs, max_num_batched_tokens)
    if num_pages is None:
        return pages
    return min(max(pages, int(ratio * num_pages) if ratio else 0), num_pages)


def pools_from_budget(
    cfg: ModelConfig,
    budget: int,
    page_size: int,
    kv_dtype,
    max_num_seqs: int,
    pages_per_seq: int,
    window_num_pages: int | None,
    state_rows: int | None = None,
    ratio: float | None = None,
) -> tuple[int, int | None]:
    """(num_pages, window_num_pages) from `budget` bytes: less the penalty state a penalized
    request makes on first use (a slot per running sequence over the vocabulary, so that it
    still fits beside the pools), a linear-attention model's recurrent states
    (engine/linear_state.py: `state_rows` of them, by default one per sequence) and a hybrid
    model's windowed pool (`window_num_pages`, or `ratio` of the full-attention pool's
    pages when that is more: both pools from the budget), whole pages of the rest
    for the (full-attention) pool, never more than max_num_seqs full-length sequences use."""
    budget -= penalties.state_bytes(max_num_seqs, cfg.vocab_size)
    if state_rows is None:
        state_rows = linear_state.state_rows(cfg, max_num_seqs)
    budget -= cfg.linear_state_bytes() * state_rows
    if window_num_pages is not None and ratio is not None:
        main, window = (kv_pool_bytes(cfg, *n, page_size, kv_dtype) for n in ((1, 0), (0, 1)))
        n = min(int(budget // (main + ratio * window)), max_num_seqs * pages_per_seq)
        window_num_pages = max(window_num_pages, int(ratio * n))
    if window_num_pages is not None:
        window_num_pages = min(window_num_pages, max_num_seqs * pages_per_seq)
        budget -= kv_pool_bytes(cfg, 0, window_num_pages, page_size, kv_dtype)
    # One page of the main pool (without the windowed pool's share), per token rounded up
    # (DeepSeek-V4's entry pages hold less than a byte a token for some widths).
    if cfg.attention_free:  # (its pages hold nothing: the states are all it keeps)
        if budget < 0:
            raise ValueError(
                f"max_num_seqs={max_num_seqs}: its {state_rows} recurrent states "
                f"({cfg.linear_state_bytes()} bytes each) need {-budget} bytes more than the "
                "memory budget holds"
            )
        return max_num_seqs * pages_per_seq, None
    page = kv_pool_bytes(cfg, 1, None if window_num_pages is None else 0, page_size, kv_dtype)
    per_token = -(-page // page_size)
    num_pages = min(
        pages_for_budget(budget, per_token, page_size),
        max_num_seqs * pages_per_seq,
    )
    if window_num_pages is not None:
        window_num_pages = min(window_num_pages, num_pages)
    return num_pages, window_num_pages


def check_kv_fits(
    cfg: ModelConfig,
    num_pages: int,
    page_size: int,
    kv_dtype,
    mesh_config: MeshConfig | None,
    window_num_pages: int | None = None,
    state_rows: int = 0,
) -> None:
    """ValueError naming num_pages if its KV pool (and a linear-attention model's
    `state_rows` recurrent states) cannot fit, before anything is allocated.

    Each device holds the whole pool but for GQA KV heads split over tp (sharding/rules.py:
    pages are replicated over dp and ep; the MLA latent is never split): on a GPU that share
    is held against one device's memory; on CPU every device's copy is host RAM."""
    tp = mesh_config.tp if mesh_config else 1
    devices = mesh_config.dp * mesh_config.tp * mesh_config.ep if mesh_config else 1
    pool = kv_pool_bytes(cfg, num_pages, window_num_pages, page_size, kv_dtype)
    per_device = math.ceil(pool * kv_shard_fraction(cfg, tp))
    per_device += math.ceil(state_rows * cfg.linear_state_bytes() * state_shard_fraction(cfg, tp))
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        need = per_device * devices
        have, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "host RAM"
    else:
        need, have = per_device, (dev.memory_stats() or {}).get("bytes_limit")
        where = f"one {dev.platform} device's memory"
        if not have:
            return
    if need > have:
        raise ValueError(
            f"num_pages={num_pages}: the KV pool ({page_size}-token pages) needs "
            f"{need / 2**30:.1f} GiB of {where}, which has {have / 2**30:.1f} GiB"
        )
