"""fp8 (e4m3) KV pages: the quantizer, writes, attention over fp8 pages on the XLA path, and
the engine with kv_cache_dtype="fp8" against Hugging Face with an fp8 KV cache
(tests/fixtures/make_fp8_kv_reference.py).
"""

from __future__ import annotations

import json
import pathlib
import warnings

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from configs.presets import get_preset
from engine import LLM, SamplingParams, kv_quant
from engine import attention_ops as ops
from engine import paged_attention as pa
from engine.step import init_kv_pages
from pallas_kernels import mla_paged_attention_ref, ragged_paged_attention_ref

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
TOL = 2e-3  # logprobs against HF, as for the unquantized engine


def test_quantize_rows_matches_numpy_e4m3_rounding():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3, 40)).astype(np.float32) * np.float32(10.0) ** rng.integers(
        -6, 6, size=(5, 3, 1)
    )
    x[1, 2] = 0.0  # an all-zero row
    x[2, 0, 7] = 3e38  # a huge value: must not overflow to NaN
    q = kv_quant.quantize_rows(jnp.asarray(x))
    assert q.data.dtype == jnp.uint8 and q.scale.dtype == jnp.float32  # e4m3 bit patterns
    assert q.fp8().dtype == jnp.float8_e4m3fn
    assert q.data.shape == x.shape and q.scale.shape == x.shape[:-1]
    # XLA may divide by 448 as a multiply by its reciprocal: within one float32 ulp.
    np.testing.assert_allclose(np.asarray(q.scale), np.abs(x).max(-1) / 448.0, rtol=1.2e-7)
    # Given the scale, the rounding is checked against ml_dtypes' own numpy cast.
    scale = np.asarray(q.scale)
    safe = np.where(scale > 0, scale, np.float32(1.0))[..., None]
    want = np.clip(x / safe, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(
        np.asarray(q.data).view(np.uint8), want.view(np.uint8), err_msg="fp8 bit patterns"
    )
    back = np.asarray(kv_quant.dequantize(q))
    assert np.isfinite(back).all()
    assert not back[1, 2].any()
    # Every row's largest element is exact; every element within half an e4m3 step: 2^-4
    # relative above the subnormal range, half the subnormal spacing (2^-10 * s) below it.
    np.testing.assert_allclose(np.abs(back).max(-1), np.abs(x).max(-1), rtol=1e-6)
    bound = 2.0**-4 * np.abs(x) + 2.0**-10 * scale[..., None] * (1 + 1e-6)
    assert (np.abs(back - x) <= bound).all()


def test_write_kv_quantizes_rows_into_their_slots():
    rng = np.random.default_rng(1)
    pages = kv_quant.zeros((4, 8, 2, 16))  # [N, P, K, Dh]
    new = jnp.asarray(rng.standard_normal((5, 2, 16)), jnp.float32)
    slots = jnp.array([3, 9, -1, 31, 17], jnp.int32)  # -1: padding, dropped
    out = pa.write_kv(pages, new, slots)
    assert isinstance(out, kv_quant.QuantizedPages)
    want = kv_quant.quantize_rows(new)
    flat_data = np.asarray(out.data).reshape(32, 2, 16).view(np.uint8)
    flat_scale = np.asarray(out.scale).reshape(32, 2)
    for i, slot in enumerate(np.asarray(slots)):
        if slot < 0:
            continue
        np.testing.assert_array_equal(flat_data[slot], np.asarray(want.data[i]).view(np.uint8))
        np.testing.assert_array_equal(flat_scale[slot], np.asarray(want.scale[i]))
    untouched = np.setdiff1d(np.arange(32), [3, 9, 31, 17])
    assert not flat_data[untouched].any() and not flat_scale[untouched].any()
    # The Pallas write (interpret mode here) stores the same bits.
    pallas = ops.PALLAS_OPS.write_kv(pages, new, slots)
    np.testing.assert_array_equal(
        np.asarray(pallas.data).view(np.uint8), flat_data.reshape(4, 8, 2, 16)
    )
    np.testing.assert_array_equal(np.asarray(pallas.scale), np.asarray(out.scale))


def _step_meta() -> pa.AttnMetadata:
    """Two decodes, a prefill chunk, an empty span and a padding token; pages of 8 slots."""
    return pa.build_metadata(
        jnp.array([0, 1, 6, 7, 7], jnp.int32),
        jnp.array([20, 6, 7, 8, 9, 10, 33, 0], jnp.int32),
        jnp.array([21, 11, 34, 0], jnp.int32),
        jnp.array([[0, 1, 2, 9, 9], [3, 4, 9, 9, 9], [5, 6, 7, 8, 9], [0, 0, 0, 0, 0]], jnp.int32),
    )


@pytest.mark.parametrize("mla", [False, True], ids=["gqa", "mla"])
def test_xla_attention_over_fp8_pages_reads_the_dequantized_rows(mla):
    """Same as attention over the dequantized pages, and as the Pallas twin with scales."""
    rng = np.random.default_rng(2)
    page_size, num_pages = 8, 10
    meta = _step_meta()
    width = (40,) if mla else (2, 16)
    rows = jnp.asarray(rng.standard_normal((num_pages, page_size, *width)) * 3, jnp.float32)
    pages = kv_quant.quantize_rows(rows)
    deq = kv_quant.dequantize(pages)
    meta_args = (meta.cu_q_lens, meta.positions, meta.kv_lens, meta.page_table)
    if mla:
        q_lat = jnp.asarray(rng.standard_normal((8, 4, 32)), jnp.float32)
        q_pe = jnp.asarray(rng.standard_normal((8, 4, 8)), jnp.float32)
        out = pa.paged_attention_mla(q_lat, q_pe, pages, meta, 0.2, 1)
        want = pa.paged_attention_mla(q_lat, q_pe, deq, meta, 0.2, 1)
        twin = mla_paged_attention_ref(
            q_lat, q_pe, pages.fp8(), *meta_args, scale=0.2, latent_scales=pages.scale
        )
    else:
        q = jnp.asarray(rng.standard_normal((8, 6, 16)), jnp.float32)
        values = kv_quant.quantize_rows(rows[..., ::-1])
        out = pa.paged_attention_gqa(q, pages, values, meta, 0.2, 1)
        want = pa.paged_attention_gqa(q, deq, kv_quant.dequantize(values), meta, 0.2, 1)
        twin = ragged_paged_attention_ref(
            q,
            pages.fp8(),
            values.fp8(),
            *meta_args,
            scale=0.2,
            k_scales=pages.scale,
            v_scales=values.scale,
        )
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
    np.testing.assert_allclose(np.asarray(twin), np.asarray(out), atol=1e-5, rtol=1e-5)
    # and not what the unquantized rows give: the test sees the rounding
    exact = (
        pa.paged_attention_mla(q_lat, q_pe, rows, meta, 0.2, 1)
        if mla
        else pa.paged_attention_gqa(q, rows, rows[..., ::-1], meta, 0.2, 1)
    )
    assert np.abs(np.asarray(exact) - np.asarray(out)).max() > 1e-3


def test_cache_bytes_and_layout():
    llama, mla = get_preset("tiny-llama"), get_preset("tiny-deepseek-v3")
    k, dh, layers = llama.num_kv_heads, llama.head_dim, llama.num_layers
    # per layer: K and V rows of Dh bytes per KV head, plus a 4-byte scale per row
    assert kv_quant.bytes_per_token(llama, jnp.float8_e4m3fn) == layers * 2 * k * (dh + 4)
    assert kv_quant.bytes_per_token(llama) == llama.kv_bytes_per_token()
    width = mla.kv_lora_rank + mla.qk_rope_head_dim
    assert kv_quant.bytes_per_token(mla, jnp.float8_e4m3fn) == mla.num_layers * (width + 4)
    kv = init_kv_pages(mla, 3, 8, jnp.float8_e4m3fn)
    assert len(kv) == mla.num_layers
    (latent,) = kv[0]
    assert latent.data.shape == (3, 8, width) and latent.scale.shape == (3, 8)
    k_pages, v_pages = init_kv_pages(llama, 3, 8, jnp.float8_e4m3fn)[0]
    assert k_pages.fp8().dtype == jnp.float8_e4m3fn and v_pages.scale.shape == (3, 8, k)


def test_bad_kv_cache_dtype_is_refused_before_loading():
    with pytest.raises(ValueError, match="kv_cache_dtype='int4'.*'fp8'"):
        LLM(model="/nonexistent/model", kv_cache_dtype="int4")


@pytest.mark.parametrize(
    "arch, impl",
    [(arch, impl) for arch in ("llama", "deepseek_v3") for impl in ("xla", "pallas")]
    + [("deepseek_v32", "xla")],
)
def test_engine_with_fp8_kv_matches_hf_with_an_fp8_cache(arch, impl):
    """Greedy tokens and logprobs (decode path, chunked prefill) and teacher-forced scores
    equal HF's with every cached row quantized alike; unquantized HF is measurably apart.
    `pallas` runs the kernels (interpret mode off GPU), with no fallback to XLA. DeepSeek-V3.2
    (sparse attention, whose XLA path every backend takes) also caches its indexer's keys
    in fp8 pages, as HF's cache does here."""
    ref = json.loads((FIXTURES / arch / "reference.json").read_text())
    ref8 = json.loads((FIXTURES / arch / "reference_fp8_kv.json").read_text())
    llm = LLM(
        model=str(FIXTURES / arch),
        kv_cache_dtype="fp8",
        attention_impl=impl,
        page_size=8,
        num_pages=32,
        max_model_len=64,
        max_num_batched_tokens=32,  # the 33-token prompt is chunked
    )
    assert llm.stats()["kv_cache_dtype"] == "float8_e4m3fn"
    assert isinstance(llm._kv[0][0], kv_quant.QuantizedPages)
    n = len(ref8["greedy_tokens"][0])
    # The engine runs a float32 model's matmuls in float32 (engine/step.py): TF32, XLA:GPU's
    # default, moved K/V rows across e4m3 rounding steps (1/16) that HF's float32 did not
    # cross (seen on an H200, before: logprobs 0.2 apart, tokens equal).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = llm.generate(
            ref["prompts"], SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        )
    assert not [w for w in caught if "XLA path" in str(w.message)]
    for out, tokens, logprobs in zip(outs, ref8["greedy_tokens"], ref8["logprobs"], strict=True):
        assert out.token_ids == tokens
        np.testing.assert_allclose(out.logprobs, logprobs, atol=TOL, rtol=0)
    seqs = [p + t for p, t in zip(ref["prompts"], ref["greedy_tokens"], strict=True)]
    fp8_gap = 0.0
    scored = llm.score(seqs)
    for got, want, unquantized in zip(
        scored, ref8["scored_logprobs"], ref8["scored_logprobs_f32"], strict=True
    ):
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
        fp8_gap = max(fp8_gap, float(np.abs(np.subtract(want, unquantized)).max()))
    assert fp8_gap > 10 * TOL  # the comparison could tell fp8 from unquantized KV


