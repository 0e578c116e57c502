"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the indexer's top-k over paged index keys
and the MLA over the chosen keys, each against a plain numpy computation; the engine against
transformers' DeepseekV32ForCausalLM (tests/fixtures/deepseek_v32, whose prompts are longer
than its index_topk of 12, so most queries attend sparsely). GLM-5 (glm_moe_dsa) differs
from it only in layer code (its indexer's rope) that the reference path checks against
transformers (tests/test_hf_parity.py); left out here for the suite's time."""

from __future__ import annotations

import json
import pathlib
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from engine import LLM, SamplingParams, sparse_mla
from engine import paged_attention as pa
from engine.sparse_mla import select_keys, sparse_mla_attention
from models.reference import greedy_generate, prefill_bucket

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
PAGE = 8
NUM_PAGES = 24
# (query tokens this step, KV length after it) per sequence: a decode over fewer keys than
# topk, a decode over many, a prefill chunk ending off a page boundary after cached pages,
# an empty span, a whole prompt of one page exactly, a one-token prompt.
SPANS = [(1, 5), (1, 37), (21, 43), (0, 16), (16, 16), (1, 1)]


def _batch(rng):
    """Metadata for SPANS over shuffled pages, and each token's (sequence, position)."""
    pages = rng.permutation(NUM_PAGES)
    width = max(-(-kv // PAGE) for _, kv in SPANS)
    table = np.zeros((len(SPANS), width), np.int32)
    used = 0
    for s, (_, kv) in enumerate(SPANS):
        n = -(-kv // PAGE)
        table[s, :n] = pages[used : used + n]
        used += n
    cu = np.cumsum([0] + [q for q, _ in SPANS]).astype(np.int32)
    tokens = [(s, kv - q + j) for s, (q, kv) in enumerate(SPANS) for j in range(q)]
    positions = np.array([p for _, p in tokens], np.int32)
    kv_lens = np.array([kv for _, kv in SPANS], np.int32)
    meta = pa.build_metadata(cu, positions, kv_lens, table, len(tokens))
    return meta, table, tokens


def _key_rows(pages: np.ndarray, table: np.ndarray, seq: int, count: int) -> np.ndarray:
    """The first `count` cached rows of sequence `seq`, in position order."""
    return np.stack([pages[table[seq, j // PAGE], j % PAGE] for j in range(count)])


@pytest.mark.parametrize("tile_sizes, block_tokens", [((8, 4, 2), 16), ((8,), 16), (None, 2048)])
def test_select_keys_are_each_querys_top_scored_visible_keys(tile_sizes, block_tokens):
    """Small tiles and blocks: spans cut into tiles and remainder tiles (or one size only,
    the batch-invariant mode's), a running top-k merged over several key blocks; the
    defaults: one tile a span and one block."""
    rng = np.random.default_rng(0)
    meta, table, tokens = _batch(rng)
    heads, dim, topk = 3, 16, 6
    index_pages = rng.standard_normal((NUM_PAGES, PAGE, dim)).astype(np.float32)
    q = rng.standard_normal((len(tokens), heads, dim)).astype(np.float32)
    w = rng.standard_normal((len(tokens), heads)).astype(np.float32)
    got = select_keys(
        jnp.asarray(q),
        jnp.asarray(w),
        jnp.asarray(index_pages),
        meta,
        topk,
        tile_sizes,
        block_tokens,
    )
    got = np.asarray(got)
    for t, (seq, pos) in enumerate(tokens):
        keys = _key_rows(index_pages, table, seq, pos + 1)  # [L, Di]
        scores = (w[t][:, None] * np.maximum(q[t] @ keys.T, 0)).sum(0)  # [L]
        best = np.sort(np.argsort(-scores, kind="stable")[:topk])
        want = np.full(topk, -1)
        want[: len(best)] = best
        np.testing.assert_array_equal(got[t], want, err_msg=f"token {t} (position {pos})")


def test_sparse_mla_is_a_softmax_over_the_chosen_keys_alone():
    rng = np.random.default_rng(1)
    meta, table, tokens = _batch(rng)
    heads, rank, rope, topk, scale = 4, 12, 4, 6, 0.3
    latent = rng.standard_normal((NUM_PAGES, PAGE, rank + rope)).astype(np.float32)
    q_lat = rng.standard_normal((len(tokens), heads, rank)).astype(np.float32)
    q_pe = rng.standard_normal((len(tokens), heads, rope)).astype(np.float32)
    chosen = np.full((len(tokens), topk), -1, np.int32)
    for t, (_, pos) in enumerate(tokens):
        keys = np.sort(rng.permutation(pos + 1)[:topk])
        chosen[t, : len(keys)] = keys
    got = np.asarray(
        sparse_mla_attention(
            jnp.asarray(q_lat),
            jnp.asarray(q_pe),
            jnp.asarray(latent),
            meta,
            jnp.asarray(chosen),
            scale,
        )
    )
    q_cat = np.concatenate([q_lat, q_pe], axis=-1)
    for t, (seq, pos) in enumerate(tokens):
        rows = _key_rows(latent, table, seq, pos + 1)[chosen[t][chosen[t] >= 0]]  # [k, W]
        s = q_cat[t] @ rows.T * scale  # [H, k]
        p = np.exp(s - s.max(-1, keepdims=True))
        want = (p / p.sum(-1, keepdims=True)) @ rows[:, :rank]
        np.testing.assert_allclose(got[t], want, atol=1e-5, rtol=1e-5)


def test_engine_gives_hf_greedy_tokens_in_chunks_and_from_cached_pages():
    """Prefill in chunks of 16 tokens (a query's keys span pages written by earlier
    steps); then the same prompts again, whose prefix-cache hits read the cached index
    keys instead of computing them."""
    fixture = FIXTURES / "deepseek_v32"
    ref = json.loads((fixture / "reference.json").read_text())
    assert ref["sparse_effect"] > 0.1 and ref["min_index_gap"] >= 1e-5
    greedy = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    llm = LLM(
        model=str(fixture),
        max_num_batched_tokens=16,
        num_pages=32,
        max_model_len=128,
        enable_prefix_caching=True,
    )
    for cached in ([0, 0, 0], [0, 16, 32]):
        outs = llm.generate(ref["prompts"], greedy)
        for out, tokens, lps in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
            assert out.token_ids == tokens
            np.testing.assert_allclose(out.logprobs, lps, atol=2e-3, rtol=0)
        # The second round's prompts (17 and 33 tokens) start from their cached whole pages.
        assert [o.num_cached_tokens for o in outs] == cached


def test_a_page_table_within_the_top_k_attends_densely(tmp_path, monkeypatch):
    """index_topk 128 = max_model_len: every query keeps every key it sees (transformers'
    topk = min(index_topk, keys)), so the engine takes the dense MLA path and gives the
    contiguous reference's tokens for that config; the indexer's keys are still cached."""
    fixture = tmp_path / "v32"
    shutil.copytree(FIXTURES / "deepseek_v32", fixture)
    config = json.loads((fixture / "config.json").read_text())
    (fixture / "config.json").write_text(json.dumps({**config, "index_topk": 128}))

    def no_sparse(*args, **kwargs):
        raise AssertionError("sparse attention where every key is kept")

    monkeypatch.setattr(sparse_mla, "attention", no_sparse)
    # Every step padded to 16 tokens, the reference's decodes to its prefill's rows: one
    # program each.
    kw = dict(max_model_len=128, num_pages=32, max_num_batched_tokens=16, token_buckets=(16,))
    llm = LLM(model=str(fixture), **kw)
    prompts = json.loads((fixture / "reference.json").read_text())["prompts"]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    for prompt, out in zip(prompts, outs, strict=True):
        rows = prefill_bucket(len(prompt))
        tokens, logprobs = greedy_generate(llm.params, llm.config, prompt, 8, decode_rows=rows)
        assert out.token_ids == tokens
        np.testing.assert_allclose(out.logprobs, logprobs, atol=1e-4, rtol=0)
    assert all(float(jnp.abs(layer[1]).max()) > 0 for layer in llm._kv)
