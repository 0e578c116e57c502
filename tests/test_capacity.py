"""Capacity math against figures computed here from the published architectures (the released
config.json files), not from the code under test: KV bytes per token and per sequence,
parameter and weight bytes (total and active), sequences that fit, bad input, the script."""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from safetensors import safe_open

from configs.presets import PRESETS, get_preset
from engine.kv_pages import pages_for_tokens
from long_context.capacity import (
    capacity,
    format_capacity,
    kv_bytes_per_token,
    param_counts,
    params_per_device,
    weight_bytes,
)
from sharding.mesh import check_layout

REPO = pathlib.Path(__file__).resolve().parents[1]
GIB = 1 << 30
BYTES = {"bfloat16": 2, "float8_e4m3fn": 1, "int8": 1, "int4": 0.5}

# From each model's released config.json. GQA: V, d, layers, heads, kv heads, head dim, dense
# FFN, and for MoE (experts, top-k, expert FFN, qk_norm). MLA models are listed separately.
GQA = {
    "llama-3.1-8b": dict(V=128256, d=4096, L=32, H=32, K=8, hd=128, F=14336),
    "llama-3.1-70b": dict(V=128256, d=8192, L=80, H=64, K=8, hd=128, F=28672),
    "mixtral-8x7b": dict(V=32000, d=4096, L=32, H=32, K=8, hd=128, E=8, k=2, Fe=14336),
    "qwen3-30b-a3b": dict(V=151936, d=2048, L=48, H=32, K=4, hd=128, E=128, k=8, Fe=768, qkn=1),
    "qwen3-235b-a22b": dict(V=151936, d=4096, L=94, H=64, K=4, hd=128, E=128, k=8, Fe=1536, qkn=1),
}
MLA = {
    # q_lora 0 = plain q projection; dense = first_k_dense_replace; bias = noaux_tc router bias
    "deepseek-v2-lite": dict(V=102400, d=2048, L=27, H=16, rq=0, r=512, dn=128, dr=64, dv=128,
                             F=10944, dense=1, E=64, k=6, Fe=1408, shared=2, bias=0),
    "deepseek-v3": dict(V=129280, d=7168, L=61, H=128, rq=1536, r=512, dn=128, dr=64, dv=128,
                        F=18432, dense=3, E=256, k=8, Fe=2048, shared=1, bias=1),
}  # fmt: skip


def gqa_params(V, d, L, H, K, hd, F=0, E=0, k=0, Fe=0, qkn=0) -> tuple[int, int]:
    attn = d * H * hd + 2 * d * K * hd + H * hd * d + 2 * hd * qkn
    ffn = 3 * d * F if not E else d * E + 3 * d * Fe * E
    idle = 0 if not E else 3 * d * Fe * (E - k)  # routed experts a token does not use
    total = 2 * V * d + d + L * (attn + ffn + 2 * d)  # untied embedding and head, norms
    return total, total - L * idle


def mla_params(V, d, L, H, rq, r, dn, dr, dv, F, dense, E, k, Fe, shared, bias):
    q = d * rq + rq + rq * H * (dn + dr) if rq else d * H * (dn + dr)
    attn = q + d * (r + dr) + r + r * H * (dn + dv) + H * dv * d
    moe = d * E + bias * E + 3 * d * Fe * E + 3 * d * Fe * shared
    total = 2 * V * d + d + L * (attn + 2 * d) + dense * 3 * d * F + (L - dense) * moe
    return total, total - (L - dense) * 3 * d * Fe * (E - k)


def expected_params(name: str) -> tuple[int, int]:
    return gqa_params(**GQA[name]) if name in GQA else mla_params(**MLA[name])


def expected_kv_per_token(name: str, nbytes: float = 2, fp8_scales: bool = False) -> float:
    """fp8_scales: the engine's fp8 pages keep a 4-byte scale per cached row."""
    scale = 4 if fp8_scales else 0
    if name in GQA:
        a = GQA[name]
        return 2 * a["L"] * a["K"] * (a["hd"] * nbytes + scale)
    a = MLA[name]
    return a["L"] * ((a["r"] + a["dr"]) * nbytes + scale)


REAL = [*GQA, *MLA]


