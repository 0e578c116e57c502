"""config_from_hf: HF config.json spellings -> ModelConfig, checked against the presets."""

import dataclasses
import json
import math
import os

import pytest

from configs.hf_config import SUPPORTED_MODEL_TYPES, config_from_hf
from configs.model_config import RopeScaling
from configs.presets import get_preset

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
ARCHS = (
    "llama",
    "qwen2",
    "qwen2_sliding",
    "mistral",
    "qwen3",
    "qwen2_moe",
    "qwen3_moe",
    "mixtral",
    "glm4_moe",
    "glm4_moe_lite",
    "gpt_oss",
    "olmoe",
    "ernie4_5_moe",
    "minimax_m2",
    "dots1",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "glm_moe_dsa",
    "mistral4",
    "mistral_large4",
    "ministral3",
    "hunyuan_v1_moe",
    "llama4",
    "qwen3_vl_moe",
    "glm4v_moe",
    "qwen3_next",
    "kimi_linear",
    *("qwen3_5_moe", "qwen3_5", "olmo2", "olmo3"),
    *("deepseek_v4", "solar_open", "exaone_moe", "afmoe", "gemma4", "gemma4_dense"),
    *("gemma4_e", "gemma3n", "gemma4_unified", "zamba2"),  # (62nd session)
    *("bailing_hybrid", "granitemoe", "granitemoeshared", "flex_olmo", "exaone4"),
    *("nemotron_h", "nemotron_h_latent", "granitemoehybrid", "granitemoehybrid_dense"),
)
# Fields that describe tokens or storage rather than the network.
NON_ARCH = ("name", "dtype", "bos_token_id", "eos_token_ids")


def _preset(arch: str):
    return get_preset("tiny-" + arch.replace("_", "-"))


def _arch_diff(got, want) -> dict:
    return {
        f.name: (getattr(got, f.name), getattr(want, f.name))
        for f in dataclasses.fields(want)
        if f.name not in NON_ARCH and getattr(got, f.name) != getattr(want, f.name)
    }


@pytest.mark.parametrize("arch", ARCHS)
def test_fixture_config_is_tiny_preset(arch):
    want = _preset(arch)
    got = config_from_hf(os.path.join(FIXTURES, arch))  # a model directory
    assert dataclasses.replace(got, name=want.name) == want
    assert got.name == os.path.join(FIXTURES, arch)


def test_glm4_moe_partial_rotary_factor_spellings_and_default():
    """Released GLM-4.5 configs put partial_rotary_factor (and rope_theta) at the top level;
    transformers 5.24 moves it into rope_parameters and defaults it to 0.5 when absent."""
    legacy = os.path.join(FIXTURES, "glm4_moe", "config.legacy.json")
    with open(legacy) as f:
        raw = json.load(f)
    assert "rope_parameters" not in raw and raw["partial_rotary_factor"] == 0.5
    got = config_from_hf(legacy, name="x")
    assert got == config_from_hf(os.path.join(FIXTURES, "glm4_moe"), name="x")
    assert got.partial_rotary_factor == 0.5 and got.rotary_dim == got.head_dim // 2 == 8
    del raw["partial_rotary_factor"]
    assert config_from_hf(raw, name="x") == got  # transformers' default
    raw["partial_rotary_factor"] = 0.25
    assert config_from_hf(raw).rotary_dim == 4
    for bad in (0, 1.5, "half", True):
        raw["partial_rotary_factor"] = bad
        with pytest.raises(ValueError, match=f"partial_rotary_factor={bad!r}"):
            config_from_hf(raw)
    raw["partial_rotary_factor"] = 0.1  # int(16 * 0.1) = 1 channel: no rotation pair
    with pytest.raises(ValueError, match="partial_rotary_factor=0.1: .* even number >= 2"):
        config_from_hf(raw)


def test_glm4_moe_and_qwen2_moe_fields():
    """What transformers' modeling code reads: GLM-4.5's use_qk_norm and attention_bias (q/k/v
    only), its fixed V3 routing; Qwen2-MoE's qkv_bias (default on) and shared expert."""
    glm = json.loads(open(os.path.join(FIXTURES, "glm4_moe", "config.json")).read())
    cfg = config_from_hf({**glm, "use_qk_norm": False, "attention_bias": False})
    assert not cfg.qk_norm and not cfg.attention_bias
    assert (cfg.scoring_func, cfg.topk_method) == ("sigmoid", "noaux_tc")
    assert [cfg.is_moe_layer(i) for i in range(3)] == [False, True, True]
    qwen = json.loads(open(os.path.join(FIXTURES, "qwen2_moe", "config.json")).read())
    del qwen["qkv_bias"]
    cfg = config_from_hf(qwen)
    assert cfg.attention_bias and cfg.shared_expert_gate and cfg.shared_expert_width == 48
    assert [cfg.is_moe_layer(i) for i in range(4)] == [False, True, False, True]  # step 2
    assert not config_from_hf({**qwen, "qkv_bias": False}).attention_bias


