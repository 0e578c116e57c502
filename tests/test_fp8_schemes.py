"""fp8 checkpoints in compressed-tensors' float-quantized format (configs/fp8_schemes.py):
per-channel scales (llm-compressor's FP8_DYNAMIC, the RedHatAI *-FP8-dynamic releases),
per-tensor and per-block ones; read dequantized or held as stored (`quantization="fp8"`,
or vLLM's "compressed-tensors").

Anchors: transformers on the float model given compressed-tensors' own decompression of
tests/fixtures/mixtral_fp8_channel (make_fp8_channel_fixture.py; transformers loading the
directory itself gives the same tokens, recorded there), and for the per-tensor and block
layouts, stored * scale computed here with ml_dtypes from the format's description.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import jax
import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from configs.fp8_schemes import Fp8Scheme, compressed_tensors_fp8
from engine import LLM, SamplingParams
from models import quantization as quant
from models.fp8_checkpoint import Fp8Reader, held_scale
from models.load import load_model, model_config

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
CHANNEL = FIXTURES / "mixtral_fp8_channel"
REF = json.loads((CHANNEL / "reference.json").read_text())
ENGINE = dict(num_pages=32, max_model_len=128)


def _decode(llm: LLM) -> tuple[list, list]:
    n = len(REF["greedy_tokens"][0])
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    outs = llm.generate(REF["prompts"], params)
    return [o.token_ids for o in outs], [o.logprobs for o in outs]


def _header(file: pathlib.Path) -> dict:
    """A safetensors file's header: {name: {dtype, shape, data_offsets}}."""
    raw = file.read_bytes()
    return json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])


def _tensors(file: pathlib.Path) -> tuple[dict, dict]:
    """(fp8 tensors as float8_e4m3fn, the others) of one safetensors file (numpy's
    safetensors API cannot read fp8)."""
    fp8, other, reader = {}, {}, Fp8Reader()
    with safe_open(str(file), framework="np") as f:
        for name, entry in _header(file).items():
            if name == "__metadata__":
                continue
            if entry["dtype"] == "F8_E4M3":
                fp8[name] = reader.read(file, name)
            else:
                other[name] = f.get_tensor(name)
    return fp8, other


def _stored(path: pathlib.Path) -> tuple[dict, dict]:
    fp8, other = {}, {}
    for file in sorted(path.glob("*.safetensors")):
        a, b = _tensors(file)
        fp8.update(a)
        other.update(b)
    return fp8, other


