"""Checkpoint names of Gemma 4's layer layout (transformers' gemma4_text) and of Gemma 3n's
(gemma3n_text: the same, without layer scalars, with its AltUp and LAuReL tensors and the
model's stream projections), for models/checkpoint_names.py."""

from __future__ import annotations

from configs.model_config import ModelConfig
from models.expert_names import mlp_names
from models.hf_tensors import HFTensor, Path_
from models.hf_tensors import linear as _linear
from models.hf_tensors import vector as _vector

# Gemma 4's layer layout (its norms around each block, its MLP's and per-layer inputs' names),
# Gemma 3n's too.
GEMMA_LAYOUT = ("gemma4_text", "gemma3n_text")


def gemma_layer_names(cfg: ModelConfig, layer: str, at: Path_, moe: bool) -> dict[str, HFTensor]:
    """Gemma 4's norms after its blocks and around its feed-forward halves, its layer
    scalar, its dense MLP and (moe) the experts beside it: the router's projection, scale
    and per-expert scales, the experts fused [E, 2F, D] (gate rows, then up) and [E, D, F]."""
    d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    norms = {
        "post_attention_layernorm": "attn_post_norm",
        "pre_feedforward_layernorm": "mlp_norm",
        "post_feedforward_layernorm": "mlp_post_norm",
    }
    if moe:
        norms["post_feedforward_layernorm_1"] = "mlp_out_norm"
        norms["pre_feedforward_layernorm_2"] = "moe_norm"
        norms["post_feedforward_layernorm_2"] = "moe_out_norm"
    names = {f"{layer}.{hf}.weight": _vector(d, at + (ours,)) for hf, ours in norms.items()}
    if cfg.layer_scalars:
        names[f"{layer}.layer_scalar"] = _vector(1, at + ("layer_scalar",))
    if cfg.altup_num_inputs:  # (Gemma 3n: its LAuReL block and AltUp)
        names.update(altup_names(cfg, layer, at))
    width = cfg.layer_intermediate_size(at[1] if at[0] == "layers" else 0)
    names.update(mlp_names(d, width, f"{layer}.mlp", at + ("mlp",)))
    if cfg.per_layer_input_dim:  # (E2B / E4B: the per-layer input's gate, projection, norm)
        p = cfg.per_layer_input_dim
        names[f"{layer}.per_layer_input_gate.weight"] = _linear(p, d, at + ("ple_gate",))
        names[f"{layer}.per_layer_projection.weight"] = _linear(d, p, at + ("ple_out",))
        names[f"{layer}.post_per_layer_input_norm.weight"] = _vector(d, at + ("ple_post_norm",))
    if moe:
        m = at + ("moe",)
        names[f"{layer}.router.proj.weight"] = _linear(e, d, m + ("router",))
        names[f"{layer}.router.scale"] = _vector(d, m + ("router_scale",))
        names[f"{layer}.router.per_expert_scale"] = _vector(e, m + ("expert_scale",))
        gate_up = (m + ("w_gate",), m + ("w_up",))
        names[f"{layer}.experts.gate_up_proj"] = HFTensor((e, 2 * f, d), gate_up, "gate_up")
        names[f"{layer}.experts.down_proj"] = HFTensor((e, d, f), (m + ("w_down",),), "experts_T")
    return names


def altup_names(cfg: ModelConfig, layer: str | None = None, at: Path_ = ()) -> dict[str, HFTensor]:
    """Gemma 3n's checkpoint names beyond Gemma 4's layout: with `layer` its AltUp and
    LAuReL tensors, else the model's stream projections (N - 1 each way, [D, D])."""
    d, n, r = cfg.hidden_size, cfg.altup_num_inputs, cfg.laurel_rank
    if layer is None:
        names = {}
        for k in range(n - 1):
            for hf, ours in (
                ("altup_projections", "altup_proj"),
                ("altup_unembed_projections", "altup_unembed"),
            ):
                names[f"model.{hf}.{k}.weight"] = HFTensor((d, d), ((ours,),), "expert", expert=k)
        return names
    alt = at + ("altup",)
    return {
        f"{layer}.laurel.linear_left.weight": _linear(r, d, at + ("laurel_left",)),
        f"{layer}.laurel.linear_right.weight": _linear(d, r, at + ("laurel_right",)),
        f"{layer}.laurel.post_laurel_norm.weight": _vector(d, at + ("laurel_norm",)),
        f"{layer}.altup.correct_output_scale": _vector(d, alt + ("correct_scale",)),
        f"{layer}.altup.correction_coefs.weight": _linear(n, n, alt + ("correction_coefs",)),
        f"{layer}.altup.prediction_coefs.weight": _linear(n * n, n, alt + ("prediction_coefs",)),
        f"{layer}.altup.modality_router.weight": _linear(n, d, alt + ("router",)),
        f"{layer}.altup.router_norm.weight": _vector(d, alt + ("router_norm",)),
    }