def test_gpt_oss_defaults_windows_and_rope():
    """What transformers 5.24's GptOssConfig fills in: the YaRN dict (factor 32, no
    truncation) when a config has none, rope_theta 150000, even layers windowed."""
    hf = json.loads(open(os.path.join(FIXTURES, "gpt_oss", "config.json")).read())
    cfg = config_from_hf(hf)
    assert cfg.rope_scaling.truncate is False and cfg.rope_scaling.factor == 4.0
    assert (cfg.attention_sinks, cfg.o_proj_bias, cfg.expert_bias) == (True, True, True)
    assert (cfg.scoring_func, cfg.expert_act, cfg.swiglu_limit) == (
        "softmax_topk",
        "clamped_swiglu",
        1.0,
    )
    bare = {k: v for k, v in hf.items() if k not in ("rope_parameters", "layer_types")}
    bare["num_hidden_layers"] = 4
    cfg = config_from_hf(bare)
    assert cfg.rope_theta == 150000.0
    want = RopeScaling(
        rope_type="yarn",
        factor=32.0,
        original_max_position_embeddings=4096,
        beta_fast=32.0,
        beta_slow=1.0,
        mscale=1.0,
        truncate=False,
    )
    assert cfg.rope_scaling == want
    assert [cfg.attention_window(i) for i in range(4)] == [8, None, 8, None]
    assert not config_from_hf({**hf, "attention_bias": False}).o_proj_bias


def test_ernie4_5_moe_layers_and_refusals():
    """transformers' Ernie4_5_MoeDecoderLayer: MoE where (i + 1) % interval == 0 and
    start <= i <= end (end -1: the last layer); Ernie4_5_MoeTopKRouter: softmax, the
    correction bias for the choice only, renormalized."""
    hf = json.loads(open(os.path.join(FIXTURES, "ernie4_5_moe", "config.json")).read())
    cfg = config_from_hf(hf)
    assert (cfg.scoring_func, cfg.topk_method, cfg.norm_topk_prob) == ("softmax", "noaux_tc", True)
    assert [cfg.is_moe_layer(i) for i in range(4)] == [False, True, False, True]

    def moe_layers(**change):
        c = config_from_hf({**hf, **change})
        return [i for i in range(c.num_layers) if c.is_moe_layer(i)]

    assert moe_layers(moe_layer_interval=1, moe_layer_start_index=1) == [1, 2, 3]
    assert moe_layers(moe_layer_interval=1, moe_layer_end_index=2) == [0, 1, 2]
    assert moe_layers(moe_layer_interval=3) == [2]
    for change, message in [
        (dict(use_bias=True), "use_bias=True: not supported for ernie4_5_moe"),
        (dict(moe_layer_interval=0), "moe_layer_interval=0"),
        (dict(moe_norm_min=0.5), "moe_norm_min=0.5"),
    ]:
        with pytest.raises(ValueError, match=message):
            config_from_hf({**hf, **change})


def test_olmoe_fields():
    """OLMoE (transformers' OlmoeAttention): q/k norms over all heads, clip_qkv, biases on
    q/k/v/o with attention_bias; its q_norm spans hidden_size, so heads must fill it."""
    hf = json.loads(open(os.path.join(FIXTURES, "olmoe", "config.json")).read())
    cfg = config_from_hf({**hf, "clip_qkv": None, "attention_bias": False})
    assert cfg.qk_norm and cfg.qk_norm_full and cfg.clip_qkv is None
    assert not cfg.attention_bias and not cfg.o_proj_bias and cfg.sliding_window is None
    assert cfg.moe_intermediate_size == hf["intermediate_size"]
    with pytest.raises(ValueError, match="head_dim=8: OLMoE's q_norm spans hidden_size=64"):
        config_from_hf({**hf, "head_dim": 8})