def test_acceptance_figures():
    c = capacity("llama-3.1-70b", 131072, kv_dtype="bfloat16", weight_dtype="bfloat16", tp=8)
    assert c.kv_bytes_per_token == 327_680
    assert c.kv_bytes_per_sequence == 42_949_672_960
    assert kv_bytes_per_token(get_preset("deepseek-v3"), "bfloat16") == 70_272
    # fp8 KV as the engine stores it: 61 x (576 + 4) and 2 x 80 x 8 x (128 + 4)
    assert kv_bytes_per_token(get_preset("deepseek-v3"), "float8_e4m3fn") == 35_380
    assert kv_bytes_per_token(get_preset("llama-3.1-70b"), "float8_e4m3fn") == 168_960


def test_sparse_attention_adds_the_indexer_key_and_weights():
    """DeepSeek-V3.2-Exp = V3 + per layer an indexer key of 128 cached per token and its
    weights: wq_b [1536, 64 x 128], wk [7168, 128], k_norm weight and bias, weights_proj
    [7168, 64] (all active: every token runs them)."""
    v3, v32 = get_preset("deepseek-v3"), get_preset("deepseek-v3.2-exp")
    assert kv_bytes_per_token(v32, "bfloat16") == 61 * (512 + 64 + 128) * 2
    assert kv_bytes_per_token(v32, "float8_e4m3fn") == 61 * (512 + 64 + 4 + 128 + 4)
    indexer = 61 * (1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64)
    (total3, active3), (total32, active32) = param_counts(v3), param_counts(v32)
    assert (total32 - total3, active32 - active3) == (indexer, indexer)


def test_glm5_counts_match_its_published_totals():
    """GLM-5's model card: 744B parameters, 40B active (without its embedding and head,
    2 x 154,880 x 6,144, as the card counts active ones)."""
    total, active = param_counts(get_preset("glm-5"))
    assert total == pytest.approx(744e9, rel=0.005)
    assert active - 2 * 154880 * 6144 == pytest.approx(40e9, rel=0.01)


def test_published_totals_match_the_architecture_tables():
    # Guards the tables above against typos: the model cards' headline counts.
    for name, total, active in [
        ("llama-3.1-8b", 8.03e9, 8.03e9),
        ("llama-3.1-70b", 70.6e9, 70.6e9),
        ("mixtral-8x7b", 46.7e9, 12.9e9),
        ("qwen3-30b-a3b", 30.5e9, 3.3e9),
        ("qwen3-235b-a22b", 235e9, 22e9),
        ("deepseek-v2-lite", 15.7e9, None),  # card's 2.4B active excludes the embeddings
        ("deepseek-v3", 671e9, 37e9),
    ]:
        got_total, got_active = expected_params(name)
        assert got_total == pytest.approx(total, rel=0.01), name
        if active is not None:
            assert got_active == pytest.approx(active, rel=0.03), name


@pytest.mark.parametrize("name", REAL)
def test_kv_bytes_and_weight_bytes_of_real_presets(name):
    cfg = get_preset(name)
    total, active = expected_params(name)
    for dtype, nbytes in BYTES.items():
        fp8 = dtype == "float8_e4m3fn"
        assert kv_bytes_per_token(cfg, dtype) == expected_kv_per_token(name, nbytes, fp8)
        assert weight_bytes(cfg, dtype) == (math.ceil(total * nbytes), math.ceil(active * nbytes))
    c = capacity(name, 4096, weight_dtype="int4", hbm_gib=4096.0)
    assert (c.num_params, c.num_active_params) == (total, active)
    assert c.kv_dtype == "bfloat16"  # the model's own dtype by default
    assert c.kv_bytes_per_sequence == expected_kv_per_token(name) * 4096


