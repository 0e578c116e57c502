"""The tensors of a linear-attention (or state-space) layer in a Hugging Face checkpoint, per
kind: gated DeltaNet (Qwen3-Next's, Qwen3.5's), KDA (Kimi-Linear's, Ling 2.5's), Mamba-1
(Jamba's), Mamba-2 (Nemotron-H's, Granite 4.0's), lightning attention (MiniMax-01's) and
LFM2's short convolution (models/checkpoint_names.py takes them for the layers
ModelConfig.is_linear_layer names)."""

from __future__ import annotations

from configs.model_config import ModelConfig
from models.hf_tensors import HFTensor, Path_
from models.hf_tensors import linear as _linear
from models.hf_tensors import vector as _vector


def linear_attn_names(cfg: ModelConfig, pre: str, at: Path_) -> dict[str, HFTensor]:
    """A gated DeltaNet layer: Qwen3-Next's fused in_proj_qkvz / in_proj_ba (grouped by key
    head: its q, k, then its value heads' v, then their z; its value heads' b, then a) or
    Qwen3.5's in_proj_qkv (all q, all k, all v) and in_proj_z / _b / _a; the conv over the
    q, k, v channels in that order."""
    d, hk, hv = cfg.hidden_size, cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv, taps = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel
    if cfg.linear_attention_kind == "kimi_delta":
        return _kda_names(cfg, pre, at)
    if cfg.linear_attention_kind == "mamba2":
        return mamba2_names(cfg, pre, at)
    if cfg.linear_attention_kind == "mamba1":
        return _mamba1_names(cfg, pre, at)
    if cfg.linear_attention_kind == "lightning":  # MiniMax-01's: qkv_proj's rows per head q, k, v
        return {
            f"{pre}.qkv_proj.weight": HFTensor(
                (3 * hv * dk, d), tuple(at + (w,) for w in ("wq", "wk", "wv")), "grouped", groups=hv
            ),
            f"{pre}.output_gate.weight": _linear(hv * dk, d, at + ("wz",)),
            f"{pre}.norm.weight": _vector(hv * dk, at + ("norm",)),
            f"{pre}.out_proj.weight": _linear(d, hv * dk, at + ("wo",)),
        }
    if cfg.linear_attention_kind == "short_conv":  # LFM2's: in_proj's rows B, then C, then x
        bcx = tuple(at + (f"w_{x}",) for x in "bcx")
        return {
            f"{pre}.in_proj.weight": HFTensor((3 * d, d), bcx, "grouped"),
            f"{pre}.conv.weight": HFTensor((d, 1, taps), (at + ("conv",),), "grouped"),
            f"{pre}.out_proj.weight": _linear(d, d, at + ("wo",)),
        }
    qkv = tuple(at + (w,) for w in ("wq", "wk", "wv"))
    width = 2 * hk * dk + hv * dv
    names = {
        f"{pre}.conv1d.weight": HFTensor(
            (width, 1, taps), tuple(at + (w,) for w in ("conv_q", "conv_k", "conv_v")), "grouped"
        ),
        f"{pre}.A_log": _vector(hv, at + ("A_log",)),
        f"{pre}.dt_bias": _vector(hv, at + ("dt_bias",)),
        f"{pre}.norm.weight": _vector(dv, at + ("norm",)),
        f"{pre}.out_proj.weight": _linear(d, hv * dv, at + ("wo",)),
    }
    if cfg.model_type == "olmo_hybrid":  # a projection and a conv each (g_proj: the gate)
        # (its conv: q, k, v convs in the checkpoint, read as one: release_names.JOINED)
        keep = ("conv1d.weight", "A_log", "dt_bias")
        names = {n: t for n, t in names.items() if n.endswith(keep)}
        names[f"{pre}.o_norm.weight"] = _vector(dv, at + ("norm",))
        names[f"{pre}.o_proj.weight"] = _linear(d, hv * dv, at + ("wo",))
        rows = {"q": hk * dk, "k": hk * dk, "v": hv * dv, "g": hv * dv, "b": hv, "a": hv}
        for x, n in rows.items():
            names[f"{pre}.{x}_proj.weight"] = _linear(n, d, at + ("wz" if x == "g" else f"w{x}",))
        return names
    if cfg.model_type == "lara_mini":  # (its in_proj: all q, k, v, z, b, a; out_norm)
        names[f"{pre}.out_norm.weight"] = names.pop(f"{pre}.norm.weight")
        rows = (*qkv, at + ("wz",), at + ("wb",), at + ("wa",))
        names[f"{pre}.in_proj.weight"] = HFTensor((width + hv * dv + 2 * hv, d), rows, "grouped")
        return names
    if cfg.model_type == "qwen3_next":
        names[f"{pre}.in_proj_qkvz.weight"] = HFTensor(
            (width + hv * dv, d), (*qkv, at + ("wz",)), "grouped", groups=hk
        )
        names[f"{pre}.in_proj_ba.weight"] = HFTensor(
            (2 * hv, d), (at + ("wb",), at + ("wa",)), "grouped", groups=hk
        )
        return names
    names[f"{pre}.in_proj_qkv.weight"] = HFTensor((width, d), qkv, "grouped")
    names[f"{pre}.in_proj_z.weight"] = _linear(hv * dv, d, at + ("wz",))
    names[f"{pre}.in_proj_b.weight"] = _linear(hv, d, at + ("wb",))
    names[f"{pre}.in_proj_a.weight"] = _linear(hv, d, at + ("wa",))
    return names