def test_minimax_m2_rotary_dim_and_its_own_fields():
    """Released MiniMax-M2 configs give the rotated channels as rotary_dim (transformers:
    partial_rotary_factor = rotary_dim / head_dim) and fields transformers' class ignores:
    those that describe another model are refused."""
    legacy = os.path.join(FIXTURES, "minimax_m2", "config.legacy.json")
    with open(legacy) as f:
        raw = json.load(f)
    assert "rope_parameters" not in raw and raw["rotary_dim"] == 8
    got = config_from_hf(legacy, name="x")
    assert got == config_from_hf(os.path.join(FIXTURES, "minimax_m2"), name="x")
    assert got.rotary_dim == 8 and got.qk_norm_full and got.topk_method == "noaux_tc"
    del raw["rotary_dim"]
    assert config_from_hf(raw).rotary_dim == got.head_dim  # none given: whole heads
    released = {"attn_type_list": [1, 1], "use_routing_bias": True, "scoring_func": "sigmoid"}
    assert config_from_hf({**raw, **released}).num_experts == 8
    for changes, message in (
        ({"attn_type_list": [0, 1]}, r"attn_type_list: only full-attention layers \(1\)"),
        ({"shared_intermediate_size": 32}, "shared_intermediate_size=32: only 0"),
        ({"scoring_func": "softmax"}, "scoring_func='softmax': only 'sigmoid'"),
    ):
        with pytest.raises(ValueError, match=message):
            config_from_hf({**raw, **changes})


@pytest.mark.parametrize("arch", ("llama", "deepseek_v3"))
def test_legacy_spelling_maps_the_same(arch):
    """rope_scaling (+ `type`) with top-level rope_theta and torch_dtype == rope_parameters."""
    legacy = os.path.join(FIXTURES, arch, "config.legacy.json")
    with open(legacy) as f:
        raw = json.load(f)
    assert "rope_scaling" in raw and "rope_parameters" not in raw
    got = config_from_hf(legacy, name="x")
    assert got == config_from_hf(os.path.join(FIXTURES, arch, "config.json"), name="x")
    assert got.rope_scaling.rope_type != "default"


def test_dict_source_and_dtype():
    with open(os.path.join(FIXTURES, "llama", "config.json")) as f:
        hf = json.load(f)
    assert config_from_hf(hf).name == "hf-llama"
    assert config_from_hf(hf).dtype == "float32"
    assert config_from_hf({**hf, "dtype": "bfloat16"}).dtype == "float32"
    assert config_from_hf({**hf, "dtype": "bfloat16"}, dtype="auto").dtype == "bfloat16"
    old = {k: v for k, v in hf.items() if k != "dtype"}
    assert config_from_hf({**old, "torch_dtype": "float16"}, dtype="auto").dtype == "float16"
    assert config_from_hf(hf, dtype="bfloat16").dtype == "bfloat16"


# ---- real released configs (transformers-4 spellings), abridged to the fields they carry ----
LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256,
}  # fmt: skip
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1,
    "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                            "quant_method": "fp8", "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "seq_aux": True, "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16", "transformers_version": "4.46.3", "use_cache": True,
    "v_head_dim": 128, "vocab_size": 129280,
}  # fmt: skip
# DeepSeek-V3.2-Exp's: V3's fields, the indexer's, and a ue8m0 scale format (power-of-two
# float32 scales, read like any others).
DEEPSEEK_V32_EXP = {
    **{k: v for k, v in DEEPSEEK_V3.items() if k not in ("aux_loss_alpha", "seq_aux")},
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
    "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                            "quant_method": "fp8", "scale_fmt": "ue8m0",
                            "weight_block_size": [128, 128]},
    "transformers_version": "4.44.2",
}  # fmt: skip
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 100000,
    "eos_token_id": 100001, "first_k_dense_replace": 1, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
    "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16,
    "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
    "pretraining_tp": 1, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                     "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax",
    "seq_aux": True, "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy",
    "torch_dtype": "bfloat16", "transformers_version": "4.39.3", "use_cache": True,
    "v_head_dim": 128, "vocab_size": 102400,
}  # fmt: skip
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000,
}  # fmt: skip
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
}  # fmt: skip


@pytest.mark.parametrize(
    "hf, preset",
    [
        (LLAMA_31_8B, "llama-3.1-8b"),
        (DEEPSEEK_V3, "deepseek-v3"),
        (DEEPSEEK_V32_EXP, "deepseek-v3.2-exp"),
        (DEEPSEEK_V2_LITE, "deepseek-v2-lite"),
        (MIXTRAL_8X7B, "mixtral-8x7b"),
        (QWEN3_30B_A3B, "qwen3-30b-a3b"),
    ],
    ids=lambda x: x if isinstance(x, str) else x["model_type"],
)
def test_released_configs_match_presets(hf, preset):
    want = get_preset(preset)
    got = config_from_hf(hf, dtype="auto")
    assert _arch_diff(got, want) == {}
    assert got.dtype == want.dtype == "bfloat16"


