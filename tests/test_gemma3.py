"""Google's Gemma 3, Gemma 2 and VaultGemma (configs/hf_gemma3.py): the fixtures' configs
(Gemma 3's text model, the same in its multimodal wrapper, Gemma 2's, VaultGemma's) read
to their presets; the released configs' older spelling of the RoPE and the window
pattern; Gemma 2's soft caps; the refusals. HF parity: tests/test_hf_parity.py
(gemma3_text, gemma3, gemma2, vaultgemma); the paged engine's soft-capped attention:
tests/test_engine.py, tests/test_pallas_engine.py (gemma2), tests/test_paged_attention.py,
tests/test_pallas_attention.py."""

from __future__ import annotations

import pytest

from configs.hf_config import config_from_hf
from configs.model_config import ModelConfig
from configs.presets import get_preset
from tests.family_cases import FIXTURES, arch_fields, saved_config


@pytest.mark.parametrize("arch", ["gemma3_text", "gemma3"])
def test_fixture_configs_read_as_the_preset(arch):
    cfg = config_from_hf(FIXTURES / arch)
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-gemma3"))
    assert cfg.model_type == "gemma3_text" and cfg.norm_offset == 1.0
    # Soft-capped attention scores, as Gemma 2's (Gemma3Attention applies the cap when set).
    capped = config_from_hf(dict(saved_config("gemma3_text"), attn_logit_softcapping=50.0))
    assert capped.attn_logit_softcapping == 50.0 and cfg.attn_logit_softcapping == 0.0


def test_the_released_spelling_of_rope_and_windows():
    """Gemma 3 27B's config.json: rope_theta and rope_scaling for the global layers,
    rope_local_base_freq for the windowed ones, sliding_window_pattern for the kinds."""
    released = dict(
        model_type="gemma3_text",
        num_hidden_layers=12,
        query_pre_attn_scalar=168,
        rope_theta=1000000.0,
        rope_local_base_freq=10000.0,
        rope_scaling={"factor": 8.0, "rope_type": "linear"},
        sliding_window=1024,
        sliding_window_pattern=6,
    )
    cfg = config_from_hf(released)
    assert cfg.full_attention_layers == (5, 11) and cfg.sliding_window == 1024
    assert cfg.rope_theta == 1e6 and cfg.sliding_rope_theta == 1e4
    assert cfg.rope_scaling.rope_type == "linear" and cfg.rope_scaling.factor == 8.0
    assert cfg.attention_multiplier == pytest.approx(168**-0.5, rel=1e-12)
    # Every layer global (a pattern of 1): no window.
    cfg = config_from_hf(dict(released, sliding_window_pattern=1))
    assert cfg.sliding_window is None and cfg.full_attention_layers == ()


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(attn_logit_softcapping=0.0), "attn_logit_softcapping=0.0: a finite number > 0"),
        (dict(use_bidirectional_attention=True), "use_bidirectional_attention=True"),
        (dict(hidden_activation="gelu"), "hidden_activation='gelu'"),
        (dict(query_pre_attn_scalar=0), "query_pre_attn_scalar=0: must be a number > 0"),
        (
            dict(rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 4.0}}),
            "rope_type 'yarn' \\(full_attention\\)",
        ),
        (dict(layer_types=["global"] * 2), "layer_types: expected 2 entries"),
    ],
)
def test_bad_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("gemma3_text"), **change})


def test_gemma2_fixture_and_bare_configs_read_as_their_presets():
    """The fixtures' configs are tiny-gemma2's and tiny-vaultgemma's; a bare Gemma 2 config
    is Gemma 2 2B's (Gemma2Config's defaults): every other layer windowed from layer 0, caps
    50 and 30; a bare VaultGemma one the same without the norms after each block."""
    cfg = config_from_hf(FIXTURES / "gemma2")
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-gemma2"))
    assert cfg.attn_logit_softcapping == 1.0 and cfg.final_logit_softcapping == 3.0
    assert not cfg.qk_norm and cfg.norm_offset == 1.0 and cfg.sliding_rope_theta == 0.0
    bare = config_from_hf({"model_type": "gemma2"}, dtype="bfloat16")
    assert arch_fields(bare, skip=("name",)) == arch_fields(
        get_preset("gemma-2-2b"), skip=("name",)
    )
    assert bare.full_attention_layers == tuple(range(1, 26, 2)) and bare.sliding_window == 4096
    # VaultGemma: Gemma 2 without the norms after each block (Gemma2Config's defaults).
    cfg = config_from_hf(FIXTURES / "vaultgemma")
    assert arch_fields(cfg) == arch_fields(get_preset("tiny-vaultgemma"))
    assert not cfg.sandwich_norms and cfg.attn_logit_softcapping == 0.5
    bare_vault = config_from_hf({"model_type": "vaultgemma"}, dtype="bfloat16")
    assert arch_fields(bare_vault, skip=("name", "model_type", "sandwich_norms")) == arch_fields(
        bare, skip=("name", "model_type", "sandwich_norms")
    )


