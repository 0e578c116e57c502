"""Gemma 4's configs and checkpoints (configs/hf_gemma4.py): a release's config.json spelling
(the gemma4 wrapper's text_config with global_head_dim / num_global_key_value_heads) and
transformers' saved one (per_layer_config) read to the same model, the full layers' KV
heads as transformers decides them, bad fields refused by name, the wrapper's checkpoint
names (model.language_model.*, the vision tower's tensors not read), and the real shapes'
cache. The fixture's HF parity: tests/test_hf_parity.py (reference path) and
tests/test_engine.py (paged engine)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.hf_loader import load_hf_params
from tests.test_mamba_hybrids import assert_same_params

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "gemma4"
NON_ARCH = ("name", "dtype", "bos_token_id", "eos_token_ids", "max_position_embeddings")


def _saved() -> dict:
    """The fixture's config.json (transformers 5.25's save: per_layer_config)."""
    return json.loads((FIXTURE / "config.json").read_text())


def _release_text() -> dict:
    """The fixture's text config as a release spells it: the full layers' geometry as
    global_head_dim / num_global_key_value_heads, no per_layer_config."""
    text = {k: v for k, v in _saved().items() if k != "per_layer_config"}
    return dict(text, global_head_dim=32, num_global_key_value_heads=1)


def _arch(cfg) -> dict:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in NON_ARCH}


def test_release_spelling_in_its_wrapper_reads_as_the_saved_one():
    want = get_preset("tiny-gemma4")
    wrapper = dict(
        architectures=["Gemma4ForConditionalGeneration"],
        model_type="gemma4",
        text_config=_release_text(),
        vision_config={"model_type": "gemma4_vision", "hidden_size": 32},
        audio_config=None,
        tie_word_embeddings=True,
    )
    assert _arch(config_from_hf(wrapper)) == _arch(want)
    assert _arch(config_from_hf(_release_text())) == _arch(want)
    assert _arch(config_from_hf(FIXTURE)) == _arch(want)


def test_full_layers_kv_heads_as_transformers_decides():
    """Gemma4TextConfig takes num_global_key_value_heads only with attention_k_eq_v (its
    __post_init__); without it the full layers keep num_key_value_heads, and a v_proj."""
    plain = config_from_hf(dict(_release_text(), attention_k_eq_v=False))
    assert (plain.global_head_dim, plain.global_num_kv_heads, plain.attention_k_eq_v) == (
        32,
        2,
        False,
    )
    assert [plain.layer_kv_widths(i) for i in range(4)] == [(32, 32), (64, 64)] * 2
    # Defaults: a 512-wide head where the release names none; the last layer made full.
    text = {k: v for k, v in _release_text().items() if k != "global_head_dim"}
    text["layer_types"] = ["sliding_attention"] * 4
    cfg = config_from_hf(text)
    assert (cfg.global_head_dim, cfg.full_attention_layers) == (512, (3,))
    # Every layer full: no window, the global geometry on all of them.
    full = config_from_hf(dict(_release_text(), layer_types=["full_attention"] * 4))
    assert full.sliding_window is None
    assert [full.layer_head_dim(i) for i in range(4)] == [32] * 4


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(num_kv_shared_layers=4), r"num_kv_shared_layers=4: must be in \[0, 4\)"),
        (dict(num_kv_shared_layers=3), "layer 1 .full_attention. has no earlier layer"),
        (dict(attention_bias=True), "attention_bias=True"),
        (dict(use_bidirectional_attention="all"), "use_bidirectional_attention='all'"),
        (dict(hidden_activation="gelu"), "hidden_activation='gelu'"),
        (dict(layer_types=["sliding_attention"] * 3), "layer_types: expected 4"),
        (
            dict(rope_parameters={"full_attention": {"rope_type": "yarn"}}),
            "rope_type 'yarn'",
        ),
    ],
)
def test_bad_gemma4_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**_release_text(), **change})


def test_per_layer_config_beyond_head_geometry_is_refused():
    saved = _saved()
    odd = dict(saved, per_layer_config={"1": {"head_dim": 32, "intermediate_size": 8}})
    with pytest.raises(ValueError, match="per_layer_config: only head_dim"):
        config_from_hf(odd)
    uneven = dict(saved, per_layer_config={"1": {"head_dim": 32}, "3": {"head_dim": 64}})
    with pytest.raises(ValueError, match="full_attention layers differ"):
        config_from_hf(uneven)


def test_checkpoint_in_its_wrapper_loads_the_same(tmp_path):
    """Gemma4ForConditionalGeneration's names: the language model under
    model.language_model., beside a vision tower whose tensors are not read."""
    tensors = load_file(str(FIXTURE / "model.safetensors"))
    wrapped = {n.replace("model.", "model.language_model.", 1): a for n, a in tensors.items()}
    wrapped["model.vision_tower.encoder.layers.0.mlp.up_proj.weight"] = np.ones((4, 4), "f4")
    assert "model.language_model.layers.0.router.proj.weight" in wrapped
    assert not any(n.startswith("model.layers.") for n in wrapped)
    save_file(wrapped, str(tmp_path / "model.safetensors"))
    wrapper = dict(model_type="gemma4", text_config=_saved(), tie_word_embeddings=True)
    (tmp_path / "config.json").write_text(json.dumps(wrapper))
    cfg = get_preset("tiny-gemma4")
    want, got = load_hf_params(FIXTURE, cfg), load_hf_params(tmp_path, cfg)
    assert_same_params(want, got)


def test_real_shapes_cache():
    """26B-A4B: 25 windowed layers of 8 KV heads x 256 and 5 global ones of 2 x 512 (K and V
    each; no v projection, the cache still holds both)."""
    cfg = get_preset("gemma-4-26b-a4b")
    widths = [cfg.layer_kv_widths(i) for i in range(cfg.num_layers)]
    assert widths.count((2048, 2048)) == 25 and widths.count((1024, 1024)) == 5
    assert cfg.full_attention_layers == (5, 11, 17, 23, 29)
    assert cfg.hybrid_window == 1024
    assert cfg.kv_bytes_per_token(2) == (25 * 4096 + 5 * 2048) * 2


@pytest.mark.parametrize("kv_dtype", [None, "fp8"])
def test_pool_bytes_are_the_allocated_arrays(kv_dtype):
    """The budget's pool sizes (engine/kv_budget.py) count each pool's own layers: the
    windowed pool's 2 KV heads of 16 and the main pool's 1 of 32 (fp8: scales too)."""
    from engine import kv_quant
    from engine.kv_budget import kv_pool_bytes
    from engine.step import init_kv_pages

    cfg = get_preset("tiny-gemma4")
    dtype = kv_quant.FP8_DTYPE if kv_dtype else None
    kv = init_kv_pages(cfg, 12, 8, dtype, window_num_pages=5)
    allocated = sum(x.nbytes for x in jax.tree.leaves(kv))
    assert kv_pool_bytes(cfg, 12, 5, 8, dtype) == allocated
    assert [kv[i][0].shape for i in range(2)] == [(5, 8, 2, 16), (12, 8, 1, 32)]


def test_capacity_counts_each_pools_layers():
    """26B-A4B at 262,144 tokens on 141 GiB: 5 global layers x 2 x 1,024 bf16 a token over
    the context, 25 windowed ones x 2 x 2,048 over their window's 65 pages of 16."""
    from long_context.capacity import capacity

    c = capacity("gemma-4-26b-a4b", context=262144, hbm_gib=141)
    per_sequence = 5 * 2 * 1024 * 2 * 262144 + 25 * 2 * 2048 * 2 * 65 * 16
    assert c.max_sequences == c.kv_budget_bytes_per_device // per_sequence == 15