def test_released_token_ids():
    llama = config_from_hf(LLAMA_31_8B)
    assert llama.bos_token_id == 128000
    assert llama.eos_token_ids == (128001, 128008, 128009)
    v3 = config_from_hf(DEEPSEEK_V3)
    assert (v3.bos_token_id, v3.eos_token_ids) == (0, (1,))


def test_transformers5_spelling_of_real_config():
    """The same model saved by transformers 5: rope_parameters with theta inside, `dtype`."""
    hf = {k: v for k, v in LLAMA_31_8B.items() if k not in ("rope_scaling", "rope_theta")}
    hf["rope_parameters"] = {**LLAMA_31_8B["rope_scaling"], "rope_theta": 500000.0}
    hf["dtype"] = hf.pop("torch_dtype")
    assert config_from_hf(hf, name="a", dtype="auto") == config_from_hf(
        LLAMA_31_8B, name="a", dtype="auto"
    )


def test_mistral():
    # Mistral-7B-v0.1: a 4096 sliding window, 32k positions; head_dim absent.
    v01 = {
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "vocab_size": 32000, "bos_token_id": 1, "eos_token_id": 2,
    }  # fmt: skip
    cfg = config_from_hf(v01)
    assert (cfg.model_type, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        "mistral",
        32,
        8,
        128,
    )
    # A 4096-key window on every layer, over 32k positions.
    assert cfg.max_position_embeddings == 32768 and cfg.sliding_window == 4096
    assert [cfg.attention_window(i) for i in (0, 31)] == [4096, 4096]
    assert cfg.rope_scaling == RopeScaling() and cfg.rope_theta == 10000.0
    assert not cfg.attention_bias and not cfg.qk_norm and cfg.num_experts == 0
    # v0.3: no window, head_dim explicit (null allowed), theta 1e6.
    v03 = {**v01, "sliding_window": None, "rope_theta": 1000000.0, "head_dim": None}
    cfg = config_from_hf(v03)
    assert cfg.max_position_embeddings == 32768 and cfg.head_dim == 128
    assert cfg.sliding_window is None and cfg.attention_window(0) is None
    assert cfg.rope_theta == 1000000.0
    # Absent sliding_window takes MistralConfig's default of 4096.
    absent = {k: v for k, v in v01.items() if k != "sliding_window"}
    assert config_from_hf(absent).sliding_window == 4096


def test_qwen2():
    # Qwen2.5-7B-Instruct: q/k/v biases (no attention_bias field), head_dim from hidden/heads.
    hf = {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
        "max_position_embeddings": 32768, "max_window_layers": 28, "num_attention_heads": 28,
        "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 152064,
        "bos_token_id": 151643, "eos_token_id": 151645, "rope_scaling": None,
    }  # fmt: skip
    cfg = config_from_hf(hf)
    assert cfg.attention_bias and not cfg.qk_norm
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (28, 4, 128)
    assert cfg.max_position_embeddings == 32768
    assert cfg.sliding_window is None  # the window is off (use_sliding_window)
    assert cfg.eos_token_ids == (151645,) and cfg.bos_token_id == 151643
    assert not cfg.tie_word_embeddings and cfg.vocab_size == 152064


def test_qwen3_moe_sparse_step_matches_transformers_rule():
    hf = {**QWEN3_30B_A3B, "num_hidden_layers": 8, "decoder_sparse_step": 3,
          "mlp_only_layers": [5]}  # fmt: skip
    cfg = config_from_hf(hf)
    # Qwen3MoeDecoderLayer: MoE iff i not in mlp_only_layers and (i + 1) % step == 0.
    want = [i not in (5,) and (i + 1) % 3 == 0 for i in range(8)]
    assert [cfg.is_moe_layer(i) for i in range(8)] == want


