"""The engine with attention_impl="pallas": HF greedy tokens for every fixture model, the
dispatch rules, and the automatic XLA fallback for shapes the kernels refuse.

On CPU the kernels run in interpret mode inside the jitted step (slow: one prompt budget per
model, chosen so that steps mix prefill chunks and decodes).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

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
]
GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


@pytest.mark.parametrize("arch, budget", ARCH_BUDGETS)
def test_pallas_engine_matches_hf_greedy(arch, budget):
    ref = json.loads((FIXTURES / arch / "reference.json").read_text())
    llm = LLM(
        model=str(FIXTURES / arch),
        attention_impl="pallas",
        page_size=8,
        num_pages=32,
        max_model_len=64,
        max_num_batched_tokens=budget,
    )
    assert llm.attention_impl == "pallas"
    outs = llm.generate(ref["prompts"], GREEDY)
    for out, tokens, logprobs in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
        n = len(out.token_ids)
        assert out.token_ids == tokens[:n], arch
        np.testing.assert_allclose(out.logprobs, logprobs[:n], atol=2e-3, rtol=0)


def test_auto_picks_pallas_only_on_gpu():
    assert ops.resolve_impl("auto") == ("pallas" if jax.default_backend() == "gpu" else "xla")
    assert ops.resolve_impl("pallas") == "pallas"  # interpret mode off GPU
    assert ops.get_attention_ops("pallas") is ops.PALLAS_OPS
    assert ops.get_attention_ops("pallas", batch_invariant=True) is ops.PALLAS_INVARIANT_OPS
    with pytest.raises(ValueError, match="attention_impl"):
        ops.resolve_impl("triton")


def test_kernel_configs_by_step_shape_and_device():
    """A step bucket with no more tokens than sequences is all decodes (one-token tiles);
    the invariant mode keeps one tiling for every step."""
    import pallas_kernels as pk

    assert pk.GQA_DECODE_CONFIG.block_rows < pk.GQA_CONFIG.block_rows
    # Same blocks and splits, except that a small decode batch shortens its splits to fill
    # the GPU: a batch-dependent key order, which only the non-invariant mode may have.
    for name in ("block_kv", "kv_split", "max_splits"):
        assert getattr(pk.GQA_DECODE_CONFIG, name) == getattr(pk.GQA_CONFIG, name)
    assert pk.GQA_DECODE_CONFIG.target_programs > 0 == pk.GQA_CONFIG.target_programs
    assert ops._gqa_config(64, 64, batch_invariant=False) is pk.GQA_DECODE_CONFIG
    assert ops._gqa_config(128, 64, batch_invariant=False) is pk.GQA_CONFIG
    assert ops._gqa_config(64, 64, batch_invariant=True) is pk.GQA_CONFIG
    # MLA: a deeper pipeline on Hopper only, same tiling and key order.
    assert dataclasses.replace(pk.MLA_HOPPER_CONFIG, num_stages=2) == pk.MLA_CONFIG
    capability = getattr(jax.devices()[0], "compute_capability", None)
    hopper = jax.default_backend() == "gpu" and str(capability).startswith("9.")
    assert ops.mla_config() is (pk.MLA_HOPPER_CONFIG if hopper else pk.MLA_CONFIG)


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