@pytest.mark.parametrize("quantization", [None, "fp8", "compressed-tensors"])
def test_per_channel_checkpoint_decodes_as_transformers(quantization):
    """Dequantized on load, or held as stored (fp8, or vLLM's name of the format): the
    reference's greedy tokens and logprobs."""
    llm = LLM(str(CHANNEL), quantization=quantization, **ENGINE)
    assert llm.config.quantization == (None if quantization is None else "fp8")
    tokens, logprobs = _decode(llm)
    assert tokens == REF["greedy_tokens"]
    for got, want in zip(logprobs, REF["logprobs"], strict=True):
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_held_weights_are_the_stored_bytes_and_each_rows_scale():
    """Held per-channel weights: the checkpoint's e4m3 bytes (transposed to [in, out]) in
    blocks of 128 inputs by one output, each block given its output's stored scale; the
    router and lm_head (ignored by the recipe) stay float."""
    cfg = model_config(str(CHANNEL), quantization="fp8")
    params = load_model(str(CHANNEL), cfg=cfg, host=True)[1]
    stored, scales = _stored(CHANNEL)
    layer = params["layers"][1]
    checks = {
        ("attn", "wq"): "model.layers.1.self_attn.q_proj.weight",
        ("moe", "w_gate"): "model.layers.1.block_sparse_moe.experts.{e}.w1.weight",
        ("moe", "w_down"): "model.layers.1.block_sparse_moe.experts.{e}.w2.weight",
    }
    for (group, leaf), name in checks.items():
        w = layer[group][leaf]
        assert quant.is_quantized(w) and w.block == (128, 1), (leaf, w.block)
        for e in range(w.data.shape[0] if w.lead else 1):
            data = np.asarray(w.data[e] if w.lead else w.data)
            scale = np.asarray(w.scale[e] if w.lead else w.scale)
            hf = stored[name.format(e=e)]  # [out, in]
            np.testing.assert_array_equal(
                data.reshape(hf.T.shape).view(np.uint8), hf.T.view(np.uint8)
            )
            row_scale = scales[name.format(e=e) + "_scale"][:, 0]  # [out]
            assert scale.shape == (-(-hf.shape[1] // 128), hf.shape[0])
            np.testing.assert_array_equal(scale, np.broadcast_to(row_scale, scale.shape))
    assert not quant.is_quantized(layer["moe"]["router"])
    assert not quant.is_quantized(params["lm_head"])


def _rename(path: pathlib.Path, rename) -> None:
    """Every tensor of the checkpoint in `path` renamed by `rename(name)` (its header
    rewritten; the index too)."""
    names = {}
    for file in path.glob("*.safetensors"):
        raw = file.read_bytes()
        header = {rename(k) if k != "__metadata__" else k: v for k, v in _header(file).items()}
        body = json.dumps(header).encode()
        start = 8 + int.from_bytes(raw[:8], "little")
        file.write_bytes(len(body).to_bytes(8, "little") + body + raw[start:])
        names.update({k: file.name for k in header if k != "__metadata__"})
    index = path / "model.safetensors.index.json"
    if index.exists():
        index.write_text(json.dumps({"metadata": {}, "weight_map": names}))


def _bits(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)


def _ct_config(path: pathlib.Path, weights: dict) -> None:
    config = json.loads((path / "config.json").read_text())
    qc = json.loads(json.dumps(REF["quantization_config"]))
    qc["config_groups"]["group_0"]["weights"].update(weights)
    config["quantization_config"] = qc
    (path / "config.json").write_text(json.dumps(config))


def test_per_tensor_scales_read_as_stored_times_the_scale(tmp_path):
    """strategy "tensor": one scale per weight ([1]); re-quantized here from the fixture's
    weights with ml_dtypes. Dequantized: stored * scale; held: the stored bytes, every
    block given the scale."""
    ckpt = tmp_path / "tensor"
    shutil.copytree(CHANNEL, ckpt)
    want = {}
    for file in sorted(ckpt.glob("*.safetensors")):
        fp8, tensors = _tensors(file)
        for name, data in fp8.items():
            w = data.astype(np.float32) * tensors[name + "_scale"]
            s = np.float32(np.abs(w).max() / 448)
            tensors[name] = (w / s).astype(ml_dtypes.float8_e4m3fn)
            tensors[name + "_scale"] = np.asarray([s], np.float32)
            want[name] = (tensors[name], s)
        save_file(tensors, str(file), metadata={"format": "pt"})
    _ct_config(ckpt, {"strategy": "tensor"})
    name = "model.layers.1.block_sparse_moe.experts.2.w3.weight"
    data, s = want[name]
    float_params = load_model(str(ckpt), host=True)[1]
    got = np.asarray(float_params["layers"][1]["moe"]["w_up"][2])  # [in, out]
    np.testing.assert_array_equal(got, (data.astype(np.float32) * s).T)
    cfg = model_config(str(ckpt), quantization="fp8")
    assert cfg.quantization_block == (128, 128)
    held = load_model(str(ckpt), cfg=cfg, host=True)[1]["layers"][1]["moe"]["w_up"]
    np.testing.assert_array_equal(np.asarray(held.data[2]).view(np.uint8), data.T.view(np.uint8))
    assert (np.asarray(held.scale[2]) == s).all()


def test_block_scales_named_as_compressed_tensors_names_them(tmp_path):
    """strategy "block": DeepSeek's layout with the scale named `weight_scale` (and the
    block in the group's block_structure): the same weights as the `weight_scale_inv`
    checkpoint it was renamed from, dequantized and held."""
    src = FIXTURES / "qwen3_moe_fp8"
    ckpt = tmp_path / "block"
    shutil.copytree(src, ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    block = config.pop("quantization_config")["weight_block_size"]
    (ckpt / "config.json").write_text(json.dumps(config))
    _ct_config(ckpt, {"strategy": "block", "block_structure": block})
    _rename(ckpt, lambda k: k.removesuffix("_inv"))  # *_scale_inv -> *_scale
    for quantization in (None, "fp8"):
        want = load_model(
            str(src), cfg=model_config(str(src), quantization=quantization), host=True
        )[1]
        got = load_model(
            str(ckpt), cfg=model_config(str(ckpt), quantization=quantization), host=True
        )[1]
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(_bits(a), _bits(b)), got, want)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"weights": {"num_bits": 4}}, r"weights\.num_bits=4: only 8"),
        ({"weights": {"type": "int"}}, r"weights\.type='int': only 'float'"),
        ({"weights": {"strategy": "group"}}, r"weights\.strategy='group': only 'channel'"),
        ({"weights": {"symmetric": False}}, r"weights\.symmetric=False: only True"),
        ({"weights": {"dynamic": True}}, r"weights\.dynamic=True: not supported"),
        ({"weights": {"strategy": "block"}}, r"weights\.block_structure=None: expected two"),
        ({"input_activations": {"dynamic": False}}, "input_activations: only null or dynamic"),
        ({"output_activations": {"num_bits": 8}}, "output_activations: must be null"),
    ],
)
def test_unsupported_float_quantized_configs_are_refused_by_field(change, message):
    qc = json.loads(json.dumps(REF["quantization_config"]))
    group = qc["config_groups"]["group_0"]
    for key, value in change.items():
        if isinstance(group.get(key), dict):
            group[key].update(value)
        else:
            group[key] = value
    with pytest.raises(ValueError, match=f"config_groups.group_0.{message}"):
        compressed_tensors_fp8(qc)


