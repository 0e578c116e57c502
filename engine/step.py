"""The one jitted device step: write KV, attend over pages, MoE/MLP, sample (and, with the
model's MTP module, its drafts for the next step: engine/mtp.py).

`step(params, kv, batch)` is a pure function: everything it reads arrives as an argument,
the KV pages are donated and returned, and the static part (model config, attention
implementation, KV block size) is frozen and hashable so each shape bucket compiles once.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from configs.model_config import ModelConfig
from engine import kv_quant, mla_expanded, mtp, penalties, sparse_mla
from engine import paged_attention as pa
from engine.attention_ops import get_attention_ops
from engine.batch_invariant import NARROW_ROWS
from engine.logit_bias import apply_allowed_mask, apply_token_lists
from engine.penalties import PenaltyState
from engine.sampler import sample, token_logprobs
from engine.sampler import top_logprobs as top_logprobs_of
from models import deepseek_v4, linear_attention
from models.attention import mla_absorb_q, mla_latent_to_v
from models.moe import expert_load, routed_for
from models.reductions import narrow_product_rows, native_row_sums
from models.transformer import decoder_layer, final_logits, forward_hidden
from sharding import eplb
from sharding.expert_parallel import BOUNDED_MIN_ROWS, make_routed_experts_ep
from sharding.mesh import mesh_config_of
from sharding.rules import activation_constrainer, kv_shardings, replicated


class StepBatch(NamedTuple):
    """One step's ragged batch, padded to a bucket (T tokens, S sequences, P pages)."""

    token_ids: jax.Array  # [T] int32
    positions: jax.Array  # [T] int32, absolute position of each token
    slot_mapping: jax.Array  # [T] int32, page * page_size + offset; -1 = padding
    cu_q_lens: jax.Array  # [S+1] int32, token span of each sequence
    kv_lens: jax.Array  # [S] int32, KV length after this step's tokens; 0 = padding
    page_table: jax.Array  # [S, P] int32
    sample_index: jax.Array  # [S] int32, token row whose logits are sampled
    temperature: jax.Array  # [S] float32
    top_p: jax.Array  # [S] float32
    top_k: jax.Array  # [S] int32, 0 = off
    seed: jax.Array  # [S] uint32
    sample_step: jax.Array  # [S] int32, tokens the request generated before this step
    # [T] int32: the next prompt token at each row whose log-probability is wanted (prompt
    # logprobs / scoring); -1 = none. Read only by the with_scores variant of the step.
    score_targets: jax.Array | None = None
    # Async scheduling: [T] int32, -1 = the row's token is token_ids[t], else the token the
    # previous step sampled for its sequence feed_index[t], read from `prev_tokens`, that
    # step's StepOutput.feed_tokens ([runner.Buckets.feed_rows] int32, a fixed size).
    feed_index: jax.Array | None = None
    prev_tokens: jax.Array | None = None
    min_p: jax.Array | None = None  # [S] float32, 0 = off (None: off for every row)
    # Penalties (engine/penalties.py), read only when the step gets a penalty_state: each
    # row's state slot ([S] int32, -1 = not penalized), its prompt length ([S] int32: fed
    # positions below it are prompt tokens) and its (repetition, presence, frequency)
    # penalties ([S, 3] float32).
    penalty_slot: jax.Array | None = None
    penalty_prompt_len: jax.Array | None = None
    penalty_params: jax.Array | None = None
    # logit_bias / allowed_token_ids / min_tokens (engine/logit_bias.py): [S, B] int32 token
    # ids (-1 = padding), [S, B] float32 values added to their logits (-inf bans), [S] bool
    # restrict-to-listed; None when no request in the step lists tokens.
    listed_ids: jax.Array | None = None
    listed_values: jax.Array | None = None
    listed_restrict: jax.Array | None = None
    # Structured outputs (engine/structured.py): [S, ceil(V / 32)] int32, bit t % 32 of word
    # t // 32 set where token t may be sampled; None when no row in the step is constrained.
    allowed_mask: jax.Array | None = None
    # Hybrid models (ModelConfig.hybrid_window): the windowed layers' own page table [S, P]
    # and slots [T] (their KV pool is separate); None: every layer uses page_table.
    window_page_table: jax.Array | None = None
    window_slot_mapping: jax.Array | None = None
    # [R] int32: the with_scores step scores only these rows (speculative drafts: a few rows
    # of a step that may hold a long prefill chunk) and returns [R]-shaped scores; None:
    # every row (prompt logprobs).
    score_index: jax.Array | None = None
    # [T] int32: each row's LoRA adapter slot (engine/lora.py; 0 = none), read with the
    # stacked adapters in params["lora"]; None without LoRA.
    lora_slots: jax.Array | None = None
    # MTP drafting (engine/mtp.py; ModelConfig.mtp_drafts): [T] int32 the token after each
    # row where the host knows it (-1: the step's own draw) and [S] int32 the positions each
    # sequence's pages hold.
    mtp_next: jax.Array | None = None
    mtp_room: jax.Array | None = None
    # Linear-attention models (ModelConfig.linear_attention_layers): [S] int32 each
    # sequence's row of the recurrent state (Sequence.state_slot); None for others.
    state_slots: jax.Array | None = None
    # Their prefix caching (engine/state_cache.py): [S, K] int32 span-relative ends after
    # which each sequence's state is also written to the rows beside them (-1: none;
    # linear_attention.Segments.snap_end / snap_row); None without.
    state_snap_end: jax.Array | None = None
    state_snap_row: jax.Array | None = None
    # [S] bool: the spans feeding speculative drafts (Segments.drafting); None without.
    state_drafting: jax.Array | None = None


