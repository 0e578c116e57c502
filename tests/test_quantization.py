"""fp8 weights (`LLM(quantization="fp8")`, models/quantization.py).

Anchors: transformers' outputs on the fp8 checkpoints of tests/fixtures/*_fp8 (which it
dequantizes as stored * scale_inv per block), the checkpoint's own bytes read by
models/fp8_checkpoint.py, and that loader's dequantization (tested against transformers in
tests/test_hf_parity.py). The quantizer itself is checked against its definition, block by
block.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open

from engine import LLM, SamplingParams
from models import fp8_checkpoint
from models import quantization as quant
from models.load import load_model, model_config

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
TOL = 2e-3  # logprobs against transformers, as tests/test_hf_parity.py


def _reference(name: str) -> dict:
    return json.loads((FIXTURES / name / "reference.json").read_text())


def _engine(model: str, quantization: str | None) -> LLM:
    return LLM(model, quantization=quantization, num_pages=32, max_model_len=128)


def _greedy(llm: LLM, ref: dict):
    n = len(ref["greedy_tokens"][0])
    outs = llm.generate(ref["prompts"], SamplingParams(temperature=0.0, max_tokens=n))
    return [o.token_ids for o in outs], [o.logprobs for o in outs]


@pytest.mark.parametrize(
    "shape,lead,k_dims,block",
    [((20, 12), 0, 1, (8, 5)), ((2, 20, 12), 1, 1, (8, 8)), ((3, 5, 12), 0, 2, (4, 8))],
)
def test_each_block_is_its_values_over_amax_by_448(shape, lead, k_dims, block):
    rng = np.random.default_rng(0)
    w = rng.standard_normal(shape).astype(np.float32) * rng.uniform(
        0.01, 3, shape[:1] + (1,) * (len(shape) - 1)
    ).astype(np.float32)
    if lead == 0:
        w[: block[0]] = 0  # an all-zero row of blocks (when k_dims = 1)
    q = quant.quantize(w, lead, k_dims, block)
    assert q.data.dtype == jnp.float8_e4m3fn and q.data.shape == shape
    k = int(np.prod(shape[lead : lead + k_dims]))
    mats = w.reshape(*shape[:lead], k, -1)
    data = np.asarray(q.data, np.float32).reshape(mats.shape)
    assert q.scale.shape == quant.scale_shape(shape, lead, k_dims, block)
    for idx in np.ndindex(*q.scale.shape):
        *e, bi, bj = idx
        rows = slice(bi * block[0], (bi + 1) * block[0])
        cols = slice(bj * block[1], (bj + 1) * block[1])
        vals, stored = mats[(*e, rows, cols)], data[(*e, rows, cols)]
        amax = np.abs(vals).max()
        if amax == 0:
            assert q.scale[idx] == 1 and not stored.any()
            continue
        assert q.scale[idx] == np.float32(amax) / np.float32(448)
        assert np.abs(stored).max() == 448  # the block's largest value maps to e4m3's max
        # e4m3: 3 mantissa bits, so a rounding error of at most 2**-4 of the value (normal
        # range) or half the smallest subnormal step 2**-9 (times the scale).
        err = np.abs(stored * q.scale[idx] - vals)
        assert np.all(err <= np.maximum(np.abs(vals) * 2**-4, q.scale[idx] * 2**-10) * 1.0001)


def test_dequantize_equals_the_checkpoint_loaders():
    """The in-step dequantization (jnp) is bitwise models/fp8_checkpoint.dequantize, the
    loader's, on the [K, N] matrix with partial blocks."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 7, 6, 10)).astype(np.float32)  # lead 1, K = 7 * 6, N = 10
    q = quant.quantize(w, lead=1, k_dims=2, block=(16, 4))
    got = jax.jit(lambda x: quant.dequantize(x, jnp.float32))(jax.tree.map(jnp.asarray, q))
    want = fp8_checkpoint.dequantize(q.data.reshape(3, 42, 10), q.scale, (16, 4))
    np.testing.assert_array_equal(np.asarray(got).reshape(3, 42, 10), want)
    got16 = quant.dequantize(jax.tree.map(jnp.asarray, q), jnp.bfloat16)
    assert got16.dtype == jnp.bfloat16 and got16.shape == w.shape


