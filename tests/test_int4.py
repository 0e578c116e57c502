"""int4 weights: compressed-tensors pack-quantized checkpoints (models/int4_checkpoint.py,
configs/int4_schemes.py) read dequantized or held packed (`quantization="int4"`,
models/quantization.py); GPTQ and AWQ ones decode here too (their own checks:
tests/test_int4_gptq_awq.py).

Anchors: transformers with compressed-tensors' own decompression on the checkpoints of
tests/fixtures/*_int4 and *_int4_asym (make_int4_weight_fixtures.py: its packing, its
unpacking), transformers on GPTQModel's dequantization (make_gptq_awq_fixtures.py), and a
bit-by-bit decode of the words written here from the format's description.
"""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors import safe_open

from configs.hf_config import config_from_hf, read_hf_config
from engine import LLM, SamplingParams
from models import int4_checkpoint as int4
from models import quantization as quant
from models.load import load_model, model_config

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
# compressed-tensors (symmetric; asymmetric: zero points); GPTQ (act order, v1 zero points)
# and AWQ (tests/test_int4_gptq_awq.py)
ARCHS = [
    "qwen3_moe_int4",
    "deepseek_v3_int4",
    "qwen3_moe_int4_asym",
    "qwen3_moe_gptq",
    "qwen3_moe_awq",
]


def _reference(name: str) -> dict:
    return json.loads((FIXTURES / name / "reference.json").read_text())