class StepOutput(NamedTuple):
    tokens: jax.Array  # [S] int32
    logprobs: jax.Array  # [S] float32
    # [L_moe, E] int32 token copies each expert received this step, per MoE layer in layer
    # order (padding tokens not counted); [0, 0] for dense models.
    expert_load: jax.Array | None = None
    # [T] float32 log p(score_targets[t] | tokens up to t); only from the with_scores step.
    score_logprobs: jax.Array | None = None
    # [feed_rows] int32: `tokens` padded to batch.prev_tokens' size, the next step's prev_tokens.
    feed_tokens: jax.Array | None = None
    # [S, K] int32 / float32: each row's K most likely tokens and their logprobs (unscaled
    # distribution, most likely first); only from a step made with top_logprobs=K.
    top_ids: jax.Array | None = None
    top_logprobs: jax.Array | None = None
    # The penalty state after this step (the next step's penalty_state); None without one.
    penalty_state: PenaltyState | None = None
    # [T, K] int32 / float32: every row's K most likely next tokens and their logprobs
    # (prompt_logprobs=k); only from a with_scores step made with score_top_logprobs=K.
    score_top_ids: jax.Array | None = None
    score_top_logprobs: jax.Array | None = None
    # [R] int32 / float32: with batch.score_index (speculative drafts), the token each
    # scored row draws as its request's next one (its sampling settings, at the generation
    # index of that row) and its logprob; engine/speculative.py keeps a draft it equals.
    draft_tokens: jax.Array | None = None
    draft_logprobs: jax.Array | None = None
    # MTP drafting (engine/mtp.py): [S, k] int32 each sequence's next drafts (-1: none),
    # [S, k] float32 their MTP logprobs, [S] int32 the token count they follow.
    mtp_drafts: jax.Array | None = None
    mtp_logprobs: jax.Array | None = None
    mtp_num_tokens: jax.Array | None = None


def _mla_dims(cfg: ModelConfig) -> tuple[int, int, int, int]:
    return cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim


def mla_expansion_may_pay(ops, cfg: ModelConfig, num_tokens: int, num_seqs: int) -> bool:
    """Static, per step bucket: whether any span could be expanded
    (mla_expanded.mla_expansion_may_pay)."""
    return ops.mla_expanded is not None and mla_expanded.mla_expansion_may_pay(
        num_tokens, num_seqs, *_mla_dims(cfg)
    )


def mla_split_for(ops, cfg: ModelConfig, meta, num_tokens: int, num_seqs: int):
    """The step's mla_expanded.MlaSplit, or None where no span can be expanded (nothing is
    built)."""
    if not mla_expansion_may_pay(ops, cfg, num_tokens, num_seqs):
        return None
    return mla_expanded.mla_split(meta, *_mla_dims(cfg))


