"""Gemma 4's small models (E2B / E4B: per-layer inputs, KV shared across layers, double-wide
MLPs; configs/hf_gemma4.py) and Gemma 3n (configs/hf_gemma3n.py, models/gemma3n.py): the
layers reading another's K and V cache nothing and hold no K / V weights, the pools and the
real shapes count only the layers that cache, bad fields are refused by name, the wrapped
and released checkpoint layouts load alike. The fixtures' HF parity: tests/test_hf_parity.py
(reference path) and tests/test_engine.py (paged engine)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from engine import kv_quant
from engine.kv_budget import kv_pool_bytes
from engine.lora import LoRASlots
from engine.step import init_kv_pages
from models.hf_loader import load_hf_params
from models.specs import count_params, param_specs
from tests.test_mamba_hybrids import assert_same_params

FIXTURES = Path(__file__).parent / "fixtures"


def _saved(arch: str) -> dict:
    return json.loads((FIXTURES / arch / "config.json").read_text())


@pytest.mark.parametrize("kv_dtype", [None, "fp8"])
def test_shared_layers_cache_nothing_and_the_pools_count_the_others(kv_dtype):
    """tiny-gemma4-e: layers 3-5 read layers 1's and 2's pages; the windowed pool holds
    layers 0 and 2 (2 KV heads of 16, K and V), the main pool layer 1 (2 of 32)."""
    cfg = get_preset("tiny-gemma4-e")
    assert cfg.kv_source_layers == (0, 1, 2, 1, 2, 1)
    dtype = kv_quant.FP8_DTYPE if kv_dtype else None
    kv = init_kv_pages(cfg, 12, 8, dtype, window_num_pages=5)
    assert [len(kv[i]) for i in range(6)] == [2, 2, 2, 0, 0, 0]
    allocated = sum(x.nbytes for x in jax.tree.leaves(kv))
    assert kv_pool_bytes(cfg, 12, 5, 8, dtype) == allocated
    item, scale = (1, 4) if kv_dtype else (4, 0)  # (fp8: a float32 scale per KV head row)
    windowed = 2 * 5 * 8 * 2 * (2 * 16 * item + 2 * scale)
    main = 12 * 8 * 2 * (2 * 32 * item + 2 * scale)
    assert allocated == windowed + main


def test_shared_layers_hold_no_key_or_value_weights():
    for preset in ("tiny-gemma4-e", "tiny-gemma3n"):
        layers = param_specs(get_preset(preset))["layers"]
        for i, layer in enumerate(layers):
            held = {"wk", "wv", "k_norm"} & set(layer["attn"])
            assert held == (set() if i >= 3 else {"wk", "wv", "k_norm"}), (preset, i)


def test_real_shapes_count_as_transformers_builds_them():
    """Parameter counts of transformers 5.25's Gemma4ForCausalLM / Gemma3nForCausalLM built
    on the meta device from these configs (4,628,569,344 for E2B plus its 35 layer_scalar
    buffers, which the engine holds as parameters); bf16 KV bytes per token: the 15 (E2B) or
    20 (Gemma 3n) layers that cache, K and V."""
    e2b = get_preset("gemma-4-e2b")
    assert count_params(e2b)[0] == 4_628_569_344 + 35
    assert e2b.kv_bytes_per_token(2) == (12 * 2 * 256 + 3 * 2 * 512) * 2
    assert [e2b.kv_source(i) for i in (14, 15, 19, 34)] == [14, 13, 14, 14]
    assert e2b.layer_intermediate_size(14) == 6144 and e2b.layer_intermediate_size(15) == 12288
    assert count_params(get_preset("gemma-3n-e2b"))[0] == 4_435_182_688
    assert count_params(get_preset("gemma-3n-e4b"))[0] == 6_835_235_568
    for name in ("gemma-3n-e2b", "gemma-3n-e4b"):
        assert get_preset(name).kv_bytes_per_token(2) == 20 * 2 * 2 * 256 * 2


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(kv_source_layers=(0, 1, 2, 0, 2, 1)), r"kv_source_layers\[3\]=0: .* of its kind"),
        (dict(kv_source_layers=(0, 1, 2, 4, 2, 1)), r"kv_source_layers\[3\]=4"),
        (dict(kv_source_layers=(0, 1)), "one entry per layer"),
        (dict(qk_norm_full=True), "not beside qk_norm_full"),
        (dict(per_layer_vocab_size=513), "per_layer_vocab_size=513: must be in"),
        (dict(layer_intermediate_sizes=(48, 96)), "layer_intermediate_sizes=.*one width"),
        (dict(altup_num_inputs=4), "altup_num_inputs=4: 0, or >= 2 with laurel_rank"),
        (dict(activation_sparsity=(1.0,) * 6), r"activation_sparsity=.*\[0, 1\)"),
    ],
)
def test_bad_fields_are_refused_by_name(change, match):
    with pytest.raises(ValueError, match=match):
        get_preset("tiny-gemma4-e").replace(**change)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(altup_active_idx=1), "altup_active_idx=1: only 0"),
        (dict(altup_correct_scale=False), "altup_correct_scale=False: only True"),
        (dict(intermediate_size=[48, 96]), r"intermediate_size=\[48, 96\]: one number"),
        (dict(activation_sparsity_pattern=[0.5]), "activation_sparsity_pattern=.*one per layer"),
        (dict(num_kv_shared_layers=6), r"num_kv_shared_layers=6: must be in \[0, 6\)"),
        (dict(hidden_activation="gelu"), "hidden_activation='gelu'"),
    ],
)
def test_bad_gemma3n_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**_saved("gemma3n"), **change})


def test_gemma3n_in_its_wrapper_with_a_releases_extra_tensors_loads_the_same(tmp_path):
    """Gemma3nForConditionalGeneration's layout: the language model under
    model.language_model., an audio tower beside it, and (as the releases keep them) K / V
    projections on the layers that read another's: none of them read."""
    tensors = load_file(str(FIXTURES / "gemma3n" / "model.safetensors"))
    wrapped = {n.replace("model.", "model.language_model.", 1): a for n, a in tensors.items()}
    wrapped["model.audio_tower.conformer.0.ffw_layer_start.weight"] = np.ones((4, 4), "f4")
    for proj in ("k_proj", "v_proj"):
        wrapped[f"model.language_model.layers.4.self_attn.{proj}.weight"] = np.ones((32, 64), "f4")
    save_file(wrapped, str(tmp_path / "model.safetensors"))
    text = dict(_saved("gemma3n"))
    wrapper = dict(model_type="gemma3n", text_config=text, audio_config={"hidden_size": 8})
    (tmp_path / "config.json").write_text(json.dumps(wrapper))
    cfg = config_from_hf(tmp_path)
    assert cfg.replace(name="tiny-gemma3n") == get_preset("tiny-gemma3n").replace(dtype=cfg.dtype)
    want = load_hf_params(FIXTURES / "gemma3n", cfg)
    assert_same_params(want, load_hf_params(tmp_path, cfg))


