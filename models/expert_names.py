"""MoE blocks stored in layouts of their own (models/checkpoint_names.py's _moe_names picks
them by model type): gpt-oss's, Llama 4's and Aria's, Step 3.5 / 3.7's; and a SwiGLU MLP's
three projections (mlp_names), which those and checkpoint_names share."""

from __future__ import annotations

from configs.model_config import ModelConfig
from models.hf_tensors import HFTensor, Path_
from models.hf_tensors import linear as _linear
from models.hf_tensors import vector as _vector


def mlp_names(d: int, f: int, pre: str, at: Path_) -> dict[str, HFTensor]:
    """A SwiGLU MLP's gate_proj, up_proj and down_proj under `pre`, landing at `at`."""
    return {
        f"{pre}.gate_proj.weight": _linear(f, d, at + ("w_gate",)),
        f"{pre}.up_proj.weight": _linear(f, d, at + ("w_up",)),
        f"{pre}.down_proj.weight": _linear(d, f, at + ("w_down",)),
    }


def gpt_oss_moe_names(cfg: ModelConfig, layer: str, at: Path_) -> dict[str, HFTensor]:
    """gpt-oss keeps its experts fused, gate and up interleaved, each with a bias, and
    `mlp.router` with a bias (transformers' GptOssMLP; the released bf16 layout)."""
    d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    pre = f"{layer}.mlp"
    gate_up = (at + ("w_gate",), at + ("w_up",))
    return {
        f"{pre}.router.weight": _linear(e, d, at + ("router",)),
        f"{pre}.router.bias": _vector(e, at + ("router_logit_bias",)),
        f"{pre}.experts.gate_up_proj": HFTensor((e, d, 2 * f), gate_up, "gate_up_interleaved"),
        f"{pre}.experts.gate_up_proj_bias": HFTensor(
            (e, 2 * f), (at + ("b_gate",), at + ("b_up",)), "gate_up_interleaved"
        ),
        f"{pre}.experts.down_proj": HFTensor((e, f, d), (at + ("w_down",),), "copy"),
        f"{pre}.experts.down_proj_bias": HFTensor((e, d), (at + ("b_down",),), "copy"),
    }


def llama4_moe_names(cfg: ModelConfig, layer: str, at: Path_) -> dict[str, HFTensor]:
    """Llama 4's MoE block (transformers' Llama4TextMoe, as its checkpoints store it): the
    router, the experts fused [E, D, 2F] (gate columns, then up) and [E, F, D], and one
    shared expert; Aria's (AriaTextMoELayer) the same under mlp, its experts fc1 and fc2,
    its shared experts' MLP `shared_experts`."""
    d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    aria = cfg.model_type == "aria_text"
    pre = f"{layer}.mlp" if aria else f"{layer}.feed_forward"
    gate_up, down = ("fc1.weight", "fc2.weight") if aria else ("gate_up_proj", "down_proj")
    shared = "shared_experts" if aria else "shared_expert"
    return {
        f"{pre}.router.weight": _linear(e, d, at + ("router",)),
        f"{pre}.experts.{gate_up}": HFTensor(
            (e, d, 2 * f), (at + ("w_gate",), at + ("w_up",)), "gate_up_halves"
        ),
        f"{pre}.experts.{down}": HFTensor((e, f, d), (at + ("w_down",),), "copy"),
        **mlp_names(d, cfg.shared_expert_width, f"{pre}.{shared}", at + ("shared",)),
    }


def step_moe_names(cfg: ModelConfig, layer: str, at: Path_) -> dict[str, HFTensor]:
    """Step 3.5 / 3.7's MoE block as released (moe.*: experts stacked per projection)."""
    d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    names = {
        f"{layer}.moe.gate.weight": _linear(e, d, at + ("router",)),
        f"{layer}.moe.router_bias": _vector(e, at + ("router_bias",)),
    }
    for proj, ours, shape in (("gate", "w_gate", (e, f, d)), ("up", "w_up", (e, f, d))):
        names[f"{layer}.moe.{proj}_proj.weight"] = HFTensor(shape, (at + (ours,),), "experts_T")
    names[f"{layer}.moe.down_proj.weight"] = HFTensor((e, d, f), (at + ("w_down",),), "experts_T")
    names.update(mlp_names(d, cfg.shared_expert_width, f"{layer}.share_expert", at + ("shared",)))
    return names
