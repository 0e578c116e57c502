"""int4 checkpoints in the GPTQ and AWQ formats (configs/int4_schemes.py,
models/int4_checkpoint.py): read dequantized, or held packed with their zero points and act
order (`quantization="int4"`, models/quantization.py); their engines decode as transformers
in tests/test_int4.py.

Anchors: GPTQModel's own packing and dequantization, and transformers on the weights it
dequantizes (tests/fixtures/make_gptq_awq_fixtures.py): tests/fixtures/qwen3_moe_gptq
(asymmetric, act order, v1 zero points), qwen3_moe_awq (asymmetric GEMM), and
gptq_awq_cases.safetensors (single Linears: symmetric GPTQ v1 and v2, asymmetric with zero
points of 0, act order in v2, symmetric AWQ).
"""

from __future__ import annotations

import json
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from configs.hf_config import config_from_hf, read_hf_config
from configs.int4_schemes import Int4Scheme, int4_scheme
from engine import LLM, SamplingParams
from models import int4_checkpoint as int4
from models import quantization as quant
from models.load import load_model, model_config

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
FORMATS = ("qwen3_moe_gptq", "qwen3_moe_awq")
CASES = {  # gptq_awq_cases.safetensors: each Linear's format
    "gptq_sym_v1": Int4Scheme("gptq", 16, True, False, True),
    "gptq_sym_v2": Int4Scheme("gptq", 16, True, False, False),
    "gptq_asym_v1": Int4Scheme("gptq", 32, True, False, True),
    "gptq_asym_actorder_v2": Int4Scheme("gptq", 16, True, True, False),
    "awq_sym": Int4Scheme("awq", 32, True),
}


def _reference(name: str) -> dict:
    return json.loads((FIXTURES / name / "reference.json").read_text())


@pytest.mark.parametrize("case", CASES)
def test_each_variant_reads_as_gptqmodel_dequantizes_it(case):
    tensors = load_file(str(FIXTURES / "gptq_awq_cases.safetensors"))
    want = tensors[f"{case}.dequantized"]
    scheme = CASES[case]
    parts = int4.read_parts(
        lambda name: tensors[f"{case}.{name.rsplit('.', 1)[1]}"], "w.weight", want.shape, scheme
    )
    np.testing.assert_array_equal(parts.dequantize(scheme.held_group, np.float32), want)
    zeros = parts.zero.astype(int) + 8
    if "asym_v1" in case:  # an all-positive group's zero point 0, stored v1 as -1 (borrowed)
        assert zeros.min() == 0
    if "_sym" in case:
        assert (zeros == 8).all()
    assert (parts.g_idx is not None) == scheme.act_order


# int4_channel_cases.safetensors (make_int4_channel_cases.py): one scale per output
CHANNEL_CASES = {
    "sym": Int4Scheme("compressed-tensors", 0),
    "asym": Int4Scheme("compressed-tensors", 0, zero_point=True),
}


@pytest.mark.parametrize("case", CHANNEL_CASES)
def test_per_channel_compressed_tensors_reads_as_it_decompresses(case):
    """strategy "channel": bitwise compressed-tensors' own unpacking, the scale (and zero
    point) repeated over held groups of 128 inputs (200 inputs: a partial last group)."""
    tensors = load_file(str(FIXTURES / "int4_channel_cases.safetensors"))
    want, scheme = tensors[f"{case}.dequantized"], CHANNEL_CASES[case]
    parts = int4.read_parts(
        lambda name: tensors[f"{case}.{name.rsplit('.', 1)[1]}"], "w.weight", want.shape, scheme
    )
    assert scheme.held_group == 128 and parts.scale.shape == (want.shape[0], 2)
    np.testing.assert_array_equal(parts.dequantize(scheme.held_group, np.float32), want)


def _words(codes: np.ndarray) -> np.ndarray:
    """uint 4-bit codes [rows, 8 w] -> int32 [rows, w]: eight a word, the first lowest."""
    c = codes.astype(np.uint32).reshape(codes.shape[0], -1, 8)
    return (c << (4 * np.arange(8, dtype=np.uint32))).sum(-1, dtype=np.uint32).view(np.int32)


