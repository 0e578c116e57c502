"""Every weight declared once: shape, dtype, logical axes, initializer.

Init, shardings, abstract shapes and the checkpoint layout all derive from the tree
`param_specs(cfg)` returns. Layout (letters as in the einsums):

  embed [V, D]; final_norm [D]; lm_head [D, V] (absent when tied)
  layers[i]: attn_norm [D], mlp_norm [D], attn {...}, and either mlp {...} or moe {...}
  GQA attn: wq [D, H, Dh], wk [D, K, Dh], wv [D, K, Dv], wo [H, Dv, D] (Dv: v_head_dim,
            else Dh); bq [H, Dh], bk [K, Dh], bv [K, Dv] (attention_bias); q_norm/k_norm
            [Dh] (qk_norm; [H, Dh] / [K, Dh] with qk_norm_full, and Command R+'s); bo [D]
            (o_proj_bias);
            sinks [H] (attention_sinks; windowed layers only with windowed_sinks_only)
  MLA attn: wq [D, H, Dn+Dr] or wq_a [D, Rq], q_a_norm [Rq], wq_b [Rq, H, Dn+Dr];
            wkv_a [D, R+Dr], kv_a_norm [R], wkv_b [R, H, Dn+Dv], wo [H, Dv, D]
            (a nope layer: Dr 0 in wkv_a, Dn + Dr in wkv_b); rope_alpha [Dr/2]
            (learned_rope_scale, float32); q_scale / q_scale_bias [H] (query_log_scale);
            w_head_gate [D, H] (head_gate; GQA's too); mla_query_gate: wq_b [2Rq, H,
            Dn+Dr], wq_gate [2Rq, H, Dv];
            DSA indexer (index_topk): idx_wq [Rq, Hi, Di], idx_wk [D, Di],
            idx_k_norm / idx_k_bias [Di], idx_w [D, Hi] (float32); without a q LoRA
            idx_q_norm / idx_q_bias [D] and idx_wq [D, Hi, Di]; idx_q_scale /
            idx_q_scale_bias [Hi] (query_log_scale)
  mlp:      w_gate [D, F], w_up [D, F], w_down [F, D]
  moe:      router [D, E], router_bias [E] (noaux_tc), w_gate/w_up [E, D, Fe],
            w_down [E, Fe, D], shared {w_gate, w_up, w_down} with F = shared_expert_width,
            shared_gate [D] (Qwen2-MoE: the shared output times sigmoid(x @ shared_gate));
            expert_bias (gpt-oss): router_logit_bias [E], b_gate/b_up [E, Fe], b_down [E, D]
  linear (a gated DeltaNet layer, in place of attn: linear_attention_layers): wq/wk
            [D, Hk, dk], wv/wz [D, Hv, dv], wb/wa [D, Hv], conv_q/conv_k [C, Hk, dk],
            conv_v [C, Hv, dv], A_log/dt_bias [Hv], norm [dv], wo [Hv, dv, D]; KDA
            (kimi_delta) has wf_a/wg_a [D, dk], wf_b/wg_b [dk, Hv, dk], dt_bias [Hv, dk]
            in place of wz, wa (kda_full_rank: wf [D, Hv, dk] and wz); Mamba-2 (mamba2:
            wq, wk its C and B, wv its x, wa its dt) has no wb, conv_q/k/v_bias like its
            taps, D [Hv], norm [Hv, dv];
            GQA wq_gate [D, H, Dh] (attn_output_gate), gate_bias [H] (attn_gate_bias)
  Nemotron-H: relu2 MLPs and experts (mlp_act, expert_act) have no w_gate; a layer in
            no_ffn_layers no mlp_norm, mlp or moe; latent MoE (moe_latent_size L):
            latent_in [D, L], latent_out [L, D], experts [E, L, Fe] / [E, Fe, L]
  sandwich_norms (AFMoE): layers[i] also attn_post_norm, mlp_post_norm [D]; without
            pre_norms (FlexOlmo) no attn_norm, mlp_norm; moe_post_norm (A.X-K1): the MoE
            layers' mlp_post_norm alone; gated_norm_rank r (A.X K2): attn_norm_gate_a [D, r],
            attn_norm_gate_b [r, D], the MoE layers' mlp_norm_gate_a / _b too
  Gemma 4: a full-attention layer's wq/wk/wo at global_head_dim, global_num_kv_heads KV
            heads, no wv (attention_k_eq_v); dense_beside_moe: layers[i] mlp beside moe,
            mlp_out_norm / moe_norm / moe_out_norm [D], moe router_scale [D] and
            expert_scale [E]; layer_scalar [1] (layer_scalars); per-layer inputs
            (per_layer_input_dim P): ple_embed [Vp, L*P], ple_proj [D, L*P], ple_norm [P],
            layers[i] ple_gate [D, P], ple_out [P, D], ple_post_norm [D]; a layer reading
            an earlier one's K and V (kv_source_layers) no wk, wv, k_norm
  Gemma 3n (altup_num_inputs N, laurel_rank r): altup_proj / altup_unembed [N-1, D, D];
            layers[i] laurel_left [D, r], laurel_right [r, D], laurel_norm [D], altup
            {correct_scale [D], correction_coefs [N, N], prediction_coefs [N, N*N], router
            [D, N], router_norm [D]}
  Zamba2 (shared_blocks B, adapter_rank r): shared[b] {attn_norm [2D], attn {wq / wk / wv
            [2D, H, Dh], wo [H, Dh, D]}, mlp_norm [D], mlp}; a Mamba-2 layer attn_norm,
            linear; a shared block's run linear_out [D, D], gate_up_a [D, r], gate_up_b
            [r, 2F] (attention_adapters: q_a / k_a / v_a [2D, r], q_b / k_b / v_b [r, 2D])
  mtp (ModelConfig.mtp_drafts): enorm, hnorm, norm [D], eh_proj [2D, D], layer {...}
  DeepSeek-V4 (attention_type "dsv4", models/deepseek_v4.py): layers[i] also attn_hc /
            mlp_hc {fn [N*D, (2+N)*N], base [(2+N)*N], scale [3]}; attn wq_a [D, Rq],
            q_a_norm [Rq], wq_b [Rq, H, Dh], wkv [D, Dh], kv_norm [Dh], wo_a [H*Dh/G, G,
            Ro], wo_b [G*Ro, D], sinks [H]; compressed layers c_wkv / c_wgate [D, c*Dh],
            c_bias [m, c*Dh], c_norm [Dh] (c 2 for csa); csa i_wkv / i_wgate [D, 2Di],
            i_bias [m, 2Di], i_norm [Di], i_wq [Rq, Hi, Di], i_w [D, Hi]; moe tid2eid [V, k]
            (hash layers) or router_bias [E]; hc_head {fn [N*D, N], base [N], scale [1]}
            (norms, sinks, biases and hyper-connections float32, as transformers keeps them)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from configs.model_config import GATELESS_MLP_ACTS, ModelConfig
from models import quantization as quant

# (rng, shape, dtype) -> a host array. Random weights are drawn on the host with numpy: on
# XLA:CPU, jax.random compiled a threefry program per distinct leaf shape (~0.3 s each),
# so drawing a tiny model's weights took 4-8 s, against milliseconds here.
Initializer = Callable[[np.random.Generator, tuple[int, ...], Any], np.ndarray]


def normal(stddev: float) -> Initializer:
    def draw(rng: np.random.Generator, shape, dtype) -> np.ndarray:
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= np.float32(stddev)
        return x.astype(dtype)

    return draw


def ones(rng, shape, dtype):
    del rng
    return np.ones(shape, dtype)


def zeros(rng, shape, dtype):
    del rng
    return np.zeros(shape, dtype)


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One array: its shape, dtype, logical axis names (one per dim) and initializer."""

    shape: tuple[int, ...]
    dtype: Any
    axes: tuple[str | None, ...]
    init: Initializer = normal(0.02)

    def __post_init__(self):
        if len(self.shape) != len(self.axes):
            raise ValueError(f"ParamSpec: shape {self.shape} vs axes {self.axes}")


