"""The 57th session's families: A.X K1 (axk1, configs/hf_mla.py), Mellum (mellum,
configs/hf_laguna.py), Flint and Kolibri-1 (flint, kolibri1, configs/hf_moe_kin.py), Beam
(beam, configs/hf_beam.py), Aria (aria_text, configs/hf_aria.py), Lara Mini (lara_mini,
configs/hf_lara_mini.py), and the dense Command R (cohere, configs/hf_cohere.py), InternLM3
and Apertus (internlm3, apertus: configs/hf_llama_kin.py), GPT-NeoX (gpt_neox,
configs/hf_gpt_neox.py), the first OLMo (olmo, configs/hf_olmo1.py), Falcon (falcon,
configs/hf_falcon.py), GPT-J (gptj, configs/hf_gptj.py), GPT-BigCode and GPT-2
(gpt_bigcode, gpt2: configs/hf_gpt_bigcode.py), OPT (opt, configs/hf_opt.py); the 58th's
GPT-Neo (gpt_neo, configs/hf_gpt_bigcode.py: its windows and unscaled scores), CodeGen
(codegen, configs/hf_gptj.py), Persimmon (persimmon, configs/hf_persimmon.py), BioGPT and
XGLM (biogpt, xglm: configs/hf_opt.py; XGLM's sinusoids against transformers'); the 60th's
A.X K2 (axk2, configs/hf_mla.py). The
fixtures' configs read to their presets; the class defaults counted as transformers counts
them; the defaults a config may leave out; Kolibri-1's router against numpy, Beam's query
scale against transformers'; the refusals, by field. HF parity: tests/test_hf_parity.py (each
of them)."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from models.hf_loader import load_hf_params
from models.moe import route
from models.specs import count_params, param_specs
from tests.family_cases import FIXTURES, arch_fields, last_prefill_logits, saved_config

ARCHS = ("axk1", "mellum", "flint", "kolibri1", "beam", "aria_text", "lara_mini", "cohere")
ARCHS += ("internlm3", "apertus", "gpt_neox", "gpt_neox_seq", "olmo", "falcon", "falcon_7b")
ARCHS += ("gptj", "gpt_bigcode", "gpt2", "opt", "gpt_neo", "codegen", "persimmon", "biogpt")
ARCHS += ("xglm", "axk2")


@pytest.mark.parametrize("arch", ARCHS)
def test_fixture_configs_read_as_their_presets(arch):
    cfg = config_from_hf(FIXTURES / arch)
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-" + arch.replace("_", "-")))


@pytest.mark.parametrize(
    "arch, total, active",
    [
        # transformers 5.25's <Arch>ForCausalLM with the class's default shapes on the meta
        # device: its parameters plus the correction biases it keeps as buffers (A.X K1: 60 x
        # 192, Kolibri-1: 50 x 384); active: less the experts each token leaves (E - k of
        # them, 3 x hidden x moe_intermediate each, on every MoE layer).
        ("axk1", 518_983_063_808, 32_779_344_128),
        ("axk2", 20_314_500_992, 2_572_595_072),  # (47 x 128 correction biases)
        ("mellum", 12_149_923_072, 2_439_060_736),
        ("flint", 39_785_287_456, 2_822_983_456),
        ("kolibri1", 78_103_074_560, 3_785_250_560),
        ("beam", 501_267_612_352, 23_431_529_152),  # (49 x 256 correction biases)
        ("aria_text", 18_517_069_824, 8_853_393_408),
        ("lara_mini", 7_281_684_672, 650_490_048),  # (tied embeddings, counted once)
        ("cohere", 34_980_831_232, 34_980_831_232),  # Command R's shapes (35B), dense
        ("internlm3", 8_804_241_408, 8_804_241_408),  # InternLM3-8B's shapes
        # (Apertus: its xIELU's beta and eps, buffers there, 2 per layer, read as parameters)
        ("apertus", 6_979_596_416, 6_979_596_416),
        ("apertus1p5_text", 8_091_086_976, 8_091_086_976),  # (its vocabulary 266,752)
        ("gpt_neox", 20_554_567_680, 20_554_567_680),  # GPT-NeoX-20B's shapes
        ("olmo", 6_888_095_744, 6_888_095_744),  # OLMo-7B's shapes (norms hold nothing)
        ("falcon", 6_921_720_704, 6_921_720_704),  # Falcon-7B's shapes (one KV head)
        ("gptj", 6_050_882_784, 6_050_882_784),  # GPT-J-6B's shapes
        ("gpt_bigcode", 111_446_784, 111_446_784),  # (GPT-2 small's shapes, one KV head)
        ("gpt2", 124_439_808, 124_439_808),  # GPT-2 small
        ("opt", 125_239_296, 125_239_296),  # OPT-125M
        ("gpt_neo", 1_315_575_808, 1_315_575_808),  # GPT-Neo 1.3B
        ("codegen", 6_050_882_784, 6_050_882_784),  # (GPT-J-6B's shapes: CodeGenConfig's)
        ("persimmon", 9_397_175_296, 9_397_175_296),  # Persimmon-8B's shapes
        ("biogpt", 346_763_264, 346_763_264),  # BioGPT
        ("xglm", 564_463_616, 564_463_616),  # XGLM-564M (no position table held)
    ],
)
def test_class_defaults_count_as_transformers_counts_them(arch, total, active):
    assert count_params(config_from_hf({"model_type": arch}, dtype="bfloat16")) == (total, active)


def test_what_a_config_may_leave_out():
    """The classes' rules where a field is absent: A.X K1's dense layers from its legacy
    first_k_dense_replace / moe_layer_freq (default 1 / 1: layer 0 dense); Flint's layer kinds
    (global on 0, 1, i % 4 == 1 and the last; RoPE on the windowed ones only) and dense layers
    0 and 1; Kolibri-1's every fifth layer global, which takes no RoPE only with a window."""
    axk1 = {k: v for k, v in saved_config("axk1").items() if k != "mlp_layer_types"}
    assert config_from_hf(axk1).mlp_only_layers == (0,)
    legacy = dict(axk1, num_hidden_layers=6, first_k_dense_replace=2, moe_layer_freq=2)
    cfg = config_from_hf(legacy)
    assert [cfg.is_moe_layer(i) for i in range(6)] == [False, False, True, False, True, False]
    axk2 = {k: v for k, v in saved_config("axk2").items() if k != "mlp_layer_types"}
    assert config_from_hf(dict(axk2, moe_layer_freq=2)).mlp_only_layers == (0, 1, 3)
    flint = config_from_hf({"model_type": "flint", "num_hidden_layers": 10})
    assert flint.full_attention_layers == (0, 1, 5, 9) == flint.nope_layers
    assert flint.mlp_only_layers == (0, 1) and flint.sliding_window == 513
    assert flint.attention_sinks and flint.norm_scale_in_float32
    assert param_specs(flint)["layers"][2]["attn"]["sinks"].dtype == jnp.float32
    stepped = config_from_hf(
        {"model_type": "flint", "num_hidden_layers": 6, "decoder_sparse_step": 2}
    )
    assert stepped.mlp_only_layers == (0, 1, 2, 4)
    kolibri = config_from_hf({"model_type": "kolibri1", "num_hidden_layers": 10})
    assert kolibri.full_attention_layers == (4, 9) == kolibri.nope_layers
    assert not kolibri.norm_topk_prob and kolibri.routed_scaling_factor == 1.0
    windowless = {"model_type": "kolibri1", "layer_types": ["full_attention"] * 4}
    cfg = config_from_hf({**windowless, "num_hidden_layers": 4, "sliding_window": None})
    assert cfg.sliding_window is None and cfg.nope_layers == ()
    mellum = config_from_hf({"model_type": "mellum"})
    assert mellum.sliding_window is None and mellum.rope_theta == 500000.0
    assert mellum.mlp_only_layers == () and mellum.num_experts == 64
    beam = config_from_hf({"model_type": "beam", "num_hidden_layers": 13})
    assert beam.full_attention_layers == (5, 11, 12) == beam.nope_layers
    assert beam.mlp_only_layers == (0, 1, 2) and beam.final_logit_softcapping == 30.0
    assert beam.rope_theta == 10000.0 and beam.sliding_window == 512
    uncapped = config_from_hf({**saved_config("beam"), "final_logit_softcapping": None})
    assert uncapped.final_logit_softcapping == 0.0
    # Command R (no q/k norms) and Command R+'s kind (a LayerNorm per head and channel: 8
    # KV heads of 128, 30,283,579,392 parameters as transformers counts them)
    command_r = config_from_hf({"model_type": "cohere"})
    assert not command_r.qk_norm and command_r.rope_theta == 500000.0
    assert command_r.sliding_window is None and command_r.tie_word_embeddings
    plus = config_from_hf({"model_type": "cohere", "use_qk_norm": True, "num_key_value_heads": 8})
    assert param_specs(plus)["layers"][0]["attn"]["q_norm"].shape == (64, 128)
    assert count_params(plus)[0] == 30_283_579_392
    lara = config_from_hf({"model_type": "lara_mini", "num_hidden_layers": 10})
    assert lara.linear_attention_layers == (0, 2, 5, 7) and lara.windowed_layers == (1, 4, 6, 9)
    assert lara.nope_layers == (3, 8) == lara.full_attention_layers and lara.tie_word_embeddings


