"""Long context: chunked 8k prefill against the unchunked reference, RoPE scaling at 100k
positions against float64 formulas, bounded attention memory, max_model_len checks."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.model_config import ModelConfig, RopeScaling
from configs.presets import get_preset
from engine import LLM, SamplingParams
from engine.paged_attention import build_metadata, paged_attention_gqa, paged_attention_mla
from models.orbax_io import save_params
from models.reference import greedy_generate
from models.rope import apply_rope, rope_dim, rope_frequencies, rope_layout
from models.specs import init_params

PROMPT_LEN = 8192
NEW_TOKENS = 4


def _long_model(kind: str) -> tuple[ModelConfig, dict]:
    """A tiny model with scaled RoPE whose answer depends on the far context.

    Random weights at the usual init scale attend almost uniformly and barely move the
    logits, so any chunking would pass. Sharper q/k, larger v/o and lm_head make the last
    tokens' logprobs depend on keys thousands of positions back (checked in the test).
    """
    if kind == "gqa":
        cfg = ModelConfig(
            name="long-test-gqa",
            model_type="llama",
            vocab_size=512,
            hidden_size=64,
            num_layers=2,
            num_heads=2,
            num_kv_heads=1,
            head_dim=32,
            intermediate_size=128,
            max_position_embeddings=16384,
            rope_scaling=RopeScaling(
                rope_type="llama3", factor=8.0, original_max_position_embeddings=1024
            ),
        )
    else:
        cfg = get_preset("tiny-deepseek-v3").replace(
            name="long-test-mla",
            num_heads=2,
            max_position_embeddings=16384,
            rope_scaling=RopeScaling(
                rope_type="yarn",
                factor=16.0,
                original_max_position_embeddings=1024,
                mscale=1.0,
                mscale_all_dim=1.0,
            ),
        )
    gains = {"wq": 3, "wk": 3, "wq_b": 3, "wkv_a": 3, "wv": 3, "wo": 3, "wkv_b": 3, "lm_head": 30}

    def scale(path, x):
        return x * gains.get(getattr(path[-1], "key", None), 1)

    return cfg, jax.tree_util.tree_map_with_path(scale, init_params(cfg, jax.random.key(0)))


@pytest.mark.parametrize("kind", ["gqa", "mla"])
def test_8k_prompt_in_chunks_matches_one_unchunked_reference_prefill(kind, tmp_path):
    cfg, params = _long_model(kind)
    rng = np.random.default_rng(1)
    prompt = rng.integers(3, cfg.vocab_size, PROMPT_LEN).tolist()
    # One prefill of all 8192 tokens (O(L^2) attention, ~0.5 GiB of scores with 2 heads).
    ref_tokens, ref_logprobs = greedy_generate(params, cfg, prompt, NEW_TOKENS)
    other = rng.integers(3, cfg.vocab_size, PROMPT_LEN // 2).tolist() + prompt[PROMPT_LEN // 2 :]
    _, other_logprobs = greedy_generate(params, cfg, other, NEW_TOKENS)
    # The far half of the prompt moves the answer: a wrong chunk boundary would show.
    assert np.max(np.abs(np.subtract(other_logprobs, ref_logprobs))) > 0.05

    save_params(tmp_path / "model", params, cfg)
    for budget in (256, 2048):
        llm = LLM(
            model=str(tmp_path / "model"),
            max_num_batched_tokens=budget,
            max_model_len=PROMPT_LEN + NEW_TOKENS,
            num_pages=(PROMPT_LEN + NEW_TOKENS) // 16 + 1,
            max_num_seqs=1,
        )
        (out,) = llm.generate([prompt], SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True))
        assert out.token_ids == ref_tokens, f"budget={budget}"
        np.testing.assert_allclose(out.logprobs, ref_logprobs, atol=2e-3, rtol=0)
        # Prefill ran in PROMPT_LEN / budget chunks, then one decode step per later token.
        assert llm.stats()["num_steps"] == PROMPT_LEN // budget + NEW_TOKENS - 1


# ---- RoPE scaling at long positions, against the formulas in float64 ---------------------


def _inv_freq_f64(theta: float, dim: int, rs: RopeScaling) -> tuple[np.ndarray, float]:
    """HF modeling_rope_utils (llama3, yarn with or without truncate) written out in float64."""
    inv = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if rs.rope_type == "llama3":
        orig = rs.original_max_position_embeddings
        out = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < orig / rs.high_freq_factor:
                out.append(f)
            elif wavelen > orig / rs.low_freq_factor:
                out.append(f / rs.factor)
            else:
                smooth = (orig / wavelen - rs.low_freq_factor) / (
                    rs.high_freq_factor - rs.low_freq_factor
                )
                out.append((1 - smooth) * f / rs.factor + smooth * f)
        return np.array(out), 1.0
    assert rs.rope_type == "yarn"

    def correction_dim(rotations):
        return (
            dim
            * math.log(rs.original_max_position_embeddings / (rotations * 2 * math.pi))
            / (2 * math.log(theta))
        )

    low, high = correction_dim(rs.beta_fast), correction_dim(rs.beta_slow)
    if rs.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = np.clip((np.arange(dim // 2) - low) / max(high - low, 1e-3), 0, 1)
    keep = 1 - ramp  # 1: extrapolate (high frequency), 0: interpolate by the factor
    inv = inv / rs.factor * (1 - keep) + inv * keep

    def mscale(s, m):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    if rs.mscale and rs.mscale_all_dim:
        factor = mscale(rs.factor, rs.mscale) / mscale(rs.factor, rs.mscale_all_dim)
    else:
        factor = mscale(rs.factor, 1.0)
    return inv, factor


@pytest.mark.parametrize(
    "preset", ["small-llama-long", "llama-3.1-8b", "small-mla-long", "deepseek-v3", "gpt-oss-20b"]
)
def test_rope_scaling_at_long_positions_matches_float64(preset):
    cfg = get_preset(preset)
    dim, layout = rope_dim(cfg), rope_layout(cfg)
    positions = np.array([0, 1023, 8191, 8192, 65_537, 99_999, 100_000, 131_071])
    x = np.random.default_rng(0).standard_normal((len(positions), 3, dim))
    inv64, factor64 = _inv_freq_f64(cfg.rope_theta, dim, cfg.rope_scaling)
    inv32, factor32 = rope_frequencies(cfg.rope_theta, dim, cfg.rope_scaling)
    np.testing.assert_allclose(inv32, inv64, rtol=1e-6)
    assert factor32 == pytest.approx(factor64, rel=1e-12)

    got = np.asarray(apply_rope(jnp.asarray(x, jnp.float32), positions, inv32, factor32, layout))

    angle = positions[:, None, None] * inv64  # [T, 1, Dr/2]
    if layout == "half":
        x1, x2 = x[..., : dim // 2], x[..., dim // 2 :]
    else:
        x1, x2 = x[..., 0::2], x[..., 1::2]

    def join(a, b):  # the layout's inverse: halves back to channels
        return (
            np.stack([a, b], -1).reshape(x.shape)
            if layout == "pairs"
            else np.concatenate([a, b], -1)
        )

    want = join(
        (x1 * np.cos(angle) - x2 * np.sin(angle)) * factor64,
        (x2 * np.cos(angle) + x1 * np.sin(angle)) * factor64,
    )
    # float32 carries the angle position * inv_freq to a relative 2^-24 per rounding, so the
    # allowed error grows with the angle (high frequencies at 100k are ~1e5 rad, whatever
    # the scaling); the scaled low frequencies have small angles and are held tightly.
    angle_err = 8 * 2.0**-24 * angle + 1e-6
    half_bound = (np.abs(x1) + np.abs(x2)) * angle_err * factor64 + 1e-6
    bound = join(half_bound, half_bound)
    assert np.all(np.abs(got - want) <= bound)
    # The lowest frequencies really are scaled at these positions (not the base rope).
    base = 1.0 / cfg.rope_theta ** (np.arange(0, dim, 2) / dim)
    assert inv64[-1] < base[-1] / 2


# ---- memory: attention temporaries do not grow with the context -------------------------


def _attention_temp_bytes(kind: str, num_tokens: int, max_pages: int) -> int:
    """XLA's temp buffer size for one attention call over a `max_pages`-page context."""
    f32, i32 = jnp.float32, jnp.int32
    num_seqs, pages, page_size = 4, 64, 16
    meta_args = (
        jax.ShapeDtypeStruct((num_seqs + 1,), i32),
        jax.ShapeDtypeStruct((num_tokens,), i32),
        jax.ShapeDtypeStruct((num_seqs,), i32),
        jax.ShapeDtypeStruct((num_seqs, max_pages), i32),
    )
    if kind == "gqa":

        def f(q, k, v, *meta):
            return paged_attention_gqa(q, k, v, build_metadata(*meta), 0.1, 8)

        args = (
            jax.ShapeDtypeStruct((num_tokens, 4, 32), f32),
            jax.ShapeDtypeStruct((pages, page_size, 2, 32), f32),
            jax.ShapeDtypeStruct((pages, page_size, 2, 32), f32),
        )
    else:

        def f(q_lat, q_pe, latent, *meta):
            return paged_attention_mla(q_lat, q_pe, latent, build_metadata(*meta), 0.1, 8)

        args = (
            jax.ShapeDtypeStruct((num_tokens, 4, 32), f32),
            jax.ShapeDtypeStruct((num_tokens, 4, 16), f32),
            jax.ShapeDtypeStruct((pages, page_size, 48), f32),
        )
    compiled = jax.jit(f).lower(*args, *meta_args).compile()
    return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("kind", ["gqa", "mla"])
