"""Checkpoint names of Zamba2 (transformers' zamba2; models/zamba2.py), for
models/checkpoint_names.py.

HF layer j is a Mamba-2 layer (model.layers.j.mamba, .input_layernorm) or a hybrid one
(model.layers.j.mamba_decoder.*, its projection model.layers.j.linear, and
shared_transformer: the run of a shared block). transformers ties each block's tensors across
its runs and saves them once, under the first hybrid layer that runs the block, the adapters
of all of its runs there too (..._adapter_list.{run}.0 / .1, run counting the hybrid layers);
the copies a checkpoint may hold under later layers are not read."""

from __future__ import annotations

from configs.model_config import ModelConfig
from models.hf_tensors import HFTensor
from models.hf_tensors import linear as _linear
from models.hf_tensors import vector as _vector
from models.linear_names import mamba2_names


def zamba2_names(cfg: ModelConfig) -> dict[str, HFTensor]:
    """Every tensor a Zamba2 checkpoint of `cfg` must hold -> its shape and params target."""
    d, v, f, r = cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size, cfg.adapter_rank
    names = {
        "model.embed_tokens.weight": HFTensor((v, d), (("embed",),), "copy"),
        "model.final_layernorm.weight": _vector(d, ("final_norm",)),
    }
    if not cfg.tie_word_embeddings:
        names["lm_head.weight"] = _linear(v, d, ("lm_head",))
    hf, run, holder = 0, 0, {}  # (holder: each block's first hybrid layer)
    for i in range(cfg.num_layers):
        at = ("layers", i)
        if cfg.is_linear_layer(i):
            hybrid = i > 0 and not cfg.is_linear_layer(i - 1)
            pre = f"model.layers.{hf}" + (".mamba_decoder" if hybrid else "")
            names[f"{pre}.input_layernorm.weight"] = _vector(d, at + ("attn_norm",))
            names.update(mamba2_names(cfg, f"{pre}.mamba", at + ("linear",)))
            hf += 1
            continue
        block = run % cfg.shared_blocks
        holder.setdefault(block, hf)
        names[f"model.layers.{hf}.linear.weight"] = _linear(d, d, at + ("linear_out",))
        shared = f"model.layers.{holder[block]}.shared_transformer"
        adapters = {"gate_up": (f"{shared}.feed_forward.gate_up_proj_adapter_list", d, 2 * f)}
        if cfg.attention_adapters:
            for x in ("q", "k", "v"):
                adapters[x] = (f"{shared}.self_attn.linear_{x}_adapter_list", 2 * d, 2 * d)
        for name, (pre, into, out) in adapters.items():
            names[f"{pre}.{run}.0.weight"] = _linear(r, into, at + (f"{name}_a",))
            names[f"{pre}.{run}.1.weight"] = _linear(out, r, at + (f"{name}_b",))
        if holder[block] == hf:
            names.update(_block_names(cfg, shared, ("shared", block)))
        run += 1
    return names


def _block_names(cfg: ModelConfig, pre: str, at: tuple) -> dict[str, HFTensor]:
    """A shared block's own tensors (its attention over 2D inputs, its MLP)."""
    d, f = cfg.hidden_size, cfg.intermediate_size
    h, k, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    a, m = at + ("attn",), at + ("mlp",)
    return {
        f"{pre}.input_layernorm.weight": _vector(2 * d, at + ("attn_norm",)),
        f"{pre}.self_attn.q_proj.weight": _linear(h * dh, 2 * d, a + ("wq",)),
        f"{pre}.self_attn.k_proj.weight": _linear(k * dh, 2 * d, a + ("wk",)),
        f"{pre}.self_attn.v_proj.weight": _linear(k * dh, 2 * d, a + ("wv",)),
        f"{pre}.self_attn.o_proj.weight": _linear(d, h * dh, a + ("wo",)),
        f"{pre}.pre_ff_layernorm.weight": _vector(d, at + ("mlp_norm",)),
        f"{pre}.feed_forward.gate_up_proj.weight": HFTensor(
            (2 * f, d), (m + ("w_gate",), m + ("w_up",)), "grouped", groups=1
        ),
        f"{pre}.feed_forward.down_proj.weight": _linear(d, f, m + ("w_down",)),
    }
