"""Gated DeltaNet layers (Qwen3-Next, Qwen3.5: models/linear_attention.py) in the engine.

The layer over a ragged batch is checked against a numpy transcription of transformers'
recurrent rule, one sequence and one token at a time; the engine on the Qwen3-Next fixture
(chunked prefill, decodes, state rows reused and preemption) against transformers' greedy
tokens (tests/fixtures/make_hf_fixtures.py qwen3_next). HF parity of the reference path and
the config mapping: tests/test_hf_parity.py, tests/test_hf_config.py; the fixture on a
tp=2,ep=2 mesh: tests/test_sharding_mesh.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from configs.hf_config import config_from_hf
from configs.model_config import ModelConfig
from configs.presets import get_preset
from engine import LLM, SamplingParams, kv_budget, kv_quant, penalties
from engine.kv_pages import PageManager
from engine.linear_state import StateRows
from engine.prefix_cache import PrefixCache
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from engine.state_cache import StateCache
from long_context.capacity import capacity
from models.linear_attention import (
    CHUNK,
    Segments,
    _decayed_products,
    gated_delta_net,
    segments_from_spans,
    zero_state,
)
from models.specs import init_params
from tests.scheduler_cases import oracle_drafts
from tests.test_batch_invariance import _bits, _decoding_equals_prefilling, _scenario
from tests.test_scripts import _run

FIXTURE = Path(__file__).parent / "fixtures" / "qwen3_next"
TOL = 2e-3


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _numpy_layer(p: dict, x: np.ndarray, cfg: ModelConfig, prior: list, state: np.ndarray):
    """One sequence's tokens x [L, D] through the layer, token by token as transformers'
    torch_recurrent_gated_delta_rule: prior = its conv's last K-1 inputs of q, k, v and
    state its [Hv, dk, dv]. Returns (out [L, D], new prior, new state)."""
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    group = cfg.linear_num_value_heads // cfg.linear_num_key_heads
    convs, new_prior = [], []
    for name, old in zip(("q", "k", "v"), prior, strict=True):
        inp = np.concatenate([old, np.einsum("td,dhk->thk", x, p["w" + name])])
        w = p["conv_" + name]  # [K, H, d]
        taps = w.shape[0]
        out = np.stack([(inp[t : t + taps] * w).sum(0) for t in range(len(x))])
        convs.append(_silu(out + p.get(f"conv_{name}_bias", 0.0)))
        new_prior.append(inp[len(inp) - (taps - 1) :])
    q, k, v = convs
    mamba = cfg.linear_attention_kind == "mamba2"
    if not mamba:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(cfg.linear_key_head_dim)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    q, k = np.repeat(q, group, axis=1), np.repeat(k, group, axis=1)
    kda = cfg.linear_attention_kind == "kimi_delta"
    if mamba:  # transformers' mamba2_selective_state_update: dt is the rate and the decay
        beta = np.clip(np.log1p(np.exp(x @ p["wa"] + p["dt_bias"])), *cfg.mamba_dt_limit)
        g = np.repeat((-np.exp(p["A_log"]) * beta)[..., None], cfg.linear_key_head_dim, -1)
        return _numpy_mamba(p, x, cfg, q, k, v, beta, g, new_prior, state)
    beta = 1.0 / (1.0 + np.exp(-(x @ p["wb"])))
    if kda and "wf" in p:  # Ling 2.5: full-rank, bounded to [kda_gate_bound, 0]
        a = np.einsum("td,dhk->thk", x, p["wf"]) + p["dt_bias"]
        g = cfg.kda_gate_bound / (1.0 + np.exp(-np.exp(p["A_log"])[:, None] * a))
    elif kda:  # transformers' recurrent_kimi_delta_attention: a decay per key channel
        a = np.einsum("tr,rhk->thk", x @ p["wf_a"], p["wf_b"]) + p["dt_bias"]
        g = -np.exp(p["A_log"])[:, None] * np.log1p(np.exp(a))  # [L, H, dk]
    else:
        g = -np.exp(p["A_log"]) * np.log1p(np.exp(x @ p["wa"] + p["dt_bias"]))
        g = np.repeat(g[..., None], cfg.linear_key_head_dim, axis=-1)  # (the same per row)
    s = np.array(state, np.float64)
    o = np.zeros_like(v)
    for t in range(len(x)):
        s = s * np.exp(g[t])[:, :, None]
        delta = (v[t] - np.einsum("hkv,hk->hv", s, k[t])) * beta[t][:, None]
        s = s + k[t][:, :, None] * delta[:, None, :]
        o[t] = np.einsum("hkv,hk->hv", s, q[t])
    o = o / np.sqrt((o * o).mean(-1, keepdims=True) + cfg.rms_norm_eps) * p["norm"]
    if kda:
        gate = np.einsum("td,dhk->thk", x, p["wz"]) if "wz" in p else None
        if gate is None:
            gate = np.einsum("tr,rhk->thk", x @ p["wg_a"], p["wg_b"])
        o = o / (1.0 + np.exp(-gate))
    else:
        o = o * _silu(np.einsum("td,dhk->thk", x, p["wz"]))
    return np.einsum("thk,hkd->td", o, p["wo"]), new_prior, s


def _numpy_mamba(p, x, cfg, q, k, v, beta, g, new_prior, state):
    """_numpy_layer's Mamba-2 rule and output: no correction, D times x added, gated by
    silu(z), then RMS-normed per group of heads."""
    s = np.array(state, np.float64)
    o = np.zeros_like(v)
    for t in range(len(x)):
        s = s * np.exp(g[t])[:, :, None] + k[t][:, :, None] * (beta[t][:, None] * v[t])[:, None]
        o[t] = np.einsum("hkv,hk->hv", s, q[t]) + p["D"][:, None] * v[t]
    o = o * _silu(np.einsum("td,dhk->thk", x, p["wz"]))
    grouped = o.reshape(len(x), cfg.linear_num_key_heads, -1)
    grouped = grouped / np.sqrt((grouped * grouped).mean(-1, keepdims=True) + cfg.rms_norm_eps)
    o = grouped.reshape(o.shape) * p["norm"]
    return np.einsum("thk,hkd->td", o, p["wo"]), new_prior, s


LAYER_PRESETS = ["tiny-qwen3-next", "tiny-kimi-linear", "tiny-nemotron-h"]
SPANS = [
    ((5, 3, 0, 1), 16, 2),  # spans over several chunks, a chunk left part-full
    ((2, 1, 0, 1), 4, 64),  # as many rows as sequences: the rule row by row
    ((5, 3, 0, 1), 16, None),  # row by row (batch-invariant)
    ((40, 3, 0, 1), 48, 64),  # a span over KDA's sub-chunks of 16 rows
]


# (Ling 2.5's KDA differs from Kimi's in its gates alone: the chunked form over sub-chunks
# under its bounded decay, and the rule row by row.)
@pytest.mark.parametrize(
    "lengths, rows, chunk, preset",
    [(*span, preset) for preset in LAYER_PRESETS for span in SPANS]
    + [(*SPANS[i], "tiny-bailing-hybrid") for i in (2, 3)],
)
def test_layer_over_ragged_spans_equals_each_sequence_token_by_token(lengths, rows, chunk, preset):
    """Spans that start their sequence (zero state) or continue one (its state row), a
    decode, an empty padding span and padding rows, in one batch: each equals its sequence
    alone, token by token; state rows not in the batch are untouched. Gated DeltaNet (a
    decay per head) and KDA (per key channel)."""
    _check_layer(preset, lengths, [0] * 4, [True, False, True, False], None, chunk, rows=rows)


def _check_layer(preset, lengths, first, fresh, snaps, chunk, drafting=None, rows=64):
    """gated_delta_net over `rows` rows of spans (lengths, each's first position, fresh or
    not; their sequences in state rows 2, 4, 0, 5), with snapshots `snaps` {span:
    [(relative end, row)]} (None: no snapshot arrays) in 11 state rows: the outputs, the
    final states and each snapshot as the numpy rule gives them for the sequence up to
    there; rows 1 and 3 untouched."""
    cfg = get_preset(preset)
    rng = np.random.default_rng(1)
    p = dict(init_params(cfg, 0, init_std=0.3, host=True)["layers"][0]["linear"])
    p["A_log"] = rng.uniform(-3, 0.5, p["A_log"].shape).astype(np.float32)
    p["dt_bias"] = rng.normal(1.0, 0.5, p["dt_bias"].shape).astype(np.float32)
    for name in ("D", "conv_q_bias", "conv_k_bias", "conv_v_bias"):  # (Mamba-2's)
        if name in p:
            p[name] = rng.normal(0.5, 0.5, p[name].shape).astype(np.float32)
    slots = [2, 4, 0, 5]
    snap_end, snap_row = np.full((4, 3), -1, np.int32), np.full((4, 3), -1, np.int32)
    for i, pairs in (snaps or {}).items():
        for j, (end, row) in enumerate(pairs):
            snap_end[i, j], snap_row[i, j] = end, row
    x = rng.normal(size=(rows, cfg.hidden_size)).astype(np.float32)
    state = [rng.normal(size=a.shape).astype(np.float32) for a in zero_state(cfg, 11)]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
    seq_of = np.clip(np.searchsorted(np.cumsum(lengths), np.arange(rows), side="right"), 0, 3)
    snapping = (snap_end, snap_row, np.array(first) % 16) if snaps is not None else (None,) * 3
    seg = Segments(
        *map(jnp.asarray, (seq_of, np.arange(rows) - starts[seq_of], starts, lengths)),
        jnp.asarray(slots, jnp.int32),
        jnp.asarray(fresh),
        chunk,
        *(None if a is None else jnp.asarray(a, jnp.int32) for a in snapping),
        None if drafting is None else jnp.asarray(drafting),
    )
    if chunk == CHUNK and snaps is not None:  # as the engine makes them, from KV lengths
        cu = jnp.asarray(np.concatenate([starts, [sum(lengths)]]), jnp.int32)
        kv_lens = jnp.asarray(np.array(first) + lengths, jnp.int32)
        made = segments_from_spans(cu, kv_lens, seg.slots, rows, CHUNK, *seg[7:9])
        assert made.fresh.tolist() == fresh  # (the spans as given)
        seg = made
    out, new = gated_delta_net(p, jnp.asarray(x), cfg, tuple(map(jnp.asarray, state)), seg)
    out, new = np.asarray(out), [np.asarray(a) for a in new]
    for i, (n, slot, start) in enumerate(zip(lengths, slots, starts, strict=True)):
        before = [np.zeros_like(a[slot]) if fresh[i] else a[slot] for a in state]
        if n:
            want, prior, s = _numpy_layer(p, x[start : start + n], cfg, before[:3], before[3])
            np.testing.assert_allclose(out[start : start + n], want, atol=2e-5, rtol=1e-5)
            for got, w in zip(new, [*prior, s], strict=True):
                np.testing.assert_allclose(got[slot], w, atol=2e-5, rtol=1e-5)
        for end, row in (snaps or {}).get(i, ()):
            _, prior, s = _numpy_layer(p, x[start : start + end], cfg, before[:3], before[3])
            for got, w in zip(new, [*prior, s], strict=True):
                np.testing.assert_allclose(got[row], w, atol=2e-5, rtol=1e-5)
    assert np.abs(out[: sum(lengths)]).max() > 0.1  # (not a comparison of zeros)
    for untouched in (1, 3):  # (row 0: the padding span's)
        for got, old in zip(new, state, strict=True):
            np.testing.assert_array_equal(got[untouched], old[untouched])


@pytest.mark.parametrize("preset", LAYER_PRESETS)
@pytest.mark.parametrize("chunk", [16, CHUNK, None])
def test_snapshots_inside_a_step_hold_each_prefix_state(chunk, preset):
    """Prefix caching's state snapshots (Segments.snap_end / snap_row): a span continuing
    its sequence at position 10 past three 16-token boundaries (the chunked form's chunks
    then start on multiples of 16: the span's first 6 rows, then 16 at a time), a fresh
    span ending on one, a decode onto one: each snapshot row holds the conv inputs and the
    state of its sequence up to its boundary. With the engine's CHUNK (64), the segments
    made by segments_from_spans: a boundary at 64 inside a span from 50, a decode onto 128
    (its chunk's first 63 rows padding)."""
    fresh = [False, True, True, False]
    if chunk == CHUNK:
        _check_layer(
            preset, [40, 16, 0, 1], [50, 0, 0, 127], fresh, {0: [(14, 6)], 3: [(1, 10)]}, chunk
        )
        return
    snaps = {0: [(6, 6), (22, 7), (38, 8)], 1: [(16, 9)], 3: [(1, 10)]}
    _check_layer(preset, [40, 16, 0, 1], [10, 0, 0, 31], fresh, snaps, chunk)


@pytest.mark.parametrize("preset", LAYER_PRESETS)
def test_drafting_spans_run_row_by_row_with_a_state_per_row(preset):
    """Speculative decoding (Segments.drafting): spans feeding a decode's token and its
    drafts run row by row beside a chunked prefill, and leave the state after each row but
    the last in the rows the step names (whichever number of drafts it keeps, the next
    step starts from one of them)."""
    snaps = {0: [(1, 6), (2, 7), (3, 8)], 3: [(1, 9)]}
    drafting = [True, False, False, True]
    _check_layer(
        preset, [4, 30, 0, 2], [41, 0, 0, 17], [False, True, True, False], snaps, 16, drafting
    )


def test_kda_pair_decays_over_sub_chunks_equal_each_pair_weighed_alone():
    """KDA's chunked form: sum_d a[i,d] k[j,d] exp(cum[i,d] - cum[j,d]) over 64 rows, from
    sub-chunk matmuls, against every pair weighed alone in float64; decays strong enough
    (-40 a row) that exp(-cum) alone would overflow float32."""
    rng = np.random.default_rng(3)
    a, k = rng.normal(size=(2, 2, 64, 8)), rng.normal(size=(2, 2, 64, 8))
    # (rounded to float32 first: at |cum| ~ 2,500 its rounding alone moves exp(cum_i -
    # cum_j) by ~2e-4, the same in any float32 form)
    cum = np.cumsum(-rng.uniform(0, 80, size=(2, 2, 64, 8)), axis=-2).astype(np.float32)
    cum = cum.astype(np.float64)
    assert -cum.min() > np.log(np.finfo(np.float32).max)  # (exp(-cum) overflows float32)
    lower = np.tril(np.ones((64, 64), bool))[..., None]
    gaps = np.where(lower, cum[..., :, None, :] - cum[..., None, :, :], -np.inf)
    want = np.einsum("...id,...jd,...ijd->...ij", a, k, np.exp(gaps))
    got = np.asarray(_decayed_products(*(jnp.asarray(x, jnp.float32) for x in (a, k, cum))))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "arch",
    [
        *("qwen3_next", "kimi_linear", "nemotron_h", "granitemoehybrid", "bailing_hybrid"),
        *("lfm2_moe", "jamba", "minimax", "lfm3", "olmo_hybrid", "lara_mini"),
        *("falcon_mamba", "mamba2", "falcon_h1"),
    ],
)
def test_engine_matches_hf_with_chunks_reused_state_rows_and_preemption(arch):
    """Prompts of 5, 17 and 33 tokens with 16-token chunks beside decodes, pages for fewer
    than all three (a preemption recomputes from position 0, in whatever state row is
    free), then two samples of one prompt in rows the first requests held: transformers'
    greedy tokens every time. Qwen3-Next (gated DeltaNet, GQA), Kimi-Linear (KDA, MLA
    without RoPE, the latent pages beside the state rows), Nemotron-H (Mamba-2, GQA
    without positions, layers without a feed-forward block), Granite 4.0-H (Mamba-2,
    its multipliers), Ling 2.5 (KDA with bounded full-rank gates, gated MLA with RoPE,
    clipped SwiGLU), LFM2-MoE (short convs: a state of the conv's last inputs alone),
    Jamba (Mamba-1: a decay per state channel; attention without positions), MiniMax-01
    (lightning attention: a fixed decay per head; no conv), LFM3 (short convs beside
    global and windowed attention: state rows and the window's own pool together), OLMo
    Hybrid (gated DeltaNet with beta up to 2, its layers' inputs normed, beside attention
    layers without positions that norm their outputs), Lara Mini (gated DeltaNet beside
    windowed and global attention, experts on every layer), Falcon-H1 (attention beside
    Mamba-2 in each layer: pairs of ours), and without attention Falcon Mamba (Mamba-1) and
    Mamba-2 (pages that hold nothing, still bounding the admissions)."""
    fixture = FIXTURE.parent / arch
    ref = json.loads((fixture / "reference.json").read_text())
    # (56 tokens at most: the longest sequence's 49 fit, and a page table of one KV block
    # compiles without loops; every step padded to 16 tokens: one program)
    llm = LLM(
        str(fixture),
        max_num_batched_tokens=16,
        max_num_seqs=3,
        page_size=8,
        num_pages=7,
        max_model_len=56,
        token_buckets=(16,),
    )
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in ref["prompts"]], params)
    for out, tokens, logprobs in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
        assert out.token_ids == tokens
        np.testing.assert_allclose(out.logprobs, logprobs, atol=TOL, rtol=0)
    assert llm.stats()["num_preemptions"] > 0
    two = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, n=2)
    (out,) = llm.generate({"prompt_token_ids": ref["prompts"][1]}, two)
    assert [s.token_ids for s in out.samples] == [ref["greedy_tokens"][1][:4]] * 2


