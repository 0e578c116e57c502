"""Multimodal checkpoints served as their language model alone (vLLM's text-only use: the
vision tower's weights are not read): config.json's text_config is the model, of one of
hf_config.SUPPORTED_MODEL_TYPES or a vision-language text type read as the family it is
(_VL_TEXT). Each wrapper's behaviour here is transformers 5.25's class's, checked by a
fixture built with that class (tests/fixtures/hf_fixture_archs_vl*.py) or, for wrappers
whose language model and names are another fixture's, by its config read alike
(tests/test_vl_wrappers.py)."""

from __future__ import annotations

from configs.hf_aria import ARIA
from configs.hf_gemma3 import GEMMA3
from configs.hf_gemma3n import GEMMA3N
from configs.hf_gemma4 import GEMMA4, GEMMA4_UNIFIED

# Each wrapper's default text model_type, and its class's default tie_word_embeddings
# (transformers ties by the top-level field, not text_config's).
MULTIMODAL_WRAPPERS = {
    "mistral3": ("mistral", True),
    "mistral_large4": ("mistral_large4_text", False),
    "kimi_k25": ("deepseek_v3", True),  # Kimi K2.5: DeepSeek-V3's language model
    "llama4": ("llama4_text", False),  # Llama 4 Scout, Maverick
    "qwen3_vl_moe": ("qwen3_vl_moe_text", False),  # Qwen3-VL-30B-A3B, -235B-A22B
    "qwen3_vl": ("qwen3_vl_text", False),
    "cosmos3_omni": ("qwen3_vl_text", False),  # NVIDIA's Cosmos3 reasoner (Qwen3-VL's classes)
    "cosmos3_edge": ("cosmos3_edge_text", False),  # NVIDIA's Cosmos3 Edge
    "glm4v_moe": ("glm4v_moe_text", False),  # GLM-4.5V, GLM-4.6V
    "glm4v": ("glm4v_text", False),  # GLM-4.1V-9B-Thinking
    "glm46v": ("glm4v_text", False),  # GLM-4.6V-Flash
    "glmga": ("glm4v_text", False),  # (GLM-4.6V's classes, its config renamed)
    "glm_ocr": ("glm_ocr_text", False),  # GLM-OCR
    "hunyuan_vl": ("hunyuan_vl_text", True),  # HunyuanOCR
    "granite_docling": ("granite_docling_text", True),  # Granite-Docling (model.text_model.)
    "granite4_vision": ("granite4_vision_text", False),  # Granite 4 Vision (model.language_model.)
    "qwen3_5": ("qwen3_5_text", False),  # Qwen3.5 (dense)
    "qwen3_5_moe": ("qwen3_5_moe_text", False),  # Qwen3.5-35B-A3B ... -397B-A17B
    "mllama": ("mllama_text_model", False),  # Llama 3.2 Vision 11B, 90B (never tied)
    "gemma4": (GEMMA4, True),  # Gemma 4 26B-A4B, 31B, E2B, E4B
    "gemma4_unified": (GEMMA4_UNIFIED, True),  # Gemma 4 12B (read as gemma4_text)
    "gemma3": (GEMMA3, True),  # Gemma 3 4B, 12B, 27B
    "gemma3n": (GEMMA3N, True),  # Gemma 3n E2B, E4B
    "aria": (ARIA, False),  # Rhymes' Aria
    "qwen2_vl": ("qwen2_vl_text", False),  # Qwen2-VL 2B, 7B, 72B
    "qwen2_5_vl": ("qwen2_5_vl_text", False),  # Qwen2.5-VL 3B, 7B, 32B, 72B
    # Llama's (or Mistral's) language model
    "llava": ("llama", False),  # LLaVA-1.5, Pixtral (HF), ...
    "llava_next": ("llama", False),  # LLaVA-NeXT
    "llava_next_video": ("llama", False),  # LLaVA-NeXT-Video
    "vipllava": ("llama", False),  # ViP-LLaVA
    "video_llava": ("llama", False),  # Video-LLaVA
    "perception_lm": ("llama", False),  # Meta's Perception LM (LLaVA's classes)
    "emu3": ("emu3_text_model", False),  # BAAI's Emu3 (text_model.model., text_model.lm_head)
    "idefics3": ("llama", False),  # Idefics3
    "smolvlm": ("llama", False),  # SmolVLM, SmolVLM2
    "idefics2": ("mistral", False),  # Idefics2 (model.text_model.)
    "janus": ("llama", True),  # Janus-Pro (-hf)
    "deepseek_vl": ("llama", True),  # DeepSeek-VL (-hf)
    "deepseek_vl_hybrid": ("llama", True),
    # Qwen2's, Qwen3's, Qwen3.5's
    "llava_onevision": ("qwen2", False),  # LLaVA-OneVision
    "internvl": ("qwen2", True),  # InternVL 3 / 3.5 (-hf)
    "video_llama_3": ("qwen2", False),  # VideoLLaMA3
    "fast_vlm": ("qwen2", False),  # Apple's FastVLM (LLaVA's classes)
    "got_ocr2": ("qwen2", True),  # GOT-OCR 2.0 (-hf)
    "ovis2": ("qwen2", True),  # Ovis2
    "llava_onevision1_5": ("qwen3", False),  # LLaVA-OneVision-1.5
    "ovis2_5": ("qwen3", False),  # Ovis2.5
    "qianfan_ocr": ("qwen3", False),  # Qianfan-OCR
    "lighton_ocr": ("qwen3", True),  # LightOnOCR
    "minicpmv4_6": ("qwen3_5_text", False),  # MiniCPM-V 4.6
    "minicpmv4_7": ("qwen3_5_text", False),
    "minicpm_ocr": ("qwen3_5_text", True),
    # Other families'
    "aya_vision": ("cohere2", True),  # Cohere's Aya Vision 8B, 32B
    "cohere2_vision": ("cohere2", True),  # Command A Vision (its logits unscaled)
    "lfm2_vl": ("lfm2", True),  # LFM2-VL
    "lfm3_vl": ("lfm3", True),
    "fuyu": ("persimmon", False),  # Adept's Fuyu-8B
    "exaone4_5": ("exaone4", False),  # EXAONE 4.5
    "ernie4_5_vl_moe": ("ernie4_5_vl_moe_text", True),  # ERNIE 4.5 VL 28B-A3B, 424B-A47B
    "step3p7": ("step3p5", False),  # Step 3.7 Flash (its text_config's model_type not read)
    "deepseek_ocr2": ("deepseek_ocr2_text", False),  # DeepSeek-OCR 2
    "cohere_compass": ("cohere_compass_text", False),  # Cohere's North (Qwen3-VL's wrapper)
    "molmo2": ("molmo2_text", False),  # AllenAI's Molmo2
    "paddleocr_vl": ("paddleocr_vl_text", True),  # PaddleOCR-VL
    "apertus1p5": ("apertus1p5_text", False),  # Apertus 1.5 (its head pruned to text ids)
    "hyperclovax_vision_v2": ("hyperclovax", True),  # HyperCLOVA X SEED Think Vision
    "nemotron_h_omni": ("nemotron_h", False),  # Nemotron 3 Nano Omni (its releases: llm_config)
    # Audio-language models, their language model served for text (the audio encoder not
    # read): Mistral's Voxtral, Qwen2-Audio, NVIDIA's Audio / Music Flamingo, Zhipu's
    # GLM-ASR, Qwen3-ASR, MOSS-Transcribe-Diarize, IBM's Granite Speech.
    "voxtral": ("llama", False),
    "qwen2_audio": ("qwen2", False),
    "audioflamingo3": ("qwen2", False),
    "musicflamingo": ("qwen2", False),
    "glmasr": ("llama", True),
    "qwen3_asr": ("qwen3", True),
    "moss_transcribe_diarize": ("qwen3", True),
    "granite_speech": ("granite", True),  # IBM's Granite Speech 3.3 (its LoRA: audio only)
    "granite_speech_plus": ("granite", True),
    # Omni models' thinkers (text, image, audio in; text out), Qwen3-MoE's and Qwen2's
    "qwen3_omni_moe_thinker": ("qwen3_omni_moe_text", False),
    "qwen2_5_omni_thinker": ("qwen2_5_omni_text", False),
}
# Omni checkpoints whose thinker (its config thinker_config, its tensors under thinker.) is
# served, the talker and code2wav not read: Qwen3-Omni-30B-A3B, Qwen2.5-Omni 3B / 7B.
OMNI_WRAPPERS = {"qwen3_omni_moe": "qwen3_omni_moe_thinker", "qwen2_5_omni": "qwen2_5_omni_thinker"}
# Wrappers whose released config.json keeps the language model's fields at the top level
# (no text_config; transformers reads them into one).
FLAT_WRAPPERS = ("qwen2_vl", "qwen2_5_vl")
# Wrappers whose pre-v5 saves kept tie_word_embeddings in text_config: transformers carries
# a true one to the top level.
TIE_FROM_TEXT = ("qwen2_vl", "qwen2_5_vl", "llava", "llava_onevision", "llava_next_video")
TIE_FROM_TEXT += ("video_llama_3", "glm4v", "glm_ocr", "hunyuan_vl", "fast_vlm", "perception_lm")
# Wrappers whose head does not apply the language model's logit scale (the field named):
# transformers' Cohere2VisionForConditionalGeneration and GraniteSpeechForConditionalGeneration
# take lm_head alone (Aya Vision's, Granite-Docling's scale; vLLM scales Granite Speech's).
UNSCALED_LOGITS = {"cohere2_vision": "logit_scale"}
UNSCALED_LOGITS.update(granite_speech="logits_scaling", granite_speech_plus="logits_scaling")