def test_max_sequences_gqa_split_over_tp():
    c = capacity("llama-3.1-70b", 131072, weight_dtype="bfloat16", hbm_gib=80, tp=8, headroom=0.1)
    # Every weight split 8 ways but the RMSNorm weights (two per layer and the final one, of
    # 8,192 each), which every device keeps whole.
    norms = (80 * 2 + 1) * 8192
    weights_dev = 2 * ((70_553_706_496 - norms) // 8 + norms)
    budget = int(80 * GIB * 0.9) - weights_dev
    kv_seq_dev = 327_680 // 8 * 131072  # one of the 8 KV heads per device
    assert c.weight_bytes_per_device == weights_dev
    assert c.kv_bytes_per_sequence_per_device == kv_seq_dev
    assert c.max_sequences == budget // kv_seq_dev == 11
    assert c.kv_tokens == budget // (327_680 // 8 * 16) * 16  # whole 16-token pages


def test_sequences_take_whole_kv_pages_as_the_engine_allocates_them():
    # 1025 tokens take 65 pages of 16 (1040 slots), as engine/kv_pages.py allocates them.
    c = capacity("llama-3.1-8b", 1025, hbm_gib=20.0)
    per_token = 131_072  # 2 x 32 layers x 8 KV heads x 128 x 2 bytes
    pages = c.kv_budget_bytes_per_device // (per_token * 16)
    assert c.page_size == 16 and c.kv_tokens == pages * 16
    assert c.max_sequences == pages // pages_for_tokens(1025, 16) == pages // 65
    assert c.max_sequences < c.kv_budget_bytes_per_device // (per_token * 1025)
    assert capacity("llama-3.1-8b", 1025, hbm_gib=20.0, page_size=1).max_sequences == (
        c.kv_budget_bytes_per_device // (per_token * 1025)
    )


@pytest.mark.parametrize(
    "preset, tp", [("llama-3.1-8b", 8), ("llama-3.1-8b", 16), ("qwen3-30b-a3b", 8)]
)
def test_kv_bytes_per_device_follow_the_engines_cache_sharding(preset, tp):
    """Read off the PartitionSpec the engine gives its KV pages (sharding/rules.py): KV
    heads split over tp only when tp divides them (8 heads at tp=8), else kept whole on
    every device (8 heads at tp=16, Qwen3-30B-A3B's 4 at tp=8)."""
    from sharding.mesh import MeshConfig
    from sharding.rules import GQA_PAGES_AXES, logical_to_spec, rules_for

    cfg = get_preset(preset)
    spec = logical_to_spec(GQA_PAGES_AXES, rules_for(cfg, MeshConfig(tp=tp)))
    heads_split = spec[GQA_PAGES_AXES.index("kv_heads")] is not None
    per_token = kv_bytes_per_token(cfg, cfg.dtype)
    c = capacity(preset, 8192, tp=tp, hbm_gib=80)
    assert c.kv_bytes_per_sequence_per_device == per_token * 8192 // (tp if heads_split else 1)
    assert heads_split == (cfg.num_kv_heads % tp == 0)


def test_a_sliding_window_model_decodes_in_the_pages_of_its_window():
    """Mistral-7B-v0.1 (its released config.json): a 4096-key window on every layer. At 32k
    tokens a decoding sequence holds the pages under its last 4096 keys, 1 + ceil(4095 /
    16) = 257 of 16 tokens, where full attention holds 2048."""
    from configs.hf_config import config_from_hf

    v01 = {
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "vocab_size": 32000,
    }  # fmt: skip
    windowed = capacity(config_from_hf(v01, dtype="auto"), 32768, hbm_gib=40)
    full = capacity(
        config_from_hf({**v01, "sliding_window": None}, dtype="auto"), 32768, hbm_gib=40
    )
    per_token = 131_072  # 2 x 32 layers x 8 KV heads x 128 x 2 bytes
    pages = windowed.kv_budget_bytes_per_device // (per_token * 16)
    assert windowed.kv_bytes_per_token == full.kv_bytes_per_token == per_token
    assert windowed.kv_tokens == full.kv_tokens == pages * 16
    assert full.max_sequences == pages // 2048 and full.sliding_window is None
    assert windowed.max_sequences == pages // 257 and windowed.sliding_window == 4096
    assert "sliding window" in format_capacity(windowed)
    # A context no longer than the window holds all of its pages either way.
    assert capacity(config_from_hf(v01, dtype="auto"), 1000, hbm_gib=40).max_sequences == (
        pages // 63
    )


def test_mla_latent_is_never_split():
    b = capacity("deepseek-v3", 131072, weight_dtype="float8_e4m3fn", tp=8, hbm_gib=141)
    assert b.kv_bytes_per_sequence_per_device == b.kv_bytes_per_sequence == 70_272 * 131072
    # Per device: 1/8 of every weight but those the engine keeps whole (norms, the MLA
    # down-projections wq_a and wkv_a, the routers and their biases), counted by hand.
    n, _ = expected_params("deepseek-v3")
    whole = 61 * (2 * 7168 + 1536 + 512 + 7168 * 1536 + 7168 * 576) + 58 * (7168 * 256 + 256)
    whole += 7168  # the final norm
    assert b.weight_bytes_per_device == (n - whole) // 8 + whole == 84_780_357_120  # fp8
    budget = int(141 * GIB * 0.9) - b.weight_bytes_per_device
    assert b.kv_budget_bytes_per_device == budget
    assert b.max_sequences == budget // (70_272 * 131072) == 5


def test_hf_directory_is_sized_from_its_config_without_loading_weights():
    for arch in ("llama", "deepseek_v3", "mixtral"):
        path = REPO / "tests" / "fixtures" / arch
        n = 0
        for f in glob.glob(str(path / "*.safetensors")):
            with safe_open(f, "np") as st:
                n += sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())
        cfg = json.loads((path / "config.json").read_text())
        c = capacity(str(path), 1024, weight_dtype="bfloat16")
        assert c.num_params == n and c.weight_bytes == 2 * n
        assert c.kv_dtype == "float32"  # the checkpoint's own dtype
        layers = cfg["num_hidden_layers"]
        if arch == "deepseek_v3":
            want = layers * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * 4
        else:
            want = 2 * layers * cfg["num_key_value_heads"] * cfg["head_dim"] * 4
        assert c.kv_bytes_per_token == want


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(context=-1), "context"),
        (dict(context=0), "context"),
        (dict(context=1.5), "context"),
        (dict(context=200_000), "context"),  # over max_position_embeddings
        (dict(kv_dtype="fp4"), "kv_dtype"),
        (dict(weight_dtype="float64"), "weight_dtype"),
        (dict(tp=0), "tp"),
        (dict(hbm_gib=-8.0), "hbm_gib"),
        (dict(headroom=1.0), "headroom"),
        (dict(page_size=0), "page_size"),
        (dict(hbm_gib=80.0, tp=1), "hbm_gib"),  # 131 GiB of weights on one 80 GiB device
        (dict(model="no-such-model"), "model"),
    ],
)
def test_bad_input_raises_naming_the_flag(kwargs, field):
    args = dict(model="llama-3.1-70b", context=131072, weight_dtype="bfloat16", tp=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=rf"^{field}="):
        capacity(**args)