def test_kv_cache_dtype_names():
    assert kv_quant.resolve_kv_cache_dtype("auto") is None  # the model's own dtype
    assert kv_quant.resolve_kv_cache_dtype("fp8") == jnp.float8_e4m3fn
    assert kv_quant.resolve_kv_cache_dtype("fp8_e4m3") == jnp.float8_e4m3fn
    for bad in (["fp8"], None, "FP8", jnp.float8_e4m3fn):
        with pytest.raises(ValueError, match=r"^kv_cache_dtype="):
            kv_quant.resolve_kv_cache_dtype(bad)


def test_bfloat16_rows_are_scaled_in_float32():
    # The scale of a bfloat16 row is its float32 max / 448, not a bfloat16-rounded one.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 16)).astype(ml_dtypes.bfloat16)
    q = kv_quant.quantize_rows(jnp.asarray(x))
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(np.asarray(q.scale), np.abs(x32).max(-1) / 448.0, rtol=1.2e-7)
    want = np.clip(x32 / np.asarray(q.scale)[:, None], -448, 448).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(np.asarray(q.data), want.view(np.uint8))


def test_dequantize_multiplies_in_float32_then_casts():
    rng = np.random.default_rng(4)
    q = kv_quant.quantize_rows(jnp.asarray(rng.standard_normal((64, 16)) * 7, jnp.float32))
    want = np.asarray(q.fp8()).astype(np.float32) * np.asarray(q.scale)[:, None]
    got = kv_quant.dequantize(q, jnp.bfloat16)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(
        np.asarray(got).view(np.uint16), want.astype(ml_dtypes.bfloat16).view(np.uint16)
    )


def test_bytes_per_token_defaults_to_the_models_dtype():
    cfg = get_preset("llama-3.1-8b")  # bfloat16: 2 x 32 layers x 8 KV heads x 128 x 2 bytes
    assert kv_quant.bytes_per_token(cfg) == 131_072
    assert kv_quant.bytes_per_token(cfg, jnp.float32) == 262_144


def test_is_quantized_only_for_quantized_pages():
    assert kv_quant.is_quantized(kv_quant.zeros((2, 4, 8)))
    assert not kv_quant.is_quantized(jnp.zeros((2, 4, 8)))
    assert not kv_quant.is_quantized(np.zeros((2, 4, 8), np.uint8))
