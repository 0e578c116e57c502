"""RoPE settings of an HF config (split from configs/hf_config.py): the rope dict in either
spelling, the rotated fraction of a head, Mistral 4's and Llama 4's query temperature. `f`
is hf_config._Fields (its get / required)."""

from __future__ import annotations

from typing import Any

from configs.hf_qwen3_next import LINEAR_MODEL_TYPES
from configs.model_config import RopeScaling

# Hunyuan's dense and MoE models: their checkpoints' "dynamic" rope with an alpha (below).
HUNYUAN_TYPES = ("hunyuan_v1_dense", "hunyuan_v1_moe")

# Families whose RoPE may be Phi-3's LongRoPE (transformers' phi3 and phimoe).
LONGROPE_TYPES = ("phi3", "phimoe", "minicpm3")


def rope_params(f: Any) -> dict:
    """The RoPE dict: `rope_parameters`, legacy `rope_scaling`, or the model type's default."""
    params = f.hf.get("rope_scaling")  # the legacy spelling; null or {}: not given
    if not params:
        params = f.hf.get("rope_parameters")
        # gpt-oss: transformers' default YaRN, only where rope_parameters is absent or null
        # (an empty dict is plain RoPE there, checked against its config class).
        if params is None:
            params = f.defaults.get("rope_parameters")
    params = params or {}
    if not isinstance(params, dict):
        raise ValueError(f"HF config rope_parameters={params!r}: expected a dict or null")
    if any(isinstance(v, dict) for v in params.values()):
        raise ValueError(
            f"HF config rope_parameters has per-layer-type entries {sorted(params)}; moeserve "
            "supports one RoPE for all layers"
        )
    return params


def rope(f: Any, max_position: int) -> tuple[float, RopeScaling]:
    """(rope_theta, RopeScaling) from `rope_parameters` or legacy `rope_scaling`+`rope_theta`."""
    params = rope_params(f)
    theta = params.get("rope_theta", f.get("rope_theta"))
    theta = f.defaults["rope_theta"] if theta is None else float(theta)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if f.hf.get("model_type") in LONGROPE_TYPES and rope_type in ("su", "yarn"):
        rope_type = "longrope"  # (Phi3Config's reading of its older spellings)
    if rope_type == "default":
        return theta, RopeScaling()
    if rope_type == "longrope":
        return theta, _longrope(f, params, max_position)
    if rope_type == "dynamic" and f.hf.get("model_type") in HUNYUAN_TYPES:
        # Hunyuan's "dynamic" with an alpha is a fixed base (transformers' ntk_alpha).
        alpha = params.get("alpha")
        if not is_number(alpha) or alpha <= 1:
            raise ValueError(
                f"HF config rope_parameters.alpha={alpha!r}: {f.hf['model_type']}'s dynamic rope "
                "needs an alpha > 1 (length-dependent NTK scaling is not supported)"
            )
        return theta, RopeScaling(rope_type="ntk_alpha", alpha=float(alpha))
    if rope_type not in ("linear", "llama3", "yarn"):
        raise ValueError(
            f"HF config rope_type={rope_type!r}: supported are default, linear, llama3, yarn "
            f"(and for {', '.join(LONGROPE_TYPES)}, longrope)"
        )
    original = params.get("original_max_position_embeddings")
    if rope_type in ("llama3", "yarn") and f.hf.get("original_max_position_embeddings"):
        # transformers' standardize_rope_params gives a top-level value (Phi-3's spelling)
        # precedence over the one inside the rope dict, for these types.
        original = f.hf["original_max_position_embeddings"]
    original = max_position if original is None else int(original)
    factor = params.get("factor")
    if factor is None:
        if rope_type != "yarn":
            raise ValueError(f"HF config rope_parameters.factor is missing for {rope_type!r}")
        factor = max_position / original  # transformers' YaRN fallback
    # DeepSeek's MLA softmax scale uses mscale_all_dim with any non-default rope type
    # (transformers' DeepseekV2/V3 attention); only YaRN also uses it for the frequencies.
    mscale_all_dim = float(params.get("mscale_all_dim") or 0.0)
    fields: dict[str, Any] = dict(
        rope_type=rope_type, factor=float(factor), mscale_all_dim=mscale_all_dim
    )
    if rope_type == "llama3":
        fields.update(
            low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            high_freq_factor=float(params.get("high_freq_factor", 4.0)),
            original_max_position_embeddings=original,
        )
    elif rope_type == "yarn":
        # transformers reads null betas as 32/1 and uses mscale only when both it and
        # mscale_all_dim are set, so a null mscale beside a set mscale_all_dim stays unset (0).
        attention_factor = params.get("attention_factor")
        mscale = params.get("mscale")
        mscale = float(mscale) if mscale is not None else (0.0 if mscale_all_dim else 1.0)
        fields.update(
            original_max_position_embeddings=original,
            beta_fast=float(params.get("beta_fast") or 32.0),
            beta_slow=float(params.get("beta_slow") or 1.0),
            mscale=mscale,
            attention_factor=None if attention_factor is None else float(attention_factor),
            truncate=bool(params.get("truncate", True)),
        )
    return theta, RopeScaling(**fields)