@pytest.mark.parametrize("arch", ["qwen3_next", "kimi_linear", "nemotron_h", "lfm3", "mamba"])
def test_prefix_cache_hit_resumes_from_a_state_snapshot(arch):
    """Prefix caching on a linear-attention model (engine/state_cache.py), batch-invariant:
    a prompt of 76 tokens computed cold; after a reset, another sharing its first 70
    tokens, prefilled in chunks of 24 (the 64-token boundary inside one), leaves a
    snapshot there; the first again takes 64 tokens from the cache and its state from the
    snapshot: the cold run's greedy tokens and logprob bits (the rule row by row, a state
    at a boundary the same however the tokens were split). LFM3: its windowed layer's
    pages behind the boundary indexed too (a cut where both are); Mamba: the state alone.
    (Batch-invariant steps compile a few shapes; the chunked form's snapshots: the layer
    tests above, and scripts/bench_prefix_cache on bench-qwen3-next-40m, its tokens the
    uncached run's.)"""
    rng = np.random.default_rng(0)
    prefix = rng.integers(3, 200, 70).tolist()
    a, b = prefix + rng.integers(3, 200, 6).tolist(), prefix + rng.integers(3, 200, 10).tolist()
    llm = LLM(
        str(FIXTURE.parent / arch),
        enable_prefix_caching=True,
        mamba_block_size=64,
        max_num_batched_tokens=24,
        max_num_seqs=2,
        page_size=8,
        max_model_len=128,
        batch_invariant=True,
    )
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    (cold,) = llm.generate([{"prompt_token_ids": a}], params)
    assert llm.reset_prefix_cache() and llm.stats()["prefix_cache_state_snapshots"] == 0
    llm.generate([{"prompt_token_ids": b}], params)
    assert llm.stats()["prefix_cache_state_snapshots"] == 1
    (hit,) = llm.generate([{"prompt_token_ids": a}], params)
    assert (cold.num_cached_tokens, hit.num_cached_tokens) == (0, 64)
    assert llm.stats()["prefix_cache_states_restored"] == 1
    assert (hit.token_ids, _bits(hit.logprobs)) == (cold.token_ids, _bits(cold.logprobs))


