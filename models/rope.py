"""Rotary position embeddings: inverse frequencies per rope type, and their application.

Frequencies follow Hugging Face `modeling_rope_utils` (default, linear, llama3, yarn) and are
computed in float32 numpy, as HF computes them in float32 torch, so the angles agree within a
float32 step (numpy's and torch's pow differ in the last bit for a few exponents: 2 of gpt-oss-20b's
32 YaRN frequencies, by 1e-7 relative). They are static per config: computed at trace time and
baked into the jitted step.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from configs import hf_cohere as cohere
from configs.hf_moe import ERNIE_MOE
from configs.model_config import ModelConfig, RopeScaling

# Layouts of the rotary channels (see apply_rope).
LAYOUTS = ("half", "pairs", "pairs_to_half", "half_reversed")


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN magnitude correction 0.1 * mscale * ln(scale) + 1 (DeepSeek `yarn_get_mscale`)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def _base_inv_freq(theta: float, dim: int) -> np.ndarray:
    # HF: 1 / base ** (arange(0, dim, 2).float() / dim), all in float32.
    exponent = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    return np.float32(1.0) / np.power(np.float32(theta), exponent, dtype=np.float32)


def _llama3_inv_freq(inv_freq: np.ndarray, rs: RopeScaling) -> np.ndarray:
    # HF `_compute_llama3_parameters`: keep high frequencies, divide low ones by `factor`,
    # interpolate smoothly in between.
    old_len = rs.original_max_position_embeddings
    low_wavelen = old_len / rs.low_freq_factor
    high_wavelen = old_len / rs.high_freq_factor
    wavelen = np.float32(2 * math.pi) / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / np.float32(rs.factor), inv_freq)
    smooth = (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor)
    smoothed = (1 - smooth) * scaled / np.float32(rs.factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _yarn_inv_freq(theta: float, dim: int, rs: RopeScaling) -> tuple[np.ndarray, float]:
    # HF `_compute_yarn_parameters`.
    factor = rs.factor
    if rs.attention_factor is not None:
        attention_factor = float(rs.attention_factor)
    elif rs.mscale and rs.mscale_all_dim:
        attention_factor = yarn_get_mscale(factor, rs.mscale) / yarn_get_mscale(
            factor, rs.mscale_all_dim
        )
    else:
        attention_factor = yarn_get_mscale(factor)
    beta_fast = rs.beta_fast or 32.0
    beta_slow = rs.beta_slow or 1.0
    orig = rs.original_max_position_embeddings

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(orig / (num_rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rs.truncate:  # HF's default; gpt-oss keeps the fractional range (truncate=False)
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # HF: prevent a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = (1 - ramp).astype(np.float32)
    pos_freqs = np.power(
        np.float32(theta), np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    ).astype(np.float32)
    inv_extrapolation = np.float32(1.0) / pos_freqs
    inv_interpolation = np.float32(1.0) / (np.float32(factor) * pos_freqs)
    inv_freq = (
        inv_interpolation * (1 - extrapolation_factor) + inv_extrapolation * extrapolation_factor
    )
    return inv_freq.astype(np.float32), attention_factor


def _longrope_inv_freq(theta: float, dim: int, rs: RopeScaling) -> tuple[np.ndarray, float]:
    # HF `_compute_longrope_parameters`, its factors chosen once (RopeScaling.long_factors).
    ext = np.asarray(rs.long_factor if rs.long_factors else rs.short_factor, np.float32)
    if ext.shape != (dim // 2,):
        raise ValueError(f"longrope factors: {ext.shape[0]} for a rotary width of {dim}")
    exponent = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    inv_freq = np.float32(1.0) / (ext * np.power(np.float32(theta), exponent, dtype=np.float32))
    mscale = rs.long_mscale if rs.long_factors else rs.short_mscale
    if not mscale:
        orig = rs.original_max_position_embeddings
        default = 1.0 if rs.factor <= 1 else math.sqrt(1 + math.log(rs.factor) / math.log(orig))
        mscale = default if rs.attention_factor is None else rs.attention_factor
    return inv_freq.astype(np.float32), float(mscale)


def for_max_model_len(cfg: ModelConfig, max_model_len: int) -> ModelConfig:
    """`cfg` as an engine of `max_model_len` serves it: LongRoPE's long factors when that
    passes original_max_position_embeddings, its short ones otherwise (vLLM's choice, made
    once: transformers switches per sequence, recomputing the cache)."""
    rs = cfg.rope_scaling
    if rs.rope_type != "longrope":
        return cfg
    long = max_model_len > rs.original_max_position_embeddings
    return cfg.replace(rope_scaling=dataclasses.replace(rs, long_factors=long))


def rope_frequencies(theta: float, dim: int, rs: RopeScaling) -> tuple[np.ndarray, float]:
    """(inv_freq [dim // 2] float32, attention_factor) for rotary width `dim`.

    attention_factor multiplies cos and sin (HF `attention_scaling`); it is 1 except for yarn
    and longrope.
    """
    if rs.rope_type == "yarn":
        return _yarn_inv_freq(theta, dim, rs)
    if rs.rope_type == "longrope":
        return _longrope_inv_freq(theta, dim, rs)
    if rs.rope_type == "ntk_alpha":  # HF HunYuan's compute_ntk_alpha_rope_parameters
        theta = theta * rs.alpha ** (dim / (dim - 2))
    inv_freq = _base_inv_freq(theta, dim)
    if rs.rope_type == "linear":
        inv_freq = inv_freq / np.float32(rs.factor)
    elif rs.rope_type == "llama3":
        inv_freq = _llama3_inv_freq(inv_freq, rs)
    return inv_freq.astype(np.float32), 1.0


def gemma4_frequencies(cfg: ModelConfig, layer: int, dim: int) -> np.ndarray:
    """Gemma 4's inv_freq [dim // 2] for layer `layer`'s heads of width `dim`, rotated whole
    (layout "half"): a windowed layer's default RoPE at sliding_rope_theta; a full layer's
    proportional RoPE (transformers' _compute_proportional_rope_parameters): the first
    int(partial_rotary_factor * dim // 2) frequencies of base rope_theta over the whole
    width, zeros after them (those channel pairs stay as they are), divided by the factor."""
    if cfg.attention_window(layer) is not None or not cfg.rope_proportional:
        return _base_inv_freq(cfg.sliding_rope_theta or cfg.rope_theta, dim)
    angles = int(cfg.partial_rotary_factor * dim // 2)
    inv_freq = np.zeros(dim // 2, np.float32)
    inv_freq[:angles] = _base_inv_freq(cfg.rope_theta, dim)[:angles]
    return inv_freq / np.float32(cfg.rope_scaling.factor)


def rope_dim(cfg: ModelConfig) -> int:
    """Rotary width: the GQA head dim (its leading part under a partial_rotary_factor), or
    MLA's decoupled rope dim."""
    return cfg.rotary_dim


def rope_layout(cfg: ModelConfig) -> str:
    """Channel layout HF uses for this model (see apply_rope)."""
    pairs = ("ernie4_5", *ERNIE_MOE, "glm", "glm4", "helium", "llama4_text", *cohere.TYPES)
    pairs += ("gptj", "codegen")
    if cfg.model_type == "nanochat":  # (its rotate_half flips both signs)
        return "half_reversed"
    if cfg.model_type in pairs:
        # ERNIE 4.5, GLM-4, Cohere, GPT-J and CodeGen rotate interleaved pairs in place,
        # Llama 4 as complex pairs
        return "pairs"
    if not cfg.is_mla or not cfg.rope_interleave:
        return "half"
    # DeepSeek-V2 (HF 5.24) rotates complex pairs in place; V3 de-interleaves into halves.
    return "pairs" if cfg.model_type == "deepseek_v2" else "pairs_to_half"


def apply_rope(
    x: jax.Array,  # [T, ..., Dr]
    positions: jax.Array,  # [T] int
    inv_freq: np.ndarray,  # [Dr // 2]
    attention_factor: float = 1.0,
    layout: str = "half",
) -> jax.Array:  # [T, ..., Dr]
    """Rotate x by angle position * inv_freq, computed in float32.

    layout "half": channel i pairs with i + Dr/2 (HF rotate_half: Llama, Qwen, Mixtral).
    layout "pairs": channels (2i, 2i+1) are a complex number rotated in place (DeepSeek-V2's
      view_as_complex path).
    layout "pairs_to_half": pairs (2i, 2i+1) rotated, output written as [all even | all odd]
      (HF DeepSeek-V3 apply_rotary_pos_emb_interleave).
    layout "half_reversed": "half" by the opposite angle (NanoChat's rotate_half, cat(x2, -x1)).
    The first three give the same q.k dot products for the same pair assignment; only what is
    cached differs, so q and k must use the same layout.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: expected one of {LAYOUTS}")
    freqs = positions.astype(jnp.float32)[:, None] * jnp.asarray(inv_freq)[None, :]  # [T, Dr/2]
    cos = jnp.cos(freqs) * attention_factor
    sin = jnp.sin(freqs) * attention_factor
    if layout == "half_reversed":
        sin, layout = -sin, "half"
    extra = x.ndim - 2
    cos = cos.reshape(cos.shape[:1] + (1,) * extra + cos.shape[1:])
    sin = sin.reshape(sin.shape[:1] + (1,) * extra + sin.shape[1:])
    xf = x.astype(jnp.float32)
    if layout == "half":
        half = x.shape[-1] // 2
        x1, x2 = xf[..., :half], xf[..., half:]
    else:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
    r1 = x1 * cos - x2 * sin
    r2 = x2 * cos + x1 * sin
    if layout == "pairs":
        out = jnp.stack([r1, r2], axis=-1).reshape(x.shape)
    else:
        out = jnp.concatenate([r1, r2], axis=-1)
    return out.astype(x.dtype)
