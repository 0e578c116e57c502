"""The engine with attention_impl="pallas": HF greedy tokens for every fixture model, the
dispatch rules, and the automatic XLA fallback for shapes the kernels refuse; the opt-in
attention_impl="mosaic" routing (and on a Hopper GPU, the engine on it).

On CPU the kernels run in interpret mode inside the jitted step (slow: one prompt budget per
model, chosen so that steps mix prefill chunks and decodes).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import LLM, SamplingParams
from engine import attention_ops as ops
from engine import paged_attention as pa

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
# Prompts are 5, 17 and 33 tokens. A 32-token budget chunks the last prompt and mixes a
# prefill chunk with decodes in one step (3 step compilations); 64 prefills all at once (2).
ARCH_BUDGETS = [
    ("llama", 32),  # head_dim 40 (padded inside), 3 query heads per KV head
    ("qwen3", 64),
    ("qwen3_moe", 64),
    ("mixtral", 64),
    ("deepseek_v2", 64),
    ("deepseek_v3", 32),  # MLA
    ("mistral", 32),  # an 8-key sliding window on every layer
    ("gpt_oss", 32),  # attention sinks (merged with the kernel's splits), a windowed layer
    ("gemma2", 32),  # soft-capped scores (and logits), an 8-key window on layer 0
    ("mpt", 32),  # ALiBi: a slope per query head in the kernel's scores, 6 heads
]
GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


@pytest.mark.parametrize("arch, budget", ARCH_BUDGETS)
def test_pallas_engine_matches_hf_greedy(arch, budget):
    """gpt-oss again on its prefix cache: the windowed layer's tables then start with
    released places (engine/prefix_cache.WindowCache), which the kernel never reads."""
    ref = json.loads((FIXTURES / arch / "reference.json").read_text())
    llm = LLM(
        model=str(FIXTURES / arch),
        attention_impl="pallas",
        page_size=8,
        num_pages=32,
        max_model_len=64,
        max_num_batched_tokens=budget,
        enable_prefix_caching=arch == "gpt_oss",
    )
    assert llm.attention_impl == "pallas"
    for _ in range(2 if arch == "gpt_oss" else 1):
        outs = llm.generate(ref["prompts"], GREEDY)
        for out, tokens, logprobs in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
            n = len(out.token_ids)
            assert out.token_ids == tokens[:n], arch
            np.testing.assert_allclose(out.logprobs, logprobs[:n], atol=2e-3, rtol=0)
    if arch == "gpt_oss":  # (a hit of n pages of 8 reads the windowed pool from n - 1 on)
        assert [o.num_cached_tokens for o in outs] == [0, 16, 32]


def test_auto_picks_pallas_only_on_gpu():
    assert ops.resolve_impl("auto") == ("pallas" if jax.default_backend() == "gpu" else "xla")
    assert ops.resolve_impl("auto") != "mosaic"  # opt-in until timed on a GPU
    assert ops.resolve_impl("pallas") == "pallas"  # interpret mode off GPU
    assert ops.get_attention_ops("pallas") is ops.PALLAS_OPS
    assert ops.get_attention_ops("pallas", batch_invariant=True) is ops.PALLAS_INVARIANT_OPS
    with pytest.raises(ValueError, match="attention_impl"):
        ops.resolve_impl("triton")


def test_steps_compiled_before_the_kernels_are_imported_stay_compiled():
    """pallas_kernels is imported on first use; importing it must not change JAX's tracing
    context (engine/attention_ops.py), or every step compiled before it compiles again. In
    a fresh process: a function jitted after the engine's import, called, then called again
    after pallas_kernels' import, holds one compilation."""
    code = (
        "import jax, jax.numpy as jnp\n"
        "import engine.step\n"
        "f = jax.jit(lambda x: x + 1)\n"
        "f(jnp.ones(3))\n"
        "import pallas_kernels\n"
        "f(jnp.ones(3))\n"
        "print(f._cache_size())\n"
    )
    root = pathlib.Path(__file__).parent.parent
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["1"]


