"""MXFP4 dequantization (models/mxfp4.py) against transformers' gpt-oss load and the OCP MX spec."""

import os

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file

from models.mxfp4 import (
    FP4_VALUES,
    dequantize_mxfp4,
    gpt_oss_expert_weight,
    mxfp4_shapes,
)

FIXTURE = os.path.join(
    os.path.dirname(__file__), "fixtures", "mxfp4", "gpt_oss_experts.safetensors"
)
PREFIX = "model.layers.0.mlp.experts."
PROJS = ("gate_up_proj", "down_proj")


def bits(a: np.ndarray) -> np.ndarray:
    """The raw bits, so that -0.0, subnormals and inf must match exactly."""
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


@pytest.fixture(scope="module")
def hf():
    return load_file(FIXTURE)


def e2m1(nibble: int) -> float:
    """OCP MX spec e2m1: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0."""
    sign = -1.0 if nibble & 8 else 1.0
    exp, man = (nibble >> 1) & 3, nibble & 1
    return sign * (man / 2 if exp == 0 else 2.0 ** (exp - 1) * (1 + man / 2))


def test_fixture_covers_the_edges(hf):
    for proj in PROJS:
        blocks, scales = hf[f"{PREFIX}{proj}_blocks"], hf[f"{PREFIX}{proj}_scales"]
        assert set(np.unique(blocks & 0x0F)) == set(range(16))
        assert set(np.unique(blocks >> 4)) == set(range(16))
        assert {0, 1, 253, 254} <= set(np.unique(scales).tolist())
        assert np.isinf(hf[PREFIX + proj]).any()


@pytest.mark.parametrize("proj", PROJS)
def test_expert_weight_is_transformers_load(hf, proj):
    blocks, scales = hf[f"{PREFIX}{proj}_blocks"], hf[f"{PREFIX}{proj}_scales"]
    want = hf[PREFIX + proj]
    assert mxfp4_shapes(want.shape) == (blocks.shape, scales.shape)
    got = gpt_oss_expert_weight(blocks, scales)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(bits(got), bits(want))
    got16 = gpt_oss_expert_weight(blocks, scales, ml_dtypes.bfloat16)
    assert got16.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(bits(got16), hf[f"{PREFIX}{proj}.bf16_bits"])


@pytest.mark.parametrize("proj", PROJS)
def test_dequantize_is_storage_order(hf, proj):
    blocks, scales = hf[f"{PREFIX}{proj}_blocks"], hf[f"{PREFIX}{proj}_scales"]
    want = hf[PREFIX + proj].swapaxes(1, 2)
    np.testing.assert_array_equal(bits(dequantize_mxfp4(blocks, scales)), bits(want))
    # Leading axes only batch: one row block, or one row, decodes alike.
    np.testing.assert_array_equal(bits(dequantize_mxfp4(blocks[1], scales[1])), bits(want[1]))
    np.testing.assert_array_equal(
        bits(dequantize_mxfp4(blocks[1, 5], scales[1, 5])), bits(want[1, 5])
    )


def test_fp4_values_are_e2m1():
    assert [float(v) for v in FP4_VALUES] == [e2m1(n) for n in range(16)]
    assert np.signbit(FP4_VALUES[8]) and not np.signbit(FP4_VALUES[0])


def test_hand_computed_block():
    # Byte j holds values 2j (low nibble) and 2j + 1 (high nibble); value * 2^(s - 127).
    block = np.zeros(16, np.uint8)
    block[0] = 0x21  # 0.5, 1.0
    block[1] = 0xF8  # -0.0, -6.0
    block[15] = 0x7D  # -3.0, 6.0
    blocks = np.stack([block] * 4)[None]  # [1, 4, 16]
    scales = np.array([[130, 127, 0, 254]], np.uint8)  # 2^3, 2^0, 2^-127, 2^127
    tiny = 2.0**-127  # a float32 subnormal, as are the 2^-127 block's values
    want = {  # position in the block: value, per block
        0: (4.0, 0.5, tiny / 2, 2.0**126),
        1: (8.0, 1.0, tiny, 2.0**127),
        2: (-0.0, -0.0, -0.0, -0.0),
        3: (-48.0, -6.0, -6 * tiny, -np.inf),  # 6 * 2^127 exceeds float32: inf, as torch gives
        30: (-24.0, -3.0, -3 * tiny, -np.inf),
        31: (48.0, 6.0, 6 * tiny, np.inf),
    }
    expected = np.zeros((4, 32), np.float32)
    for pos, values in want.items():
        expected[:, pos] = values
    got = dequantize_mxfp4(blocks, scales)
    assert got.shape == (1, 128)
    np.testing.assert_array_equal(bits(got), bits(expected.reshape(1, 128)))
    assert np.signbit(got[0, 2]) and got[0, 2] == 0.0


def test_expert_weight_orientation():
    # Expert 1, row n = 3 of the storage, block g = 1: value 2j + 1 is at K = 32 * g + 2j + 1.
    blocks = np.zeros((2, 5, 2, 16), np.uint8)
    scales = np.full((2, 5, 2), 127, np.uint8)
    blocks[1, 3, 1, 4] = 0x50  # value 9 of the block: 3.0
    got = gpt_oss_expert_weight(blocks, scales)
    assert got.shape == (2, 64, 5)
    assert got[1, 32 + 9, 3] == 3.0 and np.count_nonzero(got) == 1