@pytest.mark.parametrize(
    "base, change",
    [
        # transformers puts MoE on every layer from first_k_dense_replace whatever
        # moe_layer_freq says (DeepSeek's own code makes the others dense)
        ("v2", {"moe_layer_freq": 2}),
        ("v3", {"moe_layer_freq": 2}),
        # transformers hard-codes V2's softmax and V3's sigmoid + noaux_tc routing
        ("v2", {"scoring_func": "sigmoid"}),
        ("v3", {"scoring_func": "softmax"}),
        ("v3", {"topk_method": "greedy"}),
        ("v2", {"topk_method": "noaux_tc"}),
    ],
)
def test_deepseek_routing_transformers_hard_codes_is_refused_otherwise(base, change):
    hf = {"v2": DEEPSEEK_V2_LITE, "v3": DEEPSEEK_V3}[base]
    (field,) = change
    with pytest.raises(ValueError, match=f"{field}="):
        config_from_hf({**hf, **change})


def test_deepseek_v3_defaults():
    """transformers' DeepSeek-V3 config omits scoring_func/topk_method: sigmoid + noaux_tc."""
    hf = {k: v for k, v in DEEPSEEK_V3.items() if k not in ("scoring_func", "topk_method")}
    cfg = config_from_hf(hf)
    assert (cfg.scoring_func, cfg.topk_method, cfg.rope_interleave) == (
        "sigmoid",
        "noaux_tc",
        True,
    )
    assert config_from_hf({**hf, "rope_interleave": False}).rope_interleave is False
    assert config_from_hf({**hf, "q_lora_rank": None}).q_lora_rank == 0


def test_yarn_factor_and_original_defaults():
    rope = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}
    cfg = config_from_hf({**DEEPSEEK_V3, "rope_scaling": rope})
    assert cfg.rope_scaling == RopeScaling(
        rope_type="yarn", factor=40.0, original_max_position_embeddings=4096
    )  # null mscale/betas -> transformers' defaults
    # mscale_all_dim without mscale: transformers ignores both for the cos/sin magnitude.
    rope = {"type": "yarn", "factor": 40, "mscale_all_dim": 0.707}
    cfg = config_from_hf({**DEEPSEEK_V3, "rope_scaling": rope})
    assert (cfg.rope_scaling.mscale, cfg.rope_scaling.mscale_all_dim) == (0.0, 0.707)
    assert cfg.rope_scaling.original_max_position_embeddings == 163840  # max_position default
    rope = {"rope_type": "yarn", "original_max_position_embeddings": 4096, "rope_theta": 5.0}
    cfg = config_from_hf({**DEEPSEEK_V3, "rope_scaling": None, "rope_parameters": rope})
    assert cfg.rope_scaling.factor == 163840 / 4096 and cfg.rope_theta == 5.0


def test_top_level_original_max_position_embeddings_wins_for_llama3_and_yarn():
    """transformers' standardize_rope_params: a top-level original_max_position_embeddings
    (Phi-3's spelling) overrides the rope dict's for llama3 and yarn, not for linear."""
    inner = {**LLAMA_31_8B["rope_scaling"], "original_max_position_embeddings": 8192}
    hf = {**LLAMA_31_8B, "rope_scaling": inner, "original_max_position_embeddings": 4096}
    assert config_from_hf(hf).rope_scaling.original_max_position_embeddings == 4096
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
    cfg = config_from_hf({**hf, "rope_scaling": yarn})
    assert cfg.rope_scaling.original_max_position_embeddings == 4096
    assert cfg.rope_scaling.factor == 4.0
    linear = {"type": "linear", "factor": 4.0}
    assert config_from_hf({**hf, "rope_scaling": linear}).rope_scaling.factor == 4.0