def test_kernel_configs_by_step_shape_and_device():
    """A step bucket with no more tokens than sequences (all decodes, or a step of a few
    tokens) takes the decode tiling; the invariant mode keeps one tiling for every step."""
    import pallas_kernels as pk

    assert pk.GQA_DECODE_CONFIG.block_rows < pk.GQA_CONFIG.block_rows
    # Same blocks and splits, except that a small decode batch shortens its splits to fill
    # the GPU: a batch-dependent key order, which only the non-invariant mode may have.
    for name in ("block_kv", "kv_split", "max_splits"):
        assert getattr(pk.GQA_DECODE_CONFIG, name) == getattr(pk.GQA_CONFIG, name)
    assert pk.GQA_DECODE_CONFIG.target_programs > 0 == pk.GQA_CONFIG.target_programs
    assert ops._gqa_config(64, 64, batch_invariant=False) is pk.GQA_DECODE_CONFIG
    assert ops._gqa_config(128, 64, batch_invariant=False) is pk.GQA_CONFIG
    invariant = ops._gqa_config(64, 64, batch_invariant=True)
    assert invariant == dataclasses.replace(
        pk.GQA_CONFIG, max_partial_bytes=0, splits_follow_length=False
    )
    # MLA: a deeper pipeline on Hopper only, same tiling and key order; decode-only
    # buckets shorten their splits for small batches, as GQA's do.
    assert dataclasses.replace(pk.MLA_HOPPER_CONFIG, num_stages=2) == pk.MLA_CONFIG
    for decode, base in (
        (pk.MLA_DECODE_CONFIG, pk.MLA_CONFIG),
        (pk.MLA_HOPPER_DECODE_CONFIG, pk.MLA_HOPPER_CONFIG),
    ):
        assert decode.target_programs > 0 == base.target_programs
        assert dataclasses.replace(decode, target_programs=0, min_split=base.min_split) == base
    capability = getattr(jax.devices()[0], "compute_capability", None)
    hopper = jax.default_backend() == "gpu" and str(capability).startswith("9.")
    assert ops.mla_config() is (pk.MLA_HOPPER_CONFIG if hopper else pk.MLA_CONFIG)
    decode = ops.mla_config(decode=True)
    assert decode is (pk.MLA_HOPPER_DECODE_CONFIG if hopper else pk.MLA_DECODE_CONFIG)
    assert ops.mla_config(True, decode=True) == ops.mla_config(True)  # invariant: one tiling


def test_batch_invariant_mode_never_takes_what_depends_on_the_batch(monkeypatch):
    """fast_softmax picks a key block's loop body by the other rows of its tile,
    max_partial_bytes lengthens the splits of steps with many tokens and
    splits_follow_length cuts them by the tile's keys: should a GPU measurement turn the
    first on in the engine's configs, the invariant mode still keeps all three off (and
    the other modes take them)."""
    import pallas_kernels as pk

    names = ("GQA_CONFIG", "GQA_DECODE_CONFIG", "MLA_CONFIG", "MLA_HOPPER_CONFIG")
    for name in names + ("MLA_DECODE_CONFIG", "MLA_HOPPER_DECODE_CONFIG"):
        monkeypatch.setattr(pk, name, dataclasses.replace(getattr(pk, name), fast_softmax=True))
    mode_free = dict(fast_softmax=False, max_partial_bytes=0, splits_follow_length=False)
    for config in (
        ops._gqa_config(128, 64, batch_invariant=False),
        ops._gqa_config(64, 64, batch_invariant=False),
        ops.mla_config(),
        ops.mla_config(decode=True),
    ):
        assert config.fast_softmax and config.max_partial_bytes > 0
        assert config.splits_follow_length
    for num_tokens in (64, 128):
        config = ops._gqa_config(num_tokens, 64, batch_invariant=True)
        assert config == dataclasses.replace(pk.GQA_CONFIG, **mode_free)
    assert ops.mla_config(batch_invariant=True) == dataclasses.replace(
        ops.mla_config(), **mode_free
    )


def test_refused_shape_falls_back_to_xla_with_a_warning():
    rng = np.random.default_rng(0)
    head_dim = 320  # over the kernel's register budget
    q = jnp.asarray(rng.standard_normal((3, 2, head_dim)), jnp.float32)
    k_pages = jnp.asarray(rng.standard_normal((4, 8, 1, head_dim)), jnp.float32)
    v_pages = jnp.asarray(rng.standard_normal((4, 8, 1, head_dim)), jnp.float32)
    meta = pa.build_metadata(
        jnp.array([0, 1, 3], jnp.int32),
        jnp.array([4, 6, 7], jnp.int32),
        jnp.array([5, 8], jnp.int32),
        jnp.array([[2, 0], [1, 3]], jnp.int32),
    )
    with pytest.warns(UserWarning, match="head_dim=320.*XLA path"):
        out = ops.PALLAS_OPS.gqa(q, k_pages, v_pages, meta, 0.1, 1)
    np.testing.assert_array_equal(out, pa.paged_attention_gqa(q, k_pages, v_pages, meta, 0.1, 1))


