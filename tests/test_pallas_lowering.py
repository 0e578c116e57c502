"""Every kernel's GPU path lowered for an H200 on CPU: the whole Pallas-to-Triton lowering
(block and dot shapes, gathers, masks, dtypes) runs; only Triton's PTX compile needs a GPU."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import pytest

from pallas_kernels import (
    GQA_CONFIG,
    MLA_HOPPER_CONFIG,
    mla_paged_attention,
    ragged_paged_attention,
    write_kv,
)
from pallas_kernels.gpu_lowering import lower_for_gpu

S = jax.ShapeDtypeStruct
I32 = jnp.int32
FP8 = jnp.float8_e4m3fn
FAST_GQA = dataclasses.replace(GQA_CONFIG, fast_softmax=True)
FAST_MLA = dataclasses.replace(MLA_HOPPER_CONFIG, fast_softmax=True)


def _metadata(tokens: int, batch: int, max_pages: int) -> tuple:
    return (S((batch + 1,), I32), S((tokens,), I32), S((batch,), I32), S((batch, max_pages), I32))


def _mla_with_scales(**config):
    """The MLA kernel over fp8 pages: (q_lat, q_pe, latent, *metadata, latent_scales)."""

    def kernel(q_lat, q_pe, latent, *meta_and_scales):
        return mla_paged_attention(
            q_lat,
            q_pe,
            latent,
            *meta_and_scales[:4],
            scale=0.1,
            latent_scales=meta_and_scales[4],
            **config,
        )

    return kernel


@pytest.mark.parametrize(
    "kernel, args",
    [
        pytest.param(
            functools.partial(ragged_paged_attention, scale=0.1),
            (
                S((64, 32, 128), jnp.bfloat16),
                S((4096, 16, 8, 128), jnp.bfloat16),
                S((4096, 16, 8, 128), jnp.bfloat16),
                *_metadata(64, 64, 512),
            ),
            id="gqa_llama8b_bf16",
        ),
        pytest.param(
            functools.partial(ragged_paged_attention, scale=0.1),
            (
                S((40, 6, 40), jnp.float32),
                S((64, 8, 2, 40), jnp.float32),
                S((64, 8, 2, 40), jnp.float32),
                *_metadata(40, 8, 16),
            ),
            id="gqa_d40_g3_f32",
        ),
        pytest.param(
            functools.partial(mla_paged_attention, scale=0.1),
            (
                S((64, 128, 512), jnp.bfloat16),
                S((64, 128, 64), jnp.bfloat16),
                S((2048, 64, 576), jnp.bfloat16),
                *_metadata(64, 64, 128),
            ),
            id="mla_deepseek_v3_bf16",
        ),
        pytest.param(
            lambda q, k, v, *meta_and_scales: ragged_paged_attention(
                q,
                k,
                v,
                *meta_and_scales[:4],
                scale=0.1,
                k_scales=meta_and_scales[4],
                v_scales=meta_and_scales[5],
            ),
            (
                S((64, 32, 128), jnp.bfloat16),
                S((4096, 16, 8, 128), jnp.uint8),  # e4m3 bits, as the engine keeps them
                S((4096, 16, 8, 128), jnp.uint8),
                *_metadata(64, 64, 512),
                S((4096, 16, 8), jnp.float32),
                S((4096, 16, 8), jnp.float32),
            ),
            id="gqa_llama8b_fp8_bits_pages",
        ),
        pytest.param(
            _mla_with_scales(),
            (
                S((64, 128, 512), jnp.bfloat16),
                S((64, 128, 64), jnp.bfloat16),
                S((2048, 64, 576), FP8),
                *_metadata(64, 64, 128),
                S((2048, 64), jnp.float32),
            ),
            id="mla_deepseek_v3_fp8_pages",
        ),
        pytest.param(
            functools.partial(ragged_paged_attention, scale=0.1, config=FAST_GQA),
            (
                S((2048, 32, 128), jnp.bfloat16),
                S((2048, 16, 8, 128), jnp.bfloat16),
                S((2048, 16, 8, 128), jnp.bfloat16),
                *_metadata(2048, 1, 2048),
            ),
            id="gqa_llama8b_prefill_chunk_fast_softmax",
        ),
        pytest.param(  # Mistral v0.1: a 4096-key window, fp8 pages, fast_softmax asked
            lambda q, k, v, *meta_and_scales: ragged_paged_attention(
                q,
                k,
                v,
                *meta_and_scales[:4],
                scale=0.1,
                window=4096,
                k_scales=meta_and_scales[4],
                v_scales=meta_and_scales[5],
                config=FAST_GQA,
            ),
            (
                S((64, 32, 128), jnp.bfloat16),
                S((4096, 16, 8, 128), jnp.uint8),
                S((4096, 16, 8, 128), jnp.uint8),
                *_metadata(64, 64, 512),
                S((4096, 16, 8), jnp.float32),
                S((4096, 16, 8), jnp.float32),
            ),
            id="gqa_mistral_window_fp8_fast_softmax",
        ),
        pytest.param(  # BLOOM-7B1's layer: ALiBi slopes over 32 heads, fast_softmax asked
            lambda q, k, v, *meta_and_slopes: ragged_paged_attention(
                q,
                k,
                v,
                *meta_and_slopes[:4],
                scale=128**-0.5,
                alibi=meta_and_slopes[4],
                config=FAST_GQA,
            ),
            (
                S((64, 32, 128), jnp.bfloat16),
                S((4096, 16, 32, 128), jnp.bfloat16),
                S((4096, 16, 32, 128), jnp.bfloat16),
                *_metadata(64, 64, 128),
                S((32,), jnp.float32),
            ),
            id="gqa_bloom7b1_alibi_fast_softmax",
        ),
        pytest.param(
            _mla_with_scales(config=FAST_MLA),
            (
                S((64, 128, 512), jnp.bfloat16),
                S((64, 128, 64), jnp.bfloat16),
                S((2048, 64, 576), jnp.uint8),
                *_metadata(64, 64, 128),
                S((2048, 64), jnp.float32),
            ),
            id="mla_deepseek_v3_fp8_bits_fast_softmax",
        ),
        pytest.param(
            write_kv,
            (S((4096, 16, 8, 128), jnp.bfloat16), S((64, 8, 128), jnp.bfloat16), S((64,), I32)),
            id="write_gqa_bf16",
        ),
        pytest.param(
            write_kv,
            (S((2048, 64, 576), jnp.uint8), S((64, 576), jnp.uint8), S((64,), I32)),
            id="write_mla_fp8_bits",
        ),
        pytest.param(
            write_kv,
            (S((2048, 64), jnp.float32), S((64,), jnp.float32), S((64,), I32)),
            id="write_mla_fp8_scales",
        ),
        pytest.param(
            write_kv,
            (S((2048, 64, 576), jnp.bfloat16), S((64, 576), jnp.float32), S((64,), I32)),
            id="write_mla_bf16",
        ),
    ],
)
def test_kernels_lower_to_triton_for_hopper(kernel, args):
    """The full Pallas-to-Triton lowering for an H200 runs on CPU (no GPU compile)."""
    text = lower_for_gpu(kernel, *args)
    assert "__gpu$xla.gpu.triton" in text


def test_soft_capped_scores_lower_to_a_tanh():
    """Gemma 2 9B's layer (256-wide heads, a 4096-key window, scores capped at 50) lowers,
    the cap as Triton tanh ops (none without it)."""
    args = (
        S((64, 16, 256), jnp.bfloat16),
        S((2048, 16, 8, 256), jnp.bfloat16),
        S((2048, 16, 8, 256), jnp.bfloat16),
        *_metadata(64, 64, 512),
    )
    texts = [
        lower_for_gpu(
            functools.partial(ragged_paged_attention, scale=256**-0.5, window=4096, softcap=cap),
            *args,
        )
        for cap in (50.0, 0.0)
    ]
    assert all("__gpu$xla.gpu.triton" in text for text in texts)
    assert "tanh" in texts[0] and "tanh" not in texts[1]