@pytest.mark.parametrize(
    "model_type, change",
    [
        ("llama", {"hidden_act": "swish"}),  # transformers' ACT2FN: SiLU under either name
        ("mistral", {"attention_bias": True}),  # Mistral and Mixtral hard-code no biases
        ("mixtral", {"attention_bias": True}),
        ("qwen3", {"mlp_bias": True}),  # Qwen3's MLP hard-codes no bias
        ("qwen2", {"attention_bias": True}),  # Qwen2: q/k/v biases whatever the field says
    ],
)
def test_fields_transformers_ignores_are_ignored(model_type, change):
    base = {"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4}
    base["num_key_value_heads"] = 2
    assert config_from_hf({**base, **change}) == config_from_hf(base)


def test_sliding_window_only_where_transformers_applies_one():
    """Llama and DeepSeek ignore a sliding_window key; Qwen2/Qwen3 slide only the layers
    from max_window_layers on (or those `layer_types` names), Qwen3-MoE every layer."""
    base = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=4)
    window = dict(sliding_window=16, use_sliding_window=True, max_position_embeddings=512)
    slide = dict(sliding_window=16, use_sliding_window=True)
    assert config_from_hf({**LLAMA_31_8B, **slide}).sliding_window is None
    assert config_from_hf({**DEEPSEEK_V3, **slide}).sliding_window is None

    def windows(model_type, **change):
        """Each layer's window."""
        cfg = config_from_hf({"model_type": model_type, **base, **window, **change})
        assert cfg.max_position_embeddings == 512  # a window does not shorten the context
        return [cfg.attention_window(i) for i in range(4)]

    assert windows("qwen3", max_window_layers=4) == [None] * 4  # no layer slides
    assert windows("qwen3", max_window_layers=3) == [None] * 3 + [16]
    assert windows("qwen3", max_window_layers=0) == [16] * 4
    assert windows("qwen2") == [None] * 4  # the default max_window_layers, 28, is past 4 layers
    assert windows("qwen3", layer_types=["full_attention"] * 4) == [None] * 4
    mixed = ["sliding_attention", "full_attention"] * 2
    assert windows("qwen2", layer_types=mixed) == [16, None, 16, None]
    assert windows("qwen3", max_window_layers=0, use_sliding_window=False) == [None] * 4
    # Qwen3-MoE has no layer_types: every layer.
    assert windows("qwen3_moe", max_window_layers=4) == [16] * 4
    # Qwen2-MoE's own default: the even layers below max_window_layers (transformers 5.24
    # Qwen2MoeConfig(num_hidden_layers=6, max_window_layers=4, use_sliding_window=True)
    # .layer_types = [sliding, full, sliding, full, full, full]).
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8)
    assert windows("qwen2_moe", max_window_layers=3, **moe) == [16, None, 16, None]
    assert windows("qwen2_moe", max_window_layers=1, **moe) == [16, None, None, None]
    assert windows("qwen2_moe", use_sliding_window=False, **moe) == [None] * 4
    assert windows("qwen2_moe", layer_types=mixed[::-1], **moe) == [None, 16, None, 16]
    assert windows("mistral", use_sliding_window=False) == [16] * 4  # no switch there
    assert windows("mistral", sliding_window=None) == [None] * 4


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(layer_types=["full_attention"] * 3), "layer_types: expected a list of "),
        (dict(layer_types="sliding_attention"), "layer_types: expected a list of "),
        (dict(layer_types=["sliding_attention"] * 3 + ["chunked"]), "'chunked' is not one of"),
        (dict(sliding_window=0), "sliding_window=0: must be an integer >= 1"),
        (dict(sliding_window=2.5), "sliding_window=2.5: must be an integer >= 1"),
        (dict(sliding_window=True), "sliding_window=True: must be an integer >= 1"),
        # transformers builds these, then fails making the sliding mask (no window).
        (
            dict(use_sliding_window=False, layer_types=["sliding_attention"] * 4),
            "marks sliding_attention layers, but there is no window",
        ),
        (
            dict(sliding_window=None, layer_types=["full_attention", "sliding_attention"] * 2),
            "marks sliding_attention layers, but there is no window",
        ),
    ],
)
def test_bad_sliding_window_fields_are_refused_by_name(change, message):
    hf = dict(
        model_type="qwen2",
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=4,
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=0,
    )
    with pytest.raises(ValueError, match=message):
        config_from_hf({**hf, **change})


def test_unknown_model_type():
    with pytest.raises(ValueError, match="t5") as e:
        config_from_hf({"model_type": "t5", "hidden_size": 64})
    for supported in SUPPORTED_MODEL_TYPES:
        assert supported in str(e.value)
    with pytest.raises(ValueError, match="None"):
        config_from_hf({"hidden_size": 64})


def test_missing_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        config_from_hf(missing)
    (missing).mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        config_from_hf(missing)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_type='dynamic'"),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5: only 1.0 .* llama"),
        (
            {"rope_scaling": {"rope_type": "default", "partial_rotary_factor": 0.5}},
            "partial_rotary_factor=0.5",
        ),
        ({"attention_bias": True}, "attention_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"eos_token_id": "2"}, "eos_token_id"),
        ({"dtype": "float8"}, "dtype"),
        ({"num_attention_heads": None}, "num_attention_heads"),
        ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quant_method='bitsandbytes'"),
        ({"quantization_config": "fp8"}, "quantization_config='fp8'"),
        (
            {"quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}},
            "activation_scheme='static'",
        ),
        ({"quantization_config": {"quant_method": "fp8", "fmt": "e5m2"}}, "fmt='e5m2'"),
        ({"quantization_config": {"quant_method": "fp8", "fmt": "float8_e5m2"}}, "e5m2'"),
        (
            {"quantization_config": {"quant_method": "fp8", "weight_block_size": None}},
            "weight_block_size=None",
        ),
        (
            {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 0]}},
            r"weight_block_size=\[128, 0\]",
        ),
    ],
)
def test_unsupported_fields_are_refused(change, field):
    with pytest.raises(ValueError, match=field):
        config_from_hf({**LLAMA_31_8B, **change}, dtype="auto")