def mla_attention(
    ops, p_attn: dict, cfg: ModelConfig, x, latent_pages, meta, kv_block_pages: int, split=None
) -> jax.Array:  # [T, H, Dv]
    """One MLA layer's attention over the written latent pages, before the output projection.

    Absorbed (DeepSeek-V2 sec. 2.1.2): W_UK folds into the query, attention runs against the
    cached latents and W_UV is applied afterwards. With a `split` (mla_split_for), its
    expanded sequences attend in expanded form instead and the rest absorbed.
    """
    q_lat = mla_absorb_q(p_attn, x.q_nope, cfg)
    if split is None:
        o_lat = ops.mla(q_lat, x.q_pe, latent_pages, meta, x.scale, kv_block_pages)
        return mla_latent_to_v(p_attn, o_lat, cfg)
    o_exp = ops.mla_expanded(
        x.q_nope, x.q_pe, latent_pages, p_attn["wkv_b"], split.expanded, x.scale, kv_block_pages
    )
    o_lat = ops.mla(q_lat, x.q_pe, latent_pages, split.absorbed, x.scale, kv_block_pages)
    o = mla_latent_to_v(p_attn, o_lat, cfg)
    return jnp.where(split.rows[:, None, None], o_exp, o)


def step_impl(
    params: dict,
    kv: list,
    batch: StepBatch,
    penalty_state: PenaltyState | None = None,
    *,
    cfg: ModelConfig,
    **static,
):
    """Run one engine step over the paged cache; returns the new cache and sampled tokens.

    With a `penalty_state` (donated like the cache) the step first adds its fed tokens to
    the counts, samples from penalized logits and returns the new state in its output;
    logprobs (and top logprobs) stay those of the raw logits, as vLLM reports by default.

    With a `mesh`, params and KV arrive placed by sharding/rules.py, the residual stream is
    pinned per layer and MoE layers run the expert-parallel all-to-all. `static`: the
    keyword arguments of `_step_body`.

    A float32 model's matmuls run in full float32, as Hugging Face's (torch's default)
    do: XLA:GPU's default for a float32 dot is TF32, ~1e-3 relative error, which moved
    logprobs 0.2 from HF's on an H200 (fp8-cache test, docs/benchmarks.md). No effect on
    XLA:CPU, nor on bfloat16 models (their float32 router asks for it itself).

    Row sums (norms, softmaxes, log-softmax, top-p mass) are spelled out in a fixed order
    only in the batch-invariant step; otherwise they are XLA's reduce (models/reductions.py),
    whose order may follow the batch's shape, as a matmul's does. The batch-invariant step
    also computes its narrow products (fewer than 16 output columns: routers, gates) over
    at least NARROW_ROWS rows a shard (engine/batch_invariant.py).
    """
    full_f32 = jnp.dtype(cfg.dtype) == jnp.float32
    invariant = static.get("batch_invariant", False)
    mesh = static.get("mesh")
    layout = None if mesh is None else mesh_config_of(mesh)
    shards = 1 if layout is None else layout.dp * layout.ep
    narrow_rows = NARROW_ROWS * shards if invariant else 0
    with (
        jax.default_matmul_precision("highest" if full_f32 else None),
        native_row_sums(not invariant),
        narrow_product_rows(narrow_rows),
    ):
        return _step_body(params, kv, batch, penalty_state, cfg=cfg, **static)


