"""Attention-free models (configs/hf_mamba.py): Mamba (mamba), Falcon Mamba (falcon_mamba)
and Mamba-2 (mamba2). Their fixtures' configs read to their presets; the classes' defaults
and the released shapes counted as transformers counts them; Falcon Mamba's weightless norms
move its logits; the engine with no KV: its pools sized by the states alone, a prompt past
max_position_embeddings, a tp mesh over no heads, a deployment's size, and the options it
refuses, by field.
HF parity: tests/test_hf_parity.py; the engine's chunks, preemption and prefix-cache
snapshots: tests/test_linear_attention.py (falcon_mamba, mamba2)."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from engine import LLM, SamplingParams
from engine.kv_budget import pools_from_budget
from long_context.capacity import capacity
from models.hf_loader import load_hf_params
from models.reference import greedy_generate, prefill_bucket
from models.specs import count_params
from sharding.mesh import MeshConfig, check_layout
from sharding.rules import param_partition_specs
from tests.family_cases import FIXTURES, arch_fields, last_prefill_logits

ARCHS = ("mamba", "falcon_mamba", "mamba2")


@pytest.mark.parametrize("arch", ARCHS)
def test_fixture_configs_read_as_their_presets(arch):
    cfg = config_from_hf(FIXTURES / arch)
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-" + arch.replace("_", "-")))
    assert cfg.attention_free and set(cfg.no_ffn_layers) == set(range(cfg.num_layers))


@pytest.mark.parametrize(
    "hf, total",
    [
        # transformers 5.25's <Arch>ForCausalLM with the class's defaults on the meta device
        # (tied embeddings counted once; Falcon Mamba's weightless norms: buffers)
        (dict(model_type="mamba"), 159_308_544),
        (dict(model_type="falcon_mamba"), 159_308_544),
        (dict(model_type="mamba2"), 7_285_403_648),
    ],
)
def test_class_defaults_count_as_transformers_counts_them(hf, total):
    cfg = config_from_hf(hf, dtype="bfloat16")
    assert count_params(cfg) == (total, total)
    assert cfg.max_position_embeddings == 2048  # (none in these configs: vLLM's default)


_MAMBA = dict(model_type="mamba", vocab_size=50280)


@pytest.mark.parametrize(
    "preset, hf, total",
    [
        # The releases' shapes; each count the one transformers 5.25 gives them on the meta
        # device (the names' sizes: 130M ... 2.8B, Falcon Mamba's 7.27B)
        ("mamba-130m", dict(_MAMBA, hidden_size=768, num_hidden_layers=24), 129_135_360),
        ("mamba-370m", dict(_MAMBA, hidden_size=1024, num_hidden_layers=48), 371_516_416),
        ("mamba-790m", dict(_MAMBA, hidden_size=1536, num_hidden_layers=48), 793_204_224),
        ("mamba-1.4b", dict(_MAMBA, hidden_size=2048, num_hidden_layers=48), 1_372_178_432),
        ("mamba-2.8b", dict(_MAMBA, hidden_size=2560, num_hidden_layers=64), 2_768_345_600),
        (
            "falcon-mamba-7b",
            dict(model_type="falcon_mamba", vocab_size=65024, hidden_size=4096,
                 num_hidden_layers=64, tie_word_embeddings=False),
            7_272_665_088,
        ),
        ("mamba-codestral-7b", dict(model_type="mamba2"), 7_285_403_648),
    ],
)  # fmt: skip
def test_real_presets_are_what_the_reader_makes_of_their_shapes(preset, hf, total):
    cfg = get_preset(preset)
    skip = ("name", "bos_token_id", "eos_token_ids")
    assert arch_fields(config_from_hf(hf, dtype="bfloat16"), skip) == arch_fields(cfg, skip)
    assert count_params(cfg) == (total, total)


def test_falcon_mambas_weightless_norms_move_its_logits():
    """The fixture's logits at prompt 0's last position are transformers' with dt, B and C
    RMS-normed (eps mixer_rms_eps, 1e-3 there); read as a Mamba (no norms) or with the
    class's eps they are far from them, so its HF parity tests both."""
    cfg = get_preset("tiny-falcon-mamba")
    ref = json.loads((FIXTURES / "falcon_mamba" / "reference.json").read_text())
    params = load_hf_params(FIXTURES / "falcon_mamba", cfg)
    want = np.asarray(ref["last_prefill_logits_prompt0"], np.float32)
    prompt = ref["prompts"][0]
    np.testing.assert_allclose(last_prefill_logits(cfg, params, prompt), want, atol=1e-4)
    for other in (cfg.replace(model_type="mamba"), cfg.replace(linear_norm_eps=1e-6)):
        assert np.abs(last_prefill_logits(other, params, prompt) - want).max() > 2e-3