def test_gptq_without_groups_reads_as_the_format_describes():
    """GPTQ group_size -1 (one scale and zero point per output; the "no group size" GPTQ
    releases, act order or not): words written here from the format's description, read as
    (q - z) * s; one group, so act order's g_idx (all 0) changes nothing."""
    rng = np.random.default_rng(3)
    out, cols = 16, 200
    q, z = rng.integers(0, 16, (out, cols)), rng.integers(1, 16, out)
    s = (rng.random(out) + 0.5).astype(np.float16)
    by_word = q.T.reshape(cols // 8, 8, out).transpose(0, 2, 1).reshape(-1, 8)  # 8 inputs
    stored = {
        "qweight": _words(by_word).reshape(cols // 8, out),  # [in / 8, out]
        "qzeros": _words((z - 1)[None]),  # v1: stored minus one
        "scales": s[None],
        "g_idx": np.zeros(cols, np.int32),
    }
    qc = {"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": True, "sym": False}
    scheme = int4_scheme(qc)
    assert (scheme.group, scheme.act_order, scheme.held_group) == (0, False, 128)
    parts = int4.read_parts(lambda n: stored[n.rsplit(".", 1)[1]], "w.weight", (out, cols), scheme)
    want = (q - z[:, None]).astype(np.float32) * s.astype(np.float32)[:, None]
    np.testing.assert_array_equal(parts.dequantize(scheme.held_group, np.float32), want)
    hf = read_hf_config(str(FIXTURES / "qwen3_moe_gptq"))
    cfg = config_from_hf({**hf, "quantization_config": {**hf["quantization_config"], **qc}})
    assert cfg.quantization_block == (1, 128) and not cfg.quantization_act_order


# reference_weights.safetensors' tensors: their leaves (and expert)
SAMPLES = {
    "model.layers.0.mlp.experts.5.down_proj": (("layers", 0, "moe", "w_down"), 5),
    "model.layers.1.mlp.up_proj": (("layers", 1, "mlp", "w_up"), None),
    "model.layers.2.self_attn.q_proj": (("layers", 2, "attn", "wq"), None),
}


def _leaf(tree, path):
    for key in path:
        tree = tree[key]
    return tree


@pytest.mark.parametrize("name", FORMATS)
def test_weights_load_as_gptqmodel_dequantizes_them(name):
    """Dequantized on load, or held packed and dequantized in the step: GPTQModel's
    weights, bitwise."""
    want = load_file(str(FIXTURES / name / "reference_weights.safetensors"))
    floats = load_model(str(FIXTURES / name), host=True)[1]
    cfg = model_config(str(FIXTURES / name), None, "int4")
    held = load_model(str(FIXTURES / name), cfg=cfg, host=True)[1]
    dequantize = jax.jit(quant.dequantize, static_argnums=1)
    for tensor, (path, expert) in SAMPLES.items():
        w = want[tensor].T  # [in, out]; leaves [in, out...]
        leaf = _leaf(held, path)
        assert quant.is_quantized(leaf) and leaf.bits == 4
        for got in (_leaf(floats, path), np.asarray(dequantize(leaf, jnp.float32))):
            got = np.asarray(got) if expert is None else np.asarray(got)[expert]
            np.testing.assert_array_equal(got.reshape(w.shape), w)


def test_a_gptq_checkpoint_is_held_as_stored():
    """Each expert's codes, zero points (v1: stored minus one), fp16 scales and act-order
    group indices land as stored, transposed to the leaf's [in, out]; half a byte a value."""
    name = FIXTURES / "qwen3_moe_gptq"
    cfg = model_config(str(name), None, "int4")
    assert (cfg.quantization_block, cfg.quantization_zero_point, cfg.quantization_act_order) == (
        (1, 16),
        True,
        True,
    )
    assert cfg.quantization_skip == ()  # every projection stored int4; the router is no leaf
    held = load_model(str(name), cfg=cfg, host=True)[1]["layers"][0]["moe"]["w_down"]
    tensors = load_file(str(name / "model.safetensors"))
    x = "model.layers.0.mlp.experts.3.down_proj."
    qweight, qzeros = tensors[x + "qweight"], tensors[x + "qzeros"]  # [F / 8, D], [G, D / 8]
    rows, cols = qweight.shape[0] * 8, qweight.shape[1]
    codes = np.zeros((rows, cols), np.int64)  # [in, out]: code i of a column in bits 4 (i % 8)
    for i in range(rows):
        codes[i] = (qweight[i // 8].astype(np.int64) >> (4 * (i % 8))) & 0xF
    words = (qzeros.astype(np.int64) + 0x11111111) % 2**32  # v1
    zeros = np.stack([(words[:, j // 8] >> (4 * (j % 8))) & 0xF for j in range(cols)], 1)
    values = np.asarray(quant.unpack_int4(jnp.asarray(held.data[3]), 0))
    np.testing.assert_array_equal(values, codes - 8)
    np.testing.assert_array_equal(held.zero[3], zeros - 8)
    np.testing.assert_array_equal(held.scale[3], tensors[x + "scales"].astype(np.float32))
    np.testing.assert_array_equal(held.g_idx[3], tensors[x + "g_idx"])
    assert not np.array_equal(held.g_idx[3], np.arange(rows) // 16)  # act order
    assert held.data.nbytes * 2 == np.prod(held.shape)


def test_a_held_gptq_checkpoint_converts_to_orbax_and_serves(tmp_path):
    """convert_hf_to_orbax(quantization="int4") keeps codes, zero points and group indices;
    the orbax checkpoint serves held or dequantized, transformers' tokens either way."""
    from models.load import convert_hf_to_orbax

    name = "qwen3_moe_gptq"
    out = str(tmp_path / "orbax")
    convert_hf_to_orbax(str(FIXTURES / name), out, None, "int4")
    cfg = model_config(out, None, "int4")
    assert cfg.quantization_zero_point and cfg.quantization_act_order
    _, got, _ = load_model(out, cfg=cfg, host=True)
    want = load_model(
        str(FIXTURES / name), cfg=model_config(str(FIXTURES / name), None, "int4"), host=True
    )[1]
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ref = _reference(name)
    params = SamplingParams(temperature=0, max_tokens=len(ref["greedy_tokens"][0]), ignore_eos=True)
    llm = LLM(model=out, quantization=None, num_pages=32, max_model_len=128)
    assert [o.token_ids for o in llm.generate(ref["prompts"], params)] == ref["greedy_tokens"]


def _config(name: str, **changes) -> dict:
    hf = read_hf_config(str(FIXTURES / name))
    return {**hf, "quantization_config": {**hf["quantization_config"], **changes}}


@pytest.mark.parametrize(
    "hf, message",
    [
        (_config("qwen3_moe_gptq", bits=8), r"quantization_config.bits=8: only 4"),
        (_config("qwen3_moe_gptq", group_size=-2), r"group_size=-2: expected a positive int"),
        (_config("qwen3_moe_awq", group_size=-1), r"group_size=-1: AWQ checkpoints need groups"),
        (_config("qwen3_moe_gptq", checkpoint_format="marlin"), r"checkpoint_format='marlin'"),
        (_config("qwen3_moe_gptq", lm_head=True), r"lm_head=True: only False"),
        (_config("qwen3_moe_gptq", dynamic={"-:.*": {}}), r"dynamic: per-module overrides"),
        (_config("qwen3_moe_gptq", desc_act="yes"), r"desc_act='yes': expected true or false"),
        (_config("qwen3_moe_awq", version="gemv"), r"version='gemv': only 'gemm'"),
        (_config("qwen3_moe_awq", zero_point=False), r"zero_point=False: only true"),
    ],
)
def test_unsupported_gptq_and_awq_configs_are_refused(hf, message):
    with pytest.raises(ValueError, match=message):
        config_from_hf(hf)


def _altered(tmp_path, name: str, change, config=None) -> str:
    """A copy of fixture `name` with change(tensors) applied (and `config` as its config)."""
    out = tmp_path / name
    shutil.copytree(FIXTURES / name, out)
    tensors = load_file(str(out / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(out / "model.safetensors"))
    if config is not None:
        (out / "config.json").write_text(json.dumps(config))
    return str(out)


X = "model.layers.0.mlp.experts.0.down_proj."


def test_bad_gptq_and_awq_tensors_are_refused_naming_them(tmp_path):
    def shrink(t):
        t[X + "qzeros"] = t[X + "qzeros"][:1]

    def far_group(t):
        t[X + "g_idx"] = t[X + "g_idx"] + 1000

    def drop_scales(t):
        del t[X + "scales"]

    for change, message in (
        (shrink, rf"'{X}qzeros': expected shape \(2, 8\)"),
        (far_group, rf"'{X}g_idx': group indices outside \[0, 2\)"),
        (drop_scales, rf"'{X}scales': missing"),
    ):
        with pytest.raises(ValueError, match=message):
            load_model(_altered(tmp_path / change.__name__, "qwen3_moe_gptq", change))
    # Inputs out of group order in a checkpoint whose config says no act order.
    path = _altered(
        tmp_path / "order",
        "qwen3_moe_gptq",
        lambda t: None,
        _config("qwen3_moe_gptq", desc_act=False),
    )
    with pytest.raises(ValueError, match=r"g_idx': inputs out of group order"):
        load_model(path)
    # GPTQ's tensors under a compressed-tensors config, and the other way round.
    ct = read_hf_config(str(FIXTURES / "qwen3_moe_int4"))["quantization_config"]
    path = _altered(
        tmp_path / "mislabeled",
        "qwen3_moe_gptq",
        lambda t: None,
        {**read_hf_config(str(FIXTURES / "qwen3_moe_gptq")), "quantization_config": ct},
    )
    with pytest.raises(ValueError, match=r"qweight': packed int4 needs .* 'gptq' or 'awq'"):
        load_model(path)


def test_vllms_quantization_names_hold_a_checkpoint_of_that_format():
    """vLLM's --quantization gptq / awq (and their Marlin kernels', compressed-tensors) on
    a checkpoint of that format: held as int4, as quantization="int4" holds it."""
    for name, aliases in (
        ("qwen3_moe_gptq", ("gptq", "gptq_marlin")),
        ("qwen3_moe_awq", ("awq", "awq_marlin")),
        ("qwen3_moe_int4", ("compressed-tensors",)),
    ):
        want = model_config(str(FIXTURES / name), None, "int4")
        for alias in aliases:
            assert model_config(str(FIXTURES / name), None, alias) == want, alias
    with pytest.raises(ValueError, match=r"quantization='awq': needs .* 'awq' \(found 'gptq'"):
        model_config(str(FIXTURES / "qwen3_moe_gptq"), None, "awq")
    with pytest.raises(ValueError, match=r"quantization='gptq': .* \(found None"):
        model_config("tiny-qwen3-moe", None, "gptq")
    with pytest.raises(ValueError, match=r"quantization='int8': expected None or one of"):
        model_config(str(FIXTURES / "qwen3_moe_gptq"), None, "int8")