def _step_body(
    params: dict,
    kv: list,
    batch: StepBatch,
    penalty_state: PenaltyState | None,
    *,
    cfg: ModelConfig,
    kv_block_pages: int,
    attention_impl: str = "xla",
    mesh: Mesh | None = None,
    batch_invariant: bool = False,
    with_scores: bool = False,
    top_logprobs: int = 0,
    sampling: bool = True,
    score_top_logprobs: int = 0,
) -> tuple[list, StepOutput]:
    meta = pa.build_metadata(
        batch.cu_q_lens,
        batch.positions,
        batch.kv_lens,
        batch.page_table,
        batch.token_ids.shape[0],
    )
    slots = batch.slot_mapping
    window_meta, window_slots = None, batch.window_slot_mapping
    if batch.window_page_table is not None:
        window_meta = pa.with_page_table(meta, batch.window_page_table)
    ops = get_attention_ops(attention_impl, batch_invariant)
    # Which MLA sequences attend expanded: decided once for the step, used by every layer.
    # DeepSeek-V3.2: with a page table no wider than the indexer's top-k, every query keeps
    # every key it sees, so its sparse attention is dense MLA (and takes that path).
    sparse = cfg.is_mla and sparse_mla.selects(
        cfg, meta.page_table.shape[1] * kv[cfg.first_attention_layer][0].shape[1]
    )
    split = None
    if cfg.is_mla and not sparse:
        split = mla_split_for(ops, cfg, meta, batch.token_ids.shape[0], batch.kv_lens.shape[0])

    # ALiBi's slopes (BLOOM, MPT, Falcon-RW), passed only where a model has them.
    alibi = {"alibi": jnp.asarray(cfg.alibi_slopes, jnp.float32)} if cfg.alibi_slopes else {}

    def attend_for(meta, slots, split=None):
        """Attention over the pages for the rows `meta` and `slots` describe."""

        def attend_gqa(i, p_attn, kv_i, x):
            k_pages, v_pages = kv_i
            window = cfg.attention_window(i)
            layer_meta, layer_slots = meta, slots
            if window is not None and window_meta is not None:  # the windowed layers' pool
                layer_meta, layer_slots = window_meta, batch.window_slot_mapping
            if x.k is not None:  # (None: it reads an earlier layer's K and V, written)
                k_pages = ops.write_kv(k_pages, x.k, layer_slots)
                v_pages = ops.write_kv(v_pages, x.v, layer_slots)
            sinks = p_attn.get("sinks")  # gpt-oss: per-head logits that join every softmax
            layer_ops, chunked = ops, {}
            if cfg.layer_chunked(i):  # Llama 4's chunks: the XLA path (no kernel has them)
                layer_ops, chunked = get_attention_ops("xla", batch_invariant), {"chunked": True}
            o = layer_ops.gqa(
                x.q,
                k_pages,
                v_pages,
                layer_meta,
                x.scale,
                kv_block_pages,
                window=window,
                sinks=sinks,
                softcap=cfg.attn_logit_softcapping,
                **chunked,
                **alibi,
            )
            return o, (k_pages, v_pages)

        # The latest DSA indexer's choice, for the shared-indexer layers after it (layers
        # are traced in order, so this holds the nearest earlier full layer's).
        chosen = {}

        def attend_mla(i, p_attn, kv_i, x):
            latent_pages, own = kv_i[0], ()
            if x.c_kv is not None:  # (None: it reads an earlier layer's latent, written)
                row = jnp.concatenate([x.c_kv, x.k_pe], axis=-1)  # cast (or quantized) there
                latent_pages = ops.write_kv(latent_pages, row, slots)
            if x.idx_k is not None:  # its own indexer's keys, cached for longer readers too
                own = (ops.write_kv(kv_i[1], x.idx_k, slots),)
            if sparse:
                if own:
                    chosen["keys"] = sparse_mla.select(cfg, x, own[0], meta, batch_invariant)
                o = sparse_mla.attention(
                    p_attn, cfg, x, latent_pages, chosen["keys"], meta, batch_invariant
                )
            else:
                o = mla_attention(ops, p_attn, cfg, x, latent_pages, meta, kv_block_pages, split)
            return o, (latent_pages, *own)

        def attend_v4(i, p_attn, kv_i, x):  # (the XLA path: models/deepseek_v4.py)
            tokens = (meta, slots) if window_meta is None else (window_meta, window_slots)
            return deepseek_v4.attention(p_attn, cfg, i, x, kv_i, meta, *tokens, batch_invariant)

        if cfg.is_dsv4:
            return attend_v4
        return attend_mla if cfg.is_mla else attend_gqa

    attend = attend_for(meta, slots, split)
    # Expert-parallel load balancing (engine/eplb.py): the stacks hold E_p physical slots.
    num_physical = eplb.num_physical(params)
    if mesh is None:
        routed_impl = routed_for(cfg)
    else:  # batch-invariant: the worst-case exchange only (no shape follows the batch)
        routed_impl = make_routed_experts_ep(
            cfg, mesh, None if batch_invariant else BOUNDED_MIN_ROWS, num_physical
        )
    valid = jnp.arange(batch.token_ids.shape[0]) < batch.cu_q_lens[-1]  # [T]
    # Filled while this call traces forward_hidden, one [E] per MoE layer (with EPLB
    # [E + E_p]: the copies per physical slot after those per logical expert).
    loads = []

    def counted(sink: list, positions, rows_valid):
        """Routed experts over rows at `positions`, their copies counted into `sink`."""

        def routed(p_moe, x, weights, experts, **kw):  # (kw: the layer's clip limit)
            tallied = experts
            if cfg.zero_experts:  # (LongCat-Flash's zero-computation copies: not counted)
                tallied = jnp.where(weights > 0, experts, cfg.num_experts)
            load = expert_load(tallied, rows_valid, cfg.num_experts)
            if num_physical:
                experts = eplb.to_physical(p_moe, experts, positions)
                load = jnp.concatenate([load, expert_load(experts, rows_valid, num_physical)])
            sink.append(load)
            if mesh is None:
                # Padding rows (discarded) go to row 0's experts at weight 0: they add no
                # expert to those the real tokens read (a one-token decode padded to
                # runner.TOKEN_FLOOR rows reads its own k experts' weights alone). Not on
                # a mesh: row 0 lives on one dp shard, and fetching it for the others
                # would add a collective to every MoE layer.
                experts = jnp.where(rows_valid[:, None], experts, experts[:1])
                weights = jnp.where(rows_valid[:, None], weights, jnp.zeros_like(weights))
            return routed_impl(p_moe, x, weights, experts, **kw)

        return routed

    routed = counted(loads, batch.positions, valid)

    constrain = None if mesh is None else activation_constrainer(cfg, mesh)
    token_ids = batch.token_ids
    if batch.feed_index is not None:
        fed = batch.prev_tokens[jnp.maximum(batch.feed_index, 0)]
        token_ids = jnp.where(batch.feed_index >= 0, fed, token_ids)
    kv, kv_mtp = kv[: cfg.num_layers], kv[cfg.num_layers :]
    segments = None
    if cfg.linear_attention_layers:
        segments = linear_attention.segments_from_spans(
            batch.cu_q_lens,
            batch.kv_lens,
            batch.state_slots,
            token_ids.shape[0],
            None if batch_invariant else linear_attention.CHUNK,
            batch.state_snap_end,
            batch.state_snap_row,
            batch.state_drafting,
        )
    hidden, kv = forward_hidden(
        params,
        cfg,
        token_ids,
        batch.positions,
        kv,
        attend,
        routed,
        constrain,
        batch.lora_slots,
        segments,
    )
    logits = final_logits(params, cfg, hidden[batch.sample_index])  # [S, V]
    sample_logits = logits
    if batch.listed_ids is not None:
        sample_logits = apply_token_lists(
            sample_logits, batch.listed_ids, batch.listed_values, batch.listed_restrict
        )
    if batch.allowed_mask is not None:
        listed = apply_allowed_mask(sample_logits, batch.allowed_mask)
        # A row the lists leave no allowed token (min_tokens holding back the EOS that is
        # all its expression allows next) samples under its expression alone.
        alive = jnp.isfinite(listed).any(axis=-1, keepdims=True)
        sample_logits = jnp.where(alive, listed, apply_allowed_mask(logits, batch.allowed_mask))
    if penalty_state is not None:
        penalty_state = penalties.update_state(
            penalty_state,
            token_ids,
            batch.positions,
            batch.cu_q_lens,
            batch.kv_lens,
            batch.penalty_slot,
            batch.penalty_prompt_len,
        )
        sample_logits = penalties.penalize(
            sample_logits, penalty_state, batch.penalty_slot, batch.penalty_params
        )
    tokens, logprobs = sample(
        sample_logits,
        batch.temperature,
        batch.top_k,
        batch.top_p,
        batch.seed,
        batch.sample_step,
        batch.min_p,
        greedy_only=not sampling,
    )
    if sample_logits is not logits:  # logprobs of the raw distribution
        logprobs = token_logprobs(logits, tokens)
    scores, score_top, drafted = None, (None, None), (None, None)
    if with_scores:  # every row's logits: [T, V], so only in the variant that asks for it
        targets, rows = batch.score_targets, hidden
        if batch.score_index is not None:
            targets, rows = targets[batch.score_index], hidden[batch.score_index]
        all_logits = final_logits(params, cfg, rows)
        scores = jnp.where(targets >= 0, token_logprobs(all_logits, jnp.maximum(targets, 0)), 0.0)
        if score_top_logprobs:
            score_top = top_logprobs_of(all_logits, score_top_logprobs)
        if batch.score_index is not None:
            drafted = _draw_at_rows(all_logits, batch, batch.score_index, sampling)
    mtp_out = (None, None, None)
    if cfg.mtp_drafts:  # the MTP module's pass and its drafts (engine/mtp.py)

        def run_mtp(x, positions, kv_i, attend_i, rows_valid):
            layer = params["mtp"]["layer"]
            pin = constrain or (lambda x, axes: x)
            sink = []
            mtp_routed = counted(sink, positions, rows_valid)
            y, kv_i = decoder_layer(
                layer, cfg, cfg.num_layers, x, positions, kv_i, attend_i, mtp_routed, pin
            )
            return y, kv_i, (sum(sink) if sink else None)

        kv_i, *mtp_out, mtp_load = mtp.draft(
            params, cfg, batch, hidden, kv_mtp[0], tokens, drafted[0], run_mtp, attend, attend_for
        )
        kv = [*kv, kv_i]
        if mtp_load is not None:  # its passes, one row after the decoder layers' (EPLB's order)
            loads.append(mtp_load)
    load = jnp.stack(loads) if loads else jnp.zeros((0, 0), jnp.int32)  # [L_moe, E]
    feed_tokens = None
    if batch.prev_tokens is not None:
        feed_tokens = jnp.zeros_like(batch.prev_tokens).at[: tokens.shape[0]].set(tokens)
    top = (None, None)
    if top_logprobs:
        top = top_logprobs_of(logits, top_logprobs)
    return kv, StepOutput(
        tokens,
        logprobs,
        load,
        scores,
        feed_tokens,
        *top,
        penalty_state,
        *score_top,
        *drafted,
        *mtp_out,
    )


