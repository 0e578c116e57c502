"""Parameter counts of the real-shape presets against the published figures (abstract shapes via
jax.eval_shape; nothing is allocated)."""

from __future__ import annotations

import pytest

from configs.presets import get_preset
from models.specs import count_params


@pytest.mark.parametrize(
    "preset, total, total_tol, active, active_tol",
    [
        ("deepseek-v3", 671e9, 0.02, 37e9, 0.05),  # DeepSeek-V3 report (arXiv:2412.19437)
        ("qwen3-30b-a3b", 30.5e9, 0.02, 3.3e9, 0.05),  # Qwen3 model card
        ("llama-3.1-70b", 70.55e9, 0.01, 70.55e9, 0.01),  # dense: all active
    ],
)
def test_param_counts(preset, total, total_tol, active, active_tol):
    got_total, got_active = count_params(get_preset(preset))
    assert got_total == pytest.approx(total, rel=total_tol)
    assert got_active == pytest.approx(active, rel=active_tol)