def test_a_scale_of_the_wrong_shape_or_none_is_refused_by_name(tmp_path):
    ckpt = tmp_path / "bad"
    shutil.copytree(CHANNEL, ckpt)
    _ct_config(ckpt, {"strategy": "tensor"})  # the stored scales are per channel
    wrong = r"q_proj\.weight_scale': expected shape \(1,\) .*scales per tensor\), found \(64, 1\)"
    with pytest.raises(ValueError, match=wrong):
        load_model(str(ckpt), host=True)
    _ct_config(ckpt, {"strategy": "channel"})
    name = "model.layers.0.self_attn.q_proj.weight_scale"
    _rename(ckpt, lambda k: "unused" if k == name else k)
    with pytest.raises(
        ValueError, match=r"q_proj\.weight': .* without its scale tensor .*q_proj\.weight_scale"
    ):
        load_model(str(ckpt), host=True)
    grid = held_scale(np.ones((2, 3, 1)), (2, 3, 300), Fp8Scheme("channel", (1, 128), "_scale"))
    assert grid.shape == (2, 3, 3)


def test_deepseek_v4_release_fields_are_read_and_checked():
    """DeepSeek-V4's quant_method "fp8" config: ue8m0 scales named `<module>.scale`, FP4
    experts from `expert_dtype` (top level in V4's config.json, in quantization_config in
    V4.1's); other values of either field are refused by name."""
    from configs.fp8_schemes import deepseek_fp8
    from configs.hf_config import fp8_scheme

    qc = {"quant_method": "fp8", "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
    v4 = fp8_scheme({"quantization_config": qc, "expert_dtype": "fp4"})
    assert v4.fp4_experts and v4.block == (128, 128)
    assert deepseek_fp8({**qc, "expert_dtype": "fp4"}).fp4_experts
    assert not deepseek_fp8(qc).fp4_experts
    names = {"l.wq_a.weight", "l.wq_a.scale", "v3.weight", "v3.weight_scale_inv"}
    assert v4.scale_name("l.wq_a.weight", names.__contains__) == "l.wq_a.scale"
    assert v4.scale_name("v3.weight", names.__contains__) == "v3.weight_scale_inv"
    assert v4.scale_name("gone.weight", names.__contains__) == "gone.weight_scale_inv"
    for field, value in (("scale_fmt", "e5m2"), ("expert_dtype", "int4")):
        with pytest.raises(ValueError, match=f"quantization_config.{field}='{value}'"):
            deepseek_fp8({**qc, field: value})