def test_an_aria_checkpoint_serves_its_language_model():
    """Aria's own config (model_type aria): its text_config is the model, its top-level
    tie_word_embeddings (default false) the language model's."""
    text = saved_config("aria_text")
    wrapped = config_from_hf({"model_type": "aria", "text_config": text, "vision_config": {}})
    assert arch_fields(wrapped) == arch_fields(get_preset("tiny-aria-text"))
    tied = config_from_hf({"model_type": "aria", "text_config": text, "tie_word_embeddings": True})
    assert tied.tie_word_embeddings


def test_beam_query_scale_is_transformers_at_far_positions():
    """Beam's global layers' query scale (1 + (position + 1) / 2048) ** 0.1, as transformers'
    compute_attention_scaling gave it at positions up to 131,071 (the fixture's prompts reach
    48 only, where it is within 0.3% of 1): applied to ones, in float32, on those layers
    alone."""
    from models.attention import _temperature

    cfg = get_preset("tiny-beam")
    want = json.loads((FIXTURES / "beam" / "reference.json").read_text())["nope_query_scale"]
    positions = jnp.asarray(want["positions"], jnp.int32)
    ones = jnp.ones((len(want["positions"]), 4, 16), jnp.float32)
    got = _temperature(cfg, ones, positions, cfg.nope_layers[0])
    np.testing.assert_allclose(got[:, 0, 0], want["scale"], rtol=2e-7)
    assert (got == got[:, :1, :1]).all()
    assert (_temperature(cfg, ones, positions, 0) == ones).all()  # (a windowed layer)


