"""Mesh strings, layout checks, the logical-axis rules and the multi-host flags, in this process
(one CPU device, nothing compiled). The sharded runs are in tests/test_sharding_mesh.py."""

from __future__ import annotations

import pathlib

import jax
import numpy as np
import pytest
from jax.sharding import AbstractMesh
from jax.sharding import PartitionSpec as P

from configs.presets import get_preset
from engine import LLM
from models.load import load_model
from sharding import distributed
from sharding.expert_parallel import bounded_capacity, capacity, most_sent_to_one_peer
from sharding.mesh import AXES, MeshConfig, check_layout, make_mesh, parse_mesh
from sharding.rules import (
    GQA_PAGES_AXES,
    RULES,
    activation_constrainer,
    kv_shardings,
    logical_to_spec,
    param_partition_specs,
    rules_for,
)

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    "spec, want",
    [
        ("", MeshConfig()),
        ("dp=2,tp=2,ep=2", MeshConfig(2, 2, 2)),
        ("ep=8", MeshConfig(ep=8)),
        (" tp = 2 , dp=1 ", MeshConfig(dp=1, tp=2)),
    ],
)
def test_parse_mesh(spec, want):
    assert parse_mesh(spec) == want


@pytest.mark.parametrize(
    "spec, match",
    [
        ("xp=2", "'xp=2' is not 'axis=count'"),
        ("tp", "'tp' is not 'axis=count'"),
        ("tp=0", "axis tp count 0 must be >= 1"),
        ("ep=-4", "axis ep count -4 must be >= 1"),
        ("dp=two", "axis dp count 'two' is not an integer"),
        ("tp=1_6", "axis tp count '1_6' is not an integer"),
        ("tp=+2", "axis tp count '\\+2' is not an integer"),
        ("tp=2,tp=4", "axis tp given twice"),
        ("tp=\uff12", "axis tp count '\uff12' is not an integer"),  # a fullwidth 2
    ],
)
def test_bad_mesh_strings(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_mesh(spec)


@pytest.mark.parametrize(
    "preset, mc, match",
    [
        ("tiny-qwen3-moe", MeshConfig(tp=3), "tp=3 does not divide num_heads=4"),
        ("tiny-qwen3-moe", MeshConfig(ep=3), "ep=3 does not divide num_experts=8"),
        ("tiny-mixtral", MeshConfig(ep=8), "ep=8 does not divide num_experts=4"),
        ("tiny-llama", MeshConfig(ep=2), "ep=2: model 'tiny-llama' has no routed experts"),
    ],
)
def test_impossible_layouts(preset, mc, match):
    with pytest.raises(ValueError, match=match):
        check_layout(get_preset(preset), mc)


def test_widths_the_mesh_does_not_divide_name_the_param_axis_and_count():
    cfg = get_preset("tiny-deepseek-v3").replace(moe_intermediate_size=30)
    check_layout(cfg, MeshConfig(tp=4))  # heads and experts are fine
    with pytest.raises(
        ValueError, match=r"\['moe'\].*axis '\w*mlp' of size 30 is split over mesh axis tp=4"
    ):
        param_partition_specs(cfg, MeshConfig(tp=4))


def test_mesh_larger_than_the_devices():
    with pytest.raises(
        ValueError, match=r"dp=1,tp=2,ep=1: dp\*tp\*ep=2 does not divide the 1 devices"
    ):
        make_mesh(MeshConfig(tp=2))
    mesh = make_mesh(MeshConfig())
    assert dict(mesh.shape) == {"dp": 1, "tp": 1, "ep": 1}


def test_param_specs_follow_the_logical_axes():
    specs = param_partition_specs(get_preset("tiny-deepseek-v3"), MeshConfig(dp=2, tp=2, ep=2))
    dense, moe = specs["layers"][0], specs["layers"][1]
    assert specs["embed"] == P("tp", None)
    assert dense["attn"]["wq_b"] == P(None, "tp", None)
    assert dense["attn"]["wkv_a"] == P(None, None)  # MLA latent projection: every head reads it
    assert dense["mlp"]["w_down"] == P("tp", None)
    assert moe["moe"]["w_gate"] == P("ep", None, "tp")
    assert moe["moe"]["w_down"] == P("ep", "tp", None)
    assert moe["moe"]["router"] == P(None, None)
    assert moe["moe"]["shared"]["w_up"] == P(None, "tp")


def test_scales_split_like_the_data_where_their_blocks_line_up_with_the_shards():
    """Scales (and zero points) of blocks one output wide (int4 groups, per-channel fp8)
    split over tp where the data's outputs are; along the contracted axis where each shard
    holds whole blocks (tiny-qwen3-moe: wo's 64 inputs over tp=2 in blocks of 32, not
    128; w_down's 32 never); act order's group indices keep them whole there."""
    cfg = get_preset("tiny-qwen3-moe")
    assert (cfg.num_heads * cfg.head_dim, cfg.moe_intermediate_size) == (64, 32)
    mc = MeshConfig(tp=2, ep=2)
    grouped = cfg.replace(quantization="int4", quantization_block=(1, 32))
    gptq = grouped.replace(quantization_zero_point=True)
    channel = cfg.replace(quantization="fp8", quantization_block=(1, 128))
    for c, wo_scale in ((grouped, P("tp", None)), (gptq, P("tp", None)), (channel, P(None, None))):
        layer = param_partition_specs(c, mc)["layers"][0]
        w_gate, w_down = layer["moe"]["w_gate"], layer["moe"]["w_down"]
        assert w_gate.data == P("ep", None, "tp") and w_gate.scale == P("ep", None, "tp")
        assert w_down.data == P("ep", "tp", None) and w_down.scale == P("ep", None, None)
        wq, wo = layer["attn"]["wq"], layer["attn"]["wo"]
        assert wq.data == P(None, "tp", None) and wq.scale == P(None, "tp")
        assert wo.data == P("tp", None, None) and wo.scale == wo_scale
        if c.quantization_zero_point:
            assert w_gate.zero == w_gate.scale and wo.zero == wo.scale
    act_order = gptq.replace(quantization_act_order=True)
    assert param_partition_specs(act_order, mc)["layers"][0]["attn"]["wo"].scale == P(None, None)
    blocks = cfg.replace(quantization="fp8", quantization_block=(16, 16))  # outputs: 16 wide
    layer = param_partition_specs(blocks, mc)["layers"][0]
    assert layer["moe"]["w_gate"].scale == P("ep", None, None)
    assert layer["attn"]["wo"].scale == P("tp", None)  # 64 inputs: 2 shards of 2 blocks


def test_kv_heads_split_when_tp_divides_them_and_replicated_otherwise():
    mixtral = get_preset("tiny-mixtral")  # 4 q heads, 1 kv head
    qwen = get_preset("tiny-qwen3-moe")  # 4 q heads, 2 kv heads
    tp2 = MeshConfig(tp=2)
    assert param_partition_specs(mixtral, tp2)["layers"][0]["attn"]["wk"] == P(None, None, None)
    assert param_partition_specs(qwen, tp2)["layers"][0]["attn"]["wk"] == P(None, "tp", None)
    assert logical_to_spec(GQA_PAGES_AXES, rules_for(mixtral, tp2)) == P(None, None, None, None)
    assert logical_to_spec(GQA_PAGES_AXES, rules_for(qwen, tp2)) == P(None, None, "tp", None)


def test_a_vocabulary_tp_does_not_divide_is_kept_whole():
    """GPT-2's 50,257 tokens: the embedding and lm_head replicated over tp, the rest split
    as ever (by hand, 59th session: a 509-token tiny-gpt2, tiny-llama and tiny-mamba gave the
    one-device tokens on tp=2 and dp=2,tp=2 meshes of 8 fake devices)."""
    gpt2 = get_preset("gpt-neo-125m")  # (GPT-2's vocabulary)
    specs = param_partition_specs(gpt2, MeshConfig(tp=2))
    assert specs["embed"] == P(None, None)
    assert specs["layers"][0]["mlp"]["w_up"] == P(None, "tp")
    even = param_partition_specs(gpt2.replace(vocab_size=50258), MeshConfig(tp=2))
    assert even["embed"] == P("tp", None)


def test_kv_pages_and_activations_on_a_mesh(monkeypatch):
    """On dp=2,tp=2,ep=2 (an abstract mesh: specs only, no devices): pages replicated over dp
    (one pool); GQA pages split by KV heads over tp when tp divides them; MLA's latent pages
    (one row read by every head) never split; fp8 scales split like their data's rows."""
    from engine.kv_quant import QuantizedPages

    mesh = AbstractMesh((2, 2, 2), AXES)
    mla, qwen, mixtral = (
        get_preset(n) for n in ("tiny-deepseek-v3", "tiny-qwen3-moe", "tiny-mixtral")
    )
    cases = [
        (mla, None, (P(None, None, None),)),
        (qwen, None, (P(None, None, "tp", None),) * 2),  # 2 KV heads
        (mixtral, None, (P(None, None, None, None),) * 2),  # 1 KV head: replicated
        (mla, "float8_e4m3fn", (QuantizedPages(P(None, None, None), P(None, None)),)),
        (
            qwen,
            "float8_e4m3fn",
            (QuantizedPages(P(None, None, "tp", None), P(None, None, "tp")),) * 2,
        ),
    ]
    for cfg, kv_dtype, want in cases:
        got = kv_shardings(cfg, mesh, kv_dtype)
        assert len(got) == cfg.num_layers, cfg.name
        specs = jax.tree.map(lambda s: s.spec, got, is_leaf=lambda x: hasattr(x, "spec"))
        assert specs == [want] * cfg.num_layers, (cfg.name, kv_dtype)
    # Layer-boundary activations split over dp; tokens entering the expert exchange over
    # (dp, ep): each dp replica's tokens split among its own ep devices.
    monkeypatch.setattr(jax.lax, "with_sharding_constraint", lambda x, sharding: sharding)
    pinned = activation_constrainer(qwen, mesh)(np.zeros((8, 4)), ("batch", "embed"))
    assert pinned.spec == P("dp", None) and pinned.mesh == mesh
    assert logical_to_spec(("expert_batch", None), rules_for(qwen, MeshConfig(2, 2, 2))) == P(
        ("dp", "ep"), None
    )


def test_rules_reject_clashes_and_unknown_names():
    with pytest.raises(ValueError, match="mesh axis 'ep' used twice"):
        logical_to_spec(("experts", "expert_batch"), RULES)
    with pytest.raises(ValueError, match="logical axis 'heads' has no rule"):
        logical_to_spec(("heads",), RULES)
    with pytest.raises(ValueError, match="rule 'x' -> 'zz': mesh axis must be one of"):
        logical_to_spec(("x",), {"x": "zz"})


def test_exchange_capacity_holds_the_worst_case():
    # A token's k copies go to k distinct experts, so at most min(k, E_local) per device.
    assert capacity(13, 2, 4) == 26
    assert capacity(13, 8, 4) == 52
    assert capacity(13, 8, 1) == 13


def test_bounded_exchange_capacity_is_twice_an_even_share_within_the_worst_case():
    # DeepSeek-V3 at ep=8 (32 experts a device, top-8), 256 tokens a device: 2 x 256 of the
    # 2,048 worst-case rows a peer.
    assert (bounded_capacity(256, 8, 32, 8), capacity(256, 8, 32)) == (512, 2048)
    assert bounded_capacity(16, 2, 4, 4) == 16  # 2 x 8, a multiple of 8
    assert bounded_capacity(3, 2, 4, 4) == 6  # ceil(6 / 4) = 2, x 2 = 4 -> 8, above 3 x 2
    assert bounded_capacity(4, 2, 4, 4) == 8 == capacity(4, 2, 4)  # no gain: one path
    # Copies bound for each ep device (16 experts over 4): ids >= 16 are not tokens.
    experts = np.array([[0, 5], [4, 7], [15, 16], [6, 16]])
    assert int(most_sent_to_one_peer(experts, 4, 4)) == 4  # device 1: 5, 4, 7, 6


def test_llm_rejects_bad_meshes_before_loading(monkeypatch):
    with pytest.raises(ValueError, match="axis tp count 0"):
        LLM(model="/no/such/dir", mesh="tp=0")  # the string is checked before the model

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were read before the layout was checked")

    monkeypatch.setattr("engine.llm.load_model", no_loading)
    with pytest.raises(ValueError, match=r"max_model_len=4096: must be in \[1, max_position"):
        LLM(model=str(FIXTURES / "mixtral"), max_model_len=4096)
    with pytest.raises(ValueError, match="tp=3 does not divide num_heads=4"):
        LLM(model=str(FIXTURES / "mixtral"), mesh="tp=3")
    with pytest.raises(ValueError, match="ep=2: model"):
        LLM(model=str(FIXTURES / "llama"), mesh="ep=2")
    with pytest.raises(ValueError, match=r"ep=4: dp\*tp\*ep=4 does not divide the 1 devices"):
        LLM(model=str(FIXTURES / "mixtral"), mesh="ep=4")


def test_llm_on_a_mesh_shards_params_straight_from_the_host(monkeypatch):
    """On a mesh the weights reach the devices only as shards: load_model hands over host
    arrays (a model larger than one device would not fit whole on the first)."""
    import engine.llm

    loaded = []

    def spy(*args, **kwargs):
        out = load_model(*args, **kwargs)
        loaded.append({type(x) for x in jax.tree.leaves(out[1])})
        return out

    monkeypatch.setattr(engine.llm, "load_model", spy)
    llm = LLM(model=str(FIXTURES / "llama"), mesh="dp=1")
    assert loaded == [{np.ndarray}]
    leaves = jax.tree.leaves(llm.params)
    assert all(isinstance(x.sharding, jax.sharding.NamedSharding) for x in leaves)
    LLM(model=str(FIXTURES / "llama"))
    assert len(loaded) == 2 and all(issubclass(t, jax.Array) for t in loaded[1])


@pytest.mark.parametrize(
    "args, match",
    [
        (("127.0.0.1:1234", 0, 0), "num_processes=0"),
        (("127.0.0.1:1234", 2, 2), r"process_id=2: must be in \[0, 2\)"),
        (("localhost", 2, 0), "coordinator='localhost': expected 'host:port'"),
        ((None, 2, 1), "coordinator=None"),
        ((":1234", 2, 0), "coordinator=':1234': expected 'host:port'"),
    ],
)
def test_distributed_flags_are_checked(args, match):
    with pytest.raises(ValueError, match=match):
        distributed.initialize(*args)


def test_one_process_needs_no_runtime():
    distributed.initialize(None, 1, 0)  # no coordinator, nothing started


def test_mesh_config_and_device_count_edges():
    for kwargs in (dict(tp=0), dict(dp=2.0)):
        with pytest.raises(ValueError, match="count must be an integer >= 1"):
            MeshConfig(**kwargs)
    import jax

    # 3 devices of 4 would leave one out: the mesh must divide the devices it is given.
    with pytest.raises(ValueError, match="dp\\*tp\\*ep=3 does not divide the 4 devices"):
        make_mesh(MeshConfig(tp=3), jax.devices() * 4)