def test_gemma2_released_spelling_and_null_caps():
    """Gemma 2 27B's config.json (transformers 4: rope_theta, no layer_types) reads to the
    preset; a null cap is no cap."""
    released = dict(
        model_type="gemma2",
        hidden_size=4608,
        intermediate_size=36864,
        num_hidden_layers=46,
        num_attention_heads=32,
        num_key_value_heads=16,
        head_dim=128,
        query_pre_attn_scalar=144,
        rope_theta=10000.0,
        sliding_window=4096,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        cache_implementation="hybrid",
        torch_dtype="bfloat16",
        hidden_act="gelu_pytorch_tanh",  # (beside hidden_activation, which the model reads)
        hidden_activation="gelu_pytorch_tanh",
    )
    cfg = config_from_hf(released, dtype="bfloat16")
    assert arch_fields(cfg, skip=("name",)) == arch_fields(
        get_preset("gemma-2-27b"), skip=("name",)
    )
    cfg = config_from_hf(dict(released, attn_logit_softcapping=None, final_logit_softcapping=None))
    assert cfg.attn_logit_softcapping == 0.0 and cfg.final_logit_softcapping == 0.0


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(attn_logit_softcapping=0), "attn_logit_softcapping=0: a finite number > 0"),
        (dict(final_logit_softcapping=-3.0), "final_logit_softcapping=-3.0: a finite number"),
        (dict(attn_logit_softcapping=True), "attn_logit_softcapping=True: a finite number"),
        (dict(attention_bias=True), "attention_bias=True: attention biases"),
        (dict(use_bidirectional_attention=True), "use_bidirectional_attention=True"),
        (dict(layer_types=["full_attention"]), "layer_types: expected 2 entries"),
    ],
)
def test_bad_gemma2_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**saved_config("gemma2"), **change})


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(attn_logit_softcapping=-1.0), "attn_logit_softcapping=-1.0: must be a finite"),
        (dict(attn_logit_softcapping=float("inf")), "attn_logit_softcapping=inf: must be"),
        (dict(final_logit_softcapping=float("nan")), "final_logit_softcapping=nan: must be"),
    ],
)
def test_model_config_refuses_bad_caps(change, match):
    with pytest.raises(ValueError, match=match):
        get_preset("tiny-gemma2").replace(**change)


def test_attention_softcap_is_refused_off_the_gqa_path():
    mla = get_preset("tiny-deepseek-v3")
    with pytest.raises(ValueError, match="attn_logit_softcapping: GQA attention only"):
        mla.replace(attn_logit_softcapping=50.0)
    assert isinstance(mla.replace(final_logit_softcapping=30.0), ModelConfig)


def test_the_first_gemma_reads_as_its_presets():
    """The fixture's config is tiny-gemma's; a bare config is Gemma 7B's (GemmaConfig's
    defaults); the releases' hidden_act "gelu" is the tanh GeGLU (transformers swaps it)."""
    assert arch_fields(config_from_hf(FIXTURES / "gemma")) == arch_fields(get_preset("tiny-gemma"))
    bare = config_from_hf({"model_type": "gemma"}, dtype="bfloat16")
    assert arch_fields(bare, skip=("name",)) == arch_fields(get_preset("gemma-7b"), skip=("name",))
    legacy = config_from_hf({**saved_config("gemma"), "hidden_act": "gelu"})
    assert legacy.mlp_act == "geglu" and not legacy.sandwich_norms
    with pytest.raises(ValueError, match="hidden_act='silu': only 'gelu_pytorch_tanh'"):
        config_from_hf({**saved_config("gemma"), "hidden_act": "silu"})
    with pytest.raises(ValueError, match="attention_bias=True: attention biases"):
        config_from_hf({**saved_config("gemma"), "attention_bias": True})