def test_shapes_of_gpt_oss_20b():
    # hidden 2880, intermediate 2880, 32 experts.
    assert mxfp4_shapes((32, 2880, 5760)) == ((32, 5760, 90, 16), (32, 5760, 90))
    assert mxfp4_shapes((32, 2880, 2880)) == ((32, 2880, 90, 16), (32, 2880, 90))


BLOCKS = np.zeros((2, 4, 3, 16), np.uint8)
SCALES = np.full((2, 4, 3), 127, np.uint8)


@pytest.mark.parametrize(
    "blocks, scales, dtype, match",
    [
        (BLOCKS.view(np.int8), SCALES, np.float32, r"mxfp4 blocks: int8, expected a uint8"),
        (BLOCKS, SCALES.astype(np.int32), np.float32, r"mxfp4 scales: int32, expected a uint8"),
        (BLOCKS.tolist(), SCALES, np.float32, r"mxfp4 blocks: list, expected a uint8 numpy"),
        (BLOCKS[..., :8], SCALES, np.float32, r"shape \(2, 4, 3, 8\), expected \[..., G, 16\]"),
        (BLOCKS, SCALES[..., :2], np.float32, r"scales: shape \(2, 4, 2\) does not match"),
        (BLOCKS, SCALES, np.float16, r"mxfp4 dtype: float16, expected one of"),
        (
            BLOCKS,
            np.where(np.arange(3) == 2, 255, SCALES).astype(np.uint8),
            np.float32,
            r"byte 255 \(e8m0 NaN\) at index \(0, 0, 2\)",
        ),
    ],
)
def test_bad_input_is_refused(blocks, scales, dtype, match):
    for fn in (dequantize_mxfp4, gpt_oss_expert_weight):
        with pytest.raises(ValueError, match=match):
            fn(blocks, scales, dtype)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"expert blocks: shape \(4, 3, 16\), expected \[E, N, G"):
        gpt_oss_expert_weight(BLOCKS[0], SCALES[0])
    with pytest.raises(ValueError, match=r"K = 48 is not a multiple of 32"):
        mxfp4_shapes((2, 48, 64))
    with pytest.raises(ValueError, match=r"shape \(48, 64\), expected \[E, K, N\]"):
        mxfp4_shapes((48, 64))


# ---- the HF loader reading a gpt-oss checkpoint whose experts are MXFP4 --------------------
GPT_OSS = os.path.join(os.path.dirname(__file__), "fixtures", "gpt_oss")


def _mxfp4_checkpoint(tmp_path, quant_method="mxfp4", edit=None):
    """The gpt_oss fixture with each layer's expert weights replaced by random MXFP4 blocks
    (scales 120..130) under `quant_method`; returns (dir, {name: (blocks, scales)})."""
    import json
    import shutil

    from safetensors.numpy import save_file

    out = tmp_path / "gpt_oss_mxfp4"
    shutil.copytree(GPT_OSS, out)
    tensors = load_file(str(out / "model.safetensors"))
    rng = np.random.default_rng(0)
    packed = {}
    for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        blocks_shape, scales_shape = mxfp4_shapes(tensors.pop(name).shape)
        blocks = rng.integers(0, 256, blocks_shape, dtype=np.uint8)
        scales = rng.integers(120, 131, scales_shape, dtype=np.uint8)
        tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
        packed[name] = (blocks, scales)
    if edit:
        edit(tensors)
    save_file(tensors, str(out / "model.safetensors"))
    config = json.loads((out / "config.json").read_text())
    if quant_method:
        config["quantization_config"] = {"quant_method": quant_method}
    (out / "config.json").write_text(json.dumps(config))
    return out, packed


def test_loader_dequantizes_mxfp4_experts(tmp_path):
    from configs.presets import get_preset
    from models.hf_loader import load_hf_params
    from models.load import load_model

    path, packed = _mxfp4_checkpoint(tmp_path)
    cfg, params, _ = load_model(str(path))  # config.json's quantization_config accepted
    assert cfg.replace(name="x") == get_preset("tiny-gpt-oss").replace(name="x")
    plain = load_hf_params(GPT_OSS, cfg)
    for i, layer in enumerate(params["layers"]):
        pre = f"model.layers.{i}.mlp.experts."
        gate_up = gpt_oss_expert_weight(*packed[pre + "gate_up_proj"])  # [E, D, 2F]
        moe = layer["moe"]
        np.testing.assert_array_equal(np.asarray(moe["w_gate"]), gate_up[..., 0::2])
        np.testing.assert_array_equal(np.asarray(moe["w_up"]), gate_up[..., 1::2])
        np.testing.assert_array_equal(
            np.asarray(moe["w_down"]), gpt_oss_expert_weight(*packed[pre + "down_proj"])
        )
        # Everything else as the unquantized checkpoint holds it.
        for key in ("b_gate", "b_up", "b_down", "router", "router_logit_bias"):
            np.testing.assert_array_equal(
                np.asarray(moe[key]), np.asarray(plain["layers"][i]["moe"][key])
            )


