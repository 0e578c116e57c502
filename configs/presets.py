"""Named model presets: test-size models (configs/presets_tiny.py, the shapes of
tests/fixtures), CPU-size benchmark and long-context models (presets_small.py) and real
shapes (presets_real.py); the Mamba-2 hybrids' (presets_mamba.py), Solar Open's and
K-EXAONE's (presets_more.py), Gemma 4's (presets_gemma.py), Hunyuan 3's and MiniCPM5's
(presets_newer.py), the 56th session's families (presets_kin.py), the 57th's MoE ones
(presets_moe_kin.py), the ALiBi families' (presets_alibi.py), the vision-language
wrappers' (presets_vl.py)."""

from __future__ import annotations

from configs.model_config import ModelConfig
from configs.presets_alibi import ALIBI
from configs.presets_gemma import GEMMA
from configs.presets_kin import KIN
from configs.presets_mamba import MAMBA
from configs.presets_moe_kin import MOE_KIN
from configs.presets_more import MORE
from configs.presets_newer import NEWER
from configs.presets_real import REAL
from configs.presets_recent import RECENT
from configs.presets_small import SMALL
from configs.presets_tiny import TINY
from configs.presets_vl import VL

_PARTS = (TINY, SMALL, REAL, MAMBA, MORE, GEMMA, NEWER, KIN, MOE_KIN, ALIBI, VL, RECENT)
PRESETS: dict[str, ModelConfig] = {name: cfg for part in _PARTS for name, cfg in part.items()}
assert len(PRESETS) == sum(map(len, _PARTS)), "a preset name is used twice"


def get_preset(name: str) -> ModelConfig:
    """The preset called `name`; ValueError listing the known names otherwise."""
    if name not in PRESETS:
        raise ValueError(f"model={name!r}: unknown preset; known presets: {sorted(PRESETS)}")
    return PRESETS[name]
