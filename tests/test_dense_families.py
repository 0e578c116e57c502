"""Dense families of the 55th session: the dense siblings of served MoE ones, ERNIE 4.5 dense
(ernie4_5) and Hunyuan dense (hunyuan_v1_dense), Seed-OSS (seed_oss, configs/hf_seed_oss.py)
and GLM-4 dense (glm4, configs/hf_glm4.py); and the 56th's Llama kin (configs/hf_llama_kin.py:
ministral, cwm, arcee, exaone, helium, iquestcoder), StarCoder2 (configs/hf_starcoder2.py), Phi-2
(configs/hf_phi.py), StableLM, Nemotron-4 and Jais 2 (configs/hf_layer_norm_kin.py), MiniCPM3 and
Youtu-LLM (configs/hf_minicpm3.py), HyperCLOVA X (configs/hf_hyperclovax.py). The
fixtures' configs read to their presets; the class defaults a config may leave out; the
refusals. HF parity: tests/test_hf_parity.py (each of them)."""

from __future__ import annotations

import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.rope import rope_layout
from models.specs import count_params
from tests.family_cases import FIXTURES, arch_fields, saved_config


@pytest.mark.parametrize(
    "arch, preset",
    [
        ("ernie4_5", "tiny-ernie4-5"),
        ("hunyuan_v1_dense", "tiny-hunyuan-v1-dense"),
        ("seed_oss", "tiny-seed-oss"),
        ("glm4", "tiny-glm4"),
        ("glm", "tiny-glm"),
        ("ministral", "tiny-ministral"),
        ("cwm", "tiny-cwm"),
        ("arcee", "tiny-arcee"),
        ("exaone", "tiny-exaone"),
        ("helium", "tiny-helium"),
        ("starcoder2", "tiny-starcoder2"),
        ("phi", "tiny-phi"),
        ("stablelm", "tiny-stablelm"),
        ("nemotron", "tiny-nemotron"),
        ("minicpm3", "tiny-minicpm3"),
        ("youtu", "tiny-youtu"),
        ("jais2", "tiny-jais2"),
        ("hyperclovax", "tiny-hyperclovax"),
        ("iquestcoder", "tiny-iquestcoder"),
    ],
)
def test_fixture_configs_read_as_their_presets(arch, preset):
    cfg = config_from_hf(FIXTURES / arch)
    assert arch_fields(cfg) == arch_fields(get_preset(preset))
    assert cfg.num_experts == 0  # a SwiGLU MLP on every layer


def test_class_defaults_fill_what_a_config_leaves_out():
    """A bare ERNIE 4.5 config is ERNIE-4.5-0.3B (the class's defaults): head_dim 128 (not
    hidden / heads), RoPE base 5e5 on interleaved pairs; Hunyuan's heads default to hidden /
    heads, with q/k norms after RoPE; Seed-OSS biases q/k/v by default, o_proj only when
    asked."""
    bare = config_from_hf({"model_type": "ernie4_5"}, dtype="bfloat16")
    assert arch_fields(bare, skip=("name",)) == arch_fields(
        get_preset("ernie-4.5-0.3b"), skip=("name",)
    )
    ernie = {k: v for k, v in saved_config("ernie4_5").items() if k != "head_dim"}
    cfg = config_from_hf(ernie)
    assert cfg.head_dim == 128 and rope_layout(cfg) == "pairs" and cfg.tie_word_embeddings
    hunyuan = {k: v for k, v in saved_config("hunyuan_v1_dense").items() if k != "head_dim"}
    cfg = config_from_hf(hunyuan)
    assert cfg.head_dim == 64 // 4 and cfg.qk_norm and cfg.qk_norm_after_rope
    assert cfg.rope_scaling.rope_type == "ntk_alpha" and cfg.rope_scaling.alpha == 50.0
    assert rope_layout(cfg) == "half"
    # Seed-OSS: biases on q/k/v by default, on o_proj only with attention_out_bias.
    seed = {k: v for k, v in saved_config("seed_oss").items() if "bias" not in k}
    cfg = config_from_hf(seed)
    assert cfg.attention_bias and not cfg.o_proj_bias and cfg.sliding_window is None
    cfg = config_from_hf(dict(seed, attention_bias=False, attention_out_bias=True))
    assert not cfg.attention_bias and cfg.o_proj_bias
    # A bare GLM-4 config is GLM-4-9B's shapes (the class's defaults): half of each head
    # rotated, on interleaved pairs; the three EOS ids.
    bare = config_from_hf({"model_type": "glm4"}, dtype="bfloat16")
    assert arch_fields(bare, skip=("name",)) == arch_fields(get_preset("glm-4-9b"), skip=("name",))
    assert bare.rotary_dim == 64 and rope_layout(bare) == "pairs"
    # GLM-4-9B-chat-hf (glm): the same shapes without the norms after each block.
    chat = config_from_hf({"model_type": "glm"}, dtype="bfloat16")
    assert arch_fields(chat, skip=("name",)) == arch_fields(
        get_preset("glm-4-9b-chat"), skip=("name",)
    )
    assert rope_layout(chat) == "pairs" and not chat.sandwich_norms


