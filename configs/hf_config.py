"""Hugging Face `config.json` -> `ModelConfig`, for the architectures moeserve implements.

Absent fields take the default of the matching `transformers` config class (checked against
transformers 5.24), so a sparse hand-written config means what it means to Hugging Face.
Both spellings of RoPE are read: transformers-5 `rope_parameters` (theta inside) and the
older `rope_scaling` (`type` or `rope_type`, may be null) plus a top-level `rope_theta`.

Sliding-window attention (Mistral v0.1, Mixtral/Qwen with a window set) is read into
`sliding_window` and `full_attention_layers`, as transformers' modeling code applies it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from configs import hf_alibi as alibi
from configs import hf_aria as aria
from configs import hf_bamba as bamba
from configs import hf_beam as beam
from configs import hf_cohere as cohere
from configs import hf_cohere_compass as compass
from configs import hf_dbrx as dbrx
from configs import hf_deepseek_ocr as deepseek_ocr
from configs import hf_deepseek_v4 as v4
from configs import hf_falcon as falcon
from configs import hf_falcon_h1 as falcon_h1
from configs import hf_gemma3 as gemma3
from configs import hf_gemma3n as gemma3n
from configs import hf_glm4 as glm4
from configs import hf_gpt_bigcode as gpt_bigcode
from configs import hf_gpt_neox as gpt_neox
from configs import hf_gptj as gptj
from configs import hf_hyperclovax as hyperclovax
from configs import hf_hyv3 as hyv3
from configs import hf_jamba as jamba
from configs import hf_laguna as laguna
from configs import hf_lara_mini as lara_mini
from configs import hf_layer_norm_kin as layer_norm_kin
from configs import hf_lfm2 as lfm2
from configs import hf_llama_kin as llama_kin
from configs import hf_longcat as longcat
from configs import hf_mamba as mamba
from configs import hf_mimo as mimo
from configs import hf_minicpm3 as minicpm3
from configs import hf_minimax as minimax
from configs import hf_moe_kin as moe_kin
from configs import hf_molmo2 as molmo2
from configs import hf_nanochat as nanochat
from configs import hf_olmo as olmo
from configs import hf_olmo1 as olmo1
from configs import hf_olmo_hybrid as olmo_hybrid
from configs import hf_opt as opt
from configs import hf_persimmon as persimmon
from configs import hf_phi as phi
from configs import hf_phi3 as phi3
from configs import hf_sarvam as sarvam
from configs import hf_seed_oss as seed_oss
from configs import hf_smollm3 as smollm3
from configs import hf_starcoder2 as starcoder2
from configs import hf_step as step
from configs import hf_zamba2 as zamba2
from configs.fp8_schemes import Fp8Scheme, compressed_tensors_fp8, deepseek_fp8, is_float_quantized
from configs.hf_afmoe import AFMOE, AFMOE_DEFAULTS, afmoe_fields
from configs.hf_bailing import BAILING, BAILING_ALIASES, BAILING_DEFAULTS, bailing_fields
from configs.hf_deepseek_v4 import DEEPSEEK_V4
from configs.hf_exaone import EXAONE_DEFAULTS, EXAONE_TYPES, exaone_fields
from configs.hf_gemma4 import (
    GEMMA4,
    GEMMA4_DEFAULTS,
    GEMMA4_UNIFIED,
    as_gemma4,
    gemma4_fields,
    gemma4_rope,
)
from configs.hf_granite import GRANITE, GRANITE_ATTN_TYPES, GRANITE_DEFAULTS, granite_fields
from configs.hf_kimi_linear import KIMI_ALIASES, KIMI_DEFAULTS, KIMI_LINEAR, kimi_linear_fields
from configs.hf_llama4 import LLAMA4_DEFAULTS, llama4_fields
from configs.hf_mla import MLA_DEFAULTS, MLA_MODEL_TYPES, mla_fields
from configs.hf_moe import ERNIE_MOE, moe_fields
from configs.hf_nemotron_h import NEMOTRON_ALIASES, NEMOTRON_DEFAULTS, NEMOTRON_H, nemotron_h_fields
from configs.hf_qwen3_next import LINEAR_DEFAULTS, LINEAR_MODEL_TYPES, linear_fields
from configs.hf_rope import (
    HUNYUAN_TYPES,
    check_mistral4_rotary,
    llama4_temperature,
    partial_rotary_factor,
    rope,
)
from configs.hf_window import sliding_window_fields
from configs.hf_wrappers import MULTIMODAL_WRAPPERS, cross_attention_layers, language_model_config
from configs.int4_schemes import INT4_METHODS, Int4Scheme, int4_scheme
from configs.model_config import ModelConfig

# Families whose module reads a config whole, its window too (configs/hf_<family>.py: TYPES,
# their DEFAULTS and ALIASES, fields(f, model_type), which may set num_layers).
_FAMILIES = (lfm2, longcat, jamba, minimax, cohere, hyv3, dbrx, phi3, smollm3)
_FAMILIES += (seed_oss, glm4, gemma3, laguna, olmo_hybrid, llama_kin, starcoder2, phi)  # 55-56th
_FAMILIES += (layer_norm_kin, minicpm3, hyperclovax, moe_kin, beam, aria, lara_mini, gpt_neox)
_FAMILIES += (olmo1, falcon, gptj, gpt_bigcode, opt, alibi, persimmon, bamba, mamba)  # fmt: off
_FAMILIES += (falcon_h1, nanochat, step, deepseek_ocr, compass, molmo2)  # 59th, 61st
_FAMILIES += (gemma3n, zamba2)  # 62nd
# Families with a RoPE per layer kind: the model's is the one their rope_source picks (their
# global layers', or Beam's windowed ones'); the other kind's is in their fields.
_ROPE_BY_KIND = (laguna, beam, step, compass)
SUPPORTED_MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "qwen2_moe",
    "qwen3_moe",
    "mixtral",
    "olmoe",
    *olmo.OLMO_TYPES,
    "ernie4_5",
    "paddleocr_vl_text",
    "ernie4_5_moe",
    ERNIE_MOE[1],
    "glm4_moe",
    "glm4_moe_lite",
    "gpt_oss",
    "minimax_m2",
    "dots1",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "glm_moe_dsa",
    "axk1",
    "axk2",
    "mistral4",
    "mistral_large4_text",
    "ministral3",
    *HUNYUAN_TYPES,
    "llama4_text",
    *LINEAR_MODEL_TYPES,
    KIMI_LINEAR,
    DEEPSEEK_V4,
    NEMOTRON_H,
    GRANITE,
    *GRANITE_ATTN_TYPES,
    "solar_open",
    *EXAONE_TYPES,
    AFMOE,
    GEMMA4,
    GEMMA4_UNIFIED,
    BAILING,
    mimo.MIMO,
    *sarvam.SARVAM_TYPES,
    *(model_type for family in _FAMILIES for model_type in family.TYPES),
)
# fmt: on
_DTYPES = ("float32", "bfloat16", "float16")

# Defaults of the transformers config classes for the fields read here (absent key -> this).
# fmt: off
_COMMON = dict(
    tie_word_embeddings=False, rms_norm_eps=1e-6, attention_bias=False, mlp_bias=False,
    head_dim=None, num_key_value_heads=None, rope_theta=10000.0, sliding_window=None,
)
_QWEN_WINDOW = dict(bos_token_id=None, eos_token_id=None, use_sliding_window=False,
                    sliding_window=4096, max_window_layers=28)
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
    ),
    "mistral": dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
        bos_token_id=1, eos_token_id=2, sliding_window=4096,
    ),
    "qwen2": dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=32768,
        **_QWEN_WINDOW,
    ),
    "qwen3": dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, head_dim=128,
        max_position_embeddings=32768, **_QWEN_WINDOW,
    ),
    "qwen3_moe": dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
        num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=32768,
        num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=False,
        decoder_sparse_step=1, mlp_only_layers=None, **_QWEN_WINDOW,
    ),
    "qwen2_moe": dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
        num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=32768,
        num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632, norm_topk_prob=False, decoder_sparse_step=1,
        mlp_only_layers=None, qkv_bias=True, **_QWEN_WINDOW,
    ),
    # OLMoE (AllenAI): q/k RMSNorms over all heads' channels, optional q/k/v clipping, biases
    # on q/k/v/o with attention_bias; top-k softmax experts of intermediate_size.
    "olmoe": dict(
        vocab_size=50304, hidden_size=2048, intermediate_size=2048, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=None, max_position_embeddings=4096,
        rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=50279, num_experts=64,
        num_experts_per_tok=8, norm_topk_prob=False, clip_qkv=None,
    ),
    # ERNIE 4.5 dense (0.3B): the MoE model's attention (RoPE on interleaved pairs, head_dim
    # 128 by default) and a SwiGLU MLP on every layer.
    "ernie4_5": dict(
        vocab_size=103424, hidden_size=1024, intermediate_size=3072, num_hidden_layers=18,
        num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=131072,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
        use_bias=False, head_dim=128, rope_theta=500000.0,
    ),
    # PaddleOCR-VL's language model: ERNIE 4.5 dense's (its class's defaults), its RoPE on
    # halves (Qwen2.5-Omni's attention, M-RoPE: plain for text).
    "paddleocr_vl_text": dict(
        vocab_size=103424, hidden_size=1024, intermediate_size=3072, num_hidden_layers=18,
        num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=131072,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
        use_bias=False, head_dim=128, rope_theta=500000.0,
    ),
    # ERNIE 4.5 MoE (Baidu): RoPE on interleaved pairs, softmax router whose choice adds a
    # correction bias (moe_statics), shared experts, MoE layers by start/end/interval.
    "ernie4_5_moe": dict(
        vocab_size=103424, hidden_size=2560, intermediate_size=12288, num_hidden_layers=28,
        num_attention_heads=20, num_key_value_heads=4, max_position_embeddings=131072,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
        use_bias=False, moe_intermediate_size=1536, moe_k=6, moe_num_experts=64,
        moe_num_shared_experts=2, moe_layer_start_index=1, moe_layer_end_index=-1,
        moe_layer_interval=1, moe_norm_min=1e-12, rope_theta=500000.0,
    ),
    # ERNIE 4.5 VL's language model (Ernie4_5_VLMoeTextConfig): its text experts and shared
    # ones on the layers mlp_layer_types calls sparse; M-RoPE, whose text positions rotate as
    # the plain RoPE on interleaved pairs.
    ERNIE_MOE[1]: dict(
        vocab_size=103424, hidden_size=2560, intermediate_size=12288, num_hidden_layers=28,
        num_attention_heads=20, num_key_value_heads=4, max_position_embeddings=131072,
        rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None, tie_word_embeddings=True,
        use_bias=False, moe_intermediate_size=[1536, 512], moe_k=6, moe_num_experts=64,
        moe_num_shared_experts=2, moe_norm_min=1e-12, mlp_layer_types=None, rope_theta=500000.0,
    ),
    # GLM-4.5 / 4.6 / 4.7 (and -Air): DeepSeek-V3's router on a GQA attention that rotates
    # only part of each head (partial_rotary_factor, default 0.5).
    "glm4_moe": dict(
        vocab_size=151552, hidden_size=4096, intermediate_size=10944, num_hidden_layers=46,
        num_attention_heads=96, num_key_value_heads=8, max_position_embeddings=131072,
        rms_norm_eps=1e-5, n_routed_experts=128, n_shared_experts=1, num_experts_per_tok=8,
        moe_intermediate_size=1408, n_group=1, topk_group=1, norm_topk_prob=True,
        routed_scaling_factor=1.0, first_k_dense_replace=1, use_qk_norm=False,
        partial_rotary_factor=0.5, num_nextn_predict_layers=1,
    ),
    # MiniMax-M2 (-M2.1, -M2.5): OLMo's q/k norms over all heads' channels, GLM-4.5's partial
    # rotary (released configs: rotary_dim), sigmoid top-k experts chosen with a correction bias.
    "minimax_m2": dict(
        vocab_size=200064, hidden_size=3072, intermediate_size=1536, num_hidden_layers=62,
        num_attention_heads=48, num_key_value_heads=8, head_dim=128, max_position_embeddings=196608,
        bos_token_id=200034, eos_token_id=200020, num_experts_per_tok=8, num_local_experts=256,
        rope_theta=5000000.0,
    ),
    # dots.llm1 (rednote): Qwen3's attention (per-head q/k norms; sliding windows from
    # max_window_layers on, as Qwen2 but with no use_sliding_window switch) with DeepSeek-V3's
    # MoE (sigmoid router with a correction bias, groups, shared experts, dense first layers).
    "dots1": dict(
        vocab_size=152064, hidden_size=4608, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=62, num_attention_heads=32, num_key_value_heads=32,
        n_shared_experts=None, n_routed_experts=None, n_group=1, topk_group=1,
        num_experts_per_tok=None, first_k_dense_replace=0, norm_topk_prob=False,
        max_position_embeddings=2048, routed_scaling_factor=1.0, sliding_window=4096,
        max_window_layers=62, bos_token_id=None, eos_token_id=None,
    ),
    "mixtral": dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, rope_theta=1000000.0,
        num_local_experts=8, num_experts_per_tok=2,
    ),
    # gpt-oss: attention sinks, biases on q/k/v/o, every other layer a 128-key window (even
    # layers), YaRN without truncation; every layer MoE with router and expert biases and a
    # clamped SwiGLU; the rope dict below is transformers' default when a config has none.
    "gpt_oss": dict(
        vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
        num_attention_heads=64, num_key_value_heads=8, head_dim=64, sliding_window=128,
        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=150000.0,
        num_local_experts=128, num_experts_per_tok=4, swiglu_alpha=1.702, swiglu_limit=7.0,
        attention_bias=True, layer_types=None,
        rope_parameters=dict(
            rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
            original_max_position_embeddings=4096,
        ),
    ),
    # Hunyuan-A13B: Llama's attention with q/k norms after RoPE, NTK-alpha rope; a float32
    # softmax router over experts of intermediate_size beside a shared MLP on every layer.
    # Hunyuan dense (Hunyuan-0.5B / 1.8B / 4B / 7B): that attention, a SwiGLU MLP.
    "hunyuan_v1_dense": dict(
        vocab_size=290943, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    ),
    "hunyuan_v1_moe": dict(
        vocab_size=290943, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, num_experts=1, moe_topk=1,
    ),
    # Ministral 3 (in a Mistral 3 wrapper): Mistral's attention (a window where
    # sliding_window is set) with YaRN and Llama 4's query temperature.
    "ministral3": dict(
        vocab_size=131072, hidden_size=4096, intermediate_size=14336, num_hidden_layers=34,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=262144, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
        rope_parameters=dict(
            type="yarn", rope_theta=1000000.0, factor=16.0,
            original_max_position_embeddings=16384, beta_fast=32.0, beta_slow=1.0,
            mscale_all_dim=1.0, mscale=1.0, llama_4_scaling_beta=0.1,
        ),
    ),
}
# fmt: on
_DEFAULTS.update(
    MLA_DEFAULTS,
    llama4_text=LLAMA4_DEFAULTS,
    **LINEAR_DEFAULTS,
    **KIMI_DEFAULTS,
    **v4.V4_DEFAULTS,
    **NEMOTRON_DEFAULTS,
    **GRANITE_DEFAULTS,
    **EXAONE_DEFAULTS,
    **olmo.OLMO_DEFAULTS,
    **AFMOE_DEFAULTS,
    **GEMMA4_DEFAULTS,
    **mimo.MIMO_DEFAULTS,
    **BAILING_DEFAULTS,
    # Solar Open: GLM-4.5's class with its own defaults (no dense layer, no MTP, no q/k
    # norms or partial rotary: Llama's attention).
    solar_open=dict(
        _DEFAULTS["glm4_moe"],
        vocab_size=196608,
        moe_intermediate_size=1280,
        num_hidden_layers=48,
        num_attention_heads=64,
        head_dim=128,
        num_experts_per_tok=8,
        first_k_dense_replace=0,
        use_qk_norm=False,
        partial_rotary_factor=None,
        num_nextn_predict_layers=0,
        rope_theta=1000000.0,
        intermediate_size=None,
    ),
)
# Other names a config.json may give a field, per model type: each config class's
# `attribute_map` in transformers 5.24 (the field read here <- the names it also takes; a
# name a class does not map is ignored, as transformers ignores it: Qwen2-MoE has none).
_ALIASES: dict[str, dict[str, tuple[str, ...]]] = {
    **KIMI_ALIASES,
    **olmo.OLMO_ALIASES,
    **BAILING_ALIASES,
    **v4.V4_ALIASES,
    **NEMOTRON_ALIASES,
    **mimo.MIMO_ALIASES,
    "qwen3_moe": {"num_experts": ("num_local_experts",)},
    "mixtral": {"num_local_experts": ("num_experts",)},
    "minimax_m2": {"num_local_experts": ("num_experts",)},
    "dots1": {"n_routed_experts": ("num_local_experts",)},
    "gpt_oss": {"num_local_experts": ("num_experts",)},
    "olmoe": {"num_experts": ("num_local_experts",)},
    "glm4_moe": {
        "n_routed_experts": ("num_local_experts",),
        "num_nextn_predict_layers": ("num_mtp_layers",),
    },
    "solar_open": {"n_routed_experts": ("num_local_experts",)},
    "glm4_moe_lite": {
        "n_routed_experts": ("num_local_experts",),
        "qk_rope_head_dim": ("head_dim",),
    },
    "deepseek_v3": {
        "n_routed_experts": ("num_local_experts",),
        "num_nextn_predict_layers": ("num_mtp_layers",),
    },
    "deepseek_v2": {"n_routed_experts": ("num_experts",)},
    "axk1": {"n_routed_experts": ("num_local_experts",)},
    "axk2": {"n_routed_experts": ("num_local_experts",)},
    # (V3.2's __post_init__ also moves a num_experts there.)
    "deepseek_v32": {"n_routed_experts": ("num_local_experts", "num_experts")},
    "glm_moe_dsa": {"n_routed_experts": ("num_local_experts", "num_experts")},
    "mistral4": {"n_routed_experts": ("num_local_experts",)},
    "mistral_large4_text": {"n_routed_experts": ("num_local_experts", "num_experts")},
    **dict.fromkeys(
        ERNIE_MOE, {"moe_num_experts": ("num_experts",), "moe_k": ("num_experts_per_tok",)}
    ),
    "hunyuan_v1_moe": {"num_experts": ("num_local_experts",), "moe_topk": ("num_experts_per_tok",)},
}
for _family in _FAMILIES:
    _DEFAULTS.update(_family.DEFAULTS)
    _ALIASES.update(_family.ALIASES)


def read_hf_config(source: dict | str | os.PathLike) -> dict:
    """The config dict: `source` itself, or parsed from a config.json path or model directory."""
    if isinstance(source, dict):
        return source
    path = os.fspath(source)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"HF config not found: {path}")
    return _read_json_object(path, "HF config")


def _read_json_object(path: str, what: str) -> dict:
    with open(path) as f:
        try:
            obj = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{what} {path}: not valid JSON ({e})") from e
    if not isinstance(obj, dict):
        raise ValueError(f"{what} {path}: expected a JSON object, got {type(obj).__name__}")
    return obj


class _Fields:
    """Lookup of one HF config with the architecture's class defaults behind it."""

    def __init__(self, hf: dict, model_type: str):
        self.hf = hf
        self.defaults = {**_COMMON, **_DEFAULTS[model_type]}
        self.aliases = _ALIASES.get(model_type, {})

    def get(self, key: str) -> Any:
        """The value as transformers sees it: present (even null) wins, else alias, else default."""
        if key in self.hf:
            return self.hf[key]
        for alias in self.aliases.get(key, ()):
            if alias in self.hf:
                return self.hf[alias]
        return self.defaults.get(key)

    def required(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise ValueError(f"HF config field {key!r} is missing or null; it is required")
        return value


def _eos_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(v, int) for v in value):
        return tuple(value)
    raise ValueError(f"HF config eos_token_id={value!r}: expected an int, a list of ints or null")