def test_internlm3_reads_its_releases_bias_switches():
    """InternLM3-8B's config.json names its switches qkv_bias and bias (transformers maps them
    to attention_bias and mlp_bias, and Llama's layers put a bias on o_proj too): off, it is
    Llama's model; on, refused by name."""
    release = {k: v for k, v in saved_config("internlm3").items() if not k.endswith("_bias")}
    release |= {"qkv_bias": False, "bias": False}
    assert arch_fields(config_from_hf(release)) == arch_fields(get_preset("tiny-internlm3"))
    for switch, field in (("qkv_bias", "attention_bias"), ("bias", "mlp_bias")):
        with pytest.raises(ValueError, match=f"{field}=True: biases are not supported"):
            config_from_hf({**release, switch: True})


@pytest.mark.parametrize(
    "preset, hf",
    [
        # Pythia's config.json (legacy rotary fields), GPT-J-6B's and Falcon's shapes
        *(
            (
                name,
                dict(
                    model_type="gpt_neox",
                    vocab_size=v,
                    hidden_size=d,
                    num_hidden_layers=n,
                    num_attention_heads=h,
                    intermediate_size=4 * d,
                    rotary_pct=0.25,
                    rotary_emb_base=10000,
                    bos_token_id=0,
                    eos_token_id=0,
                ),
            )  # fmt: skip
            for name, (v, d, n, h) in {
                "pythia-1b": (50304, 2048, 16, 8),
                "pythia-6.9b": (50432, 4096, 32, 32),
                "pythia-12b": (50688, 5120, 36, 40),
            }.items()
        ),
        ("gpt-j-6b", dict(model_type="gptj")),
        ("opt-125m", dict(model_type="opt")),
        (
            "opt-6.7b",
            dict(
                model_type="opt",
                hidden_size=4096,
                num_hidden_layers=32,
                num_attention_heads=32,
                ffn_dim=16384,
                word_embed_proj_dim=4096,
            ),
        ),  # fmt: skip
        (
            "starcoder",
            dict(
                model_type="gpt_bigcode",
                n_embd=6144,
                n_layer=40,
                n_head=48,
                n_positions=8192,
                vocab_size=49152,
                n_inner=24576,
                bos_token_id=0,
                eos_token_id=0,
            ),
        ),  # fmt: skip
        ("falcon-7b", dict(model_type="falcon")),
        ("gpt-neo-1.3b", dict(model_type="gpt_neo")),
        ("biogpt", dict(model_type="biogpt")),
        ("xglm-564m", dict(model_type="xglm")),
        (
            "xglm-7.5b",
            dict(model_type="xglm", d_model=4096, ffn_dim=16384, num_layers=32, attention_heads=32),
        ),
        (
            "biogpt-large",
            dict(
                model_type="biogpt",
                vocab_size=57717,
                hidden_size=1600,
                num_hidden_layers=48,
                num_attention_heads=25,
                intermediate_size=6400,
                max_position_embeddings=2048,
            ),
        ),  # fmt: skip
        (
            "persimmon-8b",
            dict(
                model_type="persimmon",
                rope_parameters={
                    "rope_type": "default",
                    "rope_theta": 25000.0,
                    "partial_rotary_factor": 0.5,
                },
            ),
        ),  # fmt: skip
        *(
            (
                name,
                dict(
                    model_type="codegen",
                    vocab_size=51200,
                    n_embd=d,
                    n_layer=n,
                    n_head=h,
                    rotary_dim=r,
                    n_ctx=2048,
                ),
            )  # fmt: skip
            for name, (d, n, h, r) in {
                "codegen-350m": (1024, 20, 16, 32),
                "codegen-2b": (2560, 32, 32, 64),
                "codegen-6b": (4096, 33, 16, 64),
                "codegen-16b": (6144, 34, 24, 64),
            }.items()
        ),
        *(
            (
                name,
                dict(
                    model_type="gpt_neo",
                    hidden_size=d,
                    num_layers=n,
                    num_heads=h,
                    attention_types=[[["global", "local"], n // 2]],
                ),
            )  # fmt: skip
            for name, (d, n, h) in {
                "gpt-neo-125m": (768, 12, 12),
                "gpt-neo-2.7b": (2560, 32, 20),
            }.items()
        ),
        *(
            (
                name,
                dict(
                    model_type="falcon",
                    hidden_size=d,
                    num_hidden_layers=n,
                    num_attention_heads=h,
                    num_kv_heads=8,
                    new_decoder_architecture=True,
                    tie_word_embeddings=False,
                ),
            )  # fmt: skip
            for name, (d, n, h) in {
                "falcon-40b": (8192, 60, 128),
                "falcon-180b": (14848, 80, 232),
            }.items()
        ),
    ],
)
def test_real_presets_are_what_the_readers_make_of_their_shapes(preset, hf):
    skip = ("name",) if preset == "starcoder" else ("name", "max_position_embeddings")
    want = arch_fields(get_preset(preset), skip)
    assert arch_fields(config_from_hf(hf, dtype="bfloat16"), skip) == want


def test_pythias_released_spelling():
    """Pythia's config.json: the rotary fraction and base at the top level (rotary_pct,
    rotary_emb_base), no rope_parameters: the same model."""
    saved = saved_config("gpt_neox")
    release = {
        k: v for k, v in saved.items() if k not in ("rope_parameters", "partial_rotary_factor")
    }
    release |= {"rotary_pct": 0.25, "rotary_emb_base": 10000}
    cfg = config_from_hf(release)
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-gpt-neox"))
    assert cfg.rotary_dim == 4
    assert config_from_hf({**release, "rotary_pct": 0.5}).rotary_dim == 8


def test_falcon_40b_shapes_and_layouts():
    """Falcon-40B's config (8 KV heads, new_decoder_architecture, untied): 41,835,970,560
    parameters, as transformers 5.25 counts them; its norms ln_attn / ln_mlp by default,
    one with num_ln_in_parallel_attn 1; a KV head per query head without multi_query; one
    block after the other without parallel_attn."""
    falcon_40b = dict(
        model_type="falcon", hidden_size=8192, num_hidden_layers=60, num_attention_heads=128,
        num_kv_heads=8, new_decoder_architecture=True, tie_word_embeddings=False,
    )  # fmt: skip
    cfg = config_from_hf(falcon_40b)
    assert count_params(cfg)[0] == 41_835_970_560
    assert cfg.num_kv_heads == 8 and cfg.parallel_norms and cfg.head_dim == 64
    one = config_from_hf({**falcon_40b, "num_ln_in_parallel_attn": 1})
    assert one.parallel_block and not one.parallel_norms
    mha = config_from_hf({"model_type": "falcon", "multi_query": False})
    assert mha.num_kv_heads == mha.num_heads == 71
    sequential = config_from_hf({"model_type": "falcon", "parallel_attn": False})
    assert not sequential.parallel_block and sequential.num_kv_heads == 1


def test_gpt_bigcode_positions_are_learned_and_bounded():
    """GPT-BigCode's position table is n_positions long: the engine takes no max_model_len
    past it (by name, before any work); without multi_query a KV head per query head; an
    unscaled score where scale_attn_weights is false."""
    from engine import LLM

    cfg = get_preset("tiny-gpt-bigcode")
    assert param_specs(cfg)["pos_embed"].shape == (2048, 64)
    with pytest.raises(ValueError, match=r"max_model_len=4096: must be in \[1, max_position"):
        LLM(model=str(FIXTURES / "gpt_bigcode"), max_model_len=4096, num_pages=8)
    mha = config_from_hf({**saved_config("gpt_bigcode"), "multi_query": False})
    assert mha.num_kv_heads == mha.num_heads == 4
    unscaled = config_from_hf({**saved_config("gpt_bigcode"), "scale_attn_weights": False})
    assert unscaled.attention_multiplier == 1.0 and cfg.attention_multiplier == 0.0
    with pytest.raises(ValueError, match="learned_positions=True: GQA with every layer"):
        cfg.replace(nope_layers=(0,))


def test_olmo_holds_no_norm_weights():
    """OLMo 1's LayerNorms have no parameters: none in the tree, none read (its fixture holds
    none); a config without clip_qkv clamps nothing."""
    cfg = get_preset("tiny-olmo")
    specs = param_specs(cfg)
    assert "final_norm" not in specs
    assert not {"attn_norm", "mlp_norm"} & set(specs["layers"][0])
    assert config_from_hf({**saved_config("olmo"), "clip_qkv": None}).clip_qkv is None


def test_kolibri1_router_picks_by_biased_logits_and_weighs_by_sigmoid():
    """Top-k of logit + bias, each pick weighed by sigmoid(logit), renormalized: written out
    in numpy. The bias is large enough that adding it to the sigmoid scores instead
    (DeepSeek-V3's rule) picks other experts for some tokens."""
    cfg = get_preset("tiny-kolibri1")
    rng = np.random.default_rng(0)
    t, d, e, k = 32, cfg.hidden_size, cfg.num_experts, cfg.num_experts_per_tok
    x = rng.normal(size=(t, d)).astype(np.float32)
    w = (0.1 * rng.normal(size=(d, e))).astype(np.float32)
    bias = rng.normal(size=(e,)).astype(np.float32)
    p = {"router": jnp.asarray(w), "router_bias": jnp.asarray(bias)}
    weights, experts = route(p, jnp.asarray(x), cfg)
    logits = x.astype(np.float64) @ w.astype(np.float64)
    want = np.argsort(-(logits + bias), axis=-1, kind="stable")[:, :k]
    np.testing.assert_array_equal(np.sort(np.asarray(experts), -1), np.sort(want, -1))
    picked = 1 / (1 + np.exp(-np.take_along_axis(logits, np.asarray(experts), -1)))
    np.testing.assert_allclose(weights, picked / picked.sum(-1, keepdims=True), rtol=1e-5)
    _, v3_experts = route(p, jnp.asarray(x), cfg.replace(router_bias_on_logits=False))
    assert (np.sort(v3_experts, -1) != np.sort(experts, -1)).any(-1).sum() > 0


@pytest.mark.parametrize(
    "arch, change, match",
    [
        ("axk1", dict(q_lora_rank=None), "q_lora_rank: axk1's attention always has a q LoRA"),
        ("axk1", dict(mlp_layer_types=["dense"] * 3), "mlp_layer_types: expected a list of"),
        ("axk1", dict(scoring_func="softmax"), "scoring_func='softmax': transformers' axk1"),
        ("axk2", dict(q_lora_rank=None), "q_lora_rank: axk2's attention always has a q LoRA"),
        ("axk2", dict(gated_norm_rank=0), "gated_norm_rank=0: axk2 needs an int >= 1"),
        ("axk2", dict(attention_bias=True), "attention_bias=True: not supported for axk2"),
        ("mellum", dict(attention_bias=True), "attention_bias=True: not supported"),
        ("mellum", dict(layer_types=["full_attention"] * 3), "layer_types: expected 4 entries"),
        (
            "mellum",
            dict(rope_parameters={"full_attention": {"rope_theta": 1e4}}),
            "no 'sliding_attention' entry",
        ),
        (
            "mellum",
            dict(
                rope_parameters={
                    "full_attention": {"rope_theta": 1e4, "partial_rotary_factor": 0.5},
                    "sliding_attention": {"rope_theta": 1e2},
                }
            ),
            "full_attention.partial_rotary_factor=0.5: Mellum rotates whole heads",
        ),
        ("flint", dict(decoder_sparse_step=0), "decoder_sparse_step=0: expected an integer"),
        ("flint", dict(mlp_only_layers=[4]), r"mlp_only_layers=\[4\]: expected a list"),
        ("flint", dict(sliding_window=None), "sliding_window=None: sliding_attention layers"),
        ("flint", dict(hidden_act="gelu"), "hidden_act='gelu': only 'silu'"),
        ("kolibri1", dict(layer_types="sliding"), "layer_types: expected 4 entries of"),
        ("kolibri1", dict(attention_bias=True), "attention_bias=True: not supported"),
        (
            "beam",
            dict(rope_parameters={"full_attention": {"rope_theta": 1e4}}),
            "full_attention: Beam's global layers take no positions",
        ),
        (
            "beam",
            dict(rope_parameters={"sliding_attention": {"rope_type": "yarn", "factor": 2.0}}),
            "sliding_attention.rope_type='yarn': only 'default'",
        ),
        ("beam", dict(mlp_layer_types=["dense"]), "mlp_layer_types: expected 4 of dense"),
        ("beam", dict(final_logit_softcapping=-1), "final_logit_softcapping=-1: a number > 0"),
        ("beam", dict(attention_bias=True), "attention_bias=True: not supported"),
        ("aria_text", dict(mlp_bias=True), "mlp_bias=True: not supported"),
        ("aria_text", dict(moe_num_shared_experts=-1), "moe_num_shared_experts=-1: expected"),
        ("aria_text", dict(hidden_act="gelu"), "hidden_act='gelu': only 'silu'"),
        (
            "lara_mini",
            dict(rope_parameters={"rope_theta": 1e4, "partial_rotary_factor": 0.5}),
            "partial_rotary_factor=0.5: Lara Mini rotates whole heads",
        ),
        ("lara_mini", dict(layer_types=["mamba"] * 5), "layer_types: expected 5 entries of"),
        ("lara_mini", dict(sliding_window=0), "sliding_window=0: sliding_attention layers"),
        ("lara_mini", dict(attention_bias=True), "attention_bias=True: not supported"),
        ("cohere", dict(logit_scale=0), "logit_scale=0: expected a number > 0"),
        ("cohere", dict(hidden_act="gelu"), "hidden_act='gelu': only 'silu'"),
        ("cohere", dict(attention_bias=True), "attention_bias=True: only False"),
        ("apertus", dict(hidden_act="silu"), "hidden_act='silu': apertus takes 'xielu'"),
        ("gpt_neox", dict(hidden_act="relu"), "hidden_act='relu': expected one of"),
        ("olmo", dict(attention_bias=True), "attention_bias=True: not supported"),
        ("falcon", dict(alibi=True), "alibi=True: not with new_decoder_architecture"),
        ("falcon", dict(activation="relu"), "activation='relu': only 'gelu'"),
        ("falcon", dict(num_kv_heads=3), "num_kv_heads=3: must divide 8 heads"),
        ("gptj", dict(activation_function="gelu"), "activation_function='gelu': only the tanh"),
        ("gptj", dict(rotary_dim=7), "rotary_dim=7: must be even"),
        ("gptj", dict(rotary_dim=32), r"rotary_dim=32: an int in \[2, head_dim=16\]"),
        ("gpt_bigcode", dict(add_cross_attention=True), "add_cross_attention=True: cross"),
        ("gpt_bigcode", dict(activation_function="relu"), "activation_function='relu': expected"),
        ("gpt2", dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
        ("opt", dict(do_layer_norm_before=False), "do_layer_norm_before=False: norms after"),
        ("gpt_neo", dict(num_layers=6), "attention_types=.*for each of the 6 layers"),
        ("codegen", dict(n_embd=66, n_head=6), "n_embd=66: CodeGen's qkv_proj comes in 4"),
        ("persimmon", dict(hidden_act="gelu"), "hidden_act='gelu': only 'relu2'"),
        ("biogpt", dict(hidden_act="relu"), "hidden_act='relu': only 'gelu'"),
        ("xglm", dict(activation_function="relu"), "activation_function='relu': only 'gelu'"),
        ("xglm", dict(add_cross_attention=True), "add_cross_attention=True: cross-attention"),
        ("gpt_neo", dict(attention_types=[[["global", "sparse"], 2]]), "'global' / 'local'"),
        ("opt", dict(word_embed_proj_dim=32), "word_embed_proj_dim=32: embeddings narrower"),
        ("opt", dict(activation_function="gelu"), "activation_function='gelu': another"),
        ("olmo", dict(clip_qkv="8"), "clip_qkv='8': a number > 0, or null"),
        (
            "gpt_neox",
            dict(rope_parameters={"rope_theta": 1e4, "partial_rotary_factor": 1.5}),
            "partial_rotary_factor=1.5: must be a number in",
        ),
    ],
)
def test_the_readers_refuse_by_field(arch, change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config(arch), **change})


@pytest.mark.parametrize(
    "preset, change, match",
    [
        ("tiny-kolibri1", dict(topk_method="greedy"), "router_bias_on_logits=True: needs"),
        ("tiny-axk2", dict(q_lora_rank=0), "mla_query_gate=True: needs a q LoRA"),
        ("tiny-axk2", dict(gated_norm_rank=-1), "gated_norm_rank=-1: must be >= 0"),
        ("tiny-mellum", dict(router_bias_on_logits=True), "router_bias_on_logits=True: needs"),
        ("tiny-mellum", dict(moe_post_norm=True, num_experts=0), "moe_post_norm=True: needs"),
        ("tiny-kolibri1", dict(moe_post_norm=True), "moe_post_norm=True: needs"),
        ("tiny-beam", dict(attn_scale_power=-0.1), "attn_scale_power=-0.1: must be a finite"),
        ("tiny-beam", dict(attn_scale_beta=0.5), "attn_scale_power=0.1: needs"),
        ("tiny-beam", dict(attn_output_gate=False), "attn_gate_bias=True: needs attn_output"),
        ("tiny-beam", dict(residual_normed=True), "depth_scaled_residual=True: not beside"),
        ("tiny-flint", dict(mlp_act="xielu"), "mlp_act='xielu': dense MLPs only"),
        ("tiny-gpt-neox-seq", dict(parallel_norms=True), "parallel_norms=True: needs"),
        ("tiny-gpt-neox", dict(norm_weightless=True), "norm_weightless=True: not with norm_b"),
        ("tiny-helium", dict(norm_weightless=True, norm_zero_centered=True), "norm_weightless"),
    ],
)
def test_model_config_refuses_bad_fields(preset, change, match):
    with pytest.raises(ValueError, match=match):
        get_preset(preset).replace(**change)


def test_gpt_neos_windows_and_unscaled_scores_move_its_logits():
    """tiny-gpt-neo's local layers (an 8-key window) and unscaled scores: each moves the
    logits at the 33-token prompt's last position (HF parity, tests/test_hf_parity.py,
    holds them to 2e-3), so the fixture tests both."""
    cfg = get_preset("tiny-gpt-neo")
    prompt = json.loads((FIXTURES / "gpt_neo" / "reference.json").read_text())["prompts"][-1]
    params = load_hf_params(FIXTURES / "gpt_neo", cfg)
    want = last_prefill_logits(cfg, params, prompt)
    windowless = cfg.replace(sliding_window=None, full_attention_layers=())
    scaled = cfg.replace(attention_multiplier=0.0)  # (head_dim^-0.5)
    for other in (windowless, scaled):
        assert np.abs(last_prefill_logits(other, params, prompt) - want).max() > 0.05


def test_xglms_sinusoids_are_transformers_far_past_the_prompts():
    """XGLM's computed position table (models/layers.sinusoids, two rows in) equals the rows
    transformers' XGLMSinusoidalPositionalEmbedding.get_embedding built (reference.json) at
    positions 0, 48, 999 and 2,047 (the fixture's prompts reach 48 only)."""
    from models.layers import sinusoids

    want = json.loads((FIXTURES / "xglm" / "reference.json").read_text())["sinusoids"]
    got = np.asarray(sinusoids(jnp.asarray(want["rows"], jnp.int32), 64))
    table = np.asarray(want["table"])
    np.testing.assert_allclose(got[:2], table[:2], atol=2e-6, rtol=0)  # (positions 0, 48)
    # Far out a float32 frequency one step off (torch's and XLA's float32 exp round their own
    # ways) moves the angle 2,049 x f by up to 1.2e-4: within three such steps.
    np.testing.assert_allclose(got[2:], table[2:], atol=3.6e-4, rtol=0)