@pytest.mark.parametrize(
    "arch, change, match",
    [
        ("ernie4_5", dict(use_bias=True), "use_bias=True: not supported for ernie4_5"),
        ("hunyuan_v1_dense", dict(attention_bias=True), "attention_bias=True"),
        (
            "hunyuan_v1_dense",
            dict(rope_parameters=dict(rope_type="dynamic", rope_theta=1e4, factor=2.0)),
            "alpha=None: hunyuan_v1_dense's dynamic rope needs an alpha > 1",
        ),
        ("ernie4_5", dict(hidden_act="gelu"), "hidden_act='gelu'"),
        ("seed_oss", dict(mlp_bias=True), "mlp_bias=True: not supported for seed_oss"),
        ("seed_oss", dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (
            "glm4",
            dict(rope_parameters=dict(rope_theta=1e4, partial_rotary_factor=2)),
            "partial_rotary_factor=2: must be a number in",
        ),
        ("glm4", dict(hidden_act="gelu"), "hidden_act='gelu'"),
    ],
)
def test_bad_configs_are_refused_by_field(arch, change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config(arch), **change})


def test_exaone_reads_its_releases_field_names():
    """EXAONE 3.5's config.json spells num_layers, layer_norm_epsilon, activation_function."""
    fixture = saved_config("exaone")
    renamed = {"num_hidden_layers": "num_layers", "rms_norm_eps": "layer_norm_epsilon"}
    renamed |= {"hidden_act": "activation_function"}
    released = {renamed.get(k, k): v for k, v in fixture.items()}
    assert arch_fields(config_from_hf(released)) == arch_fields(get_preset("tiny-exaone"))
    with pytest.raises(ValueError, match="hidden_act='gelu': exaone takes 'silu'"):
        config_from_hf({**released, "activation_function": "gelu"})


def test_llama_kin_class_defaults_count_as_transformers_counts_them():
    """Bare configs are their classes' defaults, whose models transformers 5.25 counts on the
    meta device: Ministral 7,241,732,096 (with head_dim 128 set: the class's null head_dim
    fails its own attention; hidden / heads here, 128 as well), CWM 32,581,097,472 (3 of 4
    layers windowed, 8,192 keys; Llama 3's RoPE), Arcee 4,022,766,080 (a ReLU² MLP)."""
    counts = {"ministral": 7_241_732_096, "cwm": 32_581_097_472, "arcee": 4_022_766_080}
    counts["iquestcoder"] = 39_794_283_520  # (IQuest-Coder's 40B shapes, a LlamaForCausalLM)
    for model_type, count in counts.items():
        cfg = config_from_hf({"model_type": model_type})
        assert count_params(cfg)[0] == count, model_type
    ministral = config_from_hf({"model_type": "ministral"})
    assert ministral.head_dim == 128 and ministral.sliding_window == 4096
    assert ministral.full_attention_layers == ()  # (every layer windowed)
    cwm = config_from_hf({"model_type": "cwm"})
    assert cwm.full_attention_layers == tuple(range(0, 64, 4)) and cwm.sliding_window == 8192
    assert cwm.rope_scaling.rope_type == "llama3" and cwm.rope_theta == 1e6
    arcee = config_from_hf({"model_type": "arcee"})
    assert arcee.mlp_act == "relu2" and arcee.head_dim == 80 and arcee.sliding_window is None


