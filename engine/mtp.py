"""Speculative decoding with the model's own multi-token-prediction (MTP) module.

DeepSeek-V3 and V3.2, GLM-4.5 and GLM-4.7-Flash checkpoints store, after their decoder
layers, an MTP module trained to predict the token after next: one more decoder layer over
`eh_proj([enorm(embed(t[p + 1])); hnorm(h[p])])`, h the model's last hidden state (after
its final norm) at position p, then `norm` and the model's lm_head. vLLM's
`speculative_config={"method": "mtp", "num_speculative_tokens": k}` (or "deepseek_mtp").

Every step runs it over all of its rows, as one more layer (ModelConfig.mtp_drafts: the
params' "mtp" subtree, its own KV layer at index num_layers in the same pages), with the
token that follows each row: the next prompt token where the host knows it
(StepBatch.mtp_next), else the token the step itself draws there (its sample, or a draft
row's draw). For each sequence the row whose next token is known last (the sampled row, or
where the step turned a draft down) gives the first draft; each further draft runs the
layer once more on one row per sequence, over its previous output (after `norm`) and the
draft before: the one layer reused k times, chained as transformers' MtpModel chains its
layers. The drafts (-1: none) and the token count they follow come back with the step; the
next step feeds them after the new token, and engine/speculative.py keeps those the model
agrees with. So the tokens are those decoding without drafts gives, greedy or sampled.

The MTP KV written at rows whose drafts were turned down lies past the sequence's length
and is written again before anything reads it, as the model's own. A chain stops where the
sequence's pages end (StepBatch.mtp_room; no page is taken for it). The MTP layer runs
without LoRA adapters, and a prefix-cache hit takes the MTP KV its pages hold, made with
the next token of the request that wrote them: drafts only, the tokens never change. With
EPLB (engine/eplb.py) its MoE layer is the placement's last: its expert copies (over all of
its passes in a step) are counted and its experts placed and moved as the decoder layers'.
Under quantization="fp8" | "int4" its layer is held quantized as the decoder layers are
(models/tree.decoder_layers). Not from orbax checkpoints (they store no MTP module).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from engine import paged_attention as pa
from models.layers import embed, rms_norm
from models.orbax_io import is_orbax_dir

METHODS = ("mtp", "deepseek_mtp")


@dataclasses.dataclass
class MtpProposer:
    """The drafts of each sequence the last step sampled for, from the step itself."""

    num_speculative_tokens: int
    # request id -> (the token count the drafts follow, drafts, their MTP logprobs)
    _drafts: dict = dataclasses.field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        from engine.speculative import MAX_DRAFTS  # (engine/speculative.py imports this one)

        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DRAFTS:
            raise ValueError(
                f"speculative_config.num_speculative_tokens={k!r}: must be in [1, {MAX_DRAFTS}]"
            )

    @classmethod
    def from_config(cls, config: dict) -> MtpProposer:
        """vLLM's {"method": "mtp", "num_speculative_tokens": k}."""
        unknown = sorted(set(config) - {"method", "num_speculative_tokens"})
        if unknown:
            raise ValueError(
                f"speculative_config: unknown keys {unknown} for method {config['method']!r}; "
                "known: ['method', 'num_speculative_tokens']"
            )
        if "num_speculative_tokens" not in config:
            raise ValueError("speculative_config.num_speculative_tokens: missing")
        return cls(config["num_speculative_tokens"])

    def drafts(self, seq, cap: int) -> tuple[int, ...]:
        """`seq`'s drafts from the last step, if they follow its tokens now (at most `cap`)."""
        got = self._drafts.get(seq.request_id)
        if got is None or got[0] != seq.num_tokens:
            return ()
        return got[1][:cap]

    def last(self, request_id: str):
        """(token count, drafts, logprobs) the last step gave `request_id`, or None."""
        return self._drafts.get(request_id)

    def record(self, items, out) -> None:
        """Keep the drafts a step (StepOutput) gave the items that sampled; older ones go."""
        drafts, logprobs, counts = jax.device_get(
            (out.mtp_drafts, out.mtp_logprobs, out.mtp_num_tokens)
        )
        drafts, logprobs, counts = drafts.tolist(), logprobs.tolist(), counts.tolist()
        kept = {}
        for it, row, lps, count in zip(items, drafts, logprobs, counts, strict=False):
            if it.sample:
                n = row.index(-1) if -1 in row else len(row)
                kept[it.request_id] = (count, tuple(row[:n]), tuple(lps[:n]))
        self._drafts = kept