def _generation_eos_ids(source: str | os.PathLike) -> tuple[int, ...]:
    """eos_token_id of the generation_config.json beside the config, if there is one: chat
    models (Llama 3 Instruct, Qwen2.5 Instruct) list their end-of-turn token only there."""
    path = os.fspath(source)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    gen_path = os.path.join(folder, "generation_config.json")
    if not os.path.isfile(gen_path):
        return ()
    return _eos_ids(_read_json_object(gen_path, "HF generation config").get("eos_token_id"))


def fp8_scheme(hf: dict) -> Fp8Scheme | None:
    """How the checkpoint of HF config `hf` stores fp8 weights (configs/fp8_schemes.py:
    quant_method "fp8", or compressed-tensors "float-quantized"); None when it does not."""
    qc = hf.get("quantization_config")
    if is_float_quantized(qc):
        return compressed_tensors_fp8(qc)
    if isinstance(qc, dict) and qc.get("quant_method") == "fp8":
        return deepseek_fp8(qc, hf.get("expert_dtype"))
    return None


def fp8_weight_block(hf: dict) -> tuple[int, int] | None:
    """[rows, cols] of the scale blocks the engine holds a checkpoint's quantized weights in:
    an fp8 checkpoint's (its `weight_block_size`; per-channel and per-tensor scales:
    configs/fp8_schemes.py), or (1, group_size) for int4 weights (compressed-tensors'
    pack-quantized, GPTQ or AWQ: a scale per group of inputs of an output row,
    configs/int4_schemes.py); None when the config has no `quantization_config`. Such
    weights are dequantized on load (models/fp8_checkpoint.py, models/int4_checkpoint.py)
    unless held as they are stored (ModelConfig.quantization). Other quantization methods
    are refused, naming the field."""
    qc = hf.get("quantization_config")
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise ValueError(f"HF config quantization_config={qc!r}: expected a JSON object")
    method = qc.get("quant_method")
    if method == "mxfp4" and hf.get("model_type") == "gpt_oss":
        return None  # gpt-oss's MXFP4 experts (models/mxfp4.py), no fp8 blocks
    fp8 = fp8_scheme(hf)
    if fp8 is not None:
        return fp8.held_block
    if method in INT4_METHODS:
        return 1, int4_scheme(qc).held_group
    raise ValueError(
        f"HF config quantization_config.quant_method={method!r}: only 'fp8' (block-quantized "
        "e4m3 weights with weight_scale_inv), 'compressed-tensors' (float-quantized fp8, or "
        "pack-quantized int4), int4 ('gptq', 'awq') and, for gpt_oss, 'mxfp4' (its experts) "
        "are supported"
    )