def test_drafts_restart_from_the_state_after_the_kept_ones(monkeypatch):
    """Speculative decoding on Qwen3-Next: a drafting step runs the decode and its drafts
    row by row and leaves the state after each; when some are rejected the next step
    starts from the state after the kept ones (a draft row copied into the sequence's).
    Drafts from an oracle in place of the ngram lookup (the greedy continuation, one draft
    spoiled at a place that rotates call by call: 0 to 3 kept a step): the greedy tokens
    and logprobs of the engine without drafts, in fewer steps. (Without the copy the tokens
    differ.)"""
    # test_engine_matches_hf's engine: its step programs, compiled already.
    kw = dict(max_num_batched_tokens=16, max_num_seqs=3, page_size=8, num_pages=7)
    kw["token_buckets"] = (16,)
    plain = LLM(str(FIXTURE), max_model_len=56, **kw)
    ngram = {"method": "ngram", "num_speculative_tokens": 3}
    spec = LLM(str(FIXTURE), max_model_len=56, speculative_config=ngram, **kw)
    prompts = [
        {"prompt_token_ids": p}
        for p in json.loads((FIXTURE / "reference.json").read_text())["prompts"]
    ]
    greedy = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    want = plain.generate(prompts, greedy)
    fulls = {tuple(w.prompt_token_ids): w.prompt_token_ids + w.token_ids for w in want}
    drafts = oracle_drafts(fulls, spec.config.vocab_size)
    monkeypatch.setattr(type(spec._scheduler.speculative), "drafts", drafts)
    got = spec.generate(prompts, greedy)
    for w, g in zip(want, got, strict=True):
        assert g.token_ids == w.token_ids
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-5, rtol=0)
    stats = spec.stats()
    assert 0 < stats["num_accepted_tokens"] < stats["num_draft_tokens"]
    assert min(stats["num_accepted_tokens_per_pos"]) > 0  # (all three kept, some steps)
    assert stats["num_steps"] < plain.stats()["num_steps"]