def _mamba1_names(cfg: ModelConfig, pre: str, at: Path_) -> dict[str, HFTensor]:
    """A Mamba-1 layer (Jamba's, Mamba's, Falcon Mamba's): in_proj's rows x then gate,
    x_proj's dt then B then C."""
    d, hv, n = cfg.hidden_size, cfg.linear_num_value_heads, cfg.linear_key_head_dim
    r, taps = cfg.mamba_dt_rank, cfg.linear_conv_kernel
    names = {
        f"{pre}.in_proj.weight": HFTensor((2 * hv, d), (at + ("wv",), at + ("wz",)), "grouped"),
        f"{pre}.conv1d.weight": HFTensor((hv, 1, taps), (at + ("conv_v",),), "grouped"),
        f"{pre}.x_proj.weight": HFTensor(
            (r + 2 * n, hv), tuple(at + (w,) for w in ("w_dt", "w_b", "w_c")), "grouped"
        ),
        f"{pre}.dt_proj.weight": _linear(hv, r, at + ("dt_proj",)),
        f"{pre}.dt_proj.bias": _vector(hv, at + ("dt_bias",)),
        f"{pre}.A_log": HFTensor((hv, n), (at + ("A_log",),), "copy"),
        f"{pre}.D": _vector(hv, at + ("D",)),
        f"{pre}.out_proj.weight": _linear(d, hv, at + ("wo",)),
    }
    if cfg.mamba1_norms == "weighted":  # (Falcon Mamba's have no weights)
        for x, width in (("dt", r), ("b", n), ("c", n)):
            names[f"{pre}.{x}_layernorm.weight"] = _vector(width, at + (f"{x}_norm",))
    if cfg.linear_conv_bias:
        names[f"{pre}.conv1d.bias"] = _vector(hv, at + ("conv_v_bias",))
    return names


def _kda_names(cfg: ModelConfig, pre: str, at: Path_) -> dict[str, HFTensor]:
    """A KDA layer (Kimi-Linear, its release's names under self_attn): q/k/v projections
    and convs of their own, the low-rank forget (f_a, f_b) and output (g_a, g_b) gates,
    A_log stored [1, 1, H, 1], dt_bias [H * dk]."""
    d, h, dk = cfg.hidden_size, cfg.linear_num_value_heads, cfg.linear_key_head_dim
    taps = cfg.linear_conv_kernel
    names = {
        f"{pre}.b_proj.weight": _linear(h, d, at + ("wb",)),
        f"{pre}.f_a_proj.weight": _linear(dk, d, at + ("wf_a",)),
        f"{pre}.f_b_proj.weight": _linear(h * dk, dk, at + ("wf_b",)),
        f"{pre}.g_a_proj.weight": _linear(dk, d, at + ("wg_a",)),
        f"{pre}.g_b_proj.weight": _linear(h * dk, dk, at + ("wg_b",)),
        f"{pre}.A_log": HFTensor((1, 1, h, 1), (at + ("A_log",),), "copy"),
        f"{pre}.dt_bias": _vector(h * dk, at + ("dt_bias",)),
        f"{pre}.o_norm.weight": _vector(dk, at + ("norm",)),
        f"{pre}.o_proj.weight": _linear(d, h * dk, at + ("wo",)),
    }
    if cfg.kda_full_rank:  # Ling 2.5: full-rank gates, A_log [H]
        for low_rank in ("f_a_proj", "f_b_proj", "g_a_proj", "g_b_proj"):
            del names[f"{pre}.{low_rank}.weight"]
        names[f"{pre}.f_proj.weight"] = _linear(h * dk, d, at + ("wf",))
        names[f"{pre}.g_proj.weight"] = _linear(h * dk, d, at + ("wz",))
        names[f"{pre}.A_log"] = _vector(h, at + ("A_log",))
    for x in "qkv":
        names[f"{pre}.{x}_proj.weight"] = _linear(h * dk, d, at + (f"w{x}",))
        names[f"{pre}.{x}_conv1d.weight"] = HFTensor(
            (h * dk, 1, taps), (at + (f"conv_{x}",),), "grouped"
        )
    return names


def mamba2_names(cfg: ModelConfig, m: str, li: Path_) -> dict[str, HFTensor]:
    """A Mamba-2 mixer (Nemotron-H's, Granite 4.0's): in_proj's rows z | x | B | C | dt, its
    conv's channels x | B | C (and their biases), A_log, D, dt_bias, the gated norm's weight
    over every channel, out_proj."""
    d, hk, hv = cfg.hidden_size, cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv, taps = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel
    rows = tuple(li + (w,) for w in ("wz", "wv", "wk", "wq", "wa"))
    conv = 2 * hk * dk + hv * dv
    convs = ("conv_v", "conv_k", "conv_q")
    names = {
        f"{m}.in_proj.weight": HFTensor((hv * dv + conv + hv, d), rows, "grouped"),
        f"{m}.conv1d.weight": HFTensor((conv, 1, taps), tuple(li + (c,) for c in convs), "grouped"),
        f"{m}.out_proj.weight": _linear(d, hv * dv, li + ("wo",)),
        **{f"{m}.{leaf}": _vector(hv, li + (leaf,)) for leaf in ("A_log", "D", "dt_bias")},
    }
    if cfg.mamba_gated_norm:  # (Falcon-H1's mixers have none)
        names[f"{m}.norm.weight"] = _vector(hv * dv, li + ("norm",))
    if cfg.linear_conv_bias:
        biases = tuple(li + (c + "_bias",) for c in convs)
        names[f"{m}.conv1d.bias"] = HFTensor((conv,), biases, "grouped")
    return names