@pytest.mark.parametrize(
    "hf, match",
    [
        (dict(model_type="mamba", use_bias=True), "use_bias=True"),
        (dict(model_type="falcon_mamba", hidden_act="gelu"), "hidden_act='gelu'"),
        (dict(model_type="mamba2", num_heads=96), "num_heads=96 x head_dim=64"),
    ],
)
def test_reader_refuses_by_field(hf, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf(hf)


def test_only_mambas_mixers_make_a_model_without_attention():
    with pytest.raises(ValueError, match="only Mamba's mixers"):
        get_preset("tiny-qwen3-next").replace(linear_attention_layers=(0, 1, 2, 3))


def test_pools_are_sized_by_the_states_alone():
    """No KV: every sequence gets its full length of (empty) pages, the budget less the
    penalty state goes to the state rows; too small a budget for them is refused."""
    cfg = get_preset("tiny-mamba2")
    rows = 4
    assert cfg.kv_bytes_per_token() == 0
    num_pages, window = pools_from_budget(cfg, 64 << 20, 16, None, 2, 128, None, rows)
    assert (num_pages, window) == (2 * 128, None)
    with pytest.raises(ValueError, match="max_num_seqs=2: its 4 recurrent states"):
        pools_from_budget(cfg, cfg.linear_state_bytes() * 3, 16, None, 2, 128, None, rows)


def test_a_mesh_splits_the_mixers_whatever_num_heads_says():
    """tp over Mamba-1's channels (its one key head, B and C, read by all of them, is not a
    reason to keep them whole) and Mamba-2's heads; num_heads (1, unused) not checked."""
    for preset, leaf in (("tiny-mamba", "wv"), ("tiny-mamba2", "wv")):
        cfg = get_preset(preset)
        check_layout(cfg, MeshConfig(tp=2))
        specs = param_partition_specs(cfg, MeshConfig(tp=2))["layers"][0]["linear"]
        assert "tp" in jax.tree.leaves(tuple(specs[leaf])), (preset, specs[leaf])
    c = capacity("mamba-2.8b", 262144, hbm_gib=80, tp=2)
    state = get_preset("mamba-2.8b").linear_state_bytes()
    assert (c.kv_bytes_per_token, c.state_bytes_per_sequence_per_device) == (0, state // 2)
    assert c.max_sequences == c.kv_budget_bytes_per_device // (state // 2)
    with pytest.raises(ValueError, match="tp=2 does not divide num_heads=1"):
        attending = get_preset("tiny-mamba").replace(linear_attention_layers=(0, 1))
        check_layout(attending, MeshConfig(tp=2))


def test_engine_serves_past_max_position_embeddings_and_refuses_what_needs_kv():
    """max_model_len 4,096 on a model whose config says 2,048 (no positions anywhere): a
    2,100-token prompt in 512-token chunks decodes as the reference forward does; the
    pools from the default budget; LoRA and KV offloading refused, naming the option."""
    fixture = str(FIXTURES / "mamba2")
    cfg = get_preset("tiny-mamba2")
    with pytest.raises(ValueError, match="max_model_len=4096"):  # (attention: its bound)
        LLM("tiny-qwen3", max_model_len=4096, num_pages=8)
    llm = LLM(fixture, max_model_len=4096, max_num_batched_tokens=512, max_num_seqs=2)
    assert llm.stats()["num_pages_total"] == 2 * 4096 // 16
    prompt = np.random.default_rng(0).integers(3, 500, 2100).tolist()
    (out,) = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=3))
    params = load_hf_params(FIXTURES / "mamba2", cfg)
    want, logprobs = greedy_generate(params, cfg, prompt, 3, decode_rows=prefill_bucket(2100))
    assert out.token_ids == want
    np.testing.assert_allclose(out.logprobs, logprobs, atol=2e-5)
    for option, value in (("enable_lora", True), ("kv_offloading_size", 1)):
        kw = {option: value, "enable_prefix_caching": option == "kv_offloading_size"}
        with pytest.raises(ValueError, match=option):
            LLM(fixture, num_pages=8, max_model_len=64, **kw)


def test_the_float32_stream_is_closer_to_transformers_bfloat16_run(tmp_path):
    """residual_in_fp32 (the classes' default, true): the bfloat16 engine's prompt logprobs
    nearer transformers' bfloat16 run (reference_bf16.json) than with the config's false,
    read as a stream in bfloat16 (measured: a mean difference 0.52 against 0.68 of
    transformers' own float32-to-bfloat16 one)."""
    ref = json.loads((FIXTURES / "mamba2" / "reference_bf16.json").read_text())
    want = np.concatenate([np.asarray(p, np.float32) for p in ref["bfloat16_prompt_logprobs"]])
    shutil.copytree(FIXTURES / "mamba2", tmp_path / "bf16_stream")
    config = json.loads((tmp_path / "bf16_stream" / "config.json").read_text())
    (tmp_path / "bf16_stream" / "config.json").write_text(
        json.dumps(dict(config, residual_in_fp32=False))
    )
    gaps = []
    for model in (FIXTURES / "mamba2", tmp_path / "bf16_stream"):
        llm = LLM(str(model), dtype="bfloat16", num_pages=32, max_model_len=128)
        assert llm.config.residual_in_float32 == (model.name == "mamba2")
        gaps.append(np.abs(np.concatenate(llm.score(ref["prompts"])) - want).mean())
    assert gaps[0] < 0.9 * gaps[1], gaps