def _glm4v_head_dim(text: dict) -> int:
    """GLM-4.1V's attention: heads hidden_size / num_attention_heads wide, whatever head_dim."""
    return text["hidden_size"] // text["num_attention_heads"]


# Language models of vision-language checkpoints that are another family's, read with their
# own classes' defaults (transformers 5.25's <Wrapper>TextConfig) and the fields those
# classes fix (a callable: of the merged config): Qwen3-VL's are Qwen3-MoE's (top-k always
# renormalized) and Qwen3's, with no sliding window; GLM-4.5V's is GLM-4.5's with no q/k
# norms and no MTP layer; GLM-4.1V's is GLM-4-0414's (biased q/k/v, sandwich norms) with
# whole-head RoPE by default, GLM-OCR's the same without biases; HunyuanOCR's is Hunyuan's
# dense one, tied; Llama 3.2 Vision's is Llama's beside cross-attention layers (skipped for
# text: ModelConfig.cross_attention_layers), never tied; the Omni thinkers' are Qwen3-MoE's
# (top-k renormalized by default) and Qwen2's; Granite-Docling's is Granite's under its own
# multipliers; Qwen2-VL's and Qwen2.5-VL's are Qwen2's (biased q/k/v, its window fields).
# Their M-RoPE gives text tokens the same position on each axis: the text's RoPE
# (_TEXT_ROPE; image and video inputs: not supported).
# fmt: off
_VL_TEXT = {  # text model_type -> (the family, class defaults, fixed fields)
    "qwen3_vl_moe_text": ("qwen3_moe", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
        num_attention_heads=16, num_key_value_heads=16, head_dim=128,
        max_position_embeddings=128000, rms_norm_eps=1e-6, moe_intermediate_size=1408,
        num_experts_per_tok=4, num_local_experts=60, decoder_sparse_step=1, mlp_only_layers=[],
        bos_token_id=None, eos_token_id=None, rope_theta=500000.0,
    ), dict(norm_topk_prob=True, use_sliding_window=False)),
    "qwen3_vl_text": ("qwen3", dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, head_dim=128,
        max_position_embeddings=128000, rms_norm_eps=1e-6, rope_theta=500000.0,
    ), dict(use_sliding_window=False)),
    "glm4v_moe_text": ("glm4_moe", dict(
        vocab_size=151424, max_position_embeddings=65536, attention_bias=True,
    ), dict(use_qk_norm=False, num_nextn_predict_layers=0)),
    "qwen3_omni_moe_text": ("qwen3_moe", dict(
        vocab_size=3584, hidden_size=2048, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
        rms_norm_eps=1e-6, rope_theta=1000000.0, num_experts=128, num_experts_per_tok=8,
        moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], sliding_window=None, bos_token_id=None, eos_token_id=None,
    ), dict(use_sliding_window=False)),
    "qwen2_5_omni_text": ("qwen2", dict(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
        rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False, sliding_window=None,
        max_window_layers=28, bos_token_id=None, eos_token_id=None,
    ), {}),
    "mllama_text_model": ("llama", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=40,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=500000.0, bos_token_id=128000, eos_token_id=128001,
        cross_attention_layers=[3, 8, 13, 18, 23, 28, 33, 38],
    ), dict(tie_word_embeddings=False, attention_bias=False, mlp_bias=False)),
    "glm4v_text": ("glm4", dict(
        vocab_size=151552, hidden_size=4096, intermediate_size=13696, num_hidden_layers=40,
        num_attention_heads=32, num_key_value_heads=2, max_position_embeddings=32768,
        rms_norm_eps=1e-5, rope_theta=10000.0, partial_rotary_factor=1.0,
    ), dict(attention_bias=True, head_dim=_glm4v_head_dim)),
    "glm_ocr_text": ("glm4", dict(
        vocab_size=59392, hidden_size=1024, intermediate_size=4096, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=10000.0, partial_rotary_factor=1.0,
    ), dict(attention_bias=False, head_dim=_glm4v_head_dim)),
    "hunyuan_vl_text": ("hunyuan_v1_dense", dict(
        vocab_size=290943, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=2048,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
    ), {}),
    "granite_docling_text": ("granite", dict(
        vocab_size=133800, hidden_size=1024, intermediate_size=2048, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=32768,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
        embedding_multiplier=12.0, logits_scaling=4.0, residual_multiplier=0.263,
        attention_multiplier=0.015625,
    ), {}),
    "granite4_vision_text": ("granite", {}, {}),  # (GraniteConfig's own defaults)
    "emu3_text_model": ("llama", dict(  # (BAAI's Emu3: Llama's, dropout aside)
        vocab_size=184622, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=9216,
        rms_norm_eps=1e-5, bos_token_id=151849, eos_token_id=151850, rope_theta=1e6,
        tie_word_embeddings=False,
    ), dict(attention_bias=False, mlp_bias=False)),
    # Cosmos3 Edge's: Arcee's layers (a ReLU-squared MLP without a gate), its M-RoPE plain
    "cosmos3_edge_text": ("arcee", dict(
        vocab_size=131072, hidden_size=2048, intermediate_size=9216, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, hidden_act="relu2",
        max_position_embeddings=131072, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=11,
        tie_word_embeddings=False, rope_theta=100_000_000.0,
    ), {}),
    **{t: ("qwen2", dict(  # (Qwen2VLTextConfig's and Qwen2_5_VLTextConfig's, alike)
        vocab_size=152064, hidden_size=8192, intermediate_size=29568, num_hidden_layers=80,
        num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=32768,
        rms_norm_eps=1e-5, use_sliding_window=False, sliding_window=4096, max_window_layers=80,
        bos_token_id=151643, eos_token_id=151645, rope_theta=1000000.0,
    ), {}) for t in ("qwen2_vl_text", "qwen2_5_vl_text")},
}
# fmt: on


