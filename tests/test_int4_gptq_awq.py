"""int4 checkpoints in the GPTQ and AWQ formats (configs/int4_schemes.py,
models/int4_checkpoint.py): read dequantized, or held packed with their zero points and act
order (`quantization="int4"`, models/quantization.py).

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
from configs.int4_schemes import Int4Scheme
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
    np.testing.assert_array_equal(parts.dequantize(scheme.group, np.float32), want)
    zeros = parts.zero.astype(int) + 8
    if "asym_v1" in case:  # an all-positive group's zero point 0, stored v1 as -1 (borrowed)
        assert zeros.min() == 0
    if "_sym" in case:
        assert (zeros == 8).all()
    assert (parts.g_idx is not None) == scheme.act_order


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