def test_a_missing_model_path_is_not_called_an_unknown_preset(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"^model='/no/such/dir': no such directory"):
        capacity("/no/such/dir", 1024)
    with pytest.raises(FileNotFoundError, match=r"^model='\./nope': no such directory"):
        capacity("./nope", 1024)
    afile = tmp_path / "config.json"
    afile.write_text("{}")
    with pytest.raises(ValueError, match="is a file; expected a directory or preset name"):
        capacity(str(afile), 1024)


def _script(*flags: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "scripts.capacity", *flags]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_script_prints_one_json_object():
    proc = _script(
        "--model=llama-3.1-70b", "--context=131072", "--kv_dtype=bfloat16",
        "--weight_dtype=int4", "--hbm_gib=80", "--tp=2", "--headroom=0.1", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["kv_bytes_per_token"] == 327_680
    assert d["kv_bytes_per_sequence"] == 42_949_672_960
    assert d["weight_bytes"] == d["active_weight_bytes"] == 70_553_706_496 // 2
    norms = (80 * 2 + 1) * 8192  # kept whole on both devices; int4: half a byte each
    assert d["weight_bytes_per_device"] == ((70_553_706_496 - norms) // 2 + norms) // 2
    budget = int(80 * GIB * 0.9) - d["weight_bytes_per_device"]
    assert d["max_sequences"] == budget // (42_949_672_960 // 2) == 2
    bad = _script("--model=llama-3.1-70b", "--context=-5")
    assert bad.returncode != 0 and "context=-5" in bad.stderr


def test_float16_and_int4_byte_widths():
    # 2 x 32 layers x 8 KV heads x 128 = 65,536 KV elements per token; float16 is 2 bytes.
    cfg = get_preset("llama-3.1-8b")
    assert kv_bytes_per_token(cfg, "float16") == 65_536 * 2
    assert kv_bytes_per_token(cfg, "float32") == 65_536 * 4
    total, _ = expected_params("llama-3.1-8b")
    assert weight_bytes(cfg, "float16") == (2 * total, 2 * total)


def test_fractional_bytes_round_up_never_down():
    # An odd parameter count at int4 (half a byte each) needs the last half byte stored too.
    cfg = get_preset("tiny-llama").replace(hidden_size=33)
    n, _ = gqa_params(V=512, d=33, L=2, H=6, K=2, hd=40, F=192)
    assert n % 2 == 1
    assert weight_bytes(cfg, "int4") == ((n + 1) // 2, (n + 1) // 2)
    # MLA latent 31 + rope key 8 = 39 values per layer, 3 layers: 117 half bytes -> 59 bytes.
    mla = get_preset("tiny-deepseek-v3").replace(kv_lora_rank=31)
    assert (mla.num_layers, mla.qk_rope_head_dim) == (3, 8)
    assert kv_bytes_per_token(mla, "int4") == 59


def test_weights_per_device_as_the_engine_shards_them():
    # llama-3.1-8b at tp=16: 16 does not divide the 8 KV heads, so every device keeps the
    # whole K and V projections (and the KV cache), and the RMSNorm weights, as the engine's
    # sharding does; the rest is split 16 ways. An even split would count 1.5x too little.
    n, _ = expected_params("llama-3.1-8b")
    whole = 32 * (2 * 4096 * 1024 + 2 * 4096) + 4096  # wk, wv, two norms a layer; final norm
    c = capacity("llama-3.1-8b", 4096, tp=16, hbm_gib=80.0)
    assert c.weight_bytes_per_device == 2 * ((n - whole) // 16 + whole)
    assert c.kv_bytes_per_sequence_per_device == 131_072 * 4096
    assert c.kv_budget_bytes_per_device == int(80 * GIB * 0.9) - c.weight_bytes_per_device


def test_a_tp_the_engine_cannot_split_by_is_refused():
    # 3 does not divide llama-3.1-8b's 32 heads; 64 does not divide tiny-llama's heads.
    with pytest.raises(ValueError, match=r"tp=3: the engine cannot split llama-3.1-8b so "):
        capacity("llama-3.1-8b", 4096, tp=3, hbm_gib=80.0)
    with pytest.raises(ValueError, match=r"tp=64: .*does not divide num_heads"):
        capacity("tiny-llama", 64, tp=64, hbm_gib=1.0)
    # 3 divides tiny-llama's 6 heads but not an MLP 190 wide, which tp splits (its
    # 512-token vocabulary, which 3 does not divide either, stays whole on each device).
    odd = get_preset("tiny-llama").replace(intermediate_size=190)
    with pytest.raises(ValueError, match=r"tp=3: .*'mlp' of size 190 is split over mesh"):
        capacity(odd, 64, tp=3, hbm_gib=1.0)
    assert capacity("tiny-llama", 64, tp=3, hbm_gib=1.0).tp == 3


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_params_per_device_are_the_shards_jax_places(name):
    """Per device, the elements of each weight's shard as JAX lays out the engine's
    shardings on a (1, tp, 1) mesh: split leaves, whole ones, MoE experts (ep=1), MLA,
    tied embeddings. (Checked against `llm.params` on an 8-device CPU mesh at tp=2 and 4.)"""
    import jax
    from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

    from models.specs import is_spec, param_specs
    from sharding.mesh import AXES, MeshConfig
    from sharding.rules import param_partition_specs

    def is_pspec(x) -> bool:
        return isinstance(x, PartitionSpec)

    cfg = get_preset(name)
    specs = jax.tree.leaves(param_specs(cfg), is_leaf=is_spec)
    checked = 0
    for tp in (1, 2, 4, 8, 16):
        try:
            parts = param_partition_specs(cfg, MeshConfig(tp=tp))
            check_layout(cfg, MeshConfig(tp=tp))
        except ValueError:
            with pytest.raises(ValueError):
                params_per_device(cfg, tp)
            continue
        mesh = AbstractMesh((1, tp, 1), AXES)
        shards = [
            NamedSharding(mesh, p).shard_shape(s.shape)
            for s, p in zip(specs, jax.tree.leaves(parts, is_leaf=is_pspec), strict=True)
        ]
        assert params_per_device(cfg, tp) == sum(math.prod(s) for s in shards), (name, tp)
        checked += 1
    # tp=1 and at least one split, but where no tp > 1 divides the query heads (Falcon-7B's
    # 71) or the vocabulary (GPT-Neo's 50,257 tokens): served whole, one device per replica
    assert checked >= 2 or cfg.num_heads % 2 or cfg.vocab_size % 2, name


def test_mla_latent_is_not_split_even_when_tp_divides_the_kv_heads():
    # deepseek-v3's config keeps num_kv_heads=4 (unused by MLA); tp=4 divides it, and the
    # latent is still on every device whole.
    cfg = get_preset("deepseek-v3")
    assert cfg.num_kv_heads % 4 == 0
    c = capacity("deepseek-v3", 4096, weight_dtype="int4", tp=4, hbm_gib=141)
    assert c.kv_bytes_per_sequence_per_device == c.kv_bytes_per_sequence == 70_272 * 4096


def test_usable_memory_rounds_down_and_zero_headroom_is_allowed():
    # 1 GiB x (1 - 0.3) = 751,619,276.8 bytes: the budget counts whole bytes, rounded down.
    n, _ = gqa_params(V=512, d=96, L=2, H=6, K=2, hd=40, F=192)  # tiny-llama, float32
    c = capacity("tiny-llama", 64, hbm_gib=1.0, headroom=0.3)
    assert c.weight_bytes_per_device == 4 * n
    assert c.kv_budget_bytes_per_device == 751_619_276 - 4 * n
    c0 = capacity("tiny-llama", 64, hbm_gib=1.0, headroom=0.0)
    assert c0.kv_budget_bytes_per_device == GIB - 4 * n


def test_a_budget_of_exactly_zero_bytes_does_not_fit_and_one_page_does():
    n, _ = expected_params("llama-3.1-8b")
    weights = 2 * n  # bfloat16
    with pytest.raises(ValueError, match=r"^hbm_gib="):
        capacity("llama-3.1-8b", 16, hbm_gib=weights / GIB, headroom=0.0)
    page = 131_072 * 16  # one 16-token page of llama-3.1-8b's bfloat16 KV
    c = capacity("llama-3.1-8b", 16, hbm_gib=(weights + page) / GIB, headroom=0.0)
    assert c.kv_budget_bytes_per_device == page
    assert (c.kv_tokens, c.max_sequences) == (16, 1)


def test_not_fitting_names_the_memory_that_would_fit():
    # llama-3.1-70b in bfloat16 on one device: 2 x 70,553,706,496 bytes = 131.4 GiB, which
    # with 10% headroom needs 131.4 / 0.9 = 146.0 GiB.
    need = 2 * 70_553_706_496 / GIB / 0.9
    with pytest.raises(ValueError, match=rf"needs hbm_gib > {need:.1f} or a larger tp"):
        capacity("llama-3.1-70b", 4096, hbm_gib=80.0)
    with pytest.raises(ValueError, match=r"^hbm_gib="):
        capacity("llama-3.1-70b", 4096, hbm_gib=need - 0.1)
    assert capacity("llama-3.1-70b", 4096, hbm_gib=need + 0.1).kv_budget_bytes_per_device > 0


def test_weight_dtype_defaults_to_the_models_not_the_kv_dtype():
    c = capacity("llama-3.1-8b", 4096, kv_dtype="float8_e4m3fn")
    n, _ = expected_params("llama-3.1-8b")
    assert (c.kv_dtype, c.weight_dtype) == ("float8_e4m3fn", "bfloat16")
    assert c.weight_bytes == 2 * n
    c = capacity("llama-3.1-8b", 4096, weight_dtype="int4")
    assert (c.kv_dtype, c.weight_dtype) == ("bfloat16", "int4")


def test_a_hybrid_models_windowed_layers_hold_only_their_windows_pages():
    """gpt-oss-20b: 24 layers of 8 KV heads x 64 (bf16: 2 x 8 x 64 x 2 = 2,048 bytes a token
    per layer, 256 per device at tp=8), 12 of them with a 128-key window. At 128k a decoding
    sequence holds 8,192 pages of 16 in each full-attention layer and 1 + ceil(127 / 16) = 9
    in each windowed one (the engine's pool of their own)."""
    cfg = get_preset("gpt-oss-20b")
    c = capacity(cfg, 131072, tp=8, hbm_gib=80)
    per_sequence = 16 * 256 * (12 * 8192 + 12 * 9)
    assert c.kv_bytes_per_token == 24 * 2048
    assert c.max_sequences == c.kv_budget_bytes_per_device // per_sequence
    assert (c.sliding_window, c.windowed_layers) == (128, 12)
    assert "128 keys' pages in its 12 layers with a sliding window" in format_capacity(c)
    # All layers full: twice the bytes per sequence, less the windows' pages.
    full = capacity(cfg.replace(sliding_window=None), 131072, tp=8, hbm_gib=80)
    assert full.windowed_layers == 0 and full.sliding_window is None
    assert full.max_sequences == c.kv_budget_bytes_per_device // (16 * 256 * 24 * 8192)
    assert 1.9 < c.max_sequences / full.max_sequences < 2.1
    # swa_full_tokens_ratio=0.25 (a prefix cache keeping windows longer): a quarter of its
    # context's pages in each windowed layer, 2,048 of 16.
    r = capacity(cfg, 131072, tp=8, hbm_gib=80, swa_full_tokens_ratio=0.25)
    assert r.max_sequences == c.kv_budget_bytes_per_device // (16 * 256 * 12 * (8192 + 2048))
    assert "their pool 0.25 x the full layers' pages" in format_capacity(r)
    with pytest.raises(ValueError, match="swa_full_tokens_ratio=0.5: only for a model whose"):
        capacity("llama-3.1-8b", 4096, swa_full_tokens_ratio=0.5)


def test_a_model_config_is_sized_as_given_and_counts_are_integers():
    cfg = get_preset("llama-3.1-8b").replace(name="my-8b", num_layers=16)
    c = capacity(cfg, 4096, tp=8)
    assert c.model == "my-8b"
    assert c.kv_bytes_per_token == 2 * 16 * 8 * 128 * 2
    assert c.kv_bytes_per_sequence_per_device == 2 * 16 * 128 * 2 * 4096  # one KV head each
    # Whole numbers of bytes, tokens and sequences (the script prints them as JSON).
    for name, value in c.to_dict().items():
        if name not in (
            "model",
            "kv_dtype",
            "weight_dtype",
            "hbm_gib",
            "headroom",
            "sliding_window",
            "swa_full_tokens_ratio",
        ):
            assert type(value) is int, (name, value)


def test_hf_directory_in_its_own_dtype(tmp_path):
    hf = json.loads((REPO / "tests" / "fixtures" / "llama" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(hf | {"dtype": "bfloat16"}))
    c = capacity(str(tmp_path), 1024)
    assert (c.kv_dtype, c.weight_dtype) == ("bfloat16", "bfloat16")
    assert c.kv_bytes_per_token == 2 * 2 * 2 * 40 * 2  # 2 layers, 2 KV heads, head_dim 40
    assert c.model == str(tmp_path)


def test_orbax_directory_is_sized_from_its_stored_config(tmp_path):
    from models.orbax_io import CONFIG_FILE, config_to_dict

    cfg = get_preset("llama-3.1-8b").replace(name="ckpt-8b", num_kv_heads=4)
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config_to_dict(cfg)))
    c = capacity(str(tmp_path), 1024)
    assert c.model == "ckpt-8b"
    assert c.kv_bytes_per_token == 2 * 32 * 4 * 128 * 2


def test_model_paths_presets_and_empty_directories(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "llama-3.1-8b").mkdir()  # a preset name wins over a directory of that name
    assert capacity("llama-3.1-8b", 1024).model == "llama-3.1-8b"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"^model='empty': directory has no config.json"):
        capacity("empty", 1024)
    home = tmp_path / "home"
    (home / "ckpt").mkdir(parents=True)
    hf = (REPO / "tests" / "fixtures" / "llama" / "config.json").read_text()
    (home / "ckpt" / "config.json").write_text(hf)
    monkeypatch.setenv("HOME", str(home))
    assert capacity("~/ckpt", 1024).kv_bytes_per_token == 2 * 2 * 2 * 40 * 4


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(context=True), "context"),
        (dict(tp=True), "tp"),
        (dict(tp=8.0), "tp"),
        (dict(page_size=True), "page_size"),
        (dict(page_size=16.0), "page_size"),
        (dict(hbm_gib=0.0), "hbm_gib"),
        (dict(hbm_gib=float("nan")), "hbm_gib"),
        (dict(hbm_gib=float("inf")), "hbm_gib"),
        (dict(headroom=-0.1), "headroom"),
        (dict(headroom=float("nan")), "headroom"),
    ],
)
def test_more_bad_input_raises_naming_the_flag(kwargs, field):
    args = dict(model="llama-3.1-70b", context=131072, weight_dtype="bfloat16", tp=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=rf"^{field}="):
        capacity(**args)