def test_unpacking_reads_each_nibble_of_each_word():
    rng = np.random.default_rng(0)
    words = rng.integers(-(2**31), 2**31, size=(3, 5), dtype=np.int64).astype(np.int32)
    got = int4.unpack_words(words, 37)
    want = np.zeros((3, 37), np.int8)
    for r in range(3):
        for j in range(37):  # element j: bits 4 (j % 8) .. + 3 of word j // 8, stored + 8
            word = int(words[r, j // 8]) & 0xFFFFFFFF
            want[r, j] = ((word >> (4 * (j % 8))) & 0xF) - 8
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_held_packing_round_trips_in_the_step(axis):
    rng = np.random.default_rng(axis)
    values = rng.integers(-8, 8, size=(4, 6, 8), dtype=np.int8)
    packed = int4.pack_pairs(values, axis)
    assert packed.dtype == np.uint8 and packed.shape[axis] == values.shape[axis] // 2
    got = jax.jit(quant.unpack_int4, static_argnums=1)(jnp.asarray(packed), axis)
    np.testing.assert_array_equal(np.asarray(got), values)


def test_round_to_nearest_int4_per_group():
    """quantization="int4" on float weights: per group of inputs, s = max|w| / 7 and
    round(w / s) in [-8, 7]; dequantized in the step within half a step of w."""
    rng = np.random.default_rng(1)
    w = rng.normal(size=(2, 64, 24)).astype(np.float32)  # [experts, K, N]
    q = quant.quantize(w, lead=1, k_dims=1, block=(32, 1), bits=4)
    assert q.bits == 4 and q.data.shape == (2, 32, 24) and q.scale.shape == (2, 2, 24)
    assert q.shape == w.shape
    groups = w.reshape(2, 2, 32, 24)
    np.testing.assert_allclose(q.scale, np.abs(groups).max(axis=2) / 7, rtol=1e-6)
    back = np.asarray(jax.jit(quant.dequantize, static_argnums=1)(q, jnp.float32))
    step = np.repeat(q.scale, 32, axis=1)
    assert np.all(np.abs(back - w) <= step / 2 + 1e-6)
    assert np.isclose(np.abs(back - w).max(), (step / 2).max(), rtol=0.5)  # not exact copies


@pytest.mark.parametrize("quantization", [None, "int4"])
@pytest.mark.parametrize("name", ARCHS)
def test_int4_checkpoints_decode_as_transformers(name, quantization):
    """Dequantized on load or held packed: transformers' greedy tokens and logprobs."""
    ref = _reference(name)
    llm = LLM(
        model=str(FIXTURES / name),
        quantization=quantization,
        num_pages=32,
        max_model_len=128,
        max_num_batched_tokens=64,
    )
    params = SamplingParams(temperature=0, max_tokens=len(ref["greedy_tokens"][0]), ignore_eos=True)
    outs = llm.generate(ref["prompts"], params)
    assert [o.token_ids for o in outs] == ref["greedy_tokens"]
    for out, want in zip(outs, ref["logprobs"], strict=True):
        np.testing.assert_allclose(out.logprobs, want, atol=1e-4)
    moe = next(layer["moe"] for layer in llm.params["layers"] if "moe" in layer)
    assert quant.is_quantized(moe["w_down"]) == (quantization == "int4")


def test_an_int4_checkpoint_is_held_as_stored():
    """Every packed tensor lands as its own values (transposed, two to a byte) with its own
    scales; what the checkpoint keeps float (its ignore list) stays float."""
    name = "deepseek_v3_int4"
    fixture = FIXTURES / name
    cfg = model_config(str(fixture), None, "int4")
    group = _reference(name)["quantization_config"]["config_groups"]["group_0"]["weights"]
    assert cfg.quantization == "int4" and cfg.quantization_block == (1, group["group_size"])
    # Kimi-K2's recipe: attention, shared experts and the dense MLP stay float.
    assert "layers.0.attn.wq_a" in cfg.quantization_skip
    assert "layers.1.moe.shared.w_up" in cfg.quantization_skip
    assert not any(".moe.w_" in leaf for leaf in cfg.quantization_skip)
    _, params, _ = load_model(str(fixture), cfg=cfg, host=True)
    layer = next(i for i, x in enumerate(params["layers"]) if "moe" in x)
    held = params["layers"][layer]["moe"]["w_down"]
    assert not quant.is_quantized(params["layers"][layer]["attn"]["wq_a"])
    prefix = f"model.layers.{layer}.mlp.experts.3.down_proj."
    with _open(fixture, prefix + "weight_packed") as f:
        packed = f.get_tensor(prefix + "weight_packed")
        scale = f.get_tensor(prefix + "weight_scale")
    values = np.asarray(quant.unpack_int4(jnp.asarray(held.data[3]), 0))  # [F, D] = [in, out]
    np.testing.assert_array_equal(values.T, int4.unpack_words(packed, values.shape[0]))
    np.testing.assert_array_equal(held.scale[3], scale.T)
    # Packed: half a byte a value, plus the group scales.
    assert held.data.nbytes * 2 == np.prod(held.shape)


def _open(fixture: pathlib.Path, tensor: str):
    """The safetensors file of `fixture` that holds `tensor`."""
    index = fixture / "model.safetensors.index.json"
    if not index.exists():
        return safe_open(str(fixture / "model.safetensors"), "np")
    return safe_open(str(fixture / json.loads(index.read_text())["weight_map"][tensor]), "np")


def test_a_float_model_is_quantized_to_int4_on_load():
    """A preset (float weights) held as int4 in groups of 128 inputs: the step computes with
    the dequantized weights (an engine given those weights as floats decodes the same)."""
    cfg = model_config("tiny-qwen3-moe", None, "int4")
    assert cfg.quantization_block == quant.INT4_DEFAULT_BLOCK
    held = LLM("tiny-qwen3-moe", quantization="int4", num_pages=32, max_model_len=64)
    floats = LLM("tiny-qwen3-moe", num_pages=32, max_model_len=64)
    floats.load_weights(jax.tree.map(np.asarray, quant.dequantize_tree(held.params, jnp.float32)))
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    prompts = [[5, 9, 13, 2], [7, 7, 30]]
    a, b = held.generate(prompts, params), floats.generate(prompts, params)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    np.testing.assert_allclose([o.logprobs for o in a], [o.logprobs for o in b], atol=1e-5)
    moe = next(layer["moe"] for layer in held.params["layers"] if "moe" in layer)
    assert moe["w_gate"].data.dtype == jnp.uint8 and moe["w_gate"].bits == 4


def _with_weights(**changes) -> dict:
    hf = read_hf_config(str(FIXTURES / "qwen3_moe_int4"))
    qc = json.loads(json.dumps(hf["quantization_config"]))
    qc["config_groups"]["group_0"]["weights"].update(changes)
    return {**hf, "quantization_config": qc}


@pytest.mark.parametrize(
    "hf, message",
    [
        (_with_weights(num_bits=8), r"weights.num_bits=8: only 4"),
        (_with_weights(symmetric="no"), r"weights.symmetric='no': expected true or false"),
        (_with_weights(strategy="tensor"), r"weights.strategy='tensor': only 'group' or 'channel'"),
        (_with_weights(actorder="group"), r"weights.actorder='group': only null, 'weight'"),
        (_with_weights(group_size=0), r"weights.group_size=0"),
    ],
)
def test_unsupported_compressed_tensors_configs_are_refused(hf, message):
    with pytest.raises(ValueError, match=message):
        config_from_hf(hf)


def test_mixed_quantizations_and_bad_tensors_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"quantization='fp8': the checkpoint stores int4"):
        model_config(str(FIXTURES / "qwen3_moe_int4"), None, "fp8")
    with pytest.raises(ValueError, match=r"quantization='int4': the checkpoint stores fp8"):
        model_config(str(FIXTURES / "qwen3_moe_fp8"), None, "int4")
    # A scale of the wrong shape, named before any weight is read.
    import shutil

    from safetensors.numpy import load_file, save_file

    bad = tmp_path / "bad"
    shutil.copytree(FIXTURES / "qwen3_moe_int4", bad)
    tensors = load_file(str(bad / "model.safetensors"))
    name = "model.layers.0.mlp.experts.0.down_proj.weight_scale"
    tensors[name] = tensors[name][:, :0]
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(ValueError, match=rf"checkpoint tensor '{name}': expected shape"):
        load_model(str(bad))


def test_an_int4_checkpoint_converts_to_orbax_as_stored(tmp_path):
    """convert_hf_to_orbax(quantization="int4") keeps the packed values and scales; the
    orbax checkpoint serves held or dequantized, transformers' tokens either way."""
    from models.load import convert_hf_to_orbax

    name = "deepseek_v3_int4"
    out = str(tmp_path / "orbax")
    convert_hf_to_orbax(str(FIXTURES / name), out, None, "int4")
    _, want, _ = load_model(
        str(FIXTURES / name), cfg=model_config(str(FIXTURES / name), None, "int4"), host=True
    )
    cfg, got, _ = load_model(out, cfg=model_config(out, None, "int4"), host=True)
    assert cfg.quantization == "int4"
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ref = _reference(name)
    params = SamplingParams(temperature=0, max_tokens=len(ref["greedy_tokens"][0]), ignore_eos=True)
    for quantization in ("int4", None):
        llm = LLM(model=out, quantization=quantization, num_pages=32, max_model_len=128)
        assert [o.token_ids for o in llm.generate(ref["prompts"], params)] == ref["greedy_tokens"]