def test_the_fallback_keeps_the_window_and_the_batch_invariant_mode(monkeypatch):
    """A refused shape goes to the XLA ops of the engine's mode (the invariant tiling in
    batch-invariant mode), with the layer's sliding window."""
    rng = np.random.default_rng(1)
    calls = []

    def spy(name, real):
        def call(*args, **kwargs):
            calls.append((name, kwargs.get("window")))
            return real(*args, **kwargs)

        return call

    for mode in ("XLA_OPS", "XLA_INVARIANT_OPS"):
        xla = getattr(ops, mode)
        spies = dict(gqa=spy(mode, xla.gqa), mla=spy(mode, xla.mla))
        monkeypatch.setattr(ops, mode, xla._replace(**spies))
    meta = pa.build_metadata(
        jnp.array([0, 1, 3], jnp.int32),
        jnp.array([4, 6, 7], jnp.int32),
        jnp.array([5, 8], jnp.int32),
        jnp.array([[2, 0], [1, 3]], jnp.int32),
    )
    q = jnp.asarray(rng.standard_normal((3, 2, 320)), jnp.float32)  # head_dim over the budget
    kv = jnp.asarray(rng.standard_normal((2, 4, 8, 1, 320)), jnp.float32)
    rank = 1024  # kv_lora_rank over the MLA kernel's
    q_lat = jnp.asarray(rng.standard_normal((3, 2, rank)), jnp.float32)
    q_pe = jnp.asarray(rng.standard_normal((3, 2, 8)), jnp.float32)
    latent = jnp.asarray(rng.standard_normal((4, 8, rank + 8)), jnp.float32)
    outs = {}
    for pallas, mode in (
        (ops.PALLAS_OPS, "XLA_OPS"),
        (ops.PALLAS_INVARIANT_OPS, "XLA_INVARIANT_OPS"),
    ):
        for window in (None, 2):
            calls.clear()
            with pytest.warns(UserWarning, match="XLA path"):
                outs[mode, window] = pallas.gqa(q, *kv, meta, 0.1, 1, window=window)
            assert calls == [(mode, window)]
        calls.clear()
        with pytest.warns(UserWarning, match="XLA path"):
            pallas.mla(q_lat, q_pe, latent, meta, 0.1, 1)
        assert calls == [(mode, None)]
    changed = np.asarray(outs["XLA_OPS", 2]) - np.asarray(outs["XLA_OPS", None])
    assert np.abs(changed).max() > 0.1  # the window is applied