@pytest.mark.parametrize(
    "arch, change, match",
    [
        ("ministral", dict(hidden_act="gelu"), "hidden_act='gelu': only 'silu'"),
        ("arcee", dict(hidden_act="silu"), "hidden_act='silu': arcee takes 'relu2'"),
        ("cwm", dict(mlp_bias=True), "mlp_bias=True: biases are not supported"),
        ("arcee", dict(attention_bias=True), "attention_bias=True: biases are not supported"),
        ("cwm", dict(layer_types=["full_attention"]), "layer_types: expected 2 entries"),
        ("ministral", dict(sliding_window=None), "sliding_attention layers need a sliding"),
        ("helium", dict(head_dim=32), "head_dim=32: Helium's o_proj takes hidden_size inputs"),
        ("starcoder2", dict(hidden_act="gelu"), "hidden_act='gelu': only 'gelu_pytorch_tanh'"),
        ("phi", dict(qk_layernorm=True), "qk_layernorm=True: q/k LayerNorms are not supported"),
        ("phi", dict(hidden_act="relu"), "hidden_act='relu': only the tanh GELU"),
        ("stablelm", dict(qk_layernorm=True), "qk_layernorm=True: not supported for stablelm"),
        ("nemotron", dict(mlp_bias=True), "mlp_bias=True: not supported for nemotron"),
        ("nemotron", dict(hidden_act="silu"), "hidden_act='silu': nemotron takes 'relu2'"),
    ],
)
def test_bad_llama_kin_configs_are_refused_by_field(arch, change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config(arch), **change})


def test_starcoder2_class_defaults_and_biases():
    """A bare StarCoder2 config is its class's defaults (StarCoder2-3B's shapes): 3,030,371,328
    parameters, as transformers 5.25 counts StarCoder2ForCausalLM on the meta device; biases
    everywhere (use_bias), or nowhere."""
    cfg = config_from_hf({"model_type": "starcoder2"})
    assert count_params(cfg)[0] == 3_030_371_328
    assert cfg.mlp_act == "gelu" and cfg.norm_kind == "layer" and cfg.sliding_window is None
    plain = config_from_hf({**saved_config("starcoder2"), "use_bias": False})
    assert not (plain.attention_bias or plain.o_proj_bias or plain.mlp_bias) and plain.norm_bias
    assert config_from_hf({**saved_config("starcoder2"), "norm_epsilon": 1e-3}).rms_norm_eps == 1e-3


def test_a_bare_phi_config_is_phi_1_5():
    """PhiConfig's defaults are Phi-1.5's shapes (half of each head rotated)."""
    bare = config_from_hf({"model_type": "phi"}, dtype="bfloat16")
    assert arch_fields(bare, skip=("name",)) == arch_fields(get_preset("phi-1_5"), skip=("name",))
    assert bare.rotary_dim == 32 and bare.parallel_block and bare.lm_head_bias