def _longrope(f: Any, params: dict, max_position: int) -> RopeScaling:
    """Phi-3's LongRoPE: its short and long factors, the pretraining length (the config's
    top-level original_max_position_embeddings first, as transformers standardizes it),
    factor (else max_position / that), attention_factor, and Phi-3.5-MoE's mscales."""
    if f.hf.get("model_type") not in LONGROPE_TYPES:
        raise ValueError(
            f"HF config rope_type='longrope': only for {', '.join(LONGROPE_TYPES)} here"
        )
    lists = [params.get(name) for name in ("short_factor", "long_factor")]
    for name, value in zip(("short_factor", "long_factor"), lists, strict=True):
        if not isinstance(value, list) or not all(is_number(x) for x in value):
            raise ValueError(f"HF config rope_parameters.{name}={value!r}: a list of numbers")
    moe = f.hf.get("model_type") == "phimoe"  # (PhimoeRotaryEmbedding reads its mscales)
    inside, top = (
        params.get("original_max_position_embeddings"),
        f.hf.get("original_max_position_embeddings"),
    )
    # (PhimoeConfig takes the rope dict's length first, Phi3Config its own top-level one)
    original = (inside or top) if moe else (top or inside)
    if not isinstance(original, int) or isinstance(original, bool) or original < 1:
        raise ValueError(
            f"HF config original_max_position_embeddings={original!r}: longrope needs an int >= 1"
        )
    factor = params.get("factor") or max_position / original
    attention = params.get("attention_factor")
    return RopeScaling(
        rope_type="longrope",
        factor=float(factor),
        original_max_position_embeddings=original,
        attention_factor=None if attention is None else float(attention),
        short_factor=tuple(float(x) for x in lists[0]),
        long_factor=tuple(float(x) for x in lists[1]),
        short_mscale=float(params.get("short_mscale") or 0.0) if moe else 0.0,
        long_mscale=float(params.get("long_mscale") or 0.0) if moe else 0.0,
    )


def partial_rotary_factor(f: Any, model_type: str) -> float:
    """The fraction of each head RoPE rotates: GLM-4's, GLM-4.5's and Phi-3's partial_rotary_factor
    (inside the rope dict or, in released configs, top level; transformers' defaults 0.5,
    1); 1 elsewhere,
    where transformers' attention rotates the whole head whatever the field says, so a value
    there would mean a model the reference does not compute: refused."""
    partial = rope_params(f).get("partial_rotary_factor", f.get("partial_rotary_factor"))
    if model_type == "minimax_m2":  # its released configs' rotary_dim, else whole heads
        rotary_dim = f.hf.get("rotary_dim")
        if partial is None and rotary_dim is not None:
            partial = rotary_dim / f.required("head_dim") if is_number(rotary_dim) else rotary_dim
        partial = 1.0 if partial is None else partial
    partial_types = ("glm", "glm4", "glm4_moe", "minimax_m2", "phi", "phi3", "stablelm", "nemotron")
    partial_types += ("gpt_neox", "persimmon")
    if model_type in (*partial_types, *LINEAR_MODEL_TYPES):
        if not is_number(partial) or not 0 < partial <= 1:
            raise ValueError(
                f"HF config partial_rotary_factor={partial!r}: must be a number in (0, 1]"
            )
        return float(partial)
    if partial not in (None, 1, 1.0):
        raise ValueError(
            f"HF config partial_rotary_factor={partial}: only 1.0 is supported for {model_type}"
        )
    return 1.0


def check_mistral4_rotary(f: Any) -> None:
    """Mistral 4's partial_rotary_factor must put RoPE on the qk_rope_head_dim channels of
    each head (transformers sizes its rotary by it)."""
    nope, rope = f.required("qk_nope_head_dim"), f.required("qk_rope_head_dim")
    partial = rope_params(f).get("partial_rotary_factor")
    if partial is not None and not (
        is_number(partial) and abs(partial * (nope + rope) - rope) < 1e-6
    ):
        raise ValueError(
            f"HF config rope_parameters.partial_rotary_factor={partial!r}: mistral4 needs "
            f"qk_rope_head_dim / (qk_nope_head_dim + qk_rope_head_dim) = {rope}/{nope + rope}"
        )


def llama4_temperature(f: Any) -> dict:
    """Mistral 4's and Ministral 3's query temperature (ModelConfig.attn_scale_beta) from
    their rope dict's llama_4_scaling_beta and original_max_position_embeddings, which
    transformers reads there (and fails without)."""
    params = rope_params(f)
    model_type = f.hf.get("model_type")
    beta = params.get("llama_4_scaling_beta")
    if not is_number(beta) or beta < 0:
        raise ValueError(
            f"HF config rope_parameters.llama_4_scaling_beta={beta!r}: {model_type} needs a "
            "number >= 0 (transformers scales its queries by it)"
        )
    if not beta:
        return dict(attn_scale_beta=0.0)
    positions = params.get("original_max_position_embeddings")
    if not isinstance(positions, int) or isinstance(positions, bool) or positions < 1:
        raise ValueError(
            f"HF config rope_parameters.original_max_position_embeddings={positions!r}: "
            f"{model_type}'s query temperature needs an int >= 1"
        )
    return dict(attn_scale_beta=float(beta), attn_scale_positions=positions)


def is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)