def test_an_fp8_checkpoint_is_held_as_stored():
    """Every fp8 tensor of the checkpoint lands as its own bytes (transposed) with its own
    scales; what it stores in float stays float (ModelConfig.quantization_skip)."""
    fixture = FIXTURES / "deepseek_v3_fp8"
    cfg, params, _ = load_model(
        str(fixture), cfg=model_config(str(fixture), None, "fp8"), host=True
    )
    ref = _reference("deepseek_v3_fp8")
    assert cfg.quantization == "fp8" and cfg.quantization_block == (4, 8)
    assert (
        cfg.quantization_skip
        == ("layers.0.attn.wo",)
        == tuple(".".join(n.split(".")[1:3]) + ".attn.wo" for n in ref["unquantized_weights"])
    )
    reader = fp8_checkpoint.Fp8Reader()
    index = json.loads((fixture / "model.safetensors.index.json").read_text())["weight_map"]
    fp8_names = [
        n
        for n, f in index.items()
        if reader._layout(fixture / f)[1][n]["dtype"] == fp8_checkpoint.FP8_DTYPE
    ]
    assert len(fp8_names) == ref["quantized_weights"]
    seen = 0
    for name in fp8_names:
        path = fixture / index[name]
        stored = reader.read(path, name)
        with safe_open(str(path), framework="np") as f:
            scale = f.get_tensor(name + fp8_checkpoint.SCALE_SUFFIX)
        parts = name.split(".")
        layer = params["layers"][int(parts[2])]
        if ".experts." in name:
            e, proj = int(parts[5]), parts[6]
            leaf = layer["moe"][
                {"gate_proj": "w_gate", "up_proj": "w_up", "down_proj": "w_down"}[proj]
            ]
            data, got_scale = leaf.data[e], leaf.scale[e]
        else:
            leaf = _leaf_of(layer, parts[3:-1])
            data, got_scale = leaf.data, leaf.scale
        assert quant.is_quantized(leaf) and leaf.block == (8, 4)
        np.testing.assert_array_equal(
            np.asarray(data).reshape(stored.T.shape).view(np.uint8),
            stored.T.view(np.uint8),
        )
        np.testing.assert_array_equal(got_scale, scale.T.astype(np.float32))
        seen += 1
    assert seen == ref["quantized_weights"]
    assert not quant.is_quantized(params["layers"][0]["attn"]["wo"])
    assert params["layers"][0]["attn"]["wo"].dtype == np.float32
    for name in ("embed", "lm_head"):
        assert params[name].dtype == np.float32
    assert params["layers"][1]["moe"]["router"].dtype == np.float32


_HF_TO_OURS = {
    ("self_attn", "q_proj"): ("attn", "wq"),
    ("self_attn", "q_a_proj"): ("attn", "wq_a"),
    ("self_attn", "q_b_proj"): ("attn", "wq_b"),
    ("self_attn", "kv_a_proj_with_mqa"): ("attn", "wkv_a"),
    ("self_attn", "kv_b_proj"): ("attn", "wkv_b"),
    ("self_attn", "o_proj"): ("attn", "wo"),
    ("mlp", "gate_proj"): ("mlp", "w_gate"),
    ("mlp", "up_proj"): ("mlp", "w_up"),
    ("mlp", "down_proj"): ("mlp", "w_down"),
}


def _leaf_of(layer: dict, parts: list[str]):
    if parts[:2] == ["mlp", "shared_experts"]:
        return layer["moe"]["shared"][_HF_TO_OURS[("mlp", parts[2])][1]]
    group, name = _HF_TO_OURS[tuple(parts)]
    return layer[group if group != "mlp" or "mlp" in layer else "moe"][name]


@pytest.mark.parametrize(
    "name", ["deepseek_v3_fp8", "qwen3_moe_fp8", "deepseek_v32_fp8", "qwen3_next_fp8"]
)
def test_fp8_weights_decode_as_transformers_on_fp8_checkpoints(name):
    ref = _reference(name)
    llm = _engine(str(FIXTURES / name), "fp8")
    tokens, logprobs = _greedy(llm, ref)
    assert tokens == ref["greedy_tokens"]
    for got, want in zip(logprobs, ref["logprobs"], strict=True):
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(llm.params))
    if name == "deepseek_v3_fp8":
        # Held fp8, the step computes with exactly the float weights the dequantizing
        # loader gives: bitwise the same logprobs.
        plain = _engine(str(FIXTURES / name), None)
        assert _greedy(plain, ref) == (tokens, logprobs)
        float_bytes = sum(x.nbytes for x in jax.tree.leaves(plain.params))
        assert nbytes < 0.5 * float_bytes, (nbytes, float_bytes)
    if name == "qwen3_next_fp8":  # attention and experts held fp8; the DeltaNet's float
        layers = llm.params["layers"]
        assert quant.is_quantized(layers[1]["attn"]["wq"])
        assert quant.is_quantized(layers[0]["moe"]["w_up"])
        assert not any(quant.is_quantized(w) for w in layers[0]["linear"].values())


