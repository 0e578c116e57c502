"""Named model presets: test-size models (configs/presets_tiny.py, the shapes of
tests/fixtures), CPU-size benchmark and long-context models (presets_small.py) and real
shapes (presets_real.py); Nemotron-H's of each kind (presets_mamba.py)."""

from __future__ import annotations

from configs.model_config import ModelConfig
from configs.presets_mamba import NEMOTRON
from configs.presets_real import REAL
from configs.presets_small import SMALL
from configs.presets_tiny import TINY

PRESETS: dict[str, ModelConfig] = {**TINY, **SMALL, **REAL, **NEMOTRON}
assert len(PRESETS) == len(TINY) + len(SMALL) + len(REAL) + len(NEMOTRON), "a name used twice"


def get_preset(name: str) -> ModelConfig:
    """The preset called `name`; ValueError listing the known names otherwise."""
    if name not in PRESETS:
        raise ValueError(f"model={name!r}: unknown preset; known presets: {sorted(PRESETS)}")
    return PRESETS[name]