def _spy_on_kernels(monkeypatch) -> list[str]:
    """Records which pallas_kernels entry point each attention op calls (then calls it)."""
    import pallas_kernels as pk

    calls = []

    def spy(name, real):
        def call(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        return call

    for name in (
        "ragged_paged_attention",
        "ragged_paged_attention_mosaic",
        "mla_paged_attention",
        "mla_decode_mosaic",
    ):
        monkeypatch.setattr(pk, name, spy(name, getattr(pk, name)))
    return calls


def test_mosaic_ops_route_prefill_gqa_and_decode_mla_to_the_mosaic_kernels(monkeypatch):
    """MOSAIC_OPS in interpret mode: GQA steps with prefill chunks and all-decode MLA steps
    run the Mosaic GPU kernels and equal the XLA path; decodes (GQA), chunks (MLA), GQA
    layers with a sliding window and what the Mosaic kernels refuse (float32) go to the
    Triton kernels, the last with a warning."""
    from test_pallas_attention import _check, _meta, ragged_batch, random_pages
    from test_pallas_mosaic import decode_batch

    calls = _spy_on_kernels(monkeypatch)
    rng = np.random.default_rng(11)
    bf16 = jnp.bfloat16
    pages = {"prefill": 40, "decode": 64}
    prefill = ragged_batch(4, 16, pages["prefill"])  # 24 tokens, 6 sequences: chunks, decodes
    decode = decode_batch(4, 16, pages["decode"])  # 8 tokens, 7 sequences: one token at most
    prefill["pages"], decode["pages"] = pages["prefill"], pages["decode"]

    def inputs(b, kind, dtype):
        meta = pa.build_metadata(*(jnp.asarray(x) for x in _meta(b)))
        num_tokens = b["positions"].shape[0]
        if kind == "gqa":  # 8 query heads on 2 KV heads of 64
            q = jnp.asarray(rng.standard_normal((num_tokens, 8, 64)), dtype)
            k = random_pages(rng, (b["pages"], 16, 2, 64), b["owned"], dtype)
            v = random_pages(rng, (b["pages"], 16, 2, 64), b["owned"], dtype)
            return (q, k, v, meta, 0.125, 2)
        q_lat = jnp.asarray(rng.standard_normal((num_tokens, 4, 128)), dtype)
        q_pe = jnp.asarray(rng.standard_normal((num_tokens, 4, 64)), dtype)
        latent = random_pages(rng, (b["pages"], 16, 192), b["owned"], dtype)
        return (q_lat, q_pe, latent, meta, 0.07, 2)

    def trace(op, args):  # abstract arrays; scale and kv_block_pages stay Python numbers
        jax.eval_shape(lambda *arrays: op(*arrays, *args[4:]), *args[:4])

    routes = [  # (step, attention, dtype, the kernel it must reach)
        (prefill, "gqa", bf16, "ragged_paged_attention_mosaic"),
        (decode, "gqa", bf16, "ragged_paged_attention"),
        (decode, "mla", bf16, "mla_decode_mosaic"),
        (prefill, "mla", bf16, "mla_paged_attention"),
    ]
    for b, kind, dtype, kernel in routes:
        calls.clear()
        trace(getattr(ops.MOSAIC_OPS, kind), inputs(b, kind, dtype))
        assert calls == [kernel], (kind, dtype)
    calls.clear()
    with pytest.warns(UserWarning, match="Mosaic GQA attention.*bfloat16, float16.*Triton kernel"):
        trace(ops.MOSAIC_OPS.gqa, inputs(prefill, "gqa", jnp.float32))
    assert calls == ["ragged_paged_attention"]
    # A layer with a sliding window: the Mosaic kernel has no window mask.
    calls.clear()
    args = inputs(prefill, "gqa", bf16)
    jax.eval_shape(lambda *a: ops.MOSAIC_OPS.gqa(*a, *args[4:], window=4), *args[:4])
    assert calls == ["ragged_paged_attention"]

    # The two Mosaic routes, run: the same numbers as the engine's XLA path.
    for b, kind in ((prefill, "gqa"), (decode, "mla")):
        args = inputs(b, kind, bf16)
        mosaic = jax.jit(getattr(ops.MOSAIC_OPS, kind), static_argnums=(4, 5))
        xla = jax.jit(getattr(ops.XLA_OPS, kind), static_argnums=(4, 5))
        _check(mosaic(*args), xla(*args), b, bf16)


def test_mosaic_is_opt_in_for_hopper_and_not_batch_invariant():
    capability = str(getattr(jax.devices()[0], "compute_capability", ""))
    if jax.default_backend() == "gpu" and capability.startswith("9."):
        assert ops.resolve_impl("mosaic") == "mosaic"
    else:  # the GPU interpreter deadlocked XLA:CPU inside a whole step (attention_ops.py)
        with pytest.raises(ValueError, match="attention_impl='mosaic': needs a Hopper GPU"):
            ops.resolve_impl("mosaic")
    assert ops.get_attention_ops("mosaic") is ops.MOSAIC_OPS
    with pytest.raises(ValueError, match="batch_invariant=True"):
        ops.resolve_impl("mosaic", batch_invariant=True)
    with pytest.raises(ValueError, match="batch_invariant=True"):
        ops.get_attention_ops("mosaic", batch_invariant=True)
    with pytest.raises(ValueError, match="attention_impl='mosaic'"):  # before any loading
        LLM(model="/nonexistent", attention_impl="mosaic", batch_invariant=True)


@pytest.mark.gpu
def test_mosaic_engine_scores_like_the_pallas_engine_on_hopper():
    """bf16, 8 query heads on 2 KV heads of 64: prompts (one chunked) through the Mosaic GPU
    prefill kernel. Random weights give near-uniform logits, where greedy tokens flip on
    rounding, so the check is every prompt token's logprob against the Triton-kernel engine
    in the same dtype. Measured on CPU in interpret mode (NPROC=8): Mosaic vs Triton 0.004
    at most, XLA vs Triton 0.008; with the Mosaic kernel's softmax scale 25% off, 0.046."""
    capability = str(getattr(jax.devices()[0], "compute_capability", ""))
    if jax.default_backend() != "gpu" or not capability.startswith("9."):
        pytest.skip("needs a Hopper GPU")
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(3, 8000, n)] for n in (5, 40, 70)]
    scores = {}
    for impl in ("pallas", "mosaic"):
        llm = LLM(
            model="bench-llama-20m",
            dtype="bfloat16",
            attention_impl=impl,
            page_size=16,
            num_pages=64,
            max_model_len=256,
            max_num_batched_tokens=64,  # the 70-token prompt is chunked
        )
        scores[impl] = llm.score(prompts)
    for a, b in zip(scores["pallas"], scores["mosaic"], strict=True):
        assert a.shape == b.shape and np.isfinite(b).all()
        np.testing.assert_allclose(b, a, atol=2e-2, rtol=0)