def is_spec(x: Any) -> bool:
    return isinstance(x, ParamSpec)


def _gqa_specs(cfg: ModelConfig, dt, w, layer: int = 0) -> dict:
    d, h = cfg.hidden_size, cfg.layer_num_heads(layer)
    k, dh = cfg.layer_num_kv_heads(layer), cfg.layer_head_dim(layer)
    dv = cfg.layer_v_head_dim(layer)
    s = {
        "wq": ParamSpec((d, h, dh), dt, ("embed", "q_heads", "head_dim"), w),
        "wk": ParamSpec((d, k, dh), dt, ("embed", "kv_heads", "head_dim"), w),
        "wv": ParamSpec((d, k, dv), dt, ("embed", "kv_heads", "head_dim"), w),
        "wo": ParamSpec((h, dv, d), dt, ("q_heads", "head_dim", "embed"), w),
    }
    if cfg.attention_bias:
        s["bq"] = ParamSpec((h, dh), dt, ("q_heads", "head_dim"), zeros)
        s["bk"] = ParamSpec((k, dh), dt, ("kv_heads", "head_dim"), zeros)
        s["bv"] = ParamSpec((k, dv), dt, ("kv_heads", "head_dim"), zeros)
    if cfg.qk_norm_full or (cfg.qk_norm and cfg.model_type == "cohere"):
        # OLMoE: one norm over all heads' channels; Command R+: a weight per head's channel
        s["q_norm"] = ParamSpec((h, dh), dt, ("q_heads", "head_dim"), ones)
        s["k_norm"] = ParamSpec((k, dh), dt, ("kv_heads", "head_dim"), ones)
    elif cfg.qk_norm:
        norm = zeros if cfg.norm_zero_centered else ones
        s["q_norm"] = ParamSpec((dh,), dt, ("head_dim",), norm)
        s["k_norm"] = ParamSpec((dh,), dt, ("head_dim",), norm)
        if cfg.norm_bias:  # (Persimmon: LayerNorms with a bias, shared by the heads)
            s["q_norm_bias"] = ParamSpec((dh,), dt, ("head_dim",), zeros)
            s["k_norm_bias"] = ParamSpec((dh,), dt, ("head_dim",), zeros)
    if cfg.attn_output_gate:
        s["wq_gate"] = ParamSpec((d, h, dh), dt, ("embed", "q_heads", "head_dim"), w)
    if cfg.attn_gate_bias:  # (Beam's, per head)
        s["gate_bias"] = ParamSpec((h,), dt, ("q_heads",), zeros)
    if cfg.head_gate:  # (LFM3: its output times sigmoid(x @ gate) per head)
        s["w_head_gate"] = ParamSpec((d, h), dt, ("embed", "q_heads"), w)
    if cfg.attention_k_eq_v and cfg.is_global_layer(layer):  # (Gemma 4: v is k's)
        del s["wv"]
    if cfg.kv_source(layer) != layer:  # (it reads an earlier layer's K and V)
        for name in ("wk", "wv", "k_norm", "k_norm_bias"):
            s.pop(name, None)
    if cfg.o_proj_bias:
        s["bo"] = ParamSpec((d,), dt, ("embed",), zeros)
    if cfg.layer_sinks(layer):  # (Flint keeps its sinks float32, as transformers does)
        sink_dt = jnp.float32 if cfg.model_type == "flint" else dt
        s["sinks"] = ParamSpec((h,), sink_dt, ("q_heads",), zeros)
    return s