# The top level's fields that decide the language model's, carried into its config.
_CARRIED = ("quantization_config", "dtype", "torch_dtype")
# M-RoPE's rope types as their text positions rotate: Qwen2-VL's "mrope" the plain RoPE,
# HunyuanOCR's "xdrope" Hunyuan's NTK-alpha one (its class reads it as "dynamic").
_TEXT_ROPE = {"mrope": "default", "xdrope": "dynamic"}


def language_model_config(hf: dict) -> dict:
    """The config of the model served: `hf` itself, or a multimodal wrapper's text_config
    (MULTIMODAL_WRAPPERS) with the top level's quantization_config, dtype and
    tie_word_embeddings (which decide the language model's, as transformers reads them)."""
    if hf.get("model_type") in _VL_TEXT:  # (such a text_config read alone)
        return _vl_text(hf)
    if hf.get("model_type") in OMNI_WRAPPERS:
        thinker = hf.get("thinker_config", {})
        if not isinstance(thinker, dict):
            raise ValueError(f"HF config thinker_config={thinker!r}: expected a JSON object")
        carried = {k: hf[k] for k in _CARRIED if k in hf}
        return language_model_config(
            {"model_type": OMNI_WRAPPERS[hf["model_type"]], **carried, **thinker}
        )
    wrapper = MULTIMODAL_WRAPPERS.get(hf.get("model_type"))
    if wrapper is None:
        return hf
    default_type, default_tie = wrapper
    flat = hf["model_type"] in FLAT_WRAPPERS and "text_config" not in hf
    skip = ("model_type", "vision_config", "text_config")
    text = hf.get("text_config", hf.get("llm_config", {}))  # (Nemotron Omni's: llm_config)
    text = {k: v for k, v in hf.items() if k not in skip} if flat else text
    if not isinstance(text, dict):
        raise ValueError(f"HF config text_config={text!r}: expected a JSON object")
    out = {"model_type": default_type, **text}
    if hf["model_type"] == "kimi_k25" and out["model_type"] == "kimi_k2":
        out["model_type"] = "deepseek_v3"  # (Kimi_K25Config's reading of its remote code's)
    if hf["model_type"] == "step3p7":  # (Step3p7Config drops its remote code's)
        out["model_type"] = default_type
    out["tie_word_embeddings"] = hf.get("tie_word_embeddings", default_tie)
    if hf["model_type"] in TIE_FROM_TEXT and text.get("tie_word_embeddings"):
        out["tie_word_embeddings"] = True
    if hf["model_type"] in UNSCALED_LOGITS:
        out[UNSCALED_LOGITS[hf["model_type"]]] = 1.0
    out |= {k: hf[k] for k in _CARRIED if k in hf}
    return _vl_text(out) if out["model_type"] in _VL_TEXT else out


