"""Test-size presets of the vision-language and audio-language wrappers served as their
language model (configs/hf_wrappers.py), the shapes of tests/fixtures/<wrapper> (made by
tests/fixtures/hf_fixture_archs_vl2.py and hf_fixture_archs_audio.py): each its family's
tiny preset, renamed, but where the wrapper reads it otherwise (Command A Vision's and
Granite Speech's logits unscaled; GLM-OCR's q/k/v without biases; Voxtral's text class's
heads and RoPE base; the tie of the fixtures tied by their class's default or their
text_config)."""

from __future__ import annotations

from configs.model_config import ModelConfig
from configs.presets_kin import KIN
from configs.presets_mamba import MAMBA
from configs.presets_moe_kin import MOE_KIN
from configs.presets_more import MORE
from configs.presets_newer import NEWER
from configs.presets_tiny import TINY

_FAMILY = {  # wrapper fixture -> its family's tiny preset
    "aya_vision": MORE["tiny-cohere2"],
    "cohere2_vision": MORE["tiny-cohere2"].replace(logit_scale=1.0),
    "lfm2_vl": MORE["tiny-lfm2"],
    "fuyu": MOE_KIN["tiny-persimmon"],
    "exaone4_5": MORE["tiny-exaone4"],
    "deepseek_vl": KIN["tiny-llava"].replace(tie_word_embeddings=True),
    "idefics2": TINY["tiny-mistral"],
    "hyperclovax_vision_v2": KIN["tiny-hyperclovax"].replace(tie_word_embeddings=True),
    "minicpmv4_6": TINY["tiny-qwen3-5"],
    "lighton_ocr": TINY["tiny-qwen3"],
    "glm4v": NEWER["tiny-glm4"],
    "glm_ocr": NEWER["tiny-glm4"].replace(attention_bias=False, tie_word_embeddings=True),
    "hunyuan_vl": NEWER["tiny-hunyuan-v1-dense"].replace(tie_word_embeddings=True),
    # (the text_config leaves rms_norm_eps to GraniteDoclingTextConfig: 1e-5, not 1e-6)
    "granite_docling": NEWER["tiny-granite"].replace(tie_word_embeddings=True, rms_norm_eps=1e-5),
    "qwen3_omni_moe_thinker": TINY["tiny-qwen3-moe"],
    "qwen2_5_omni_thinker": TINY["tiny-qwen2"],
    # (Llama 3.2 Vision's: RoPE base 5e5 by its class; checkpoint layers 1 and 3 cross-attention)
    "mllama": KIN["tiny-llava"].replace(rope_theta=500000.0, cross_attention_layers=(1, 3)),
    "nemotron_h_omni": MAMBA["tiny-nemotron-h"],
    # The audio-language wrappers (tests/fixtures/hf_fixture_archs_audio.py)
    # (Voxtral's text_config by its class: heads 128 wide, RoPE base 1e8, as its releases)
    "voxtral": KIN["tiny-llava"].replace(head_dim=128, rope_theta=1e8),
    "qwen2_audio": TINY["tiny-qwen2"],
    "audioflamingo3": TINY["tiny-qwen2"],
    "musicflamingo": TINY["tiny-qwen2"],
    "glmasr": KIN["tiny-llava"].replace(tie_word_embeddings=True),
    "qwen3_asr": TINY["tiny-qwen3"],
    "moss_transcribe_diarize": TINY["tiny-qwen3"],
    # (Granite Speech's head: lm_head alone, without Granite's logits_scaling)
    "granite_speech": NEWER["tiny-granite"].replace(tie_word_embeddings=True, logits_scaling=1.0),
    "granite_speech_plus": NEWER["tiny-granite"].replace(
        tie_word_embeddings=True, logits_scaling=1.0
    ),
}
VL_FIXTURES = tuple(_FAMILY)
VL: dict[str, ModelConfig] = {}
for _name, _cfg in (("tiny-" + a.replace("_", "-"), c) for a, c in _FAMILY.items()):
    VL[_name] = _cfg.replace(name=_name)