def _mla_specs(cfg: ModelConfig, layer: int, dt, w) -> dict:
    d, h, r, dr = cfg.hidden_size, cfg.num_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim
    dq = cfg.qk_head_dim
    s = {}
    if cfg.q_lora_rank:
        rq = cfg.q_lora_rank
        s["wq_a"] = ParamSpec((d, rq), dt, ("embed", "q_lora"), w)
        s["q_a_norm"] = ParamSpec((rq,), dt, ("q_lora",), ones)
        if cfg.mla_query_gate:  # (A.X K2: from [normed, raw] latent, a gate per channel)
            rq, dv = 2 * rq, cfg.v_head_dim
            s["wq_gate"] = ParamSpec((rq, h, dv), dt, ("q_lora", "q_heads", "head_dim"), w)
        s["wq_b"] = ParamSpec((rq, h, dq), dt, ("q_lora", "q_heads", "head_dim"), w)
    else:
        s["wq"] = ParamSpec((d, h, dq), dt, ("embed", "q_heads", "head_dim"), w)
    if cfg.kv_source(layer) == layer:  # (else it reads an earlier layer's latent)
        # (A nope layer, Mistral Large 4's, has no rope channels: its latent alone.)
        s["wkv_a"] = ParamSpec((d, r + cfg.layer_rope_dim(layer)), dt, ("embed", "kv_lora"), w)
        s["kv_a_norm"] = ParamSpec((r,), dt, ("kv_lora",), ones)
    kv_b = (r, h, cfg.layer_nope_dim(layer) + cfg.v_head_dim)
    s["wkv_b"] = ParamSpec(kv_b, dt, ("kv_lora", "q_heads", "head_dim"), w)
    s["wo"] = ParamSpec((h, cfg.v_head_dim, d), dt, ("q_heads", "head_dim", "embed"), w)
    if cfg.head_gate:  # (Ling 2.5: its output times sigmoid(x @ gate) per head)
        s["w_head_gate"] = ParamSpec((d, h), dt, ("embed", "q_heads"), w)
    if cfg.learned_rope_scale:
        # LeRoPE's one alpha per frequency, the model's (each layer holds a copy), float32
        # as transformers keeps its rotary.
        s["rope_alpha"] = ParamSpec((dr // 2,), jnp.float32, (None,), zeros)
    if cfg.query_log_scale:
        s["q_scale"] = ParamSpec((h,), dt, ("q_heads",), zeros)
        s["q_scale_bias"] = ParamSpec((h,), dt, ("q_heads",), ones)
    if cfg.indexes(layer):
        # The lightning indexer (DeepSeek-V3.2), replicated: its queries from the q LoRA
        # (Mistral Large 4: from the LayerNormed hidden state, with the query log scale),
        # one key per token (LayerNorm with a bias) and a weight per index head, float32
        # (transformers keeps weights_proj so).
        hi, di = cfg.index_n_heads, cfg.index_head_dim
        if cfg.q_lora_rank:
            s["idx_wq"] = ParamSpec((cfg.q_lora_rank, hi, di), dt, (None, None, None), w)
        else:
            s["idx_q_norm"] = ParamSpec((d,), dt, (None,), ones)
            s["idx_q_bias"] = ParamSpec((d,), dt, (None,), zeros)
            s["idx_wq"] = ParamSpec((d, hi, di), dt, (None, None, None), w)
        if cfg.query_log_scale:
            s["idx_q_scale"] = ParamSpec((hi,), dt, (None,), zeros)
            s["idx_q_scale_bias"] = ParamSpec((hi,), dt, (None,), ones)
        s["idx_wk"] = ParamSpec((d, di), dt, (None, None), w)
        s["idx_k_norm"] = ParamSpec((di,), dt, (None,), ones)
        s["idx_k_bias"] = ParamSpec((di,), dt, (None,), zeros)
        s["idx_w"] = ParamSpec((d, hi), jnp.float32, (None, None), w)
    return s


def _mamba1_specs(cfg: ModelConfig, dt, w) -> dict:
    """A Mamba-1 layer: in_proj's x and gate halves wv / wz [D, Hv], the conv's taps [K, Hv]
    (and bias), x_proj's thirds w_dt [Hv, R] / w_b / w_c [Hv, N] (Jamba's with RMSNorms),
    dt_proj [R, Hv] and its bias, A_log [Hv, N], D [Hv], wo [Hv, D]."""
    d, hv, n = cfg.hidden_size, cfg.linear_num_value_heads, cfg.linear_key_head_dim
    r, taps, vh = cfg.mamba_dt_rank, cfg.linear_conv_kernel, "linear_v_heads"
    s = {
        "wv": ParamSpec((d, hv), dt, ("embed", vh), w),
        "wz": ParamSpec((d, hv), dt, ("embed", vh), w),
        "conv_v": ParamSpec((taps, hv), dt, (None, vh), w),
        "w_dt": ParamSpec((hv, r), dt, (vh, None), w),
        "w_b": ParamSpec((hv, n), dt, (vh, None), w),
        "w_c": ParamSpec((hv, n), dt, (vh, None), w),
        "dt_proj": ParamSpec((r, hv), dt, (None, vh), w),
        "dt_bias": ParamSpec((hv,), dt, (vh,), zeros),
        "A_log": ParamSpec((hv, n), dt, (vh, None), zeros),
        "D": ParamSpec((hv,), dt, (vh,), ones),
        "wo": ParamSpec((hv, d), dt, (vh, "embed"), w),
    }
    if cfg.linear_conv_bias:
        s["conv_v_bias"] = ParamSpec((hv,), dt, (vh,), zeros)
    if cfg.mamba1_norms == "weighted":  # (Jamba's)
        s |= {
            f"{x}_norm": ParamSpec((k,), dt, (None,), ones)
            for x, k in (("dt", r), ("b", n), ("c", n))
        }
    return s


def _linear_specs(cfg: ModelConfig, dt, w) -> dict:
    """A linear-attention layer (models/linear_attention.py), its projections split by what
    they make (transformers' fused in_proj_qkvz / in_proj_qkv are cut apart on load). KDA
    (linear_attention_kind "kimi_delta"): low-rank forget (wf_a, wf_b) and output (wg_a,
    wg_b) gates in place of wa and wz, dt_bias per key channel. LFM2's short conv
    (short_conv): w_b / w_c / w_x [D, D] (its in_proj's thirds), conv [K, D], wo [D, D].
    Lightning attention: wq / wk / wv / wz [D, H, dk], norm [H, dk] (one over all heads),
    wo [H, dk, D]."""
    d, hk, hv = cfg.hidden_size, cfg.linear_num_key_heads, cfg.linear_num_value_heads
    if cfg.linear_attention_kind == "mamba1":
        return _mamba1_specs(cfg, dt, w)
    if cfg.linear_attention_kind == "lightning":  # qkv_proj's thirds, output_gate, out_proj
        dk, heads = cfg.linear_key_head_dim, ("embed", "linear_v_heads", None)
        proj = {n: ParamSpec((d, hv, dk), dt, heads, w) for n in ("wq", "wk", "wv", "wz")}
        return proj | {
            "norm": ParamSpec((hv, dk), dt, ("linear_v_heads", None), ones),
            "wo": ParamSpec((hv, dk, d), dt, ("linear_v_heads", None, "embed"), w),
        }
    if cfg.linear_attention_kind == "short_conv":  # (small: replicated over the mesh)
        taps, full = cfg.linear_conv_kernel, ("embed", None)
        proj = {f"w_{x}": ParamSpec((d, d), dt, full, w) for x in "bcx"}
        conv = ParamSpec((taps, d), dt, (None, None), w)
        return proj | {"conv": conv, "wo": ParamSpec((d, d), dt, (None, "embed"), w)}
    dk, dv, taps = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel
    kh, vh = ("embed", "linear_k_heads", None), ("embed", "linear_v_heads", None)
    specs = {
        "wq": ParamSpec((d, hk, dk), dt, kh, w),
        "wk": ParamSpec((d, hk, dk), dt, kh, w),
        "wv": ParamSpec((d, hv, dv), dt, vh, w),
        "wb": ParamSpec((d, hv), dt, ("embed", "linear_v_heads"), w),
        "conv_q": ParamSpec((taps, hk, dk), dt, (None, "linear_k_heads", None), w),
        "conv_k": ParamSpec((taps, hk, dk), dt, (None, "linear_k_heads", None), w),
        "conv_v": ParamSpec((taps, hv, dv), dt, (None, "linear_v_heads", None), w),
        "A_log": ParamSpec((hv,), dt, ("linear_v_heads",), zeros),
        "norm": ParamSpec((dv,), dt, (None,), ones),
        "wo": ParamSpec((hv, dv, d), dt, ("linear_v_heads", None, "embed"), w),
    }
    if cfg.linear_attention_kind == "mamba2":  # wq, wk: C and B; wv: x; wa: dt
        hv_dv = (None, "linear_v_heads", None)
        biases = {
            "conv_q_bias": ParamSpec((hk, dk), dt, ("linear_k_heads", None), zeros),
            "conv_k_bias": ParamSpec((hk, dk), dt, ("linear_k_heads", None), zeros),
            "conv_v_bias": ParamSpec((hv, dv), dt, hv_dv[1:], zeros),
        }
        norm = {"norm": ParamSpec((hv, dv), dt, hv_dv[1:], ones)}  # per channel, per group
        return {k: v for k, v in specs.items() if k not in ("wb", "norm")} | {
            **(biases if cfg.linear_conv_bias else {}),
            "wz": ParamSpec((d, hv, dv), dt, vh, w),
            "wa": ParamSpec((d, hv), dt, ("embed", "linear_v_heads"), w),
            "dt_bias": ParamSpec((hv,), dt, ("linear_v_heads",), ones),
            "D": ParamSpec((hv,), dt, ("linear_v_heads",), ones),
            **(norm if cfg.mamba_gated_norm else {}),  # (Falcon-H1's: none)
        }
    if cfg.linear_attention_kind == "kimi_delta" and cfg.kda_full_rank:  # (Ling 2.5's)
        return specs | {
            "wf": ParamSpec((d, hv, dk), dt, vh, w),
            "dt_bias": ParamSpec((hv, dk), dt, ("linear_v_heads", None), ones),
            "wz": ParamSpec((d, hv, dv), dt, vh, w),
        }
    if cfg.linear_attention_kind == "kimi_delta":
        return specs | {
            "wf_a": ParamSpec((d, dk), dt, ("embed", None), w),
            "wf_b": ParamSpec((dk, hv, dk), dt, (None, "linear_v_heads", None), w),
            "dt_bias": ParamSpec((hv, dk), dt, ("linear_v_heads", None), ones),
            "wg_a": ParamSpec((d, dv), dt, ("embed", None), w),
            "wg_b": ParamSpec((dv, hv, dv), dt, (None, "linear_v_heads", None), w),
        }
    return specs | {
        "wz": ParamSpec((d, hv, dv), dt, vh, w),
        "wa": ParamSpec((d, hv), dt, ("embed", "linear_v_heads"), w),
        "dt_bias": ParamSpec((hv,), dt, ("linear_v_heads",), ones),
    }


def _constant(value: float) -> Initializer:
    return lambda rng, shape, dtype: jnp.full(shape, value, dtype)


# Apertus' xIELU parameters as transformers initializes them (alpha_p = softplus^-1(0.8),
# alpha_n = softplus^-1(0.8 - beta), beta 0.5, eps -1e-6), each [1].
_XIELU = {
    "act_alpha_p": math.log(math.expm1(0.8)),
    "act_alpha_n": math.log(math.expm1(0.3)),
    "act_beta": 0.5,
    "act_eps": -1e-6,
}


def _mlp_specs(
    d: int, f: int, dt, w, gated: bool = True, biased: bool = False, xielu: bool = False
) -> dict:
    """A dense MLP: SwiGLU, or (gated False: relu2, gelu, xielu) up and down alone; `biased`
    (StarCoder2's): b_up [F], b_down [D] too; `xielu` (Apertus'): its act_* [1] too."""
    biases = {
        "b_up": ParamSpec((f,), dt, ("mlp",), zeros),
        "b_down": ParamSpec((d,), dt, ("embed",), zeros),
    }
    acts = {k: ParamSpec((1,), dt, (None,), _constant(v)) for k, v in _XIELU.items()}
    return {
        **({"w_gate": ParamSpec((d, f), dt, ("embed", "mlp"), w)} if gated else {}),
        "w_up": ParamSpec((d, f), dt, ("embed", "mlp"), w),
        "w_down": ParamSpec((f, d), dt, ("mlp", "embed"), w),
        **(biases if biased else {}),
        **(acts if xielu else {}),
    }


def _moe_specs(cfg: ModelConfig, dt, w) -> dict:
    d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    dx = cfg.moe_latent_size or d  # the experts' input and output width
    fp32_router = cfg.topk_method == "noaux_tc" or cfg.model_type in (
        "mistral_large4_text",
        "hunyuan_v1_moe",
        "flint",
    )
    router_dt = jnp.float32 if fp32_router else dt
    s = {
        # DeepSeek-V3's, GLM's, Mistral Large 4's, Hunyuan's and Flint's routers stay float32
        # (transformers keeps `gate.weight` so, or builds it float32,
        # _keep_in_fp32_modules_strict): a bf16 copy of a float32 checkpoint's router would
        # move close expert choices.
        # (LongCat-Flash: its zero-computation experts' logits after the routed ones')
        "router": ParamSpec((d, e + cfg.zero_experts), router_dt, ("embed", None), w),
        "w_gate": ParamSpec((e, dx, f), dt, ("experts", "embed", "expert_mlp"), w),
        "w_up": ParamSpec((e, dx, f), dt, ("experts", "embed", "expert_mlp"), w),
        "w_down": ParamSpec((e, f, dx), dt, ("experts", "expert_mlp", "embed"), w),
    }
    if cfg.expert_act == "relu2":  # (no gate projection)
        del s["w_gate"]
    if cfg.moe_latent_size:  # Nemotron-H's latent MoE: the token down to the experts' width
        s["latent_in"] = ParamSpec((d, dx), dt, ("embed", None), w)
        s["latent_out"] = ParamSpec((dx, d), dt, (None, "embed"), w)
    if cfg.topk_method == "noaux_tc":
        # DeepSeek-V3 keeps the correction bias in float32.
        s["router_bias"] = ParamSpec((e + cfg.zero_experts,), jnp.float32, (None,), zeros)
    if cfg.expert_bias:
        s["router_logit_bias"] = ParamSpec((e,), dt, (None,), zeros)
        s["b_gate"] = ParamSpec((e, f), dt, ("experts", "expert_mlp"), zeros)
        s["b_up"] = ParamSpec((e, f), dt, ("experts", "expert_mlp"), zeros)
        s["b_down"] = ParamSpec((e, d), dt, ("experts", "embed"), zeros)
    if cfg.num_shared_experts:
        s["shared"] = _mlp_specs(d, cfg.shared_expert_width, dt, w, cfg.mlp_act != "relu2")
    if cfg.shared_expert_gate:
        s["shared_gate"] = ParamSpec((d,), dt, ("embed",), w)
    return s


def _hc_specs(cfg: ModelConfig, outputs: int, scales: int, w) -> dict:
    n, f32 = cfg.hc_mult, jnp.float32
    return {
        "fn": ParamSpec((n * cfg.hidden_size, outputs), f32, (None, None), w),
        "base": ParamSpec((outputs,), f32, (None,), zeros),
        "scale": ParamSpec((scales,), f32, (None,), ones),
    }


def _random_experts(num_experts: int) -> Initializer:
    """A hash table's init: each row k distinct experts."""

    def draw(rng, shape, dtype):
        rows = [rng.permutation(num_experts)[: shape[1]] for _ in range(shape[0])]
        return np.asarray(rows, dtype)

    return draw


def _v4_layer_specs(cfg: ModelConfig, i: int, dt, w) -> dict:
    """A DeepSeek-V4 decoder layer (the module docstring's layout)."""
    d, h, dh, rq = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.q_lora_rank
    f32, g, ro, kind = jnp.float32, cfg.o_groups, cfg.o_lora_rank, cfg.v4_layer_kinds[i]
    n = cfg.hc_mult
    attn = {
        "wq_a": ParamSpec((d, rq), dt, ("embed", "q_lora"), w),
        "q_a_norm": ParamSpec((rq,), f32, ("q_lora",), ones),
        "wq_b": ParamSpec((rq, h, dh), dt, ("q_lora", "q_heads", "head_dim"), w),
        "wkv": ParamSpec((d, dh), dt, ("embed", None), w),
        "kv_norm": ParamSpec((dh,), f32, (None,), ones),
        "wo_a": ParamSpec((h * dh // g, g, ro), dt, (None, None, None), w),
        "wo_b": ParamSpec((g * ro, d), dt, (None, "embed"), w),
        "sinks": ParamSpec((h,), f32, ("q_heads",), zeros),
    }
    ratio = cfg.v4_ratio(i)
    if ratio:
        c = 2 if kind == "csa" else 1
        attn["c_wkv"] = ParamSpec((d, c * dh), dt, ("embed", None), w)
        attn["c_wgate"] = ParamSpec((d, c * dh), dt, ("embed", None), w)
        attn["c_bias"] = ParamSpec((ratio, c * dh), f32, (None, None), zeros)
        attn["c_norm"] = ParamSpec((dh,), f32, (None,), ones)
    if kind == "csa":
        hi, di = cfg.index_n_heads, cfg.index_head_dim
        attn["i_wkv"] = ParamSpec((d, 2 * di), dt, ("embed", None), w)
        attn["i_wgate"] = ParamSpec((d, 2 * di), dt, ("embed", None), w)
        attn["i_bias"] = ParamSpec((ratio, 2 * di), f32, (None, None), zeros)
        attn["i_norm"] = ParamSpec((di,), f32, (None,), ones)
        attn["i_wq"] = ParamSpec((rq, hi, di), dt, (None, None, None), w)
        attn["i_w"] = ParamSpec((d, hi), dt, (None, None), w)
    moe = _moe_specs(cfg, dt, w)
    if i in cfg.hash_moe_layers:
        k = cfg.num_experts_per_tok
        table = _random_experts(cfg.num_experts)
        moe["tid2eid"] = ParamSpec((cfg.vocab_size, k), jnp.int32, (None, None), table)
    else:
        moe["router_bias"] = ParamSpec((cfg.num_experts,), f32, (None,), zeros)
    return {
        "attn_norm": ParamSpec((d,), f32, ("embed",), ones),
        "mlp_norm": ParamSpec((d,), f32, ("embed",), ones),
        "attn_hc": _hc_specs(cfg, (2 + n) * n, 3, w),
        "mlp_hc": _hc_specs(cfg, (2 + n) * n, 3, w),
        "attn": attn,
        "moe": moe,
    }


def _zamba2_layer_specs(cfg: ModelConfig, i: int, dt, w) -> dict:
    """Zamba2's layer i: a Mamba-2 layer's norm and mixer, or a shared block's run: its
    adapters (gate_up's; q / k / v's with attention_adapters) and output projection."""
    d, r = cfg.hidden_size, cfg.adapter_rank
    if cfg.is_linear_layer(i):
        return {
            "attn_norm": ParamSpec((d,), dt, ("embed",), ones),
            "linear": _linear_specs(cfg, dt, w),
        }
    layer = {"linear_out": ParamSpec((d, d), dt, ("embed", None), w)}
    widths = {"gate_up": (d, 2 * cfg.intermediate_size)}
    if cfg.attention_adapters:  # (2D in and out: MHA, heads of 2D / H)
        widths.update(q=(2 * d, 2 * d), k=(2 * d, 2 * d), v=(2 * d, 2 * d))
    for name, (into, out) in widths.items():
        layer[f"{name}_a"] = ParamSpec((into, r), dt, (None, None), w)
        layer[f"{name}_b"] = ParamSpec((r, out), dt, (None, None), w)
    return layer


def _shared_block_specs(cfg: ModelConfig, dt, w) -> dict:
    """A Zamba2 shared block: its attention over [x, embeddings] (2D wide) and its MLP."""
    d, h, k, dh = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    return {
        "attn_norm": ParamSpec((2 * d,), dt, (None,), ones),
        "attn": {
            "wq": ParamSpec((2 * d, h, dh), dt, (None, "q_heads", "head_dim"), w),
            "wk": ParamSpec((2 * d, k, dh), dt, (None, "kv_heads", "head_dim"), w),
            "wv": ParamSpec((2 * d, k, dh), dt, (None, "kv_heads", "head_dim"), w),
            "wo": ParamSpec((h, dh, d), dt, ("q_heads", "head_dim", "embed"), w),
        },
        "mlp_norm": ParamSpec((d,), dt, ("embed",), ones),
        "mlp": _mlp_specs(d, cfg.intermediate_size, dt, w),
    }


def _layer_specs(cfg: ModelConfig, i: int, moe: bool, dt, w) -> dict:
    if cfg.is_dsv4:
        return _v4_layer_specs(cfg, i, dt, w)
    if cfg.shared_blocks:
        return _zamba2_layer_specs(cfg, i, dt, w)
    d = cfg.hidden_size
    norm = zeros if cfg.norm_zero_centered else ones
    # (OLMo Hybrid's attention layers: OLMo 2's, the blocks' outputs normed, nothing before)
    post_normed = cfg.hybrid_post_norms and not cfg.is_linear_layer(i)
    pre_normed = cfg.pre_norms and not post_normed
    layer = {"attn_norm": ParamSpec((d,), dt, ("embed",), norm)} if pre_normed else {}
    if cfg.parallel_hybrid and cfg.is_linear_layer(i):  # (Falcon-H1: its pair's normed input)
        del layer["attn_norm"]
    if cfg.is_linear_layer(i):
        layer["linear"] = _linear_specs(cfg, dt, w)
    else:
        layer["attn"] = _mla_specs(cfg, i, dt, w) if cfg.is_mla else _gqa_specs(cfg, dt, w, i)
    if cfg.sandwich_norms or post_normed:  # (AFMoE: the blocks' outputs normed too)
        layer["attn_post_norm"] = ParamSpec((d,), dt, ("embed",), norm)
        layer["mlp_post_norm"] = ParamSpec((d,), dt, ("embed",), norm)
    if moe and cfg.moe_post_norm:  # (A.X-K1: the MoE layers' output normed)
        layer["mlp_post_norm"] = ParamSpec((d,), dt, ("embed",), norm)
    for name in ("attn_norm", "mlp_norm")[: 1 + moe] if cfg.gated_norm_rank else ():
        r = cfg.gated_norm_rank  # (A.X K2: its input norm, a MoE layer's second, gated)
        layer[f"{name}_gate_a"] = ParamSpec((d, r), dt, ("embed", None), w)
        layer[f"{name}_gate_b"] = ParamSpec((r, d), dt, (None, "embed"), w)
    if i in cfg.no_ffn_layers:  # (Nemotron-H: a mixer alone)
        return layer
    # (Cohere: one norm before both blocks; GPT-NeoX: one each, side by side)
    one_norm = cfg.parallel_block and not cfg.parallel_norms
    if pre_normed and not one_norm:
        layer["mlp_norm"] = ParamSpec((d,), dt, ("embed",), norm)
    if cfg.norm_bias:  # (Phi-3.5-MoE's LayerNorms; Phi-2's one before both blocks)
        for name in ("attn_norm_bias",) + (() if one_norm else ("mlp_norm_bias",)):
            layer[name] = ParamSpec((d,), dt, ("embed",), zeros)
    if moe:
        layer["moe"] = _moe_specs(cfg, dt, w)
    if not moe or cfg.dense_beside_moe or cfg.shortcut_moe:
        gated = cfg.mlp_act not in GATELESS_MLP_ACTS
        xielu = cfg.mlp_act == "xielu"
        width = cfg.layer_intermediate_size(i)
        layer["mlp"] = _mlp_specs(d, width, dt, w, gated, cfg.mlp_bias, xielu)
    if moe and cfg.dense_beside_moe:  # Gemma 4: the dense output's norm, the experts' two
        for name in ("mlp_out_norm", "moe_norm", "moe_out_norm"):
            layer[name] = ParamSpec((d,), dt, ("embed",), norm)
        layer["moe"]["router_scale"] = ParamSpec((d,), dt, ("embed",), ones)
        layer["moe"]["expert_scale"] = ParamSpec((cfg.num_experts,), dt, (None,), ones)
    if cfg.per_layer_input_dim:  # (Gemma 4 E2B / E4B: its per-layer input's gate)
        p = cfg.per_layer_input_dim
        layer["ple_gate"] = ParamSpec((d, p), dt, ("embed", None), w)
        layer["ple_out"] = ParamSpec((p, d), dt, (None, "embed"), w)
        layer["ple_post_norm"] = ParamSpec((d,), dt, ("embed",), norm)
    if cfg.layer_scalars:
        layer["layer_scalar"] = ParamSpec((1,), dt, (None,), ones)
    if cfg.altup_num_inputs:  # (Gemma 3n: its LAuReL block and AltUp, models/gemma3n.py)
        n, r = cfg.altup_num_inputs, cfg.laurel_rank
        layer["laurel_left"] = ParamSpec((d, r), dt, ("embed", None), w)
        layer["laurel_right"] = ParamSpec((r, d), dt, (None, "embed"), w)
        layer["laurel_norm"] = ParamSpec((d,), dt, ("embed",), norm)
        layer["altup"] = {
            "correct_scale": ParamSpec((d,), dt, ("embed",), ones),
            "correction_coefs": ParamSpec((n, n), dt, (None, None), w),
            "prediction_coefs": ParamSpec((n, n * n), dt, (None, None), w),
            "router": ParamSpec((d, n), dt, ("embed", None), w),
            "router_norm": ParamSpec((d,), dt, ("embed",), norm),
        }
    return layer


def param_specs(cfg: ModelConfig, init_std: float = 0.02) -> dict:
    """The model's parameter tree, with a ParamSpec at every leaf."""
    dt = jnp.dtype(cfg.dtype)
    w = normal(init_std)
    d, v = cfg.hidden_size, cfg.vocab_size
    specs = {
        "embed": ParamSpec((v, d), dt, ("vocab", "embed"), w),
        "layers": [_layer_specs(cfg, i, cfg.is_moe_layer(i), dt, w) for i in range(cfg.num_layers)],
        "final_norm": ParamSpec((d,), dt, ("embed",), zeros if cfg.norm_zero_centered else ones),
    }
    if cfg.per_layer_input_dim:  # (Gemma 4 E2B / E4B: models.transformer.per_layer_inputs)
        rows, width = cfg.per_layer_vocab_size or v, cfg.num_layers * cfg.per_layer_input_dim
        specs["ple_embed"] = ParamSpec((rows, width), dt, ("vocab", None), w)
        specs["ple_proj"] = ParamSpec((d, width), dt, ("embed", None), w)
        specs["ple_norm"] = ParamSpec((cfg.per_layer_input_dim,), dt, (None,), ones)
    if cfg.shared_blocks:  # (Zamba2: models/zamba2.py)
        specs["shared"] = [_shared_block_specs(cfg, dt, w) for _ in range(cfg.shared_blocks)]
    if cfg.altup_num_inputs:  # (Gemma 3n: its streams' projections, out and back)
        streams = (cfg.altup_num_inputs - 1, d, d)
        specs["altup_proj"] = ParamSpec(streams, dt, (None, None, None), w)
        specs["altup_unembed"] = ParamSpec(streams, dt, (None, None, None), w)
    if cfg.learned_positions:  # (GPT-BigCode: a learned embedding per position)
        rows = cfg.max_position_embeddings + cfg.position_offset  # (OPT's: 2 rows before)
        specs["pos_embed"] = ParamSpec((rows, d), dt, (None, "embed"), w)
    if cfg.embed_norm:  # (BLOOM: the embeddings LayerNormed, bias and all)
        specs["embed_norm"] = ParamSpec((d,), dt, ("embed",), ones)
        if cfg.norm_bias:
            specs["embed_norm_bias"] = ParamSpec((d,), dt, ("embed",), zeros)
    if cfg.norm_weightless:  # (OLMo 1, NanoChat: their norms hold nothing)
        del specs["final_norm"]
        specs.pop("embed_norm", None)
        for layer in specs["layers"]:
            for name in ("attn_norm", "mlp_norm"):
                layer.pop(name, None)
    if cfg.is_dsv4:
        specs["final_norm"] = ParamSpec((d,), jnp.float32, ("embed",), ones)
        specs["hc_head"] = _hc_specs(cfg, cfg.hc_mult, 1, w)
    if cfg.mtp_drafts:
        # The MTP module (engine/mtp.py): enorm / hnorm on the next token's embedding and the
        # model's last hidden state, eh_proj [2D, D] over the two, one decoder layer (MoE
        # always, as transformers' MtpModel builds it), and `norm` before the shared lm_head.
        specs["mtp"] = {
            "enorm": ParamSpec((d,), dt, ("embed",), ones),
            "hnorm": ParamSpec((d,), dt, ("embed",), ones),
            "eh_proj": ParamSpec((2 * d, d), dt, (None, "embed"), w),
            "layer": _layer_specs(cfg, cfg.num_layers, bool(cfg.num_experts), dt, w),
            "norm": ParamSpec((d,), dt, ("embed",), ones),
        }
    if not cfg.tie_word_embeddings:  # (Apertus 1.5's pruned: output_vocab_size rows)
        specs["lm_head"] = ParamSpec((d, cfg.output_vocab_size or v), dt, ("embed", "vocab"), w)
    if cfg.norm_bias:  # (Phi-3.5-MoE)
        specs["final_norm_bias"] = ParamSpec((d,), dt, ("embed",), zeros)
    if cfg.lm_head_bias:
        specs["lm_head_bias"] = ParamSpec((v,), dt, ("vocab",), zeros)
    if cfg.quantization:
        block = quant.our_block(cfg.quantization_block)
        bits = quant.bits_of(cfg.quantization)
        specs = quant.map_quantized(
            specs,
            lambda s, *a: _quantized_spec(
                s, *a, block, bits, cfg.quantization_zero_point, cfg.quantization_act_order
            ),
            cfg.quantization_skip,
        )
    return specs


def _quantized_spec(
    s: ParamSpec,
    lead: int,
    k_dims: int,
    name: str,
    block,
    bits: int = 8,
    zero_point: bool = False,
    act_order: bool = False,
) -> quant.QuantizedWeight:
    """The fp8 data (bits=4: int4 values packed two to a byte along the last contracted
    axis) and float32 block scales that hold the weight `s` declares: the scales split like
    the data's leading (expert) axes, whole along the rest (blocks one output wide: split
    along the outputs too, sharding.rules._scales_along_outputs); int4 with `zero_point` and
    `act_order` (a GPTQ / AWQ checkpoint's) its zero points and group indices too."""
    del name
    scale = quant.scale_shape(s.shape, lead, k_dims, block)
    shape, dtype = s.shape, quant.FP8
    if bits == 4:
        axis = lead + k_dims - 1
        shape, dtype = (*shape[:axis], -(-shape[axis] // 2), *shape[axis + 1 :]), jnp.uint8
    per_block = s.axes[:lead] + (None, None)
    zero = g_idx = None
    if bits == 4 and zero_point:  # GPTQ / AWQ: zero points like the scales; act order
        zero = ParamSpec(scale, jnp.int8, per_block, zeros)
    if bits == 4 and act_order:
        k, _ = quant.matrix_dims(s.shape, lead, k_dims)
        g_idx = ParamSpec(
            (*s.shape[:lead], k), jnp.int32, s.axes[:lead] + (None,), _in_order(block[0])
        )
    return quant.QuantizedWeight(
        ParamSpec(shape, dtype, s.axes, s.init),
        ParamSpec(scale, quant.SCALE_DTYPE, per_block, ones),
        lead,
        k_dims,
        block,
        bits,
        zero,
        g_idx,
    )


def _in_order(group: int) -> Callable:
    """The init of a g_idx spec: each contracted index in its own position's group."""

    def init(rng, shape, dtype):
        del rng
        return quant.groups_in_order(shape, group).astype(dtype)

    return init


def init_params(
    cfg: ModelConfig, key: jax.Array | int, init_std: float = 0.02, host: bool = False
) -> dict:
    """Random parameters following `param_specs`, drawn from `key` (a jax PRNG key or an
    int seed): the leaves in tree order from one numpy generator seeded with the key's
    data, so a key always gives the same weights. On the default device, or with
    `host=True` as numpy arrays."""
    if not isinstance(key, int):
        key = jnp.asarray(key)
        key = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
        key = np.asarray(key, np.uint32).ravel().tolist()
    rng = np.random.default_rng(key)
    # fp8 weights: drawn in the model dtype, then quantized (the same draws either way).
    specs = param_specs(cfg.replace(quantization=None), init_std)
    params = jax.tree.map(lambda s: s.init(rng, s.shape, s.dtype), specs, is_leaf=is_spec)
    if cfg.quantization:
        params = quant.quantize_params(
            params, quant.our_block(cfg.quantization_block), cfg.quantization_skip, cfg=cfg
        )
    return params if host else jax.tree.map(jnp.asarray, params)


def abstract_params(cfg: ModelConfig) -> dict:
    """`jax.ShapeDtypeStruct` tree of the params (no allocation)."""
    return jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype), param_specs(cfg), is_leaf=is_spec
    )


def count_bytes(cfg: ModelConfig) -> tuple[int, int]:
    """(total, active per token) bytes of the params as the engine holds them: fp8 / int4
    data and their float32 scales where `cfg.quantization` quantizes, else each leaf's dtype."""
    tree = abstract_params(cfg)
    total = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))
    inactive = 0
    for layer in tree["layers"]:
        if "moe" in layer:
            moe = layer["moe"]
            leaves = [
                x
                for k in ("w_gate", "w_up", "w_down", "b_gate", "b_up", "b_down")
                if k in moe
                for x in jax.tree.leaves(moe[k])
            ]
            per_expert = sum(x.size * x.dtype.itemsize for x in leaves) // cfg.num_experts
            inactive += per_expert * (cfg.num_experts - cfg.num_experts_per_tok)
    return total, total - inactive


def count_params(cfg: ModelConfig) -> tuple[int, int]:
    """(total, active per token) parameter counts, from the abstract tree (a quantized
    weight counts as its values, not its scales)."""
    tree = abstract_params(cfg.replace(quantization=None))
    total = sum(x.size for x in jax.tree.leaves(tree))
    inactive = 0
    for layer in tree["layers"]:
        if "moe" in layer:
            moe = layer["moe"]
            per_expert = (
                sum(
                    moe[k].size
                    for k in ("w_gate", "w_up", "w_down", "b_gate", "b_up", "b_down")
                    if k in moe
                )
                // cfg.num_experts
            )
            inactive += per_expert * (cfg.num_experts - cfg.num_experts_per_tok)
    return total, total - inactive