def test_gemma3n_takes_no_adapters():
    with pytest.raises(ValueError, match="gemma3n_text has no projection LoRA targets"):
        LoRASlots(get_preset("tiny-gemma3n"), 2, 4)


def test_gemma4_unified_reads_as_gemma4_with_its_own_class_defaults():
    """gemma4_unified_text (in its wrapper too) is Gemma 4's text model without per-layer
    inputs or experts: its saved config reads to the tiny preset; left out, its fields take
    Gemma4UnifiedTextConfig's defaults (a 1,024-key window), not gemma4_text's (512, and
    256-wide per-layer inputs)."""
    saved = _saved("gemma4_unified")
    want = get_preset("tiny-gemma4-unified")
    for hf in (saved, dict(model_type="gemma4_unified", text_config=saved)):
        got = config_from_hf(hf)
        assert got.replace(name=want.name) == want.replace(dtype=got.dtype)
    bare = {k: v for k, v in saved.items() if k not in ("sliding_window", "per_layer_config")}
    bare.update(global_head_dim=32, num_global_key_value_heads=1)
    cfg = config_from_hf(bare)
    assert (cfg.model_type, cfg.sliding_window, cfg.per_layer_input_dim) == ("gemma4_text", 1024, 0)
    gemma4 = config_from_hf(dict(bare, model_type="gemma4_text"))
    assert (gemma4.sliding_window, gemma4.per_layer_input_dim) == (512, 256)


def test_gemma3n_release_spelling_reads_as_the_saved_one():
    """Gemma 3n's releases spell the RoPE as rope_theta / rope_local_base_freq (and carry a
    query_pre_attn_scalar its attention ignores): the same model as transformers' save."""
    saved = _saved("gemma3n")
    release = {k: v for k, v in saved.items() if k != "rope_parameters"}
    release.update(rope_theta=1e6, rope_local_base_freq=1e4, query_pre_attn_scalar=256)
    assert config_from_hf(release) == config_from_hf(saved)
    other = config_from_hf(dict(release, rope_local_base_freq=5e3))
    assert other.sliding_rope_theta == 5e3


def test_capacity_counts_the_layers_that_cache():
    """Gemma 4 E2B at 131,072 tokens on 141 GiB: 3 global layers x K and V of 1 x 512 bf16 a
    token over the context, the 12 windowed layers that cache (of 28) 1 x 256 over their
    window's 33 pages of 16; the 20 reading others' pages hold none."""
    from long_context.capacity import capacity

    c = capacity("gemma-4-e2b", context=131072, hbm_gib=141)
    per_sequence = 3 * 2 * 512 * 2 * 131072 + 12 * 2 * 256 * 2 * 33 * 16
    assert c.windowed_layers == 12
    assert c.max_sequences == c.kv_budget_bytes_per_device // per_sequence == 156