def test_scheduler_takes_a_prefix_up_to_its_last_snapshot():
    """The host side: a snapshot row per boundary a step passes, indexed under its page's
    block id once the step is launched (a step built ahead takes it); a match cut to the
    last boundary with one, its row copied to the new sequence's state row; the least
    recently used row given up first; a cancelled step's rows and copy taken back."""
    states = StateCache(16, 8, first_row=3, num_rows=2)
    pages = PageManager(32, 8)
    sched = Scheduler(
        pages, 64, 2, 64, prefix_cache=PrefixCache(pages, states=states), state_slots=2
    )
    params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    tokens = list(range(10, 50))
    sched.add(Sequence("a", tokens, params))
    out = sched.schedule()
    assert out.items[0].state_snapshots == ((16, 3), (32, 4))
    sched.add(Sequence("b", tokens[:33] + [99, 98], params))  # 4 cached pages, snapshot at 32
    ahead = sched.schedule_ahead()  # a's step launched: its pages and snapshots are taken
    (item,) = ahead.items
    assert (item.start_pos, item.state_from, item.state_snapshots) == (32, 4, ())
    sched.cancel(ahead)  # never ran: its copy is made by the retry
    sched.update(out, {"a": (7, -1.0)})
    assert states.num_indexed == 2
    out = sched.schedule()
    assert (out.items[0].start_pos, out.items[0].state_from) == (32, 4)
    sched.update(out, {"b": (7, -1.0)})
    sched.add(Sequence("c", list(range(100, 120)), params))  # a new row: row 3 (LRU) goes
    out = sched.schedule()
    assert out.items[0].state_snapshots == ((16, 3),)
    sched.update(out, {"c": (7, -1.0)})
    sched.add(Sequence("d", tokens[:20], params))  # its boundary's snapshot is gone
    (item,) = sched.schedule().items
    assert (item.start_pos, item.state_from) == (0, 0)
    # With drafts too (speculative decoding): each sequence row's draft rows come after
    # the snapshots' (rows 3 and 4 here), three per row.
    rows = StateRows(2, StateCache(16, 8, first_row=3, num_rows=2), drafts=3)
    seq = Sequence("e", tokens, params)
    rows.admit(seq)
    rows.admit(seq)  # (row 2)
    assert rows.item_fields(seq, 40, 43, 2)["state_snapshots"] == ((1, 8), (2, 9))


