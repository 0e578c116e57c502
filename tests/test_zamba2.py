"""Zamba2 (configs/hf_zamba2.py, models/zamba2.py): a hybrid layer read as two (its shared
block's run, an attention layer, then its Mamba-2 mixer), the blocks run in turn with each
run's own adapters, counts as transformers builds them, bad fields refused by name, the
checkpoint's tied copies not needed. The fixture's HF parity: tests/test_hf_parity.py
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
from engine.lora import LoRASlots
from engine.step import init_kv_pages
from models.checkpoint_names import hf_tensor_names
from models.hf_loader import load_hf_params
from models.specs import count_params
from tests.test_mamba_hybrids import assert_same_params

FIXTURE = Path(__file__).parent / "fixtures" / "zamba2"


def _saved() -> dict:
    return json.loads((FIXTURE / "config.json").read_text())


def test_hybrid_layers_are_a_block_run_then_a_mixer():
    """HF layers 1, 3, 4 (hybrid) of six: layers 1, 4, 6 here run blocks 0, 1, 0 and hold
    KV pages (4 heads x 32, K and V); the six mixers hold their state rows."""
    cfg = get_preset("tiny-zamba2")
    attention = [i for i in range(cfg.num_layers) if not cfg.is_linear_layer(i)]
    assert attention == [1, 4, 6] and cfg.num_layers == 9
    kv = init_kv_pages(cfg, 4, 8, state_rows=2)
    assert [kv[i][0].shape for i in attention] == [(4, 8, 4, 32)] * 3
    assert all(kv[i][-1].shape[0] == 2 for i in range(9) if i not in attention)
    assert cfg.kv_bytes_per_token(4) == 3 * 2 * 4 * 32 * 4
    names = hf_tensor_names(cfg)
    # Each run's adapters, under its block's first hybrid layer; the projection per layer.
    adapter = "model.layers.{}.shared_transformer.self_attn.linear_q_adapter_list.{}.0.weight"
    assert names[adapter.format(1, 2)].targets == (("layers", 6, "q_a"),)
    assert names[adapter.format(3, 1)].targets == (("layers", 4, "q_a"),)
    assert names["model.layers.4.linear.weight"].targets == (("layers", 6, "linear_out"),)
    assert "model.layers.4.shared_transformer.self_attn.q_proj.weight" not in names
    assert names["model.layers.4.mamba_decoder.input_layernorm.weight"].targets == (
        ("layers", 7, "attn_norm"),
    )


def test_counts_as_transformers_builds_them():
    """transformers 5.25's Zamba2ForCausalLM on the meta device: 2,481,848,336 parameters
    with Zamba2Config's defaults (54 layers, 9 hybrid, one shared block, MLP adapters
    alone), 2,697,604,000 with two blocks, attention adapters and 80 mixer heads."""
    cfg = config_from_hf({"model_type": "zamba2"})  # (every field its class's default)
    assert cfg.num_layers == 54 + 9 and count_params(cfg)[0] == 2_481_848_336
    both = dict(model_type="zamba2", num_mem_blocks=2, use_shared_attention_adapter=True)
    both.update(n_mamba_heads=80)
    assert count_params(config_from_hf(both))[0] == 2_697_604_000


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(rms_norm_eps=1e-6), "rms_norm_eps=1e-06: only 1e-5"),
        (dict(add_bias_linear=True), "add_bias_linear=True: not supported"),
        (dict(use_long_context=True), "use_long_context=True: not supported"),
        (dict(hidden_act="relu"), "hidden_act='relu'"),
        (dict(num_key_value_heads=2), "num_key_value_heads=2: attention adapters need"),
        (dict(layers_block_type=["mamba"] * 6), "no 'hybrid' layer"),
        (dict(layers_block_type=["hybrid"] * 5), "layers_block_type: expected 6 entries"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**_saved(), **change})


def test_a_checkpoint_with_each_runs_copy_of_its_block_loads_the_same(tmp_path):
    """A save that keeps the tied blocks' copies under every hybrid layer (older saves,
    untied tools): the copies are not read, the first ones are."""
    tensors = load_file(str(FIXTURE / "model.safetensors"))
    held = {n: a for n, a in tensors.items() if n.startswith("model.layers.1.shared_transformer")}
    for n, a in held.items():
        tensors[n.replace("layers.1.", "layers.4.", 1)] = np.zeros_like(a)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(_saved()))
    cfg = get_preset("tiny-zamba2")
    assert_same_params(load_hf_params(FIXTURE, cfg), load_hf_params(tmp_path, cfg))
    assert jax.tree.structure(load_hf_params(tmp_path, cfg)["shared"]).num_leaves == 2 * 9


def test_takes_no_adapters():
    with pytest.raises(ValueError, match="zamba2 has no projection LoRA targets"):
        LoRASlots(get_preset("tiny-zamba2"), 2, 4)
