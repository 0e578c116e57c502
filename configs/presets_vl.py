"""Test-size presets of the vision-language wrappers served as their language model
(configs/hf_wrappers.py), the shapes of tests/fixtures/<wrapper> (made by
tests/fixtures/hf_fixture_archs_vl2.py): each its family's tiny preset, renamed, but where the
wrapper reads it otherwise (Command A Vision's logits unscaled; DeepSeek-VL's and HyperCLOVA X
Vision's tie, their classes' default)."""

from __future__ import annotations

from configs.model_config import ModelConfig
from configs.presets_kin import KIN
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
}
VL_FIXTURES = tuple(_FAMILY)
VL: dict[str, ModelConfig] = {}
for _arch, _cfg in _FAMILY.items():
    VL["tiny-" + _arch.replace("_", "-")] = _cfg.replace(name="tiny-" + _arch.replace("_", "-"))