def stored_int4_scheme(hf: dict) -> Int4Scheme | None:
    """How the checkpoint of HF config `hf` stores its int4 weights (None: not int4)."""
    qc = hf.get("quantization_config")
    if isinstance(qc, dict) and qc.get("quant_method") in INT4_METHODS:
        return None if is_float_quantized(qc) else int4_scheme(qc)
    return None


def _dtype(hf: dict, dtype: str | None) -> str:
    if dtype is None:
        return "float32"
    if dtype != "auto":
        return dtype  # ModelConfig validates it
    value = hf.get("dtype") or hf.get("torch_dtype") or "float32"  # transformers 5 / 4 spelling
    if value not in _DTYPES:
        raise ValueError(f"HF config dtype={value!r}: expected one of {_DTYPES}")
    return value


# The families whose transformers modeling code reads these fields; the others hard-code the
# biases off (Qwen2: q/k/v biases on, handled) and ignore the field, so it is ignored here too.
_HONOURS_ATTENTION_BIAS = (
    *LINEAR_MODEL_TYPES,
    *GRANITE_ATTN_TYPES,
    KIMI_LINEAR,
    "llama",
    "llama4_text",
    *HUNYUAN_TYPES,
    "mistral4",
    "mistral_large4_text",
    "qwen3",
    "qwen3_moe",
    "dots1",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "glm4_moe_lite",
    "glm_moe_dsa",
    "axk1",
    "axk2",
)
# (glm4_moe reads attention_bias as q/k/v biases only, which the tree holds: _gqa_fields.)
_HONOURS_MLP_BIAS = ("llama", "deepseek_v2")