def with_mtp(cfg, proposer, model: str):
    """`cfg` with the MTP module in it when `proposer` drafts with it."""
    if not isinstance(proposer, MtpProposer):
        return cfg
    if is_orbax_dir(model):
        raise ValueError(
            f"speculative_config.method='mtp': {model!r} is an orbax checkpoint, which holds no "
            "MTP module; serve the Hugging Face checkpoint"
        )
    return cfg.replace(mtp_drafts=proposer.num_speculative_tokens)


def fill_batch(items, batch, page_size: int):
    """`batch` with StepBatch.mtp_next (each row's next token where known, else -1) and
    mtp_room (each sequence's positions its pages hold) for `items` (runner.pack's): whole
    arrays, one pass over the items gathering their fields (as pack)."""
    n = len(items)
    cu = batch.cu_q_lens[: n + 1]
    num_tokens = int(cu[-1])
    last_next, decided, pages = [], [], []
    for it in items:
        last_next.append(-1 if it.sample else it.next_token)
        decided.append(bool(it.num_drafts) or it.feed_index >= 0)  # drafts may be refused
        pages.append(len(it.page_ids))
    nxt = np.full(batch.token_ids.shape[0], -1, np.int32)
    nxt[: num_tokens - 1] = batch.token_ids[1:num_tokens]
    nxt[cu[1:] - 1] = last_next  # a span's last row: the chunk's next prompt token, or drawn
    nxt[:num_tokens][np.repeat(np.asarray(decided, bool), np.diff(cu))] = -1  # the step draws
    room = np.zeros(batch.kv_lens.shape[0], np.int32)
    room[:n] = np.asarray(pages, np.int32) * page_size
    return batch._replace(mtp_next=nxt, mtp_room=room)


def _input(params: dict, cfg, hidden: jax.Array, tokens: jax.Array) -> jax.Array:
    """eh_proj([enorm(embed(tokens)); hnorm(hidden)]): [N, D]."""
    p, eps, f32 = params["mtp"], cfg.rms_norm_eps, cfg.norm_scale_in_float32
    e = rms_norm(embed(params, jnp.maximum(tokens, 0)), p["enorm"], eps, f32)
    h = rms_norm(hidden.astype(e.dtype), p["hnorm"], eps, f32)
    return jnp.concatenate([e, h], axis=-1) @ p["eh_proj"]


def _head(params: dict, cfg, y: jax.Array):
    """The layer's output after `norm` (the next draft's hidden), its argmax and logprob."""
    z = rms_norm(y, params["mtp"]["norm"], cfg.rms_norm_eps, cfg.norm_scale_in_float32)
    head = params["embed"].T if cfg.tie_word_embeddings else params["lm_head"]
    logp = jax.nn.log_softmax((z @ head).astype(jnp.float32), axis=-1)
    token = jnp.argmax(logp, axis=-1).astype(jnp.int32)
    return z, token, jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]