@pytest.mark.parametrize(
    "quant_method, edit, message",
    [
        (None, None, "MXFP4 blocks need a config.json quantization_config with quant_method"),
        ("fp8", None, "MXFP4 blocks need a config.json quantization_config"),
        (
            "mxfp4",
            lambda t: t.update(
                {
                    "model.layers.1.mlp.experts.down_proj_scales": t[
                        "model.layers.1.mlp.experts.down_proj_scales"
                    ][:, :-1]
                }
            ),
            r"'model.layers.1.mlp.experts.down_proj_scales': expected shape \(8, 64, 1\)",
        ),
        (
            "mxfp4",
            lambda t: t.update(
                {
                    "model.layers.0.mlp.experts.gate_up_proj_blocks": t[
                        "model.layers.0.mlp.experts.gate_up_proj_blocks"
                    ].view(np.int8)
                }
            ),
            "gate_up_proj_blocks': dtype I8, expected U8",
        ),
    ],
)
def test_loader_refuses_bad_mxfp4_before_reading(tmp_path, quant_method, edit, message):
    from configs.presets import get_preset
    from models.hf_loader import load_hf_params

    path, _ = _mxfp4_checkpoint(tmp_path, quant_method, edit)
    with pytest.raises(ValueError, match=message):
        load_hf_params(path, get_preset("tiny-gpt-oss"))


def test_mxfp4_quantization_is_only_gpt_oss():
    from configs.hf_config import config_from_hf

    llama = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    with pytest.raises(ValueError, match="quant_method='mxfp4'"):
        config_from_hf({**llama, "quantization_config": {"quant_method": "mxfp4"}})


def test_expert_weight_is_the_storage_order_transposed_across_bands():
    """Rows are transposed in bands of 256; 600 rows end in a partial band."""
    rng = np.random.default_rng(3)
    blocks = rng.integers(0, 256, (2, 600, 2, 16), dtype=np.uint8)
    scales = rng.integers(120, 135, (2, 600, 2), dtype=np.uint8)
    want = dequantize_mxfp4(blocks, scales).swapaxes(1, 2)
    np.testing.assert_array_equal(bits(gpt_oss_expert_weight(blocks, scales)), bits(want))


def test_loader_decodes_mxfp4_straight_to_bfloat16(tmp_path):
    from configs.presets import get_preset
    from models.hf_loader import load_hf_params

    path, packed = _mxfp4_checkpoint(tmp_path)
    cfg = get_preset("tiny-gpt-oss").replace(dtype="bfloat16")
    moe = load_hf_params(path, cfg)["layers"][0]["moe"]
    gate_up = gpt_oss_expert_weight(
        *packed["model.layers.0.mlp.experts.gate_up_proj"], ml_dtypes.bfloat16
    )
    assert moe["w_gate"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(bits(moe["w_gate"]), bits(gate_up[..., 0::2]))
    np.testing.assert_array_equal(bits(moe["w_up"]), bits(gate_up[..., 1::2]))


def test_deepseek_v4_fp4_weights_decode_value_by_value():
    """DeepSeek-V4's FP4 experts (models/fp8_checkpoint.dequantize_fp4): int8 [out, in / 2],
    column 2j in byte j's low nibble, 2j + 1 in its high one, times 2^(s - 127) of the ue8m0
    byte of its 32-input group; decoded here one value at a time from the e2m1 layout (sign
    bit 3, two exponent bits, one mantissa bit)."""
    from models.fp8_checkpoint import dequantize_fp4, fp4_shapes
    from models.mxfp4 import e8m0_values

    rng = np.random.default_rng(4)
    out, k = 3, 64
    codes = rng.integers(0, 16, (out, k), dtype=np.uint8)
    scales = rng.integers(100, 140, (out, k // 32), dtype=np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).view(np.int8)
    assert fp4_shapes((out, k)) == (packed.shape, scales.shape)

    def e2m1(c: int) -> float:
        e, m = (c >> 1) & 3, c & 1
        mag = m * 0.5 if e == 0 else (1 + m * 0.5) * 2.0 ** (e - 1)
        return -mag if c & 8 else mag

    want = np.array(
        [
            [e2m1(int(codes[r, c])) * 2.0 ** (int(scales[r, c // 32]) - 127) for c in range(k)]
            for r in range(out)
        ],
        np.float32,
    )
    np.testing.assert_array_equal(dequantize_fp4(packed, scales), want)
    got16 = dequantize_fp4(packed, scales, ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got16.astype(np.float32), want)  # exact in bfloat16
    np.testing.assert_array_equal(e8m0_values(np.array([127, 128, 126], np.uint8)), [1, 2, 0.5])
    with pytest.raises(ValueError, match="byte 255 \\(NaN\\) at index \\(1,\\)"):
        e8m0_values(np.array([127, 255], np.uint8))
    with pytest.raises(ValueError, match="in = 48 not a multiple of 32"):
        fp4_shapes((2, 48))
