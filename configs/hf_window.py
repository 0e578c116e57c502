"""The sliding window of an HF config, as transformers' modeling code applies it per family
(split from configs/hf_config.py)."""

from __future__ import annotations

from typing import Any

from configs.hf_deepseek_v4 import DEEPSEEK_V4
from configs.hf_kimi_linear import KIMI_LINEAR
from configs.hf_nemotron_h import NEMOTRON_H
from configs.hf_qwen3_next import LINEAR_MODEL_TYPES


def sliding_window_fields(f: Any, model_type: str, num_layers: int) -> dict:
    """The window transformers applies, and the layers it leaves out, as its modeling code
    reads them: Llama, DeepSeek and GLM-4.5 have none; Mistral and Mixtral window every
    layer; Qwen only with use_sliding_window, Qwen3-MoE every layer, Qwen2/Qwen3/Qwen2-MoE
    the layers `layer_types` marks "sliding_attention" (default: Qwen2/Qwen3 from
    max_window_layers on, Qwen2-MoE the even layers below max_window_layers); dots.llm1 as
    Qwen3 without the use_sliding_window switch. `f` is hf_config._Fields."""
    none = dict(sliding_window=None, full_attention_layers=())
    no_window = (
        "llama",
        "llama4_text",  # (its chunks: configs/hf_llama4.py)
        "hunyuan_v1_dense",
        "hunyuan_v1_moe",
        "olmoe",
        "ernie4_5",
        "paddleocr_vl_text",
        "ernie4_5_moe",
        "ernie4_5_vl_moe_text",
        "glm4_moe",
        "solar_open",
        "glm4_moe_lite",
        "axk1",
        "axk2",
        "minimax_m2",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "glm_moe_dsa",
        "mistral4",
        "mistral_large4_text",
        *LINEAR_MODEL_TYPES,
        KIMI_LINEAR,
        "bailing_hybrid",
        NEMOTRON_H,  # (nemotron_h_fields refuses one)
    )
    own = (DEEPSEEK_V4, "exaone_moe", "exaone4", "afmoe", "gemma4_text", "mimo_v2_flash")
    own += ("granite_swa", "granitemoe_swa")
    if model_type in own:
        return {}
    if model_type in no_window:
        return none
    per_layer = model_type in ("qwen2", "qwen3", "qwen2_moe", "gpt_oss", "dots1", "olmo3")
    window = f.get("sliding_window")
    layer_types = f.hf.get("layer_types") if per_layer else None
    # (no use_sliding_window switch)
    always = ("mistral", "ministral3", "mixtral", "gpt_oss", "dots1", "olmo3")
    if model_type not in always and not f.get("use_sliding_window"):
        window = None  # transformers' config sets it so
    if window is None:
        if layer_types and "sliding_attention" in layer_types:
            # transformers builds the model, then fails making its sliding mask.
            raise ValueError(
                "HF config layer_types: marks sliding_attention layers, but there is no "
                "window (sliding_window null, or use_sliding_window false)"
            )
        return none
    if not per_layer:
        return dict(sliding_window=window, full_attention_layers=())
    if layer_types is None:
        first = f.get("max_window_layers")
        if model_type == "gpt_oss":
            sliding = [i % 2 == 0 for i in range(num_layers)]
        elif model_type == "olmo3":  # (every fourth layer global)
            sliding = [(i + 1) % 4 != 0 for i in range(num_layers)]
        elif model_type == "qwen2_moe":
            sliding = [i % 2 == 0 and i < first for i in range(num_layers)]
        else:
            sliding = [i >= first for i in range(num_layers)]
        layer_types = ["sliding_attention" if s else "full_attention" for s in sliding]
    if not isinstance(layer_types, list) or len(layer_types) != num_layers:
        raise ValueError(
            f"HF config layer_types: expected a list of num_hidden_layers={num_layers} entries"
        )
    kinds = ("full_attention", "sliding_attention")
    bad = [t for t in layer_types if t not in kinds]
    if bad:
        raise ValueError(f"HF config layer_types: {bad[0]!r} is not one of {kinds}")
    full = tuple(i for i, t in enumerate(layer_types) if t == "full_attention")
    if len(full) == num_layers:
        return none
    return dict(sliding_window=window, full_attention_layers=full)
