"""The one jitted device step: write KV, attend over pages, MoE/MLP, sample.

`step(params, kv, batch)` is a pure function: everything it reads arrives as an argument,
the KV pages are donated and returned, and the static part (model config, attention
implementation, KV block size) is frozen and hashable so each shape bucket compiles once.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from configs.model_config import ModelConfig
from engine import paged_attention as pa
from engine.attention_ops import get_attention_ops
from engine.sampler import sample
from models.attention import mla_absorb_q, mla_latent_to_v
from models.transformer import final_logits, forward_hidden


class StepBatch(NamedTuple):
    """One step's ragged batch, padded to a bucket (T tokens, S sequences, P pages)."""

    token_ids: jax.Array  # [T] int32
    positions: jax.Array  # [T] int32, absolute position of each token
    slot_mapping: jax.Array  # [T] int32, page * page_size + offset; -1 = padding
    cu_q_lens: jax.Array  # [S+1] int32, token span of each sequence
    kv_lens: jax.Array  # [S] int32, KV length after this step's tokens; 0 = padding
    page_table: jax.Array  # [S, P] int32
    sample_index: jax.Array  # [S] int32, token row whose logits are sampled
    temperature: jax.Array  # [S] float32
    top_p: jax.Array  # [S] float32
    top_k: jax.Array  # [S] int32, 0 = off
    seed: jax.Array  # [S] uint32
    sample_step: jax.Array  # [S] int32, tokens the request generated before this step


class StepOutput(NamedTuple):
    tokens: jax.Array  # [S] int32
    logprobs: jax.Array  # [S] float32


def step_impl(
    params: dict,
    kv: list,
    batch: StepBatch,
    *,
    cfg: ModelConfig,
    kv_block_pages: int,
    attention_impl: str = "xla",
) -> tuple[list, StepOutput]:
    """Run one engine step over the paged cache; returns the new cache and sampled tokens."""
    meta = pa.build_metadata(
        batch.cu_q_lens,
        batch.positions,
        batch.kv_lens,
        batch.page_table,
        batch.token_ids.shape[0],
    )
    slots = batch.slot_mapping
    ops = get_attention_ops(attention_impl)

    def attend_gqa(i, p_attn, kv_i, x):
        k_pages, v_pages = kv_i
        k_pages = ops.write_kv(k_pages, x.k, slots)
        v_pages = ops.write_kv(v_pages, x.v, slots)
        o = ops.gqa(x.q, k_pages, v_pages, meta, x.scale, kv_block_pages)
        return o, (k_pages, v_pages)

    def attend_mla(i, p_attn, kv_i, x):
        (latent_pages,) = kv_i
        row = jnp.concatenate([x.c_kv, x.k_pe], axis=-1).astype(latent_pages.dtype)
        latent_pages = ops.write_kv(latent_pages, row, slots)
        # Absorbed decode (DeepSeek-V2 §2.1.2): W_UK folds into the query, so attention
        # runs against the cached latent directly and W_UV is applied afterwards.
        q_lat = mla_absorb_q(p_attn, x.q_nope, cfg)
        o_lat = ops.mla(q_lat, x.q_pe, latent_pages, meta, x.scale, kv_block_pages)
        return mla_latent_to_v(p_attn, o_lat, cfg), (latent_pages,)

    attend = attend_mla if cfg.is_mla else attend_gqa
    hidden, kv = forward_hidden(params, cfg, batch.token_ids, batch.positions, kv, attend)
    logits = final_logits(params, cfg, hidden[batch.sample_index])  # [S, V]
    tokens, logprobs = sample(
        logits, batch.temperature, batch.top_k, batch.top_p, batch.seed, batch.sample_step
    )
    return kv, StepOutput(tokens, logprobs)


# The public jitted step: static config, KV donated so the pages are updated in place.
step = jax.jit(
    step_impl, static_argnames=("cfg", "kv_block_pages", "attention_impl"), donate_argnames=("kv",)
)


@functools.cache
def make_step(cfg: ModelConfig, kv_block_pages: int, attention_impl: str = "xla"):
    """The jitted step bound to one model config.

    Cached per (cfg, kv_block_pages): engines serving the same model in one process share
    the compiled buckets, and `_cache_size()` of the result counts this model's compilations.
    """
    return jax.jit(
        functools.partial(
            step_impl, cfg=cfg, kv_block_pages=kv_block_pages, attention_impl=attention_impl
        ),
        donate_argnames=("kv",),
    )


def init_kv_pages(cfg: ModelConfig, num_pages: int, page_size: int, dtype=None) -> list:
    """Zeroed paged cache: per layer (K, V) pages for GQA, (latent,) pages for MLA."""
    dtype = jnp.dtype(dtype or cfg.dtype)
    if cfg.is_mla:
        width = cfg.kv_lora_rank + cfg.qk_rope_head_dim
        return [(jnp.zeros((num_pages, page_size, width), dtype),) for _ in range(cfg.num_layers)]
    shape = (num_pages, page_size, cfg.num_kv_heads, cfg.head_dim)
    return [(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(cfg.num_layers)]
