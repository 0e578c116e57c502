"""Gated DeltaNet, the linear-attention layers of Qwen3-Next and Qwen3.5 (arXiv:2412.06464),
Kimi Delta Attention (KDA), Kimi-Linear's (arXiv:2510.26692), Mamba-2's SSD layers,
Nemotron-H's (arXiv:2405.21060), LFM2's gated short convolutions (`short_conv`), Jamba's
Mamba layers (`mamba1`) and MiniMax-01's lightning attention (`lightning`, arXiv:2501.08313).

Per token t of a sequence, with q, k, v from a causal depthwise conv (linear_conv_kernel
taps, then SiLU) of their projections, q and k L2-normalised (q also times dk^-0.5), and
per value head a decay g_t = -exp(A_log) * softplus(a_t + dt_bias) and a rate beta_t =
sigmoid(b_t):

    S_t = exp(g_t) S_{t-1}                      S: [dk, dv] per value head, float32
    S_t = S_t + k_t (beta_t (v_t - S_t^T k_t))^T
    o_t = S_t^T q_t

then o RMS-normalised per head, times silu(z_t) (the gated norm), and projected out. Each
value head h reads key head h // (Hv / Hk) (transformers' repeat_interleave).

KDA (ModelConfig.linear_attention_kind "kimi_delta") runs the same rule with a decay per key
channel, exp(g_t) a diagonal [dk] per head: g_t = -exp(A_log) * softplus(f_b(f_a(x_t)) +
dt_bias) through a low-rank forget gate, and its output normed times sigmoid(g_b(g_a(x_t)))
(q, k, v from their own projections and convs, as many heads each).

Mamba-2 (ModelConfig.linear_attention_kind "mamba2") is the same recurrence without the
delta rule's correction, k = B and q = C per group (unnormalised), v = x per head, the rate
beta_t = dt_t = softplus(x_t W_dt + dt_bias) and the decay g_t = -exp(A_log) dt_t:
S_t = exp(g_t) S_{t-1} + B_t (dt_t x_t)^T, o_t = S_t^T C_t + D x_t; its convs have biases.

The state a sequence carries from step to step is the conv's last kernel - 1 inputs and S.
The layer runs over a step's ragged batch (`Segments`: each sequence's span of rows and its
state row), so the same code serves the paged engine (many sequences, chunked prefill and
decodes together) and the contiguous reference (one sequence). Every span advances at once,
for as many iterations as the longest needs: in the chunked (WY) form of the rule, CHUNK
rows per iteration with matmuls and a triangular solve (transformers' and fla's prefill),
or, for a batch of decodes, one row (one iteration).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from configs.model_config import ModelConfig
from models.layers import rms_norm
from models.reductions import narrow_product, row_mean, row_sum

# Rows of a span the chunked form takes at once (transformers' and fla's chunk size).
CHUNK = 64


class Segments(NamedTuple):
    """A step's rows by sequence, for the recurrent layers."""

    seq_of: jax.Array  # [T] int32: the sequence each row belongs to (padding: any)
    offset: jax.Array  # [T] int32: the row's index within its sequence's span
    starts: jax.Array  # [S] int32: first row of each sequence's span
    lengths: jax.Array  # [S] int32: rows of each span (0: a padding sequence)
    slots: jax.Array  # [S] int32: each sequence's row in the state arrays
    fresh: jax.Array  # [S] bool: the span starts the sequence (its state starts at zero)
    # Static: rows of a span per iteration of the chunked form; None: always row by row
    # (batch-invariant: a sequence's state then never depends on how its tokens were
    # split into steps and chunks).
    chunk: int | None = CHUNK
    # Prefix caching (engine/state_cache.py): [S, K] int32 span-relative ends (1..length;
    # -1: none) after which a span's state is also copied to the state row beside it in
    # snap_row, and [S] int32 each span's first position modulo CHUNK (the chunked form's
    # chunks then end on multiples of CHUNK, where the snapshots are). None: no snapshots.
    snap_end: jax.Array | None = None
    snap_row: jax.Array | None = None
    phase: jax.Array | None = None
    # Speculative decoding (engine/state_rows.py): [S] bool spans that feed drafts, run row
    # by row beside the others' chunks, a snapshot after each row but the last (the state
    # of every length of the drafts a step may keep). None: no drafts.
    drafting: jax.Array | None = None