def test_a_float_checkpoint_is_quantized_on_load():
    """llama (float32): fp8 weights in blocks of 128 x 128; the engine computes what the
    float engine computes on the dequantized weights, bitwise; orbax loads the same."""
    fixture = str(FIXTURES / "llama")
    ref = _reference("llama")
    llm = _engine(fixture, "fp8")
    float_cfg, float_params, _ = load_model(fixture, host=True)
    wq = llm.params["layers"][0]["attn"]["wq"]
    assert quant.is_quantized(wq) and wq.block == (128, 128)
    want = quant.quantize(float_params["layers"][0]["attn"]["wq"], 0, 1, (128, 128))
    np.testing.assert_array_equal(np.asarray(wq.data).view(np.uint8), want.data.view(np.uint8))
    tokens, logprobs = _greedy(llm, ref)

    plain = _engine(fixture, None)
    plain.params = jax.tree.map(
        jnp.asarray, quant.dequantize_tree(jax.tree.map(jnp.asarray, llm.params), jnp.float32)
    )
    assert _greedy(plain, ref) == (tokens, logprobs)
    # A sanity bound, not a parity check (the bitwise check above is that): e4m3 rounding
    # of every weight moves these random weights' logprobs by up to ~0.13 and, with greedy
    # margins as small as 0.017, the tokens part from the float model's after 8-9 steps.
    for got, want, got_lp, want_lp in zip(
        tokens, ref["greedy_tokens"], logprobs, ref["logprobs"], strict=True
    ):
        same = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), len(got))
        assert same >= 4, (got, want)
        assert np.abs(np.subtract(got_lp[:same], want_lp[:same])).max() < 0.25


def test_orbax_checkpoint_quantizes_like_its_hf_source(tmp_path):
    from models.load import convert_hf_to_orbax

    fixture = str(FIXTURES / "qwen3_moe")
    convert_hf_to_orbax(fixture, str(tmp_path / "orbax"))
    got = load_model(
        str(tmp_path / "orbax"), cfg=model_config(str(tmp_path / "orbax"), None, "fp8"), host=True
    )
    want = load_model(fixture, cfg=model_config(fixture, None, "fp8"), host=True)
    assert got[0].quantization == "fp8"
    assert jax.tree.structure(got[1]) == jax.tree.structure(want[1])
    for a, b in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1]), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_an_fp8_checkpoint_converts_to_orbax_as_stored(tmp_path):
    """scripts/convert_hf --quantization=fp8 writes the checkpoint's own fp8 bytes and
    scales; loaded back without quantization, it is the dequantizing HF load, bitwise."""
    fixture, out = str(FIXTURES / "deepseek_v3_fp8"), str(tmp_path / "orbax")
    cmd = ["-m", "scripts.convert_hf", f"--hf_dir={fixture}", f"--out_dir={out}"]
    run = subprocess.run(
        [sys.executable, *cmd, "--quantization=fp8"],
        cwd=FIXTURES.parent.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith(f"converted {fixture} -> {out}: deepseek_v3"), run.stdout
    for quantization in ("fp8", None):
        got = load_model(out, cfg=model_config(out, None, quantization), host=True)
        want = load_model(fixture, cfg=model_config(fixture, None, quantization), host=True)
        assert got[0].quantization == quantization
        assert got[0].quantization_skip == want[0].quantization_skip
        assert jax.tree.structure(got[1]) == jax.tree.structure(want[1])
        for a, b in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1]), strict=True):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(_bits(a), _bits(b))


def test_bad_quantization_is_refused_before_loading():
    with pytest.raises(ValueError, match=r"quantization='int8'.*\['fp8', 'int4'\]"):
        LLM("tiny-llama", quantization="int8")
    with pytest.raises(ValueError, match="quantization_block"):
        model_config("tiny-llama").replace(quantization_block=(0, 128))
    # A preset draws its weights in the model dtype, then quantizes them.
    cfg, params, _ = load_model(
        "tiny-deepseek-v3", cfg=model_config("tiny-deepseek-v3", None, "fp8"), host=True
    )
    moe = next(layer["moe"] for layer in params["layers"] if "moe" in layer)
    assert quant.is_quantized(moe["w_gate"]) and moe["w_gate"].scale.shape[0] == cfg.num_experts
    assert not quant.is_quantized(moe["router"]) and not quant.is_quantized(params["embed"])
    assert ml_dtypes.finfo(moe["w_gate"].data.dtype).max == 448


def _bits(x) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint8)
