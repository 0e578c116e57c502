"""Mamba-2 hybrids' configs and checkpoints: Nemotron-H (configs/hf_nemotron_h.py), Granite
4.0 (configs/hf_granite.py) and Bamba (configs/hf_bamba.py): releases' config.json
spellings, bad fields refused by name, Nemotron-H's checkpoints under transformers' own
names (the releases' are the fixtures': tests/test_hf_parity.py, tests/test_linear_attention.py
run them through the reference path and the engine)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from configs.hf_config import config_from_hf
from configs.presets import get_preset
from configs.presets_mamba import NANO_PATTERN
from models.checkpoint_names import nemotron_h_blocks
from models.hf_loader import load_hf_params

FIXTURES = Path(__file__).parent / "fixtures"

# Nemotron 3 Nano 30B-A3B's config.json fields as its release spells them (the pattern
# string, transformers 4's torch_dtype, Infinity in time_step_limit).
NANO_RELEASE = dict(
    architectures=["NemotronHForCausalLM"],
    model_type="nemotron_h",
    vocab_size=131072,
    hidden_size=2688,
    hybrid_override_pattern=NANO_PATTERN,
    num_hidden_layers=52,
    num_attention_heads=32,
    num_key_value_heads=2,
    head_dim=128,
    max_position_embeddings=262144,
    intermediate_size=1856,
    mlp_hidden_act="relu2",
    mamba_num_heads=64,
    mamba_head_dim=64,
    n_groups=8,
    ssm_state_size=128,
    conv_kernel=4,
    use_conv_bias=True,
    mamba_hidden_act="silu",
    time_step_limit=[0.0, float("inf")],
    chunk_size=128,
    n_routed_experts=128,
    num_experts_per_tok=6,
    moe_intermediate_size=1856,
    moe_shared_expert_intermediate_size=3712,
    n_shared_experts=1,
    n_group=1,
    topk_group=1,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
    layer_norm_epsilon=1e-5,
    residual_in_fp32=False,
    tie_word_embeddings=False,
    attention_bias=False,
    mlp_bias=False,
    use_bias=False,
    torch_dtype="bfloat16",
    bos_token_id=1,
    eos_token_id=2,
)


def test_config_of_nemotron_3_nano_as_released(tmp_path):
    """Its 52 blocks are 29 decoder layers: 23 Mamba-2 and 6 attention layers, each with the
    MoE block after it but the Mamba-2 layers right before an attention one ("M*"); read
    from a file (JSON's Infinity), and with the legacy spellings of the Mamba fields."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(NANO_RELEASE))
    want = get_preset("nemotron-3-nano-30b-a3b")
    got = config_from_hf(path, dtype="auto")
    assert got.replace(name=want.name) == want
    assert (len(got.linear_attention_layers), len(got.nope_layers)) == (23, 6)
    assert tuple(i + 1 for i in got.no_ffn_layers) == got.nope_layers
    assert not got.mlp_only_layers
    legacy = {k: v for k, v in NANO_RELEASE.items() if k not in ("n_groups", "conv_kernel")}
    legacy.update(mamba_n_groups=8, mamba_d_conv=4)
    assert config_from_hf(legacy, dtype="auto").replace(name=want.name) == want
    # transformers 5's own save: the list of kinds, no layer count, its Infinity spelled out
    kinds = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    saved = {k: v for k, v in NANO_RELEASE.items() if k not in ("hybrid_override_pattern",)}
    saved.update(
        layers_block_type=[kinds[c] for c in NANO_PATTERN],
        time_step_limit=[0.0, {"__float__": "Infinity"}],
    )
    del saved["num_hidden_layers"]
    assert config_from_hf(saved, dtype="auto").replace(name=want.name) == want


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(hybrid_override_pattern="EM*E"), r"layers_block_type\[0\]='moe': a feed-forward"),
        (dict(hybrid_override_pattern="M*EE"), r"layers_block_type\[3\]='moe'"),
        (dict(hybrid_override_pattern="M*X"), "hybrid_override_pattern: 'X' is not one of"),
        (dict(hybrid_override_pattern="MEME"), "needs a full_attention block"),
        (dict(hybrid_override_pattern=None), "layers_block_type .or hybrid_override_pattern"),
        (dict(mlp_hidden_act="silu"), "mlp_hidden_act='silu': only 'relu2'"),
        (dict(mamba_hidden_act="gelu"), "mamba_hidden_act='gelu'"),
        (dict(time_step_limit=[0.1, 0.01]), "time_step_limit"),
        (dict(use_bias=True), "use_bias=True"),
        (dict(sliding_window=4096), "sliding_window"),
    ],
)
def test_bad_nemotron_configs_are_refused_by_field(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_hf({**NANO_RELEASE, **change})


def test_a_dense_nemotron_h_pattern():
    """Nemotron-H's dense releases (Nemotron-H, Nemotron Nano 2: relu2 MLP blocks "-", no
    MoE): mixers in a row ("MM") leave the first without a feed-forward block; no experts."""
    cfg = config_from_hf({**NANO_RELEASE, "hybrid_override_pattern": "M-MM-M*-M*"})
    assert (cfg.num_layers, cfg.num_experts) == (7, 0)
    assert cfg.linear_attention_layers == (0, 1, 2, 3, 5) and cfg.nope_layers == (4, 6)
    assert cfg.no_ffn_layers == (1, 3, 5, 6) and cfg.mlp_only_layers == (0, 2, 4)
    assert not any(cfg.is_moe_layer(i) for i in range(cfg.num_layers))


def test_blocks_behind_each_layer():
    """Each decoder layer's mixer block and the feed-forward block after it (or none)."""
    cfg = get_preset("tiny-nemotron-h")  # blocks M E * E M M - *
    assert nemotron_h_blocks(cfg) == [(0, 1), (2, 3), (4, None), (5, 6), (7, None)]


@pytest.mark.parametrize("fixture", ["nemotron_h", "nemotron_h_latent"])
def test_checkpoint_under_transformers_own_names_loads_the_same(tmp_path, fixture):
    """transformers 5.25 loads a release into "model." names with each layer's experts fused
    ([E, F, L] up, [E, L, F] down: its conversion_mapping's "nemotron_h"); a checkpoint
    saved so gives the same parameters as the release's names."""
    src = FIXTURES / fixture
    tensors = load_file(str(src / "model.safetensors"))
    fused: dict[str, np.ndarray] = {}
    experts: dict[str, dict[int, np.ndarray]] = {}
    for name, array in tensors.items():
        name = name.replace("backbone.", "model.", 1)
        parts = name.split(".")
        if "experts" in parts and parts[parts.index("experts") + 1].isdigit():
            at = parts.index("experts")
            key = ".".join(parts[: at + 1] + [parts[at + 2]])  # ...experts.up_proj
            experts.setdefault(key, {})[int(parts[at + 1])] = array
        else:
            fused[name] = array
    for key, per_expert in experts.items():
        fused[key] = np.stack([per_expert[e] for e in sorted(per_expert)])
    assert experts and not any(n.startswith("backbone.") for n in fused)
    out = tmp_path / fixture
    out.mkdir()
    save_file(fused, str(out / "model.safetensors"))
    (out / "config.json").write_text((src / "config.json").read_text())
    cfg = get_preset("tiny-" + fixture.replace("_", "-"))
    want, got = load_hf_params(src, cfg), load_hf_params(out, cfg)
    assert_same_params(want, got)


def assert_same_params(want, got) -> None:
    """The two parameter trees hold the same leaves, bit for bit."""
    flat_want, flat_got = jax.tree.leaves_with_path(want), jax.tree.leaves_with_path(got)
    assert [p for p, _ in flat_want] == [p for p, _ in flat_got]
    for (path, a), (_, b) in zip(flat_want, flat_got, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=str(path))


def test_config_of_a_granite_release():
    """Granite 4.0-H as released: layer_types "mamba" / "attention", mamba_d_head "auto"
    (expand x hidden / heads), no positions; the dense -H-Micro kind (no experts) serves
    its shared MLP as the dense MLP; bad fields refused by name."""
    fixture = json.loads((FIXTURES / "granitemoehybrid" / "config.json").read_text())
    release = dict(
        fixture,
        layer_types=["mamba", "attention", "mamba", "mamba"],
        mamba_d_head="auto",
        time_step_limit=[0.0, float("inf")],
    )
    want = get_preset("tiny-granitemoehybrid")
    assert config_from_hf(release).replace(name=want.name) == want
    dense = config_from_hf({**release, "num_local_experts": 0})
    assert (dense.num_experts, dense.intermediate_size, dense.num_shared_experts) == (0, 32, 0)
    rope = config_from_hf({**release, "position_embedding_type": "rope"})
    assert rope.nope_layers == () and want.nope_layers == (1,)
    for change, match in [
        (dict(position_embedding_type="alibi"), "position_embedding_type='alibi'"),
        (dict(mamba_d_head=12), "mamba_d_head=12"),
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (dict(layer_types=["mamba", "mlp", "mamba", "mamba"]), "layer_types: expected 4"),
        (dict(mamba_proj_bias=True), "mamba_proj_bias=True"),
    ]:
        with pytest.raises(ValueError, match=match):
            config_from_hf({**release, **change})


def test_config_of_a_bamba_release():
    """Bamba (configs/hf_bamba.py): the fixture's config.json reads to tiny-bamba; Bamba-9B's
    shapes (attention on layers 9, 18, 27) to bamba-9b, 9,808,584,064 parameters as
    transformers 5.25's BambaForCausalLM counts them on the meta device; bad fields refused by
    name (transformers fixes the rotary fraction at 0.5, so another means a model it does not
    compute)."""
    from models.specs import count_params

    fixture = json.loads((FIXTURES / "bamba" / "config.json").read_text())
    want = get_preset("tiny-bamba")
    assert config_from_hf(fixture).replace(name=want.name) == want
    nine = config_from_hf({"model_type": "bamba", "attn_layer_indices": [9, 18, 27]})
    assert nine.replace(name="bamba-9b", dtype="bfloat16") == get_preset("bamba-9b")
    assert count_params(nine) == (9_808_584_064, 9_808_584_064)
    for change, match in [
        (dict(attn_layer_indices=None), "attn_layer_indices=None: a model of Mamba-2 layers"),
        (dict(attn_layer_indices=[1, 7]), r"attn_layer_indices=\[1, 7\]: layers in \[0, "),
        (dict(mlp_bias=True), "mlp_bias=True: biases are not supported"),
        (dict(mamba_proj_bias=True), "mamba_proj_bias=True: biases"),
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (
            dict(rope_parameters={**fixture["rope_parameters"], "partial_rotary_factor": 0.25}),
            "partial_rotary_factor=0.25: transformers' Bamba",
        ),
    ]:
        with pytest.raises(ValueError, match=match):
            config_from_hf({**fixture, **change})