def _draw_at_rows(logits: jax.Array, batch: StepBatch, rows: jax.Array, sampling: bool):
    """Each of `rows` (its logits [R, V]) drawn as its request's token: the sequence's
    sampling settings, at the generation index the row predicts (the sequence's last row
    samples at batch.sample_step, a row j before it at sample_step - j): what decoding one
    token a step would draw there. (tokens [R], their logprobs [R])."""
    owner = jnp.searchsorted(batch.cu_q_lens, rows, side="right") - 1
    owner = jnp.clip(owner, 0, batch.kv_lens.shape[0] - 1)
    step = batch.sample_step[owner] - (batch.cu_q_lens[owner + 1] - 1 - rows)
    min_p = None if batch.min_p is None else batch.min_p[owner]
    return sample(
        logits,
        batch.temperature[owner],
        batch.top_k[owner],
        batch.top_p[owner],
        batch.seed[owner],
        step,
        min_p,
        greedy_only=not sampling,
    )


# The public jitted step: static config, KV donated so the pages are updated in place.
step = jax.jit(
    step_impl,
    static_argnames=(
        "cfg",
        "kv_block_pages",
        "attention_impl",
        "batch_invariant",
        "with_scores",
        "top_logprobs",
        "score_top_logprobs",
    ),
    donate_argnames=("kv", "penalty_state"),
)