def segments_from_spans(
    cu_q_lens: jax.Array,  # [S+1] int32
    kv_lens: jax.Array,  # [S] int32: tokens the sequence holds after this step
    slots: jax.Array,  # [S] int32
    num_rows: int,
    chunk: int | None = CHUNK,
    snap_end: jax.Array | None = None,  # [S, K] (Segments.snap_end)
    snap_row: jax.Array | None = None,  # [S, K]
    drafting: jax.Array | None = None,  # [S] (Segments.drafting)
) -> Segments:
    """Segments of a ragged batch: sequence s owns rows cu_q_lens[s] .. cu_q_lens[s+1] - 1,
    and starts fresh where those are its first tokens."""
    starts, lengths = cu_q_lens[:-1], cu_q_lens[1:] - cu_q_lens[:-1]
    rows = jnp.arange(num_rows, dtype=jnp.int32)
    seq_of = jnp.searchsorted(cu_q_lens, rows, side="right").astype(jnp.int32) - 1
    seq_of = jnp.clip(seq_of, 0, starts.shape[0] - 1)
    fresh = kv_lens == lengths
    phase = None if snap_end is None else (kv_lens - lengths) % CHUNK
    return Segments(
        seq_of,
        rows - starts[seq_of],
        starts,
        lengths,
        slots,
        fresh,
        chunk,
        snap_end,
        snap_row,
        phase,
        drafting,
    )


def _causal_conv(
    x: jax.Array,
    w: jax.Array,
    prior: jax.Array,
    seg: Segments,
    bias: jax.Array | None = None,
    silu: bool = True,
):
    """Depthwise causal conv of each span, continuing its sequence's last inputs.

    x [T, ...C] this step's inputs; w [K, ...C] the taps (w[K-1] on the newest input);
    prior [S, K-1, ...C] each sequence's previous K-1 inputs, oldest first (zeros when
    fresh); bias [...C] (Mamba-2's) or None. Returns (silu(conv + bias) [T, ...C] (without
    `silu`: the conv alone, LFM2's), each sequence's last K-1 inputs [S, K-1, ...C])."""
    taps = w.shape[0]
    num_rows = x.shape[0]
    out = jnp.zeros(x.shape, jnp.float32)
    if bias is not None:
        out = out + bias.astype(jnp.float32)
    for m in range(taps):
        lag = taps - 1 - m
        shifted = jnp.concatenate([jnp.zeros((lag,) + x.shape[1:], x.dtype), x])[:num_rows]
        before = prior[seg.seq_of, jnp.clip(taps - 1 - lag + seg.offset, 0, taps - 2)]
        tap_in = jnp.where(
            (seg.offset >= lag).reshape((-1,) + (1,) * (x.ndim - 1)), shifted, before
        )
        out = out + tap_in.astype(jnp.float32) * w[m].astype(jnp.float32)
    # The new prior: the span's last K-1 inputs, reaching back into the old prior.
    out = jax.nn.silu(out) if silu else out
    return out.astype(x.dtype), _conv_window(x, prior, seg, seg.lengths[:, None])[:, 0]


def _conv_window(x: jax.Array, prior: jax.Array, seg: Segments, ends: jax.Array) -> jax.Array:
    """Each span's K-1 inputs before its span-relative row `ends` [S, M] (reaching back into
    the prior where the span is shorter): [S, M, K-1, ...C], oldest first."""
    taps = prior.shape[1] + 1
    rel = ends[..., None] - (taps - 1) + jnp.arange(taps - 1)  # [S, M, K-1]
    from_x = x[jnp.clip(seg.starts[:, None, None] + rel, 0, x.shape[0] - 1)]
    at = jnp.clip(taps - 1 + rel, 0, taps - 2)
    from_prior = prior[jnp.arange(prior.shape[0])[:, None, None], at]
    keep = (rel >= 0).reshape(rel.shape + (1,) * (x.ndim - 1))
    return jnp.where(keep, from_x, from_prior)


def _l2norm(x: jax.Array) -> jax.Array:
    """x / sqrt(sum x^2 + 1e-6) over the last axis, float32 (transformers' l2norm)."""
    x = x.astype(jnp.float32)
    return x * jax.lax.rsqrt(row_sum(x * x)[..., None] + 1e-6)


def _contract(s: jax.Array, x: jax.Array) -> jax.Array:
    """sum_k s[..., k, v] x[..., k]: [S, Hv, dk, dv] x [S, Hv, dk] -> [S, Hv, dv], in the
    batch-invariant step summed in an order fixed by dk alone (models/reductions.py: the
    row-by-row rule's results then never depend on the batch)."""
    return row_sum(jnp.swapaxes(s * x[..., None], -1, -2))