def test_format_capacity_prints_sizes_in_their_largest_whole_unit():
    from long_context.capacity import Capacity, format_capacity

    c = Capacity(
        model="m", context=131072, kv_dtype="bfloat16", weight_dtype="int4", tp=8,
        page_size=16, hbm_gib=80.0, headroom=0.1, num_params=10**9, num_active_params=1000,
        kv_bytes_per_token=1000, kv_bytes_per_sequence=1 << 30,
        kv_bytes_per_sequence_per_device=1023, weight_bytes=1 << 20, active_weight_bytes=1024,
        weight_bytes_per_device=3 << 29, kv_budget_bytes_per_device=1_000_000,
        kv_tokens=123_456, max_sequences=1000,
    )  # fmt: skip
    assert format_capacity(c).splitlines() == [
        "m: 1.00B params (1.00K active), weights int4, KV bfloat16, tp=8, 80 GiB/device, "
        "headroom 0.1",
        "  KV per token      1,000 B",
        "  KV per sequence   1,073,741,824 B (1.00 GiB) at 131,072 tokens; 1,023 B per device",
        "  weights           1.00 MiB total, 1.00 KiB active per token, 1.50 GiB per device",
        "  KV budget/device  976.56 KiB = 123,456 tokens in 16-token pages",
        "  max sequences     1,000",
    ]
    c = dataclasses.replace(c, num_params=10**6, num_active_params=999)
    assert format_capacity(c).startswith("m: 1.00M params (999 active),")