@functools.cache
def make_step(
    cfg: ModelConfig,
    kv_block_pages: int,
    attention_impl: str = "xla",
    mesh: Mesh | None = None,
    batch_invariant: bool = False,
    kv_dtype=None,
    with_scores: bool = False,
    top_logprobs: int = 0,
    sampling: bool = True,
    score_top_logprobs: int = 0,
):
    """The jitted step bound to one model config (and device mesh, None = one device).

    `sampling=False` compiles a step for batches whose rows are all greedy (temperature
    below sampler.GREEDY_TEMPERATURE): it takes the argmax without compiling the sampler
    (top-k / top-p bisections, min-p, the per-row threefry draw), which was ~35-40% of
    XLA:CPU's compile time of a tiny model's step. Its tokens and logprobs are those the
    sampling step gives such a batch (there the all-greedy branch of a `lax.cond` is taken).

    `kv_dtype` is the cache's page dtype (None: the model's; float8_e4m3fn: fp8 pages with
    scales), which fixes the KV pytree the step takes and returns. Cached per (cfg,
    kv_block_pages, attention_impl, mesh, batch_invariant, kv_dtype): engines serving the
    same model in one process share the compiled buckets, and `_cache_size()` of the
    result counts this model's compilations. On a mesh the KV leaves with exactly the
    shardings it came in with (XLA would otherwise canonicalize e.g. a size-1 axis away,
    and the next call would compile again), and the outputs leave replicated so every
    process can read them.
    """
    placement = {}
    if mesh is not None:
        placement["out_shardings"] = (kv_shardings(cfg, mesh, kv_dtype), replicated(mesh))
    return jax.jit(
        functools.partial(
            step_impl,
            cfg=cfg,
            kv_block_pages=kv_block_pages,
            attention_impl=attention_impl,
            mesh=mesh,
            batch_invariant=batch_invariant,
            with_scores=with_scores,
            top_logprobs=top_logprobs,
            sampling=sampling,
            score_top_logprobs=score_top_logprobs,
        ),
        donate_argnames=("kv", "penalty_state"),
        **placement,
    )


