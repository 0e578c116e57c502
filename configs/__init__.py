"""Frozen configs and named presets."""

from configs.model_config import ModelConfig, RopeScaling
from configs.presets import PRESETS, get_preset

__all__ = ["PRESETS", "ModelConfig", "RopeScaling", "get_preset"]