def _refuse_unsupported(f: _Fields, model_type: str) -> None:
    # Llama/Qwen3 `attention_bias` also puts a bias on o_proj (and DeepSeek's on the low-rank
    # projections), which the param tree has no slot for.
    if model_type in _HONOURS_ATTENTION_BIAS and f.get("attention_bias"):
        raise ValueError(f"HF config attention_bias=True: not supported for {model_type}")
    if model_type in _HONOURS_MLP_BIAS and f.get("mlp_bias"):
        raise ValueError(f"HF config mlp_bias=True: not supported for {model_type}")
    if model_type in ("ernie4_5", "paddleocr_vl_text", *ERNIE_MOE) and f.get("use_bias"):
        # Biases on every linear layer, the MLPs' too, which the tree has no slot for.
        raise ValueError(f"HF config use_bias=True: not supported for {model_type}")
    if model_type == "minimax_m2":
        # Fields of MiniMax's own configs that transformers' class ignores: refused where
        # they describe another model (MiniMax-01's lightning attention, shared experts).
        kinds = f.hf.get("attn_type_list") or []
        if any(k != 1 for k in kinds):
            raise ValueError(
                "HF config attn_type_list: only full-attention layers (1) are supported "
                f"(found {sorted(set(kinds))})"
            )
        for key, want in (("shared_intermediate_size", 0), ("scoring_func", "sigmoid")):
            if f.hf.get(key) not in (None, want):
                raise ValueError(f"HF config {key}={f.hf[key]!r}: only {want!r}")
    act = f.hf.get("hidden_act", "silu")
    # (transformers' ACT2FN: both are SiLU; Arcee's, Gemma's and StarCoder2's: their readers')
    own = (llama_kin.ARCEE, *gemma3.TYPES, starcoder2.STARCODER2, phi.PHI, *layer_norm_kin.TYPES)
    own += (llama_kin.APERTUS, llama_kin.APERTUS1P5, gpt_neox.GPT_NEOX, falcon.FALCON, *gptj.TYPES)
    own += (*gpt_bigcode.TYPES, *opt.TYPES, persimmon.PERSIMMON, nanochat.NANOCHAT, *step.TYPES)
    own += zamba2.TYPES
    if act not in ("silu", "swish") and model_type not in own:
        raise ValueError(f"HF config hidden_act={act!r}: only 'silu' (SwiGLU) is supported")