def _vl_text(text: dict) -> dict:
    """A vision-language model's text config as the config of the family it is (_VL_TEXT)."""
    family, defaults, fixed = _VL_TEXT[text["model_type"]]
    out = {**defaults, **text, "model_type": family}
    out |= {k: v(out) if callable(v) else v for k, v in fixed.items()}
    for key in ("rope_parameters", "rope_scaling"):  # (M-RoPE's types: the text's RoPE)
        rope = out.get(key)
        kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
        if kind in _TEXT_ROPE:
            out[key] = {k: v for k, v in rope.items() if k != "type"} | {
                "rope_type": _TEXT_ROPE[kind]
            }
    return out


def cross_attention_layers(hf: dict, num_layers: int) -> tuple[int, ...]:
    """Llama 3.2 Vision's cross_attention_layers (of its text config read as Llama's):
    distinct layer indices below num_hidden_layers, some layer left for the text."""
    layers = hf["cross_attention_layers"]
    ok = isinstance(layers, list) and all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in layers
    )
    if not ok or len(set(layers)) != len(layers) or len(layers) >= num_layers:
        raise ValueError(
            f"HF config cross_attention_layers={layers!r}: expected distinct layer indices "
            f"in [0, num_hidden_layers={num_layers}), fewer than all"
        )
    return tuple(sorted(layers))