def test_fp8_block_quantization_is_read_with_transformers_defaults():
    from configs.hf_config import fp8_weight_block

    assert fp8_weight_block(LLAMA_31_8B) is None
    # DeepSeek-V3's own quantization_config (checked by config_from_hf too).
    assert fp8_weight_block(DEEPSEEK_V3) == (128, 128)
    config_from_hf(DEEPSEEK_V3)
    # FineGrainedFP8Config's defaults: e4m3, dynamic activations, 128 x 128 blocks.
    assert fp8_weight_block({"quantization_config": {"quant_method": "fp8"}}) == (128, 128)
    qc = {"quant_method": "fp8", "weight_block_size": [64, 32], "activation_scheme": "Dynamic"}
    assert fp8_weight_block({"quantization_config": qc}) == (64, 32)  # case as transformers
    # The format spelled as torch's dtype (MiniMax-M2's config): the same e4m3.
    qc = {"quant_method": "fp8", "fmt": "float8_e4m3fn", "weight_block_size": [128, 128]}
    assert fp8_weight_block({"quantization_config": qc}) == (128, 128)


def test_mla_softmax_scale_uses_mscale_all_dim_with_any_scaled_rope():
    """transformers' DeepSeek attention multiplies its softmax scale by
    (0.1 * mscale_all_dim * ln(factor) + 1)^2 whenever rope_scaling is set, not only for yarn."""
    from models.attention import mla_softmax_scale

    rope = {"type": "linear", "factor": 4.0, "mscale_all_dim": 1.0}
    cfg = config_from_hf({**DEEPSEEK_V3, "rope_scaling": rope})
    assert cfg.rope_scaling.mscale_all_dim == 1.0
    want = (128 + 64) ** -0.5 * (0.1 * math.log(4.0) + 1) ** 2  # qk_nope + qk_rope head dims
    assert mla_softmax_scale(cfg) == pytest.approx(want, rel=1e-12)


def test_eos_ids_include_the_generation_config(tmp_path):
    """Chat models list their end-of-turn token in generation_config.json only."""
    with open(os.path.join(FIXTURES, "llama", "config.json")) as f:
        hf = json.load(f)
    (tmp_path / "config.json").write_text(json.dumps({**hf, "eos_token_id": 2}))
    assert config_from_hf(tmp_path).eos_token_ids == (2,)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 2]}))
    assert config_from_hf(tmp_path).eos_token_ids == (2, 7)
    assert config_from_hf(tmp_path / "config.json").eos_token_ids == (2, 7)
    (tmp_path / "generation_config.json").write_text("{")
    with pytest.raises(ValueError, match="generation_config.json"):
        config_from_hf(tmp_path)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"norm_topk_prob": True}, "norm_topk_prob"),  # transformers ignores it for V2
        ({"topk_method": "group_limited_greedy", "n_group": 16, "topk_group": 1}, "topk_group"),
    ],
)
def test_deepseek_v2_routing_that_cannot_be_honoured_is_refused(change, field):
    with pytest.raises(ValueError, match=field):
        config_from_hf({**DEEPSEEK_V2_LITE, **change})


def test_noaux_tc_groups_need_two_experts():
    with open(os.path.join(FIXTURES, "deepseek_v3", "config.json")) as f:
        hf = json.load(f)
    n = hf["n_routed_experts"]
    with pytest.raises(ValueError, match="n_group"):
        config_from_hf({**hf, "n_group": n, "topk_group": 1})


# ---- edges found by mutation testing -------------------------------------------------------