def _gqa_fields(f: _Fields, model_type: str) -> dict:
    heads = f.required("num_attention_heads")
    head_dim = f.get("head_dim")
    kv_heads = f.get("num_key_value_heads")
    if model_type == "qwen2_moe":
        attention_bias = bool(f.get("qkv_bias"))
    elif model_type in ("glm4_moe", "gpt_oss", "olmoe", *olmo.OLMO_TYPES, "solar_open"):
        # q/k/v biases (GLM-4.5's o_proj has none; gpt-oss's has one: o_proj_bias below)
        attention_bias = bool(f.get("attention_bias"))
    else:
        attention_bias = model_type == "qwen2"
    fields = dict(
        num_kv_heads=heads if kv_heads is None else kv_heads,
        head_dim=f.required("hidden_size") // heads if head_dim is None else head_dim,
        attention_bias=attention_bias,
        qk_norm=model_type in ("qwen3", "qwen3_moe", "olmoe", "minimax_m2", "dots1")
        or model_type in (*HUNYUAN_TYPES, *LINEAR_MODEL_TYPES, *olmo.OLMO_TYPES)
        or (model_type == "glm4_moe" and bool(f.get("use_qk_norm"))),
        qk_norm_after_rope=model_type in HUNYUAN_TYPES,
        qk_norm_full=model_type in ("olmoe", *olmo.OLMO_TYPES, "minimax_m2"),
        partial_rotary_factor=partial_rotary_factor(f, model_type),
    )
    if model_type == "llama4_text":
        fields.update(llama4_fields(f))
    elif model_type in LINEAR_MODEL_TYPES:
        fields.update(linear_fields(f, model_type))
    else:
        fields.update(moe_fields(f, model_type, fields))
    return fields