def test_stablelm_and_nemotron_class_defaults_count_as_transformers_counts_them():
    """StableLmConfig's defaults (StableLM-3B-4E1T's shapes) and NemotronConfig's (with its
    null num_key_value_heads as every head, where transformers' own attention fails on it):
    2,795,443,200 and 17,642,041,344 parameters on transformers 5.25's meta device."""
    stablelm = config_from_hf({"model_type": "stablelm"})
    assert count_params(stablelm)[0] == 2_795_443_200 and stablelm.rotary_dim == 20
    nemotron = config_from_hf({"model_type": "nemotron"})
    assert count_params(nemotron)[0] == 17_642_041_344 and nemotron.num_kv_heads == 48
    assert nemotron.norm_offset == 1.0 and nemotron.mlp_act == "relu2"
    parallel = config_from_hf({**saved_config("stablelm"), "use_parallel_residual": True})
    assert parallel.parallel_block
    # Jais 2 (Jais2Config's defaults, 8B's shapes): 8,090,401,280; biases where asked.
    jais2 = config_from_hf({"model_type": "jais2"})
    assert count_params(jais2)[0] == 8_090_401_280 and jais2.mlp_bias and jais2.o_proj_bias
    plain = config_from_hf({**saved_config("jais2"), "attention_bias": False, "mlp_bias": False})
    assert not (plain.attention_bias or plain.o_proj_bias or plain.mlp_bias)


def test_minicpm3_defaults_fallbacks_and_longrope():
    """A bare MiniCPM3 config is MiniCPM3-4B's shapes (the preset); null v_head_dim,
    scale_depth and dim_model_base take the class's fallbacks (hidden / heads,
    sqrt(layers): a residual scale of 1, hidden_size: no logit scaling); the release's
    LongRoPE is read (its factors over the rope channels' 16 frequency pairs)."""
    bare = config_from_hf({"model_type": "minicpm3"}, dtype="bfloat16")
    assert arch_fields(bare, skip=("name",)) == arch_fields(
        get_preset("minicpm3-4b"), skip=("name",)
    )
    nulls = dict(v_head_dim=None, scale_depth=None, dim_model_base=None)
    cfg = config_from_hf({**saved_config("minicpm3"), **nulls})
    assert cfg.v_head_dim == 16 and cfg.residual_multiplier == 1.0 and cfg.logits_scaling == 1.0
    factors = [1.0 + i / 16 for i in range(16)]
    longrope = dict(
        rope_type="longrope",
        short_factor=factors,
        long_factor=factors[::-1],
        original_max_position_embeddings=32768,
    )
    cfg = config_from_hf({"model_type": "minicpm3", "rope_scaling": longrope})
    assert cfg.rope_scaling.rope_type == "longrope" and len(cfg.rope_scaling.short_factor) == 16
    with pytest.raises(ValueError, match="attention_bias=True: biases are not supported"):
        config_from_hf({**saved_config("minicpm3"), "attention_bias": True})


def test_a_bare_youtu_config_counts_as_transformers_counts_it():
    """YoutuConfig's defaults (Youtu-LLM 2B's shapes): 1,961,560,064 parameters, as
    transformers 5.25 counts YoutuForCausalLM on the meta device; RoPE as V3's."""
    cfg = config_from_hf({"model_type": "youtu"})
    assert count_params(cfg)[0] == 1_961_560_064 and rope_layout(cfg) == "pairs_to_half"
    assert (
        config_from_hf({**saved_config("youtu"), "rope_interleave": False}).rope_interleave is False
    )


def test_hyperclovax_defaults_and_switches():
    """HyperCLOVAXConfig's defaults: 6,738,677,760 parameters as transformers counts them;
    the scores' multiplier null is head_dim^-0.5; without use_post_norm, no norms after the
    blocks; a logits_scaling <= 0 is refused."""
    cfg = config_from_hf({"model_type": "hyperclovax"})
    assert count_params(cfg)[0] == 6_738_677_760 and cfg.attention_multiplier == 128**-0.5
    plain = config_from_hf({**saved_config("hyperclovax"), "use_post_norm": False})
    assert not plain.sandwich_norms and plain.logits_scaling == 4.0
    with pytest.raises(ValueError, match="logits_scaling=0.0: must be > 0"):
        config_from_hf({**saved_config("hyperclovax"), "logits_scaling": 0.0})
