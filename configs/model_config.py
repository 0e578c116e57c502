"""Frozen model configuration: every architecture field the model zoo needs."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from configs.model_checks import (
    check_blocks,
    check_gemma4_ling,
    check_gqa,
    check_laguna,
    check_linear,
    check_longcat,
    check_mla,
    check_moe,
    check_norms_and_rope,
    check_sharing,
    check_softcaps,
    check_v4,
    check_values_and_sinks,
)

# ntk_alpha: a fixed NTK-aware base, theta * alpha^(d / (d - 2)) (Hunyuan's checkpoints
# spell it "dynamic" with an alpha; its frequencies never depend on the length).
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "ntk_alpha", "longrope")
# fmt: off
LINEAR_ATTENTION_KINDS = (
    "gated_delta", "kimi_delta", "mamba2", "short_conv", "mamba1", "lightning"
)
# fmt: on
# dsv4: DeepSeek-V4's attention (models/deepseek_v4.py).
ATTENTION_TYPES = ("gqa", "mla", "dsv4")
# softmax_topk: the top-k router logits, softmaxed among themselves (gpt-oss);
# sqrtsoftplus: sqrt(softplus(logit)) (DeepSeek-V4).
SCORING_FUNCS = ("softmax", "sigmoid", "softmax_topk", "sqrtsoftplus", "sparsemixer")
# Expert MLP activation: silu(gate) * up, gpt-oss's clamped form, or DeepSeek-V4's
# silu(min(gate, limit)) * clip(up, -limit, limit) (models/moe.py).
# relu2: relu(x @ up)^2, no gate projection (Nemotron-H's experts, and its MLPs: mlp_act).
# geglu: gelu_tanh(gate) * up (Gemma 4's experts and MLPs).
EXPERT_ACTS = ("swiglu", "clamped_swiglu", "limited_swiglu", "relu2", "geglu")
# gelu: GELU (tanh) of x @ up, no gate (StarCoder2's MLP); xielu: Apertus' xIELU of x @ up,
# no gate, its two learned slopes per layer (models/layers.xielu); gelu_exact: the erf GELU of
# x @ up, no gate (GPT-NeoX's); relu: ReLU of x @ up, no gate (OPT's).
MLP_ACTS = ("swiglu", "relu2", "geglu", "gelu", "xielu", "gelu_exact", "relu")
GATELESS_MLP_ACTS = ("relu2", "gelu", "xielu", "gelu_exact", "relu")  # (up and down alone)
# DeepSeek-V4's attention per layer: a sliding window alone, or beside compressed entries
# (csa: one per csa_ratio tokens, overlapping, picked by a lightning indexer; hca: one per
# hca_ratio tokens, all attended).
V4_LAYER_KINDS = ("sliding", "csa", "hca")
# group_top2: DeepSeek-V3's group rule (a group scores the sum of its two best experts)
# without noaux_tc's correction bias (Mistral 4, Mistral Large 4).
TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc", "group_top2")
# Models whose MTP module is a decoder layer after enorm / hnorm / eh_proj (engine/mtp.py).
MTP_MODEL_TYPES = ("deepseek_v3", "deepseek_v32", "glm4_moe", "glm4_moe_lite", "glm_moe_dsa")


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling (HF `rope_parameters` / `rope_scaling`)."""

    rope_type: str = "default"  # one of ROPE_TYPES
    factor: float = 1.0  # context extension factor
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    original_max_position_embeddings: int = 8192  # llama3, yarn
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    mscale: float = 1.0  # yarn (DeepSeek): attention-factor numerator
    mscale_all_dim: float = 0.0  # yarn (DeepSeek): also scales the softmax (MLA)
    attention_factor: float | None = None  # yarn: explicit cos/sin magnitude override
    truncate: bool = True  # yarn: round the correction range to whole dims (gpt-oss: False)
    alpha: float = 1.0  # ntk_alpha
    # longrope (Phi-3, Phi-3.5-MoE): the frequencies divided by short_factor or, with
    # long_factors (the engine's choice, as vLLM's: max_model_len past
    # original_max_position_embeddings), long_factor; cos / sin times short_mscale or
    # long_mscale where given (Phi-3.5-MoE), else attention_factor, else LongRoPE's
    # sqrt(1 + ln(factor) / ln(original_max_position_embeddings)).
    short_factor: tuple[float, ...] = ()
    long_factor: tuple[float, ...] = ()
    long_factors: bool = False
    short_mscale: float = 0.0
    long_mscale: float = 0.0

    def __post_init__(self):
        for name in ("short_factor", "long_factor"):  # (a JSON round trip gives lists)
            object.__setattr__(self, name, tuple(float(x) for x in getattr(self, name)))
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"rope_type={self.rope_type!r}: expected one of {ROPE_TYPES}")
        if self.factor <= 0:
            raise ValueError(f"rope factor={self.factor}: must be > 0")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of one decoder-only model (dense GQA, MoE, or DeepSeek MLA + MoE)."""

    name: str = "custom"  # preset name or checkpoint directory
    model_type: str = "llama"  # HF model_type this config maps from
    vocab_size: int = 512  # embedding rows
    output_vocab_size: int = 0  # lm_head rows, the first ids' (Apertus 1.5's pruned; 0: all)
    hidden_size: int = 64  # model width D
    num_layers: int = 2  # decoder layers
    num_heads: int = 4  # query heads H
    num_kv_heads: int = 4  # KV heads (GQA); MLA ignores it
    head_dim: int = 16  # GQA per-head width, not tied to hidden/heads
    intermediate_size: int = 128  # dense SwiGLU width
    rms_norm_eps: float = 1e-6  # RMSNorm epsilon
    max_position_embeddings: int = 4096  # longest position the model was built for
    rope_theta: float = 10000.0  # RoPE base
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)  # frequency scaling
    # GQA: the first int(head_dim * factor) channels rotated (GLM-4.5's 0.5), the rest not.
    partial_rotary_factor: float = 1.0
    tie_word_embeddings: bool = False  # lm_head shares the embedding matrix
    attention_bias: bool = False  # q/k/v projections carry biases (Qwen2)
    o_proj_bias: bool = False  # the output projection carries a bias (gpt-oss)
    # A learned logit per query head that joins every softmax as a key with no value
    # (gpt-oss "sinks"): softmax over [scores, sink], the sink's share dropped.
    attention_sinks: bool = False
    windowed_sinks_only: bool = False  # MiMo-V2-Flash: those sinks on windowed layers alone
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3)
    qk_norm_after_rope: bool = False  # Hunyuan: those norms after RoPE, not before
    # OLMoE: the q and k RMSNorms span all heads' channels at once (weights [H * Dh] and
    # [K * Dh]) instead of each head's; with qk_norm.
    qk_norm_full: bool = False
    clip_qkv: float | None = None  # OLMoE: q, k and v clamped to [-clip, clip] after the norms
    # Sliding window (Mistral v0.1): a query at p sees keys p - window + 1 .. p; None: all.
    # Layers in `full_attention_layers` take no window.
    sliding_window: int | None = None
    full_attention_layers: tuple[int, ...] = ()
    # Llama 4's chunks: a query at p sees keys floor(p / C) * C .. p (full_attention_layers:
    # every key). Not with a sliding window.
    attention_chunk_size: int | None = None
    attention_type: str = "gqa"  # one of ATTENTION_TYPES
    # MLA (DeepSeek V2/V3)
    q_lora_rank: int = 0  # 0: plain q projection
    kv_lora_rank: int = 0  # latent width cached per token
    qk_nope_head_dim: int = 0  # per-head non-rotary q/k width
    qk_rope_head_dim: int = 0  # decoupled rotary width (shared key across heads)
    v_head_dim: int = 0  # per-head value width (GQA: 0 is head_dim; MiMo-V2-Flash's narrower)
    attention_value_scale: float = 1.0  # MiMo-V2-Flash: the values times this first
    # Llama 3.2 Vision (mllama): its checkpoint's cross-attention layers, skipped without an
    # image (decoder layer i is its i-th other layer); its embedding's 8 more rows unread.
    cross_attention_layers: tuple[int, ...] = ()
    # A.X K2: MLA queries (and a sigmoid gate per value channel, attn "wq_gate") from the
    # q LoRA's [normed, raw] latent; input norms (and the MoE layers' second) gated by
    # sigmoid(silu(y @ norm_gate_a) @ norm_gate_b) of rank gated_norm_rank (0: none).
    mla_query_gate: bool = False
    gated_norm_rank: int = 0
    rope_interleave: bool = True  # DeepSeek rotary pairs are interleaved (x0,x1),(x2,x3)...
    # Llama 4's query temperature (Mistral 4: llama_4_scaling_beta): queries, after RoPE,
    # times 1 + attn_scale_beta * log(1 + floor(position / attn_scale_positions)); 0: none.
    attn_scale_beta: float = 0.0
    attn_scale_positions: int = 0
    # Llama 4's form of it: 1 + beta * log(1 + floor((position + 1) / positions)), on the
    # layers without RoPE only (its attn_temperature_tuning, attn_scale, floor_scale).
    attn_scale_offset: int = 0
    attn_scale_nope_only: bool = False
    # Beam's scalable softmax on its NoPE layers: queries times (1 + (position +
    # attn_scale_offset) / attn_scale_positions) ** attn_scale_power, in float32 (with
    # attn_scale_nope_only; 0: none). Not beside attn_scale_beta.
    attn_scale_power: float = 0.0
    qk_l2_norm: bool = False  # Llama 4's use_qk_norm: q, k RMS-normed after RoPE (no weight)
    # Mistral Large 4: MLA layers without RoPE (q/k nope parts take the rope channels; k_pe
    # rows cached as zeros), LeRoPE (rope frequencies times exp of attn "rope_alpha"), a
    # per-head query scale s_h * log(position + 1) + b_h ("q_scale", "q_scale_bias").
    nope_layers: tuple[int, ...] = ()
    learned_rope_scale: bool = False
    query_log_scale: bool = False
    # DeepSeek Sparse Attention (DeepSeek-V3.2, engine/sparse_mla.py): an MLA query attends
    # to the index_topk keys its lightning indexer scores highest (0: all); its keys cached.
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_rope_interleave: bool = False  # GLM-5: the indexer ropes interleaved pairs
    # GLM-5's, Mistral Large 4's "shared" indexer layers: the nearest earlier indexer's top-k.
    shared_indexer_layers: tuple[int, ...] = ()
    # KV sharing (Mistral Large 4's kv_source_layers, Gemma 4's num_kv_shared_layers): per
    # decoder layer, the layer whose cache it attends to (itself: its own; empty: every layer
    # its own). A layer reading an earlier one's computes no latent (MLA) or keys and values
    # (GQA) and caches none (its indexer's keys it still caches, when it has an indexer).
    kv_source_layers: tuple[int, ...] = ()
    # Hybrid linear attention (Qwen3-Next, Qwen3.5: models/linear_attention.py): these
    # decoder layers run a gated DeltaNet (a causal depthwise conv of linear_conv_kernel
    # taps, then the gated delta rule over a [Hv, dk, dv] state per sequence) in place of
    # softmax attention; each value head reads key head h // (Hv / Hk).
    linear_attention_layers: tuple[int, ...] = ()
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 4
    # Which rule those layers run: "gated_delta" (Qwen3's gated DeltaNet: a decay per value
    # head, the output gated by silu(z)) or "kimi_delta" (Kimi-Linear's KDA: a decay per key
    # channel from a low-rank forget gate, a sigmoid output gate; Hk = Hv, dk == dv).
    # "mamba2" (Nemotron-H's Mamba-2: the recurrence without the delta rule's correction,
    # S_t = exp(-exp(A_log) dt_t) S_{t-1} + B_t (dt_t x_t)^T, y_t = S_t^T C_t + D x_t, dt
    # clamped to mamba_dt_limit; B and C per group, the "key" heads; the output RMS-normed
    # per group after the silu(z) gate). "short_conv" (LFM2's: y = C * conv(B * x), no
    # recurrence, no heads). "mamba1" (Mamba-1: a decay per state channel, exp(dt_t A),
    # each of the Hv channels a value head of width 1, B and C one shared key head; dt of
    # rank mamba_dt_rank; its dt / B / C RMSNorms: mamba1_norms).
    # "lightning" (MiniMax-01's: S_t = lambda S_{t-1} + k_t v_t^T, o_t = S_t^T q_t, a fixed
    # decay per head and layer, no conv; the output normed over all heads, sigmoid-gated).
    linear_attention_kind: str = "gated_delta"
    mamba_dt_rank: int = 0
    linear_conv_bias: bool = False
    mamba_dt_limit: tuple[float, float] = (0.0, math.inf)
    # OLMo Hybrid: gated DeltaNet's beta times linear_beta_scale (2), its gated norm's eps (0:
    # rms_norm_eps; Falcon Mamba's dt / B / C norms'); hybrid_post_norms: attention layers
    # norm block outputs, linear ones inputs
    linear_beta_scale: float = 1.0
    linear_norm_eps: float = 0.0
    hybrid_post_norms: bool = False
    # Falcon-H1: each HF layer's attention and Mamba-2 side by side on one normed input, as
    # decoder layers 2i (attention, its output held back) and 2i + 1 (Mamba-2, adding both).
    parallel_hybrid: bool = False
    mamba_gated_norm: bool = True  # Mamba-2's RMSNorm after its gate (Falcon-H1's: none)
    # Falcon-H1's multipliers, folded into a layer's weights on load: ((leaf path), factor).
    load_scales: tuple[tuple[tuple[str, ...], float], ...] = ()
    # Kimi-Linear's MLA layers use their rope channels as they are (NoPE: no rotation).
    mla_unrotated: bool = False
    # Qwen3-Next's gated attention: q_proj also yields a gate per output channel, the
    # attention output times sigmoid(gate) before o_proj (attn "wq_gate" [D, H, Dh]).
    attn_output_gate: bool = False
    # Qwen3-Next's RMSNorms scale by (1 + weight), in float32 (weights stored zero-centred).
    norm_zero_centered: bool = False
    # Logits squashed to cap * tanh(logits / cap) (Mistral Large 4's 30; 0: none); Gemma 2's
    # attention scores (times the scale, before the mask) too, by attn_logit_softcapping.
    final_logit_softcapping: float = 0.0
    attn_logit_softcapping: float = 0.0
    # Granite 4.0 (granitemoehybrid): the embeddings times embedding_multiplier, each
    # block's output times residual_multiplier before it joins the stream, attention scores
    # times attention_multiplier (0: head_dim^-0.5), the logits divided by logits_scaling.
    embedding_multiplier: float = 1.0
    # AFMoE (Arcee Trinity): each block's output RMS-normed too before it joins the stream
    # (layers' "attn_post_norm" and "mlp_post_norm"), besides the norms before the blocks;
    # OLMo 2's layers: those alone, no norm before the blocks (pre_norms False). OLMo 3:
    # rope_scaling on the full-attention layers alone (windowed ones: plain RoPE).
    sandwich_norms: bool = False
    pre_norms: bool = True
    rope_scaling_full_only: bool = False
    # Laguna: its windowed layers rotate the whole head (partial_rotary_factor: the full ones')
    sliding_full_rotary: bool = False
    residual_multiplier: float = 1.0
    attention_multiplier: float = 0.0
    # MiniMax-01: a block's input joins the stream normed (residual_normed: x = alpha *
    # norm(x) + beta * block(norm(x))), with alpha and beta per block kind (full attention,
    # linear attention, MLP / MoE): DeepNorm's scales.
    residual_normed: bool = False
    # Beam: the stream after the n-th block (n = 2 * layer + 1 for the attention, + 1 for the
    # MLP; counting from 1) is out / sqrt(n + 1) + x * sqrt(n / (n + 1)): each block's share
    # of the stream falls with depth.
    depth_scaled_residual: bool = False
    residual_alphas: tuple[float, float, float] = (1.0, 1.0, 1.0)
    residual_betas: tuple[float, float, float] = (1.0, 1.0, 1.0)
    # Cohere's Command models: attention and MLP side by side on one normed input, both
    # outputs added to the stream (parallel_block; no mlp_norm); LayerNorms (norm_kind
    # "layer": mean-subtracted, no bias, scaled in float32; eps rms_norm_eps) in place of
    # RMSNorms; the logits times logit_scale; RoPE on interleaved pairs (models/rope.py);
    # the shared experts' output averaged with the routed one (shared_expert_average).
    parallel_block: bool = False
    # OLMo 1 (LayerNorms), NanoChat (RMSNorms, its embed_norm too): norms hold no weight.
    norm_weightless: bool = False
    # GPT-BigCode: a learned position embedding added to the token's (pos_embed [P, D], P =
    # max_position_embeddings); no RoPE (every layer in nope_layers). OPT's table starts
    # position_offset rows in (2: [P + 2, D], position p's row p + 2). XGLM's: fairseq's
    # sinusoids (sin, then cos, of position x 10000^(-i / (D / 2 - 1))), computed, not held.
    learned_positions: bool = False
    position_offset: int = 0
    sinusoidal_positions: bool = False
    # GPT-NeoX's parallel block: the MLP reads its own norm of the block's input (mlp_norm).
    parallel_norms: bool = False
    # ALiBi (BLOOM, MPT, Falcon-RW; no RoPE): a slope per query head, each scaled score plus
    # slope * (key position - query position). BLOOM's embeddings LayerNormed (embed_norm).
    alibi_slopes: tuple[float, ...] = ()
    embed_norm: bool = False
    norm_kind: str = "rms"
    logit_scale: float = 1.0
    shared_expert_average: bool = False
    # Phi-3.5-MoE: LayerNorms with a bias too (norm_bias: "attn_norm_bias", "mlp_norm_bias",
    # "final_norm_bias"), a bias on lm_head; its router's sparsemixer (scoring_func
    # "sparsemixer": two experts, each weighed by a softmax over the logits within
    # sparsemixer_eps, relatively, of its own).
    norm_bias: bool = False
    lm_head_bias: bool = False
    sparsemixer_eps: float = 0.0
    logits_scaling: float = 1.0
    # Gemma 4: the full-attention layers' own head width and KV heads (0: head_dim,
    # num_kv_heads), their values the key projection's output (no wv: attention_k_eq_v);
    # values RMS-normed without a weight (v_norm); the windowed layers' RoPE base (0:
    # rope_theta), the full ones' proportional RoPE (rope_proportional: the first
    # partial_rotary_factor of the head's frequency pairs turn, the rest stay); a dense MLP
    # beside each MoE (dense_beside_moe); a learned scalar on each layer's output.
    global_head_dim: int = 0
    global_num_kv_heads: int = 0
    attention_k_eq_v: bool = False
    v_norm: bool = False
    sliding_rope_theta: float = 0.0
    rope_proportional: bool = False
    dense_beside_moe: bool = False
    layer_scalars: bool = False
    # Gemma 4 E2B / E4B: per-layer embeddings (PLE). Layer i's input of per_layer_input_dim
    # P: its slice of a token table [per_layer_vocab_size (0: vocab_size), L * P] (times
    # sqrt(P)) joined with its slice of the embedded token's projection [D, L * P] (times
    # D^-0.5, RMS-normed per slice), the sum times 2^-0.5; after its MLP the layer adds
    # norm(down(gelu(x @ gate) * input)). Dense MLP widths per layer (Gemma 4's double-wide
    # MLPs on its KV-sharing layers; (): intermediate_size on each).
    per_layer_input_dim: int = 0
    per_layer_vocab_size: int = 0
    layer_intermediate_sizes: tuple[int, ...] = ()
    # Gemma 3n (models/gemma3n.py): AltUp's altup_num_inputs streams of the residual, the
    # first through each layer; a LAuReL block of rank laurel_rank beside the attention; per
    # layer, the share of the MLP's gate Gaussian top-k zeroes (activation_sparsity).
    altup_num_inputs: int = 0
    laurel_rank: int = 0
    activation_sparsity: tuple[float, ...] = ()
    # Zamba2 (models/zamba2.py): shared_blocks transformer blocks run in turn, one before each
    # hybrid layer's Mamba-2 mixer (an attention layer here), on [x, embeddings], each run with
    # its own adapters of adapter_rank (attention_adapters: on q / k / v too, not only the MLP).
    shared_blocks: int = 0
    adapter_rank: int = 0
    attention_adapters: bool = False
    # Ling 2.5 (bailing_hybrid): KDA's forget and output gates full-rank (linear "wf"
    # [D, Hv, dk], "wz" [D, Hv, dv]), its decay kda_gate_bound * sigmoid(exp(A_log) (f +
    # dt_bias)) when the bound is < 0 (0: Kimi's -exp(A_log) softplus(f + dt_bias)); the
    # attention's output times sigmoid(x @ w_head_gate) per head (head_gate: Ling 2.5's MLA,
    # LFM3's GQA); per layer, SwiGLU clipped after the
    # activation (silu(gate) <= limit, |up| <= limit; 0: none) in the routed experts and
    # in the shared ones (and in a dense layer's MLP: Step 3.7).
    kda_full_rank: bool = False
    kda_gate_bound: float = 0.0
    head_gate: bool = False
    # The output gates' function (attn_output_gate, head_gate): sigmoid, or softplus (Laguna)
    attn_gate_act: str = "sigmoid"
    # Beam: a bias per head on attn_output_gate's gate (attn "gate_bias" [H]), before it
    attn_gate_bias: bool = False
    # Laguna: query heads per layer (num_attention_heads_per_layer; (): num_heads on each)
    heads_per_layer: tuple[int, ...] = ()
    expert_clip_limits: tuple[float, ...] = ()
    shared_clip_limits: tuple[float, ...] = ()
    # MoE
    num_experts: int = 0  # routed experts E (0: dense model)
    num_experts_per_tok: int = 0  # top-k
    moe_intermediate_size: int = 0  # per-expert SwiGLU width
    num_shared_experts: int = 0  # DeepSeek shared experts (always on)
    shared_intermediate_size: int = 0  # 0: moe_intermediate_size * num_shared_experts
    shared_expert_gate: bool = False  # Qwen2-MoE: shared output times sigmoid(x @ w)
    scoring_func: str = "softmax"  # router scores: one of SCORING_FUNCS
    topk_method: str = "greedy"  # one of TOPK_METHODS
    n_group: int = 1  # expert groups for group-limited routing
    topk_group: int = 1  # groups kept per token
    norm_topk_prob: bool = False  # renormalize the top-k weights to sum to 1
    routed_scaling_factor: float = 1.0  # multiplies routed expert weights
    # gpt-oss: a bias on the router logits and on every expert's gate/up/down projections.
    expert_bias: bool = False
    expert_act: str = "swiglu"  # one of EXPERT_ACTS
    # Llama 4: each token's input to its (one) routed expert is scaled by the router weight,
    # not the expert's output (vLLM's apply_router_weight_on_input; top-1 only).
    router_weight_on_input: bool = False
    router_logit_softcapping: float = 0.0  # Laguna: router logits cap * tanh(x / cap) (0: none)
    # Kolibri-1's noaux_tc: the correction bias added to the logits for the choice (top-k of
    # logits + bias; the weights still sigmoid(logit)), not to the sigmoid scores.
    router_bias_on_logits: bool = False
    # A.X-K1: the MoE layers' output RMS-normed before it joins the stream (mlp_post_norm;
    # the dense layers' is not).
    moe_post_norm: bool = False
    # LongCat-Flash: zero_experts zero-computation experts after the num_experts routed ones
    # (a token choosing one adds itself times its weight); shortcut_moe: decoder layers in
    # pairs, the even layer's MoE reading its MLP's input beside that dense MLP (both on
    # every even layer, a dense MLP alone on the odd ones), its output joining the stream
    # after the odd layer's MLP; mla_lora_scales: MLA queries times sqrt(D / q_lora_rank),
    # the normed latent times sqrt(D / kv_lora_rank) (cached so, read as keys and values).
    zero_experts: int = 0
    shortcut_moe: bool = False
    mla_lora_scales: bool = False
    swiglu_limit: float = 7.0  # clamped_swiglu: gate <= limit, |up| <= limit
    swiglu_alpha: float = 1.702  # clamped_swiglu: gate * sigmoid(alpha * gate)
    # Nemotron-H: the dense MLPs' (and shared experts') activation, one of MLP_ACTS; layers
    # whose mixer no feed-forward block follows; routed experts working at this width
    # between a down and an up projection of the token (latent MoE; 0: the hidden size).
    mlp_act: str = "swiglu"
    mlp_bias: bool = False  # StarCoder2: biases on the dense MLPs' up and down (b_up, b_down)
    no_ffn_layers: tuple[int, ...] = ()
    # Mamba's residual_in_fp32: the stream in float32 between blocks, each block's input and
    # the final norm's output rounded to the model dtype (as transformers' MambaBlock).
    residual_in_float32: bool = False
    moe_latent_size: int = 0
    first_k_dense_replace: int = 0  # first k layers use a dense MLP (DeepSeek)
    moe_layer_freq: int = 1  # every n-th layer after first_k_dense_replace is MoE
    mlp_only_layers: tuple[int, ...] = ()  # layers forced dense (Qwen3-MoE)
    # tokens
    bos_token_id: int | None = None  # prepended by the tokenizer, if any
    eos_token_ids: tuple[int, ...] = ()  # generation stops on any of these
    dtype: str = "float32"  # parameter and activation dtype
    # Weights held as fp8 (or "int4": packed 4-bit, a scale per group of inputs) with a float32
    # scale per block (models/quantization.py; None: all in `dtype`). quantization_block: the
    # blocks, as HF's weight_block_size [rows (out), cols (in)] of a Linear; quantization_skip:
    # leaves kept in `dtype` ("layers.0.attn.wo": what an fp8 checkpoint stores unquantized).
    quantization: str | None = None
    quantization_block: tuple[int, int] = (128, 128)
    quantization_skip: tuple[str, ...] = ()
    # int4 held as a GPTQ / AWQ checkpoint stores it: with a zero point per group (w = (q - z)
    # * s), and with act order (each input's group from a stored index: GPTQ's desc_act).
    quantization_zero_point: bool = False
    quantization_act_order: bool = False
    # Multi-token prediction (DeepSeek-V3, GLM-4.5, 4.7-Flash): MTP modules a checkpoint has after
    # its decoder layers (HF num_nextn_predict_layers), and how many draft tokens a step asks
    # of the first one (0: not loaded; engine/mtp.py: params["mtp"], one more KV layer).
    num_nextn_predict_layers: int = 0
    mtp_drafts: int = 0
    # DeepSeek-V4 (attention_type "dsv4", models/deepseek_v4.py): one shared key=value head
    # of head_dim (its last rotary_dim channels roped), the window of sliding_window keys
    # beside each layer's compressed entries (v4_layer_kinds), a grouped output projection
    # (o_groups groups of heads, each to o_lora_rank), per-head sinks; hc_mult residual
    # streams mixed by manifold-constrained hyper-connections (hc_sinkhorn_iters, hc_eps);
    # the compressed layers rope with compress_rope_theta and rope_scaling, the sliding ones
    # with rope_theta alone; hash_moe_layers route by a token-id table (tid2eid).
    v4_layer_kinds: tuple[str, ...] = ()
    csa_ratio: int = 4
    hca_ratio: int = 128
    o_groups: int = 0
    o_lora_rank: int = 0
    compress_rope_theta: float = 160000.0
    hc_mult: int = 0
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    hash_moe_layers: tuple[int, ...] = ()
    # Its per-token rows in a pool of their own, giving back pages behind v4_token_window.
    v4_window_pool: bool = True

    def __post_init__(self):
        if self.quantization not in (None, "fp8", "int4"):
            raise ValueError(f"quantization={self.quantization!r}: expected None, 'fp8' or 'int4'")
        block = self.quantization_block
        if len(block) != 2 or not all(isinstance(b, int) and b > 0 for b in block):
            raise ValueError(f"quantization_block={block!r}: expected two positive ints")
        if self.mtp_drafts:
            if self.model_type not in MTP_MODEL_TYPES:
                raise ValueError(
                    f"speculative_config.method='mtp': model_type={self.model_type!r} has no "
                    f"MTP module here (supported: {', '.join(MTP_MODEL_TYPES)})"
                )
            if self.num_nextn_predict_layers < 1:
                raise ValueError(
                    "speculative_config.method='mtp': the model has no MTP module "
                    f"(num_nextn_predict_layers={self.num_nextn_predict_layers})"
                )
        positive = ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)}: must be > 0")
        if self.attention_type not in ATTENTION_TYPES:
            raise ValueError(
                f"attention_type={self.attention_type!r}: expected one of {ATTENTION_TYPES}"
            )
        if self.is_dsv4:
            check_v4(self)
        elif self.attention_type == "gqa":
            check_gqa(self)
        else:
            check_mla(self)
        if self.index_topk and self.attention_type == "gqa":
            raise ValueError(f"index_topk={self.index_topk}: sparse attention needs MLA")
        if self.learned_rope_scale or self.query_log_scale:
            if self.attention_type != "mla":
                raise ValueError("learned_rope_scale, query_log_scale: need MLA attention")
        if self.nope_layers:
            bad = [i for i in self.nope_layers if not 0 <= i < self.num_layers]
            if bad:
                raise ValueError(
                    f"nope_layers: layer {bad[0]} is outside [0, num_layers={self.num_layers})"
                )
        check_sharing(self)
        chunk = self.attention_chunk_size
        if chunk is not None and not (
            isinstance(chunk, int) and not isinstance(chunk, bool) and chunk >= 1
        ):
            raise ValueError(f"attention_chunk_size={chunk!r}: must be an integer >= 1 or None")
        if chunk is not None and (self.sliding_window is not None or self.is_mla):
            raise ValueError("attention_chunk_size: GQA attention without a sliding window only")
        if self.router_weight_on_input and self.num_experts_per_tok != 1:
            raise ValueError(
                f"router_weight_on_input: needs num_experts_per_tok=1 (got "
                f"{self.num_experts_per_tok}; each copy of a token would need its own input)"
            )
        check_softcaps(self)
        check_laguna(self)
        check_blocks(self)
        check_moe(self)
        check_gemma4_ling(self)
        check_values_and_sinks(self)
        check_longcat(self)
        for name in ("embedding_multiplier", "residual_multiplier", "logits_scaling"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)}: must be > 0")
        check_norms_and_rope(self)
        if self.attention_multiplier < 0:
            raise ValueError(f"attention_multiplier={self.attention_multiplier}: must be >= 0")
        if self.mlp_act not in MLP_ACTS or self.moe_latent_size < 0:
            raise ValueError(f"mlp_act={self.mlp_act!r}: expected {MLP_ACTS}; moe_latent_size >= 0")
        bad = [i for i in self.no_ffn_layers if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(f"no_ffn_layers: layer {bad[0]} is outside [0, {self.num_layers})")
        check_linear(self)
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype={self.dtype!r}: expected float32, bfloat16 or float16")

    # -- derived ---------------------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.attention_type == "mla"

    @property
    def is_dsv4(self) -> bool:
        return self.attention_type == "dsv4"

    def v4_ratio(self, layer: int) -> int:
        """Tokens per compressed entry of DeepSeek-V4 layer `layer` (0: window only)."""
        kind = self.v4_layer_kinds[layer]
        return {"sliding": 0, "csa": self.csa_ratio, "hca": self.hca_ratio}[kind]

    def v4_entry_widths(self, layer: int) -> tuple[int, ...]:
        """Widths of DeepSeek-V4 layer `layer`'s compressed entries: the attention's (head_dim)
        and, for csa, the indexer's (index_head_dim); () for a window-only layer."""
        kind = self.v4_layer_kinds[layer]
        if kind == "sliding":
            return ()
        return (self.head_dim,) + ((self.index_head_dim,) if kind == "csa" else ())

    @property
    def sparse_attention(self) -> bool:
        """DeepSeek Sparse Attention: each MLA query attends to its indexer's top keys."""
        return self.index_topk > 0

    @property
    def norm_scale_in_float32(self) -> bool:
        """Whether the layer and final RMSNorms scale by their weight in float32 before the one
        cast back (transformers' GptOssRMSNorm), not after casting the normalized value (every
        other family's, LlamaRMSNorm's): the same in float32, 1 bf16 step apart on ~25% of a
        bf16 model's elements. AFMoE's, FlexOlmo's, OLMo 2's, Flint's, Beam's, Lara Mini's."""
        scaled = ("gpt_oss", "afmoe", "gemma4_text", "gemma3n_text", "flex_olmo", "olmo2", "olmo3")
        scaled += ("olmo_hybrid",)
        scaled += ("helium", "flint", "beam", "lara_mini")
        return self.model_type in scaled or self.norm_zero_centered or self.is_dsv4

    @property
    def qk_head_dim(self) -> int:
        """Per-head q/k width: MLA nope + rope, GQA head_dim."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def rotary_dim(self) -> int:
        """Channels RoPE rotates per head: MLA's decoupled rope dim, or GQA's
        int(head_dim * partial_rotary_factor) leading channels."""
        if self.is_mla:
            return self.qk_rope_head_dim
        return int(self.head_dim * self.partial_rotary_factor)  # (DeepSeek-V4: the last ones)

    def indexes(self, layer: int) -> bool:
        """Whether layer `layer` (the MTP layer: num_layers) runs a lightning indexer of its
        own (sparse attention, and not one of shared_indexer_layers)."""
        return self.sparse_attention and layer not in self.shared_indexer_layers

    def kv_source(self, layer: int) -> int:
        """The layer whose cache layer `layer` attends to (kv_source_layers)."""
        return self.kv_source_layers[layer] if layer < len(self.kv_source_layers) else layer

    def layer_intermediate_size(self, layer: int) -> int:
        """Layer `layer`'s dense MLP width (layer_intermediate_sizes, else intermediate_size)."""
        sizes = self.layer_intermediate_sizes
        return sizes[layer] if layer < len(sizes) else self.intermediate_size

    def layer_kv_widths(self, layer: int) -> tuple[int, ...]:
        """Trailing widths of layer `layer`'s cache arrays (engine.step.init_kv_pages): GQA's
        K and V; MLA's latent unless it reads another layer's, then its indexer's keys."""
        if self.is_linear_layer(layer):  # (a state per sequence: linear_state_shapes)
            return ()
        if self.is_dsv4:
            # The window's key=value row, then (compressed layers) the compressor's inputs per
            # token (kv | gate, two series each for csa) and the indexer's (csa); the entries
            # themselves are kept one per ratio tokens (v4_entry_widths).
            kind, dh, di = self.v4_layer_kinds[layer], self.head_dim, self.index_head_dim
            raw = {"sliding": (), "hca": (2 * dh,), "csa": (4 * dh, 4 * di)}[kind]
            return (dh, *raw)
        if not self.is_mla:  # (none where it reads an earlier layer's K and V)
            if self.kv_source(layer) != layer:
                return ()
            kv = self.layer_num_kv_heads(layer)
            return kv * self.layer_head_dim(layer), kv * self.layer_v_head_dim(layer)
        latent = (self.kv_lora_rank + self.qk_rope_head_dim,)
        own = latent if self.kv_source(layer) == layer else ()
        return own + ((self.index_head_dim,) if self.indexes(layer) else ())

    def clip_limit(self, layer: int, shared: bool = False) -> float | None:
        """Layer `layer`'s SwiGLU clip (expert_clip_limits, or shared_clip_limits), or None."""
        limits = self.shared_clip_limits if shared else self.expert_clip_limits
        return (limits[layer] or None) if layer < len(limits) else None

    def is_global_layer(self, layer: int) -> bool:
        """Whether GQA layer `layer` takes global_head_dim / global_num_kv_heads (Gemma 4's
        full-attention layers beside windowed ones)."""
        return bool(self.global_head_dim) and self.attention_window(layer) is None

    def layer_head_dim(self, layer: int) -> int:
        """GQA layer `layer`'s per-head q/k width (and v's, without v_head_dim)."""
        return self.global_head_dim if self.is_global_layer(layer) else self.head_dim

    def layer_v_head_dim(self, layer: int) -> int:
        """GQA layer `layer`'s per-head value width (v_head_dim, else its q/k width)."""
        return self.v_head_dim or self.layer_head_dim(layer)

    def layer_sinks(self, layer: int) -> bool:
        """Whether GQA layer `layer` has attention sinks (attention_sinks, where
        windowed_sinks_only keeps them to the windowed layers)."""
        windowed = self.attention_window(layer) is not None
        return self.attention_sinks and (windowed or not self.windowed_sinks_only)

    def layer_num_heads(self, layer: int) -> int:
        """GQA layer `layer`'s query heads (heads_per_layer, else num_heads)."""
        return self.heads_per_layer[layer] if self.heads_per_layer else self.num_heads

    def layer_num_kv_heads(self, layer: int) -> int:
        """GQA layer `layer`'s KV heads."""
        if self.is_global_layer(layer) and self.global_num_kv_heads:
            return self.global_num_kv_heads
        return self.num_kv_heads

    def layer_rope_dim(self, layer: int) -> int:
        """MLA rope channels of decoder layer `layer` (0 in nope_layers)."""
        return 0 if layer in self.nope_layers else self.qk_rope_head_dim

    def layer_nope_dim(self, layer: int) -> int:
        """MLA per-head q/k channels without RoPE in decoder layer `layer` (a nope layer's
        take the rope channels too: qk_head_dim in all)."""
        return self.qk_head_dim - self.layer_rope_dim(layer)

    @property
    def latent_norm_eps(self) -> float:
        """The MLA q and kv LoRA RMSNorms' epsilon: transformers builds DeepSeek's and GLM's
        with the RMSNorm default 1e-6, Mistral Large 4's kv one with rms_norm_eps."""
        return self.rms_norm_eps if self.model_type == "mistral_large4_text" else 1e-6

    @property
    def shared_expert_width(self) -> int:
        """Hidden width of the always-on shared-expert MLP (0: none)."""
        if not self.num_shared_experts:
            return 0
        return self.shared_intermediate_size or self.moe_intermediate_size * self.num_shared_experts

    @property
    def _window(self) -> int | None:
        """The sliding window, or the attention chunk (a query sees at most that many keys
        back, itself included: the page bookkeeping's bound)."""
        if self.is_dsv4:  # (its window reads pages the compressed entries keep: all kept)
            return None
        return (
            self.sliding_window if self.attention_chunk_size is None else self.attention_chunk_size
        )

    def attention_window(self, layer: int) -> int | None:
        """Keys a query of decoder layer `layer` sees back from its own position (itself
        included) at most, or None: every earlier key. With attention_chunk_size, the chunk
        (a query sees from its chunk's start: layer_chunked). None for a linear-attention
        layer (LFM3's windows are its attention layers')."""
        if self._window is None or layer in self.full_attention_layers:
            return None
        if self.is_linear_layer(layer):
            return None
        return self._window

    def layer_chunked(self, layer: int) -> bool:
        """Whether layer `layer`'s window is Llama 4's chunk (attention_chunk_size)."""
        return self.attention_chunk_size is not None and self.attention_window(layer) is not None

    @property
    def kv_window(self) -> int | None:
        """Keys back from a query that every layer needs at most (the sliding window, or
        chunk, when every layer has it), or None: some layer needs all of them."""
        if self.full_attention_layers:
            return None
        return self._window

    @property
    def windowed_layers(self) -> tuple[int, ...]:
        """Decoder layers that attend through a sliding window."""
        return tuple(i for i in range(self.num_layers) if self.attention_window(i) is not None)

    @property
    def v4_token_window(self) -> int:
        """Positions back from a query (itself included) whose per-token rows DeepSeek-V4
        still reads: its window's keys, an hca window's inputs, a csa entry's two windows."""
        ratios = [
            self.v4_ratio(i) * (2 if k == "csa" else 1) for i, k in enumerate(self.v4_layer_kinds)
        ]
        return max([self.sliding_window or 1, *ratios])

    @property
    def hybrid_window(self) -> int | None:
        """The sliding window when some layers have it and others attend to every key
        (gpt-oss, Qwen2 with max_window_layers): the engine keeps the windowed layers' KV
        in a pool of its own, where a sequence gives back the pages behind its window.
        None otherwise (no window, or one on every layer: kv_window). DeepSeek-V4:
        v4_token_window with v4_window_pool (its per-token rows in that pool)."""
        if self.is_dsv4:
            return self.v4_token_window if self.v4_window_pool else None
        if 0 < len(self.windowed_layers) < self.num_layers:
            return self._window
        return None

    def is_moe_layer(self, layer: int) -> bool:
        """Whether decoder layer `layer` carries routed experts (else a dense MLP, or none:
        no_ffn_layers)."""
        if not self.num_experts or layer in self.mlp_only_layers or layer in self.no_ffn_layers:
            return False
        if layer < self.first_k_dense_replace:
            return False
        return (layer - self.first_k_dense_replace) % self.moe_layer_freq == 0

    def is_linear_layer(self, layer: int) -> bool:
        """Whether decoder layer `layer` is a linear-attention one (linear_attention_layers)."""
        return layer in self.linear_attention_layers

    @property
    def first_attention_layer(self) -> int:
        """The first decoder layer with a paged KV cache (softmax attention)."""
        return next(i for i in range(self.num_layers) if not self.is_linear_layer(i))

    @property
    def attention_free(self) -> bool:
        """No decoder layer attends (Mamba, Mamba-2): KV pages hold nothing, positions unused."""
        return len(self.linear_attention_layers) == self.num_layers

    @property
    def mamba1_norms(self) -> str:
        """Mamba-1's RMSNorms of x_proj's dt, B and C: "weighted" (Jamba's), "plain" (Falcon
        Mamba's, without weights, eps linear_norm_eps) or "none" (the first Mamba's)."""
        return {"jamba": "weighted", "falcon_mamba": "plain"}.get(self.model_type, "none")

    @property
    def norm_offset(self) -> float:
        """Added to every decoder RMSNorm's weight (in float32) before it scales."""
        return 1.0 if self.norm_zero_centered else 0.0

    def linear_state_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Per-sequence state of a gated DeltaNet layer (engine.step.init_kv_pages): the
        conv's last linear_conv_kernel - 1 inputs of q [Hk, dk], k [Hk, dk] and v [Hv, dv]
        (the model dtype), and the delta rule's [Hv, dk, dv] (float32). A short conv's
        (LFM2): its conv's last inputs [D] alone."""
        if self.linear_attention_kind == "short_conv":
            return ((self.linear_conv_kernel - 1, self.hidden_size),)
        if self.linear_attention_kind == "mamba1":  # (its conv over x alone)
            hv, dk = self.linear_num_value_heads, self.linear_key_head_dim
            return (self.linear_conv_kernel - 1, hv), (hv, dk, 1)
        if self.linear_attention_kind == "lightning":  # (no conv: the recurrence alone)
            return (
                (self.linear_num_value_heads, self.linear_key_head_dim, self.linear_value_head_dim),
            )
        kc, hk, hv = (
            self.linear_conv_kernel - 1,
            self.linear_num_key_heads,
            self.linear_num_value_heads,
        )
        dk, dv = self.linear_key_head_dim, self.linear_value_head_dim
        return (kc, hk, dk), (kc, hk, dk), (kc, hv, dv), (hv, dk, dv)

    def linear_state_bytes(self) -> int:
        """Bytes of one sequence's state across every gated DeltaNet layer."""
        item = 4 if self.dtype == "float32" else 2
        shapes = self.linear_state_shapes()
        short = self.linear_attention_kind == "short_conv"  # (no recurrence: convs alone)
        conv, rec = (shapes, ()) if short else (shapes[:-1], shapes[-1:])
        per_layer = sum(math.prod(s) for s in conv) * item + sum(math.prod(r) * 4 for r in rec)
        return per_layer * len(self.linear_attention_layers)

    @property
    def num_kv_layers(self) -> int:
        """Layers with a KV cache: the decoder layers, then the MTP layer when drafting."""
        return self.num_layers + (1 if self.mtp_drafts else 0)

    def kv_bytes_per_token(self, dtype_bytes: int | None = None) -> int:
        """KV-cache bytes one token occupies across all layers."""
        if dtype_bytes is None:
            dtype_bytes = 4 if self.dtype == "float32" else 2
        widths = sum(sum(self.layer_kv_widths(i)) for i in range(self.num_kv_layers))
        if self.is_dsv4:
            # The compressed entries, one per ratio tokens (rounded up); with the window pool
            # the per-token rows are a sequence's last v4_token_window tokens' only.
            widths = 0 if self.v4_window_pool else widths
            widths += sum(
                -(-sum(self.v4_entry_widths(i)) // self.v4_ratio(i))
                for i in range(self.num_layers)
                if self.v4_ratio(i)
            )
        return widths * dtype_bytes

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)