def test_rope_defaults_and_refusals():
    llama3 = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    rope = config_from_hf({**LLAMA_31_8B, "rope_scaling": llama3}).rope_scaling
    assert (rope.low_freq_factor, rope.high_freq_factor) == (1.0, 4.0)  # LlamaConfig's
    yarn = {"type": "yarn", "factor": 4.0, "attention_factor": 1.5}
    assert (
        config_from_hf({**DEEPSEEK_V3, "rope_scaling": yarn}).rope_scaling.attention_factor == 1.5
    )
    # A null rope_theta takes the architecture's default, not the generic 10000.
    assert config_from_hf({**MIXTRAL_8X7B, "rope_theta": None}).rope_theta == 1000000.0
    for rope, field in [
        ({"type": "linear"}, "factor is missing for 'linear'"),
        ({"full_attention": {"rope_type": "default"}}, "per-layer-type"),
    ]:
        with pytest.raises(ValueError, match=field):
            config_from_hf({**LLAMA_31_8B, "rope_scaling": rope})


def test_expert_count_aliases_and_hard_coded_fields():
    mixtral = {k: v for k, v in MIXTRAL_8X7B.items() if k != "num_local_experts"}
    assert config_from_hf({**mixtral, "num_experts": 4}).num_experts == 4
    v3 = {k: v for k, v in DEEPSEEK_V3.items() if k != "n_routed_experts"}
    assert config_from_hf({**v3, "num_local_experts": 64}).num_experts == 64
    # transformers' DeepSeek-V2 always rotates interleaved pairs, whatever the field says.
    assert config_from_hf({**DEEPSEEK_V2_LITE, "rope_interleave": False}).rope_interleave
    # A null hard-coded field means the default, not a different routing.
    assert config_from_hf({**DEEPSEEK_V3, "scoring_func": None}).scoring_func == "sigmoid"
    # Mistral and Mixtral slide every layer, with no use_sliding_window switch.
    assert config_from_hf({**MIXTRAL_8X7B, "sliding_window": 16}).sliding_window == 16


@pytest.mark.parametrize(
    "hf, field",
    [
        ({**QWEN3_30B_A3B, "attention_bias": True}, "attention_bias"),
        ({**DEEPSEEK_V2_LITE, "mlp_bias": True}, "mlp_bias"),
        ({**LLAMA_31_8B, "eos_token_id": ["2"]}, "eos_token_id"),
    ],
)
def test_more_unsupported_fields_are_refused(hf, field):
    with pytest.raises(ValueError, match=field):
        config_from_hf(hf)


def test_eos_token_id_zero():
    assert config_from_hf({**LLAMA_31_8B, "eos_token_id": 0}).eos_token_ids == (0,)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(vocab_size=0), "vocab_size=0"),
        (dict(num_heads=4, num_kv_heads=3), "num_kv_heads=3"),
        (dict(head_dim=0), "head_dim=0"),
        (dict(dtype="int8"), "dtype='int8'"),
        (
            dict(attention_type="mla", kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=3,
                 v_head_dim=8),
            "qk_rope_head_dim=3",
        ),
        (
            dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=8, n_group=4),
            "n_group=4",
        ),
        (
            dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=8, n_group=2,
                 topk_group=3),
            "topk_group=3",
        ),
        (dict(head_dim=16, partial_rotary_factor=0.0), "partial_rotary_factor=0.0"),
        (dict(head_dim=6, partial_rotary_factor=0.5), "partial_rotary_factor=0.5"),
        (
            dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=8,
                 shared_intermediate_size=16),
            "shared_intermediate_size=16",
        ),
        (
            dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=8,
                 shared_expert_gate=True),
            "shared_expert_gate=True",
        ),
        (
            dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=8,
                 expert_act="gelu"),
            "expert_act='gelu'",
        ),
        (dict(qk_norm_full=True), "qk_norm_full=True: needs qk_norm=True"),
        (dict(clip_qkv=0.0), "clip_qkv=0.0: must be > 0"),
        (
            dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=8,
                 scoring_func="softmax_topk", topk_method="noaux_tc"),
            "scoring_func='softmax_topk': needs topk_method='greedy'",
        ),
    ],
)  # fmt: skip
def test_model_config_rejects_inconsistent_fields(kwargs, field):
    from configs.model_config import ModelConfig

    with pytest.raises(ValueError, match=field):
        ModelConfig(**kwargs)


def test_model_config_edges():
    from configs.model_config import ModelConfig

    with pytest.raises(ValueError, match="rope_type='dynamic'"):
        RopeScaling(rope_type="dynamic")
    with pytest.raises(ValueError, match="rope factor=0"):
        RopeScaling(rope_type="linear", factor=0.0)
    ModelConfig(num_experts=4, num_experts_per_tok=4, moe_intermediate_size=8)  # k == E is fine
    cfg = ModelConfig()
    assert cfg.replace(dtype="bfloat16").kv_bytes_per_token() * 2 == cfg.kv_bytes_per_token()