def draft(params, cfg, batch, hidden, kv_i, sampled, drawn, run_layer, attend, attend_for):
    """The MTP pass of a step (module docstring): (its KV layer, drafts [S, k] (-1: none),
    their logprobs [S, k], the token count they follow [S], the expert copies its passes
    routed (None without experts)).

    `hidden` [T, D]: the model's last hidden state (before the final norm); `sampled` [S]:
    the step's tokens; `drawn` [R]: the draws at batch.score_index (None without drafts);
    `run_layer(x, positions, kv_i, attend, valid)` runs the MTP decoder layer and returns
    (its output, kv_i, the expert copies it routed or None) (`valid`: the rows that are not
    padding, whose expert copies count); `attend` is the step's attention,
    `attend_for(meta, slots)` one over other rows.

    The chained passes run as a loop over one traced layer (lax.scan), not k - 1 copies of
    it: the same arithmetic, row by row, at a fraction of the compile time (an MTP layer is
    a whole decoder layer, MoE included)."""
    if batch.mtp_next is None:
        raise ValueError("StepBatch.mtp_next: needed by a model drafting with its MTP module")
    t, s = batch.token_ids.shape[0], batch.kv_lens.shape[0]
    rows = jnp.arange(t, dtype=jnp.int32)
    live = batch.kv_lens > 0
    got = jnp.zeros(t, jnp.int32)
    if drawn is not None:
        got = got.at[batch.score_index].set(drawn)
    got = got.at[jnp.where(live, batch.sample_index, t)].set(sampled, mode="drop")
    nxt = jnp.where(batch.mtp_next >= 0, batch.mtp_next, got)
    last = batch.sample_index
    if drawn is not None:  # a sequence's first draft its draw turned down ends what is known
        owner = jnp.searchsorted(batch.cu_q_lens, rows, side="right") - 1
        turned_down = (
            (batch.mtp_next < 0)
            & (batch.score_targets >= 0)
            & (got != batch.score_targets)
            & (rows < batch.cu_q_lens[-1])
        )
        first = jax.ops.segment_min(
            jnp.where(turned_down, rows, t), jnp.clip(owner, 0, s - 1), num_segments=s
        )
        last = jnp.where(first < t, first, last)
    final = rms_norm(hidden, params["final_norm"], cfg.rms_norm_eps, cfg.norm_scale_in_float32)
    valid = rows < batch.cu_q_lens[-1]
    y, kv_i, load = run_layer(_input(params, cfg, final, nxt), batch.positions, kv_i, attend, valid)
    z, token, logprob = _head(params, cfg, y[last])
    count = jnp.where(live, batch.positions[last] + 2, 0)
    token = jnp.where(live, token, -1)
    if cfg.mtp_drafts == 1:
        return kv_i, token[:, None], logprob[:, None], count, load
    seqs = jnp.arange(s, dtype=jnp.int32)
    page_size = kv_i[0].shape[1]

    def chained(carry, _):
        """One more pass: each sequence's next draft from its previous one."""
        kv_i, load, z, token, pos, ok = carry
        pos = pos + 1
        ok = ok & (pos < batch.mtp_room)
        at = jnp.where(ok, pos, 0)
        page = batch.page_table[seqs, at // page_size]
        slots = jnp.where(ok, page * page_size + at % page_size, -1)
        meta = pa.build_metadata(jnp.arange(s + 1, dtype=jnp.int32), at, at + 1, batch.page_table)
        x = _input(params, cfg, z, token)
        y, kv_i, more = run_layer(x, at, kv_i, attend_for(meta, slots), ok)
        z, token, logprob = _head(params, cfg, y)
        token = jnp.where(ok, token, -1)
        load = None if load is None else load + more
        return (kv_i, load, z, token, pos, ok), (token, logprob)

    pos = batch.positions[last]
    (kv_i, load, *_), (more_tokens, more_logprobs) = jax.lax.scan(
        chained, (kv_i, load, z, token, pos, live), length=cfg.mtp_drafts - 1
    )
    tokens = jnp.concatenate([token[:, None], more_tokens.T], axis=1)
    logprobs = jnp.concatenate([logprob[:, None], more_logprobs.T], axis=1)
    return kv_i, tokens, logprobs, count, load