_HIGHEST = jax.lax.Precision.HIGHEST  # (float32 state math: never TF32 on a GPU)


def _mm(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.matmul(a, b, precision=_HIGHEST)


SUB_CHUNK = 16  # rows of a chunk whose pairs KDA's chunked form weighs one by one


def _decayed_products(a: jax.Array, k: jax.Array, cum: jax.Array) -> jax.Array:
    """M[i, j] = sum_d a[i, d] k[j, d] exp(cum[i, d] - cum[j, d]) for j <= i, else 0, over
    a chunk's rows: a, k, cum [..., C, dk], cum the running sum of log decays (never
    increasing). Within each SUB_CHUNK of rows the pairs are weighed one by one ([.., 16,
    16, dk]); a row i against the rows before its sub-chunk, whose first row is s, through
    one matmul of a[i] exp(cum[i] - cum[s - 1]) with k[j] exp(cum[s - 1] - cum[j]): both
    factors at most 1, so nothing overflows (fla's chunk_kda splits its chunks so too)."""
    *lead, c, dk = a.shape
    sub = SUB_CHUNK if c % SUB_CHUNK == 0 else c
    n = c // sub
    ab, kb, cb = (x.reshape(*lead, n, sub, dk) for x in (a, k, cum))
    tri = jnp.tril(jnp.ones((sub, sub), bool))[..., None]
    pair = jnp.where(tri, cb[..., :, None, :] - cb[..., None, :, :], 0)  # [.., n, sub, sub, dk]
    within = jnp.einsum(
        "...id,...jd,...ijd->...ij", ab, kb, jnp.where(tri, jnp.exp(pair), 0), precision=_HIGHEST
    )  # [.., n, sub, sub]
    # Each sub-chunk's boundary: the running sum at the row before it (the first: its own
    # first row, whose earlier rows are none).
    bound = jnp.concatenate([cum[..., :1, :], cum[..., sub - 1 : c - 1 : sub, :]], axis=-2)
    left = ab * jnp.exp(cb - bound[..., :, None, :])  # [.., n, sub, dk]
    before = jnp.arange(c)[None, :] < (jnp.arange(n) * sub)[:, None]  # [n, C]
    gap = jnp.where(before[:, :, None], bound[..., :, None, :] - cum[..., None, :, :], -jnp.inf)
    right = k[..., None, :, :] * jnp.exp(gap)  # [.., n, C, dk]: 0 from the sub-chunk on
    earlier = _mm(left, jnp.swapaxes(right, -1, -2))  # [.., n, sub, C]
    blocks = jnp.einsum("...Iij,IJ->...IiJj", within, jnp.eye(n, dtype=within.dtype))
    return (earlier + blocks.reshape(*lead, n, sub, c)).reshape(*lead, c, c)


def delta_rule(
    q: jax.Array,  # [T, Hv, dk] float32, normalised and scaled
    k: jax.Array,  # [T, Hv, dk] float32, normalised
    v: jax.Array,  # [T, Hv, dv] float32
    g: jax.Array,  # [T, Hv, G] float32 log decay: per head (G = 1) or per key channel (dk)
    beta: jax.Array,  # [T, Hv] float32
    state: jax.Array,  # [S, Hv, dk, dv] float32 each sequence's state before its span
    seg: Segments,
    chunk: int | None = CHUNK,
    store: jax.Array | None = None,  # [R, Hv, dk, dv] the layer's state rows (snapshots)
    delta: bool = True,  # False (Mamba-2): S_t = exp(g_t) S_{t-1} + k_t (beta_t v_t)^T
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """The gated delta rule over every span at once: `chunk` rows of each span per
    iteration in the chunked (WY) form, or (chunk None) one row per iteration. A decay per
    key channel (KDA) scales the state's rows one by one; the chunked form then weighs each
    pair of rows per channel (transformers' chunk_kimi_delta_attention: [C, C, dk] decays).
    Returns (o [T, Hv, dv] float32, the state after each span, `store` with the states
    after seg.snap_end's rows written at seg.snap_row's: None without snapshots)."""
    num_rows = q.shape[0]
    width = chunk or 1
    offsets = jnp.arange(width)
    snapping = store is not None and seg.snap_end is not None
    # Chunks start where a span's first position is, or (snapshots) on multiples of CHUNK:
    # the span's first `phase` rows of its first chunk are padding.
    phase = seg.phase if snapping and chunk else jnp.zeros_like(seg.lengths)

    def gather(j):
        """Rows j * width .. of every span: (rows [S, C], valid [S, C], the inputs there
        [S, Hv, C, ...] with padding rows zeroed (no decay, no write: beta 0))."""
        rel = j * width + offsets[None, :] - phase[:, None]
        valid = (rel >= 0) & (rel < seg.lengths[:, None])
        rows = jnp.clip(seg.starts[:, None] + rel, 0, num_rows - 1)

        def at(x):
            x = jnp.where(valid.reshape(valid.shape + (1,) * (x.ndim - 1)), x[rows], 0.0)
            return jnp.moveaxis(x, 2, 1)  # [S, Hv, C, ...]

        return rows, valid, at(q), at(k), at(v), at(g), at(beta)

    def snap(j, s, kept):
        """`kept` with the states of the spans whose row (j + 1) * width - phase - 1 is a
        snapshot's last written at its row."""
        if not snapping:
            return kept
        hit = seg.snap_end == ((j + 1) * width - phase)[:, None]  # [S, K]
        row = jnp.where(hit.any(-1), jnp.max(jnp.where(hit, seg.snap_row, -1), -1), -1)
        return kept.at[jnp.where(row >= 0, row, kept.shape[0])].set(s, mode="drop")

    def token_step(j, carry):
        s, out, kept = carry
        rows, valid, qj, kj, vj, gj, bj = gather(j)  # (C = 1)
        qj, kj, vj, gj, bj = qj[:, :, 0], kj[:, :, 0], vj[:, :, 0], gj[:, :, 0], bj[:, :, 0]
        s = s * jnp.exp(gj)[..., None]  # [S, Hv, G, 1]: per head or per key row
        remembered = _contract(s, kj) if delta else 0.0  # [S, Hv, dv]
        s = s + kj[..., None] * ((vj - remembered) * bj[..., None])[..., None, :]
        oj = _contract(s, qj)[:, None]  # [S, 1, Hv, dv]
        return s, out.at[jnp.where(valid, rows, num_rows)].set(oj, mode="drop"), snap(j, s, kept)

    tri = jnp.tril(jnp.ones((width, width), bool))  # [C, C] j <= i
    strict = jnp.tril(jnp.ones((width, width), bool), -1)

    def chunk_step(j, carry):
        # transformers' torch_chunk_gated_delta_rule for one chunk of every span: the
        # chunk's updates folded by the UT transform (I + L)^-1, L the strictly lower
        # beta k k^T with the decays between rows, then one read and one write of S.
        s, out, kept = carry
        rows, valid, qj, kj, vj, gj, bj = gather(j)
        cum = jnp.cumsum(gj, axis=-2)  # [S, Hv, C, G]
        kb = kj * bj[..., None]
        if cum.shape[-1] == 1:  # a decay per head: the pairs' decays factor out of the sums
            c = cum[..., 0]
            decay = jnp.where(tri, jnp.exp(jnp.where(tri, c[..., :, None] - c[..., None, :], 0)), 0)

            def weighed(a):  # [S, Hv, C, C]: a_i . k_j times the decay from j to i
                return _mm(a, jnp.swapaxes(kj, -1, -2)) * decay
        else:  # per key channel (KDA): each pair of rows weighed channel by channel

            def weighed(a):
                return _decayed_products(a, kj, cum)

        scores = weighed(qj)
        if delta:  # (Mamba-2 writes no correction: no pairs of keys to solve)
            system = jnp.where(strict, weighed(kb), 0) + jnp.eye(width, dtype=scores.dtype)
            solve = functools.partial(
                jax.scipy.linalg.solve_triangular, lower=True, unit_diagonal=True
            )
            u = solve(system, vj * bj[..., None])  # [S, Hv, C, dv]
            w = solve(system, kb * jnp.exp(cum))  # [S, Hv, C, dk]
            v_new = u - _mm(w, s)
        else:  # (Mamba-2: each row writes its own v, nothing to correct)
            v_new = vj * bj[..., None]
        oj = _mm(qj * jnp.exp(cum), s) + _mm(scores, v_new)  # [S, Hv, C, dv]
        last = cum[..., -1:, :]  # [S, Hv, 1, G]
        s = s * jnp.exp(jnp.swapaxes(last, -1, -2)) + _mm(
            jnp.swapaxes(kj * jnp.exp(last - cum), -1, -2), v_new
        )
        oj = jnp.moveaxis(oj, 1, 2)  # [S, C, Hv, dv]
        return s, out.at[jnp.where(valid, rows, num_rows)].set(oj, mode="drop"), snap(j, s, kept)

    steps = -(-jnp.max(seg.lengths + phase) // width)
    out = jnp.zeros(v.shape, jnp.float32)
    body = token_step if chunk is None else chunk_step
    kept = store if snapping else jnp.zeros((), jnp.float32)
    state, out, kept = jax.lax.fori_loop(0, steps, body, (state, out, kept))
    return out, state, kept if snapping else None


def _spans(seg: Segments, keep: jax.Array) -> Segments:
    """`seg` with only the spans `keep` [S] (the others empty, their snapshots none)."""
    return seg._replace(
        lengths=jnp.where(keep, seg.lengths, 0),
        snap_end=jnp.where(keep[:, None], seg.snap_end, -1),
    )


def _prior(arr: jax.Array, seg: Segments) -> jax.Array:
    """Each span's sequence's row of state array `arr` [rows, ...] ([S, ...]), zeros where
    the span starts its sequence."""
    fresh = seg.fresh.reshape((-1,) + (1,) * (arr.ndim - 1))
    return jnp.where(fresh, jnp.zeros((), arr.dtype), arr[seg.slots])


def _snap_conv(arr: jax.Array, x: jax.Array, before: jax.Array, seg: Segments) -> jax.Array:
    """Conv state array `arr` [rows, K-1, ...] with, at each snapshot's row
    (seg.snap_row), its span's inputs `x` before the snapshot's end (reaching back into
    `before`, the span's prior)."""
    rows = jnp.where(seg.snap_end > 0, seg.snap_row, arr.shape[0]).reshape(-1)
    window = _conv_window(x, before, seg, seg.snap_end).reshape((-1,) + arr.shape[1:])
    return arr.at[rows].set(window.astype(arr.dtype), mode="drop")


def _run_rule(rule, x: jax.Array, seg: Segments, rec: jax.Array):
    """`rule` (delta_rule with its inputs bound) over the step's spans: a batch of as many
    rows as sequences (decodes) a row at a time, any other in chunks of seg.chunk rows, the
    drafting spans row by row (a state after each). Returns (o, the state after each span,
    `rec` with the snapshots written: as given without them)."""
    by_rows = None if x.shape[0] == seg.starts.shape[0] else seg.chunk
    snapping = seg.snap_end is not None
    if seg.drafting is None or by_rows is None:
        o, final, kept = rule(seg, by_rows, rec if snapping else None)
        return o, final, kept if snapping else rec
    o, final, rec = rule(_spans(seg, ~seg.drafting), by_rows, rec)
    o_d, final_d, rec = rule(_spans(seg, seg.drafting), None, rec)
    return o + o_d, jnp.where(seg.drafting[:, None, None, None], final_d, final), rec


def gated_delta_net(
    p: dict, x: jax.Array, cfg: ModelConfig, state: tuple, seg: Segments
) -> tuple[jax.Array, tuple]:
    """One linear-attention layer, gated DeltaNet, KDA or Mamba-2
    (ModelConfig.linear_attention_kind):
    x [T, D] -> ([T, D], state). `state`: the layer's arrays (ModelConfig.linear_state_shapes,
    a leading state-row axis), read at seg.slots and written back there. A batch of as many
    rows as sequences (decodes: every bucket whose T is its S) runs the rule a row at a time;
    any other in chunks of seg.chunk rows."""
    conv_q, conv_k, conv_v, rec = state
    q_in, k_in, v_in = (jnp.einsum("td,dhk->thk", x, p[n]) for n in ("wq", "wk", "wv"))
    priors = [_prior(arr, seg) for arr in (conv_q, conv_k, conv_v)]
    q, new_q = _causal_conv(q_in, p["conv_q"], priors[0], seg, p.get("conv_q_bias"))
    k, new_k = _causal_conv(k_in, p["conv_k"], priors[1], seg, p.get("conv_k_bias"))
    v, new_v = _causal_conv(v_in, p["conv_v"], priors[2], seg, p.get("conv_v_bias"))
    decay_rate = jnp.exp(p["A_log"].astype(jnp.float32))  # [Hv]
    kda = cfg.linear_attention_kind == "kimi_delta"
    mamba = cfg.linear_attention_kind == "mamba2"
    group = cfg.linear_num_value_heads // cfg.linear_num_key_heads
    dt_bias = p["dt_bias"].astype(jnp.float32)
    if mamba:  # C and B per group as they are; dt both the write's rate and the decay's
        a = narrow_product(jnp.matmul, x, p["wa"]).astype(jnp.float32) + dt_bias
        beta = jnp.clip(jax.nn.softplus(a), *cfg.mamba_dt_limit)  # [T, Hv]
        g = (-decay_rate * beta)[..., None]  # [T, Hv, 1]
        qn = jnp.repeat(q.astype(jnp.float32), group, axis=1)
        kn = jnp.repeat(k.astype(jnp.float32), group, axis=1)
    else:
        beta = jax.nn.sigmoid(narrow_product(jnp.matmul, x, p["wb"]).astype(jnp.float32))
        if cfg.linear_beta_scale != 1.0:  # OLMo Hybrid: beta in [0, 2]
            beta = beta * cfg.linear_beta_scale
        if kda:  # a decay per key channel, from the low-rank (or full-rank) forget gate
            if "wf" in p:
                a = jnp.einsum("td,dhk->thk", x, p["wf"]).astype(jnp.float32)
            else:
                low = narrow_product(jnp.matmul, x, p["wf_a"])
                a = jnp.einsum("tr,rhk->thk", low, p["wf_b"]).astype(jnp.float32)
            a = a + dt_bias
            if cfg.kda_gate_bound:  # Ling 2.5's, bounded to [bound, 0]
                g = cfg.kda_gate_bound * jax.nn.sigmoid(decay_rate[:, None] * a)
            else:
                g = -decay_rate[:, None] * jax.nn.softplus(a)
        else:  # one per value head
            a = narrow_product(jnp.matmul, x, p["wa"]).astype(jnp.float32) + dt_bias
            g = (-decay_rate * jax.nn.softplus(a))[..., None]  # [T, Hv, 1]
        qn = jnp.repeat(_l2norm(q), group, axis=1) * cfg.linear_key_head_dim**-0.5
        kn = jnp.repeat(_l2norm(k), group, axis=1)
    rule = functools.partial(
        delta_rule, qn, kn, v.astype(jnp.float32), g, beta, _prior(rec, seg), delta=not mamba
    )
    o, final, rec = _run_rule(rule, x, seg, rec)
    snapping = seg.snap_end is not None
    if mamba:
        o = _mamba_output(p, o, v, x, cfg)
    elif kda:
        # KDA's gated norm (transformers' KimiLinearRMSNormGated): the rule's output in the
        # model dtype, normed and scaled in float32, times sigmoid(g_b(g_a(x))), then cast.
        if "wz" in p:  # (Ling 2.5: full-rank)
            gate = jnp.einsum("td,dhk->thk", x, p["wz"]).astype(jnp.float32)
        else:
            gate = jnp.einsum("tr,rhk->thk", x @ p["wg_a"], p["wg_b"]).astype(jnp.float32)
        of = o.astype(x.dtype).astype(jnp.float32)
        normed = of * jax.lax.rsqrt(row_mean(of * of)[..., None] + cfg.rms_norm_eps)
        o = (p["norm"].astype(jnp.float32) * normed * jax.nn.sigmoid(gate)).astype(x.dtype)
    else:
        # The gated norm (transformers' RMSNormGated): normed in float32, cast, times the
        # weight, times silu(z) in float32 (Lara Mini's: all in float32, one cast).
        z = jnp.einsum("td,dhk->thk", x, p["wz"]).astype(jnp.float32)  # [T, Hv, dv]
        eps = cfg.linear_norm_eps or cfg.rms_norm_eps
        if cfg.model_type == "lara_mini":
            o = rms_norm(o.astype(x.dtype).astype(jnp.float32), p["norm"], eps, True)
        else:
            o = rms_norm(o.astype(x.dtype), p["norm"], eps).astype(jnp.float32)
        o = (o * jax.nn.silu(z)).astype(x.dtype)
    out = jnp.einsum("thk,hkd->td", o, p["wo"])
    if snapping:  # the convs' inputs before each snapshot's end, at its row
        conv_q, conv_k, conv_v = (
            _snap_conv(arr, xp, before, seg)
            for arr, xp, before in zip(
                (conv_q, conv_k, conv_v), (q_in, k_in, v_in), priors, strict=True
            )
        )
    new_state = tuple(
        arr.at[seg.slots].set(new.astype(arr.dtype))
        for arr, new in zip(
            (conv_q, conv_k, conv_v, rec), (new_q, new_k, new_v, final), strict=True
        )
    )
    return out, new_state


def _mamba_output(p: dict, o: jax.Array, v: jax.Array, x: jax.Array, cfg: ModelConfig):
    """Mamba-2's output before its projection out: the scan plus D times the conv's x, times
    silu(z), RMS-normed per group of heads (transformers' NemotronHRMSNormGated with
    group_size = heads * head_dim / n_groups), all in float32, cast, then times the norm's
    weight. o, v [T, Hv, dv] -> [T, Hv, dv] in x's dtype."""
    y = o + p["D"].astype(jnp.float32)[:, None] * v.astype(jnp.float32)
    z = jnp.einsum("td,dhk->thk", x, p["wz"]).astype(jnp.float32)
    if not cfg.mamba_gated_norm:  # Falcon-H1: the gate alone (its scan's output, cast)
        return y.astype(x.dtype) * jax.nn.silu(z.astype(x.dtype))
    y = y * jax.nn.silu(z)
    grouped = y.reshape(y.shape[0], cfg.linear_num_key_heads, -1)  # [T, G, Hv/G * dv]
    normed = grouped * jax.lax.rsqrt(row_mean(grouped * grouped)[..., None] + cfg.rms_norm_eps)
    return p["norm"] * normed.reshape(y.shape).astype(x.dtype)


def short_conv(
    p: dict, x: jax.Array, cfg: ModelConfig, state: tuple, seg: Segments
) -> tuple[jax.Array, tuple]:
    """LFM2's gated short convolution (transformers' Lfm2ShortConv), x [T, D] -> ([T, D],
    state): B, C and x projections of each token, the causal depthwise conv
    (linear_conv_kernel taps, no activation) of B * x continuing its sequence's last
    inputs, times C, projected out. `state`: (those inputs [rows, K-1, D],), read at
    seg.slots and written back there (and, with snapshots, at seg.snap_row)."""
    (conv,) = state
    prior = _prior(conv, seg)
    bx = (x @ p["w_b"]) * (x @ p["w_x"])
    y, new = _causal_conv(bx, p["conv"], prior, seg, silu=False)
    out = ((x @ p["w_c"]) * y) @ p["wo"]
    if seg.snap_end is not None:  # the conv's inputs before each snapshot's end, at its row
        conv = _snap_conv(conv, bx, prior, seg)
    return out, (conv.at[seg.slots].set(new.astype(conv.dtype)),)


def mamba1(
    p: dict, x: jax.Array, cfg: ModelConfig, state: tuple, seg: Segments
) -> tuple[jax.Array, tuple]:
    """Mamba-1 as Jamba's layer (transformers' JambaMambaMixer; MambaMixer, FalconMambaMixer),
    x [T, D] -> ([T, D], state): the causal conv (bias, SiLU) of in_proj's x half, dt / B /
    C from x_proj each RMS-normed (ModelConfig.mamba1_norms),
    dt = softplus(dt_proj(dt) + bias), then per channel h and state channel n the selective
    scan S_t = exp(dt_t A) S_{t-1} + B_t dt_t x_t (A = -exp(A_log) [Hv, N]): delta_rule's
    Mamba form with each channel a value head of width 1 and B, C one shared key head (a
    decay per key channel); y = C_t . S_t + D x_t, times silu(gate), out_proj. `state`:
    (the conv's last inputs [rows, K-1, Hv], the scan's [rows, Hv, N, 1] float32)."""
    conv, rec = state
    xin = x @ p["wv"]  # [T, Hv]
    before = _prior(conv, seg)
    xc, new_conv = _causal_conv(xin, p["conv_v"], before, seg, p.get("conv_v_bias"))
    # dt, B and C RMS-normed with Jamba's weights, Falcon Mamba's without, or not at all.
    norms = cfg.mamba1_norms
    eps = cfg.linear_norm_eps or cfg.rms_norm_eps

    def normed(w: str, n: str) -> jax.Array:
        y = xc @ p[w]
        return y if norms == "none" else rms_norm(y, p[n] if norms == "weighted" else 1.0, eps)

    dt = normed("w_dt", "dt_norm") @ p["dt_proj"]  # [T, Hv]
    b, c = normed("w_b", "b_norm"), normed("w_c", "c_norm")
    dt = jax.nn.softplus(dt.astype(jnp.float32) + p["dt_bias"].astype(jnp.float32))
    a = -jnp.exp(p["A_log"].astype(jnp.float32))  # [Hv, N]
    shared = (x.shape[0], xin.shape[1], b.shape[1])  # (B and C: one key head for every h)
    qk = [jnp.broadcast_to(y.astype(jnp.float32)[:, None], shared) for y in (c, b)]
    # Row by row always: the chunked form's pairs of rows weighed per state channel would
    # take [64, 64, N] a channel ([S, 8192, 64, 64, 16] floats for Jamba's); one row's
    # update is [S, Hv, N] (and drafting spans want a state after each row anyway).
    snapping = seg.snap_end is not None
    v = xc.astype(jnp.float32)[..., None]  # [T, Hv, 1]
    o, final, kept = delta_rule(
        *qk, v, dt[..., None] * a, dt, _prior(rec, seg), seg, None, rec if snapping else None, False
    )
    y = o[..., 0] + p["D"].astype(jnp.float32) * xc.astype(jnp.float32)
    gate = (x @ p["wz"]).astype(jnp.float32)
    out = (y * jax.nn.silu(gate)).astype(x.dtype) @ p["wo"]
    if snapping:  # the conv's inputs before each snapshot's end, at its row
        conv, rec = _snap_conv(conv, xin, before, seg), kept
    new = (conv.at[seg.slots].set(new_conv.astype(conv.dtype)), rec.at[seg.slots].set(final))
    return out, new


def lightning_decays(cfg: ModelConfig, layer: int) -> np.ndarray:
    """Lightning attention's decay rate per head of decoder layer `layer` (transformers'
    MiniMaxLightningAttention.get_slope_rate, in float32): ALiBi's slopes 2^(-8 h / H),
    h = 1..H, times 1 - layer / (num_layers - 1) (+1e-5 twice), the state keeping
    exp(-rate) of itself each token."""
    heads = cfg.linear_num_value_heads
    base = np.float32(1 / (2 ** (8 / heads)))
    factor = np.float32(1 - layer / (cfg.num_layers - 1 + 1e-5) + 1e-5)
    return base ** np.arange(1, heads + 1, dtype=np.float32) * factor


def lightning(
    p: dict, x: jax.Array, cfg: ModelConfig, state: tuple, seg: Segments, layer: int
) -> tuple[jax.Array, tuple]:
    """MiniMax-01's lightning attention (transformers' MiniMaxLightningAttention), x [T, D]
    -> ([T, D], state): q, k, v = silu of one projection per head (no conv, no
    normalisation, no scale), S_t = exp(-rate) S_{t-1} + k_t v_t^T with a fixed rate per
    head (`lightning_decays`), o_t = S_t^T q_t: delta_rule's Mamba form with beta 1; o in
    the model dtype RMS-normed over all heads at once (eps 1e-6, transformers' default
    there), times sigmoid(x @ wz), projected out. `state`: ([rows, H, dk, dv] float32,)."""
    (rec,) = state
    q, k, v = (
        jax.nn.silu(jnp.einsum("td,dhk->thk", x, p[n])).astype(jnp.float32)
        for n in ("wq", "wk", "wv")
    )
    rates = jnp.asarray(lightning_decays(cfg, layer))
    g = jnp.broadcast_to(-rates[None, :, None], (x.shape[0], rates.shape[0], 1))
    beta = jnp.ones(g.shape[:2], jnp.float32)
    rule = functools.partial(delta_rule, q, k, v, g, beta, _prior(rec, seg), delta=False)
    o, final, rec = _run_rule(rule, x, seg, rec)
    flat = o.astype(x.dtype).reshape(x.shape[0], -1)  # [T, H * dv]
    normed = rms_norm(flat, p["norm"].reshape(-1), 1e-6).reshape(o.shape)
    gate = jax.nn.sigmoid(jnp.einsum("td,dhk->thk", x, p["wz"]))
    out = jnp.einsum("thk,hkd->td", normed * gate, p["wo"])
    return out, (rec.at[seg.slots].set(final),)


def zero_state(cfg: ModelConfig, rows: int) -> tuple:
    """A linear-attention layer's state arrays for `rows` sequences, zeroed: the convs'
    inputs in the model dtype, a recurrence's state (all but a short conv) in float32."""
    shapes = cfg.linear_state_shapes()
    dt = jnp.dtype(cfg.dtype)
    if cfg.linear_attention_kind == "short_conv":
        return tuple(jnp.zeros((rows, *s), dt) for s in shapes)
    *conv, rec = shapes
    return (*(jnp.zeros((rows, *s), dt) for s in conv), jnp.zeros((rows, *rec), jnp.float32))