@pytest.mark.parametrize(
    "model, kwargs, match",
    [
        ("tiny-qwen3-next", {"mamba_block_size": 64}, "mamba_block_size=64: only for prefix"),
        ("tiny-qwen3", {"enable_prefix_caching": True, "num_state_snapshots": 4}, "has none"),
        ("tiny-qwen3-next", {"enable_prefix_caching": True, "mamba_block_size": 48}, "of 64"),
        ("tiny-qwen3-next", {"enable_prefix_caching": True, "num_state_snapshots": 0}, "in \\[1"),
    ],
)
def test_state_snapshot_options_are_checked_before_loading(model, kwargs, match):
    with pytest.raises(ValueError, match=match):
        LLM(model, **kwargs)


@pytest.mark.parametrize(
    "option, value",
    [
        ("speculative_config", {"method": "mtp", "num_speculative_tokens": 1}),
        ("enable_lora", True),  # (Nemotron-H's adapters name blocks, not layers)
    ],
)
def test_engine_refuses_what_the_recurrent_state_cannot_follow(option, value):
    model = "tiny-nemotron-h" if option == "enable_lora" else "tiny-qwen3-next"
    with pytest.raises(ValueError, match=option):
        LLM(model, **{option: value})


def test_scheduler_holds_one_state_row_per_running_sequence():
    """Rows 1..state_slots, one per admitted sequence until it finishes; admission waits
    for a free one."""
    sched = Scheduler(PageManager(16, 8), 32, 2, 64, state_slots=1)
    params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    a, b = Sequence("a", (3, 4, 5), params), Sequence("b", (6, 7), params)
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    assert [it.request_id for it in out.items] == ["a"] and a.state_slot == 1
    assert out.items[0].state_slot == 1 and b.state_slot == 0
    sched.update(out, {"a": (9, -1.0)})  # a finishes: its row goes back
    assert a.is_finished and a.state_slot == 0
    out = sched.schedule()
    assert [it.request_id for it in out.items] == ["b"] and b.state_slot == 1