def config_from_hf(
    source: dict | str | os.PathLike, name: str | None = None, dtype: str | None = None
) -> ModelConfig:
    """Map a Hugging Face config (dict, config.json path or model dir) to a `ModelConfig`.

    EOS ids: the config's, and those of a generation_config.json beside it. A
    `quantization_config` is checked here (`fp8_weight_block`); the loader dequantizes.

    Args:
      name: the config's name; default: the directory or file path, or "hf-<model_type>".
      dtype: parameter dtype; None: float32 (what the CPU path and the HF fixtures use);
        "auto": the checkpoint's own `dtype` (transformers 5) or `torch_dtype` (older).
    """
    hf = read_hf_config(source)
    wrapper = hf.get("model_type") if hf.get("model_type") in MULTIMODAL_WRAPPERS else None
    # (served as their family; Gemma 4 unified's text model as Gemma 4's)
    hf, served_type = sarvam.as_family(as_gemma4(language_model_config(hf)))
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        where = f"text_config.model_type (of {wrapper!r})" if wrapper else "model_type"
        raise ValueError(
            f"HF config {where}={model_type!r}: not supported; supported model types: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} (and, as their text_config, "
            f"{', '.join(MULTIMODAL_WRAPPERS)})"
        )
    if name is None:
        name = (
            os.fspath(source) if not isinstance(source, dict) else f"hf-{served_type or model_type}"
        )
    f = _Fields(hf, model_type)
    if model_type == olmo.OLMO3:  # (its full layers' RoPE, as the model's)
        f = _Fields(olmo.olmo3_rope_source(f), model_type)
    _refuse_unsupported(f, model_type)
    # Refuses an unsupported quantization before any weight is read.
    block = fp8_weight_block(hf)
    int4 = stored_int4_scheme(hf)
    num_layers = f.required("num_hidden_layers")
    max_position = f.required("max_position_embeddings")
    if model_type == DEEPSEEK_V4:  # the compressed layers' RoPE; the sliding ones' base
        _, rope_scaling = rope(_Fields(v4.v4_rope_source(f), model_type), max_position)
        rope_theta = v4.v4_main_theta(f)
    elif model_type in (GEMMA4, lfm2.LFM3):  # (their windowed layers' RoPE: their fields)
        rope_theta, rope_scaling, _ = gemma4_rope(f)
    elif model_type == mimo.MIMO:  # (the same)
        rope_theta, rope_scaling = mimo.mimo_rope(f)
    elif model_type in (gemma3.GEMMA3, gemma3n.GEMMA3N):  # (the same)
        rope_theta, rope_scaling, _ = gemma3.gemma3_rope(f)
    elif ruled := next((m for m in _ROPE_BY_KIND if model_type in m.TYPES), None):
        rope_theta, rope_scaling = rope(_Fields(ruled.rope_source(f), model_type), max_position)
    else:
        rope_theta, rope_scaling = rope(f, max_position)
    family = next((m for m in _FAMILIES if model_type in m.TYPES), None)
    window = {} if family else sliding_window_fields(f, model_type, num_layers)
    eos_ids = _eos_ids(f.get("eos_token_id"))
    if not isinstance(source, dict):
        eos_ids = tuple(dict.fromkeys(eos_ids + _generation_eos_ids(source)))
    if family is not None:
        arch = family.fields(f, model_type)
        num_layers = arch.pop("num_layers", num_layers)
    elif model_type == "mistral4":
        check_mistral4_rotary(f)
        arch = {**mla_fields(f, model_type), **llama4_temperature(f)}
    elif model_type == KIMI_LINEAR:
        arch = kimi_linear_fields(f)
    elif model_type == BAILING:
        arch = bailing_fields(f)
    elif model_type in (GRANITE, *GRANITE_ATTN_TYPES):
        arch = granite_fields(f, model_type)
    elif model_type in (*EXAONE_TYPES, AFMOE):  # (their windows too)
        arch = afmoe_fields(f) if model_type == AFMOE else exaone_fields(f, model_type)
    elif model_type in (GEMMA4, mimo.MIMO):  # (their windows too)
        arch = gemma4_fields(f) if model_type == GEMMA4 else mimo.mimo_fields(f)
    elif model_type == NEMOTRON_H:  # (its layers: its mixers)
        arch = nemotron_h_fields(f)
        num_layers = arch.pop("num_layers")
    elif model_type == DEEPSEEK_V4:
        arch = v4.v4_fields(f)
    elif model_type in MLA_MODEL_TYPES:
        partial_rotary_factor(f, model_type)  # 1: MLA rotates its whole rope part
        arch = mla_fields(f, model_type)
    else:
        arch = _gqa_fields(f, model_type)
        if model_type == "llama" and "cross_attention_layers" in hf:  # (Llama 3.2 Vision's)
            arch["cross_attention_layers"] = cross_attention_layers(hf, num_layers)
            num_layers -= len(arch["cross_attention_layers"])
        if model_type == "ministral3":
            arch.update(llama4_temperature(f))
        elif model_type in olmo.OLMO_TYPES:
            arch.update(olmo.olmo_fields(model_type))
    cfg = ModelConfig(
        name=name,
        model_type=model_type,
        vocab_size=f.required("vocab_size"),
        hidden_size=f.required("hidden_size"),
        num_layers=num_layers,
        num_heads=arch.pop("num_heads", None) or f.required("num_attention_heads"),
        intermediate_size=arch.pop("intermediate_size", None) or f.required("intermediate_size"),
        rms_norm_eps=arch.pop("rms_norm_eps", None) or float(f.required("rms_norm_eps")),
        max_position_embeddings=max_position,
        rope_theta=arch.pop("rope_theta", rope_theta),
        rope_scaling=rope_scaling,
        tie_word_embeddings=bool(f.get("tie_word_embeddings")),
        bos_token_id=f.get("bos_token_id"),
        eos_token_ids=eos_ids,
        dtype=_dtype(hf, dtype),
        quantization_block=block or (128, 128),
        quantization_zero_point=bool(int4 and int4.zero_point),
        quantization_act_order=bool(int4 and int4.act_order),
        # transformers' default is 1 where the config names none; the loader then finds out
        # whether the MTP layer's weights are there (only when drafting with it).
        num_nextn_predict_layers=arch.pop(
            "num_nextn_predict_layers", int(f.get("num_nextn_predict_layers") or 0)
        ),
        **{**window, **arch},  # (Llama 4's chunks name its full-attention layers)
    )
    return cfg.replace(model_type=served_type) if served_type else cfg