class StepVariants:
    """An engine's step programs: the plain one, for batches of greedy rows only, and the
    variants that also return every row's target logprob (with_scores) and / or the top
    logprobs of each sampled row (with_top), sample (a row at temperature >=
    sampler.GREEDY_TEMPERATURE), and return every scored row's top `score_top` logprobs.
    Each variant is compiled when first needed: the sampler is ~35-40% of a step's compile
    time (make_step), saved wherever traffic is greedy."""

    def __init__(self, top_k: int, *key):
        """`top_k`: the top logprobs a with_top variant returns; `key`: make_step's
        positional arguments."""
        self.top_k, self.key = top_k, key
        self.plain = make_step(*key, sampling=False)
        self._variants: dict[tuple[bool, bool, bool, int], object] = {}

    def get(self, variant: tuple[bool, bool, bool, int]):
        """The step for (with_scores, with_top, sampling, score_top)."""
        if variant == (False, False, False, 0):
            return self.plain
        if variant not in self._variants:
            with_scores, with_top, sampling, score_top = variant
            self._variants[variant] = make_step(
                *self.key,
                with_scores=with_scores,
                top_logprobs=self.top_k if with_top else 0,
                sampling=sampling,
                score_top_logprobs=score_top,
            )
        return self._variants[variant]

    def num_compiles(self) -> int:
        """Compilations of these programs in this process (shared with engines of the same
        model config: make_step caches them)."""
        return self.plain._cache_size() + sum(f._cache_size() for f in self._variants.values())


def init_kv_pages(
    cfg: ModelConfig,
    num_pages: int,
    page_size: int,
    dtype=None,
    mesh: Mesh | None = None,
    window_num_pages: int | None = None,
    state_rows: int = 0,
) -> list:
    """Zeroed paged cache: per layer (K, V) pages for GQA (kv_quant.cache_row_shapes: V's
    rows v_head_dim wide, if set), (latent,) pages for MLA, and (latent, index keys) for MLA
    with sparse attention (ModelConfig.layer_kv_widths: a layer reading another's latent
    keeps none, one with no indexer of its own no keys); a gated DeltaNet layer's state
    arrays with `state_rows` rows (whatever `dtype`).

    `dtype` defaults to the model's; float8_e4m3fn gives kv_quant.QuantizedPages (fp8 data
    with a float32 scale per row). With a `mesh` the pages are created in place with their
    shardings (never whole on one device first). `window_num_pages`: hybrid models' pool
    of the windowed layers (ModelConfig.hybrid_window), whose pages number that many.
    """
    dtype = jnp.dtype(cfg.dtype if dtype is None else dtype)
    if mesh is not None:
        make = functools.partial(
            init_kv_pages,
            cfg,
            num_pages,
            page_size,
            dtype,
            window_num_pages=window_num_pages,
            state_rows=state_rows,
        )
        return jax.jit(make, out_shardings=kv_shardings(cfg, mesh, dtype))()
    if dtype == kv_quant.FP8_DTYPE:
        zeros = kv_quant.zeros
    else:
        zeros = functools.partial(jnp.zeros, dtype=dtype)
    kv = []
    for i in range(cfg.num_kv_layers):
        if cfg.is_linear_layer(i):
            kv.append(linear_attention.zero_state(cfg, state_rows))
            continue
        if cfg.is_dsv4:  # (its per-token rows in the window pool, when it has one)
            pool = (num_pages, page_size, zeros, window_num_pages)
            kv.append(deepseek_v4.init_layer_cache(cfg, i, *pool))
            continue
        if cfg.is_mla:  # (per layer: a layer may keep no latent, or no index keys)
            kv.append(tuple(zeros((num_pages, page_size, w)) for w in cfg.layer_kv_widths(i)))
            continue
        n = num_pages
        if window_num_pages is not None and cfg.attention_window(i) is not None:
            n = window_num_pages
        kv.append(tuple(zeros((n, page_size, *row)) for row in kv_quant.cache_row_shapes(cfg, i)))
    return kv