def test_attention_memory_is_bounded_by_the_chunk_not_the_context(kind):
    chunk = 2048
    at_8k = _attention_temp_bytes(kind, chunk, 8192 // 16)
    at_128k = _attention_temp_bytes(kind, chunk, 131072 // 16)
    # 16x the context adds only the wider page table (S x Pmax int32 = 128 KiB here); a
    # [T, L] score matrix at 128k would be 4 GiB, a per-token block copy 64 MiB.
    assert at_128k - at_8k < 1 << 20
    assert at_128k < 16 << 20


# ---- max_model_len ----------------------------------------------------------------------


def test_max_model_len_from_config_or_flag_and_long_prompts_fail_before_any_work():
    llm = LLM(model="small-llama-long", num_pages=16)
    assert llm.stats()["max_model_len"] == 131072  # the config's max_position_embeddings
    llm = LLM(model="small-llama-long", num_pages=16, max_model_len=1024)
    with pytest.raises(ValueError, match="max_model_len=1024"):
        llm.generate([[5] * 100, [5] * 1025], SamplingParams(max_tokens=1))
    stats = llm.stats()
    assert stats["num_steps"] == stats["num_waiting"] == stats["num_running"] == 0
    with pytest.raises(ValueError, match="max_model_len=131073"):
        LLM(model="small-llama-long", num_pages=16, max_model_len=131073)