def test_config_refuses_bad_linear_attention_fields():
    cfg = get_preset("tiny-qwen3-next")
    with pytest.raises(ValueError, match="linear_num_value_heads=3"):
        cfg.replace(linear_num_value_heads=3)
    with pytest.raises(ValueError, match="linear_attention_layers"):
        cfg.replace(linear_attention_layers=(0, 1, 2, 3))
    with pytest.raises(ValueError, match="linear_attention_layers: layer 4"):
        cfg.replace(linear_attention_layers=(0, 4))
    with pytest.raises(ValueError, match="linear_key_head_dim=0"):
        cfg.replace(linear_key_head_dim=0)
    with pytest.raises(ValueError, match="linear_conv_kernel=1"):
        cfg.replace(linear_conv_kernel=1)


def test_batch_invariant_mode_keeps_the_probe_bitwise():
    """Batch-invariant: the DeltaNet rule runs row by row whatever the step, so the probe's
    tokens and logprob bits are those it gets alone among co-requests (chunked under two
    token budgets, preempted), and decoding a position equals prefilling up to it."""
    alone, mixed, preemptions = _scenario("qwen3_next", batch_invariant=True, budgets=(16, 80))
    assert preemptions > 0
    for tokens, bits in mixed:
        assert (tokens, bits) == alone
    _decoding_equals_prefilling("qwen3_next", alone, at=(2, 9))