@pytest.mark.parametrize("quantization", ["fp8", "int4"])
def test_quantized_weights_are_the_bytes_the_engine_holds(quantization):
    """capacity(quantization=...) counts the weights as LLM(quantization=...) holds them:
    the real params' bytes (fp8 / packed int4 data, float32 scales, float embeddings), and
    per device what a (1, 2, 1) mesh's shards of them hold."""
    import jax
    from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

    from engine import LLM
    from long_context.capacity import quantized_config
    from models.specs import is_spec, param_specs
    from sharding.mesh import AXES, MeshConfig
    from sharding.rules import param_partition_specs

    name = "tiny-deepseek-v3"
    llm = LLM(name, quantization=quantization, num_pages=8, max_model_len=64)
    real = sum(x.nbytes for x in jax.tree.leaves(llm.params))
    c = capacity(name, 64, quantization=quantization, hbm_gib=1.0)
    assert c.weight_bytes == real and c.weight_dtype == quantization
    assert c.weight_bytes < capacity(name, 64, hbm_gib=1.0).weight_bytes
    assert c.active_weight_bytes < c.weight_bytes
    cfg = quantized_config(get_preset(name), quantization)
    specs = jax.tree.leaves(param_specs(cfg), is_leaf=is_spec)
    parts = jax.tree.leaves(
        param_partition_specs(cfg, MeshConfig(tp=2)), is_leaf=lambda x: isinstance(x, PartitionSpec)
    )
    mesh = AbstractMesh((1, 2, 1), AXES)
    want = sum(
        math.prod(NamedSharding(mesh, p).shard_shape(s.shape)) * np.dtype(s.dtype).itemsize
        for s, p in zip(specs, parts, strict=True)
    )
    assert (
        capacity(name, 64, quantization=quantization, tp=2, hbm_gib=1.0).weight_bytes_per_device
        == want
    )
    with pytest.raises(ValueError, match="give one of them"):
        capacity(name, 64, weight_dtype="int4", quantization=quantization)
    with pytest.raises(ValueError, match="quantization='int8'"):
        capacity(name, 64, quantization="int8")