def test_bench_times_both_forms_of_the_rule(tmp_path):
    """The benchmark script on the tiny model: a span of two chunks (70 rows) and a short
    one, both forms agreeing, and a decode batch."""
    out = tmp_path / "linear.json"
    flags = ["--model=tiny-qwen3-next", "--num_tokens=8,70", "--batch=3", "--iters=1"]
    table = _run("scripts.bench_linear_attention", *flags, f"--json_out={out}")
    assert "| prefill 70 |" in table and "| decode x3 |" in table
    rows = json.loads(out.read_text())
    assert [r["tokens"] for r in rows] == [8, 70, 3]
    assert all(r["max_abs_diff"] < 1e-4 for r in rows[:2])
    assert all(t > 0 for r in rows for t in r["seconds"].values())


def test_kv_budget_and_capacity_count_paged_layers_and_state_rows():
    """tiny-qwen3-next, float32: KV only on its two full-attention layers, 2 x (K + V) x
    2 heads x 16 x 4 B = 512 B a token; a sequence's state on its two DeltaNet layers, (3
    conv rows of q, k [2 x 16] and v [4 x 12] + a [4, 16, 12] matrix) x 4 B = 4,416 B each."""
    cfg = get_preset("tiny-qwen3-next")
    assert kv_quant.bytes_per_token(cfg) == cfg.kv_bytes_per_token() == 512
    assert cfg.linear_state_bytes() == 2 * 4 * (3 * (32 + 32 + 48) + 4 * 16 * 12) == 8832
    budget, seqs, page = 10_000_000, 4, 16
    num_pages, _ = kv_budget.pools_from_budget(cfg, budget, page, None, seqs, 1000, None)
    left = budget - penalties.state_bytes(seqs, cfg.vocab_size) - 5 * 8832
    assert num_pages == left // (512 * page)
    kv_budget.check_kv_fits(cfg, 8, page, None, None, None, 1000)  # (8.9 MB: fits)
    with pytest.raises(ValueError, match="num_pages=8"):  # 40M rows of 8,832 B: 353 GB
        kv_budget.check_kv_fits(cfg, 8, page, None, None, None, 40_000_000)
    c = capacity("tiny-qwen3-next", 2048, hbm_gib=0.01)
    assert c.state_bytes_per_sequence_per_device == 8832
    assert c.max_sequences == c.kv_budget_bytes_per_device // (512 * 2048 + 8832)


def test_config_of_a_dense_qwen3_5_and_the_layer_types_default():
    """Qwen3.5's dense language model (its qwen3_5 wrapper; transformers 5.25's
    Qwen3_5TextConfig defaults), whose layer_types default to a full-attention layer every
    full_attention_interval (4) layers; bad layer_types are refused by name."""
    text = dict(model_type="qwen3_5_text", num_hidden_layers=8, hidden_size=64, vocab_size=512)
    cfg = config_from_hf({"model_type": "qwen3_5", "text_config": text})
    assert cfg.linear_attention_layers == (0, 1, 2, 4, 5, 6)
    assert cfg.num_experts == 0 and cfg.intermediate_size == 12288
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rotary_dim) == (16, 4, 256, 64)
    assert (cfg.linear_num_key_heads, cfg.linear_num_value_heads) == (16, 32)
    assert cfg.attn_output_gate and cfg.norm_zero_centered and cfg.qk_norm
    with pytest.raises(ValueError, match="layer_types"):
        config_from_hf({**text, "layer_types": ["linear_attention"] * 7 + ["sliding"]})
    with pytest.raises(ValueError, match="attention_bias=True"):  # (biases on q/k/v/o)
        config_from_hf({**text, "attention_bias": True})


def test_config_of_kimi_linear_as_released():
    """Kimi-Linear-48B-A3B's config.json as Moonshot ships it (the class's attribute_map
    names; its layer kinds in linear_attn_config, counted from 1; the dense layers from
    first_k_dense_replace): the kimi-linear-48b-a3b preset; bad fields refused by name."""
    full = [4, 8, 12, 16, 20, 24, 27]
    release = dict(
        model_type="kimi_linear",
        num_experts=256,
        num_experts_per_token=8,
        num_shared_experts=1,
        moe_renormalize=True,
        num_expert_group=1,
        moe_router_activation_func="sigmoid",
        first_k_dense_replace=1,
        model_max_length=1048576,
        q_lora_rank=None,
        mla_use_nope=True,
        linear_attn_config=dict(
            full_attn_layers=full,
            kda_layers=[i for i in range(1, 28) if i not in full],
            num_heads=32,
            head_dim=128,
            short_conv_kernel_size=4,
        ),
        dtype="bfloat16",
        bos_token_id=163584,
        eos_token_id=163586,
    )
    want = get_preset("kimi-linear-48b-a3b")
    got = config_from_hf(release, dtype="auto")
    assert got.replace(name=want.name) == want.replace(
        first_k_dense_replace=0, mlp_only_layers=(0,)
    )
    assert got.linear_attention_layers[:4] == (0, 1, 2, 4) and 26 not in got.linear_attention_layers
    bad = dict(release["linear_attn_config"], full_attn_layers=[0, 4])
    with pytest.raises(ValueError, match=r"linear_attn_config.full_attn_layers: 0 is not"):
        config_from_hf({**release, "linear_attn_config": bad})
    with pytest.raises(ValueError, match="moe_router_activation_func='softmax'"):
        config_from_hf({**release, "moe_router_activation_func": "softmax"})
    with pytest.raises(ValueError, match="kimi_delta needs them equal"):
        want.replace(linear_value_head_dim=64)
