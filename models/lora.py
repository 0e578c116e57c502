"""LoRA adapters (PEFT's format) on the projections, several in one step.

An adapter adds `scale * B(A(x))` to a projection's output: A [r, in], B [out, r] as PEFT
saves them (`base_model.model.model.layers.{i}.{module}.lora_{A,B}.weight` in
adapter_model.safetensors; r, lora_alpha, use_rslora in adapter_config.json), scale =
lora_alpha / r (lora_alpha / sqrt(r) with use_rslora). Targets: the attention projections
(GQA q/k/v/o_proj; MLA q_proj or q_a_proj / q_b_proj, kv_a_proj_with_mqa, o_proj), the
dense MLP's and the shared experts' (gate/up/down_proj); not MLA's kv_b_proj (absorbed into
the query and output), nor routed experts (refused, naming the tensor).

In the step every target holds the loaded adapters stacked in slots: A [S, K, R], B [S, R, N]
(K, N: the weight's contracted and output sizes, as models/quantization.py blocks them; R:
the engine's max_lora_rank, a smaller rank zero-padded; the scale folded into B; slot 0 all
zeros: no adapter). Each token carries its slot; `delta` computes x A for every slot, keeps
the token's own (a one-hot mask) and contracts with every slot's B: 2 * S * R multiply-adds
per input and output channel, a few percent of the projection at S * R ~ 100.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
from safetensors import SafetensorError, safe_open

from configs.model_config import ModelConfig
from models.checkpoint_names import fused_qkv_layout
from models.quantization import ATTN_WEIGHTS, MLP_WEIGHTS, matrix_dims
from models.reductions import narrow_product
from models.specs import param_specs

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
# PEFT module name -> (params group, leaf)
MODULES = {
    "self_attn.q_proj": ("attn", "wq"),
    "self_attn.k_proj": ("attn", "wk"),
    "self_attn.v_proj": ("attn", "wv"),
    "self_attn.o_proj": ("attn", "wo"),
    "self_attn.q_a_proj": ("attn", "wq_a"),  # MLA
    "self_attn.q_b_proj": ("attn", "wq_b"),
    "self_attn.kv_a_proj_with_mqa": ("attn", "wkv_a"),
    "mlp.gate_proj": ("mlp", "w_gate"),
    "mlp.up_proj": ("mlp", "w_up"),
    "mlp.down_proj": ("mlp", "w_down"),
    # GPT-NeoX's and Falcon's (q, k and v fused: query_key_value, split by _split_qkv), and
    # GPT-BigCode's (c_attn), output projections and MLPs; GPT-J's attn, OPT's and Phi-2's.
    "attention.query_key_value": ("attn", "wqkv"),
    "self_attn.query_key_value": ("attn", "wqkv"),  # (Persimmon's)
    "attn.Wqkv": ("attn", "wqkv"),  # (MPT's: all q rows, all k, all v)
    "attn.qkv_proj": ("attn", "wqkv"),  # (CodeGen's: 4 groups of q's, v's and k's rows)
    "self_attention.query_key_value": ("attn", "wqkv"),
    "attn.c_attn": ("attn", "wqkv"),
    "attention.dense": ("attn", "wo"),
    "self_attention.dense": ("attn", "wo"),
    "attn.c_proj": ("attn", "wo"),
    "self_attn.out_proj": ("attn", "wo"),
    "self_attn.dense": ("attn", "wo"),
    "attn.q_proj": ("attn", "wq"),
    "attn.k_proj": ("attn", "wk"),
    "attn.v_proj": ("attn", "wv"),
    "attn.out_proj": ("attn", "wo"),
    "attn.attention.q_proj": ("attn", "wq"),  # (GPT-Neo's)
    "attn.attention.k_proj": ("attn", "wk"),
    "attn.attention.v_proj": ("attn", "wv"),
    "attn.attention.out_proj": ("attn", "wo"),
    "mlp.fc_in": ("mlp", "w_up"),
    "mlp.fc_out": ("mlp", "w_down"),
    "mlp.dense_h_to_4h": ("mlp", "w_up"),
    "ffn.up_proj": ("mlp", "w_up"),  # (MPT's)
    "ffn.down_proj": ("mlp", "w_down"),
    "mlp.dense_4h_to_h": ("mlp", "w_down"),
    "mlp.c_fc": ("mlp", "w_up"),
    "mlp.c_proj": ("mlp", "w_down"),
    "fc1": ("mlp", "w_up"),
    "fc2": ("mlp", "w_down"),
    "mlp.fc1": ("mlp", "w_up"),
    "mlp.fc2": ("mlp", "w_down"),
    # Shared experts (DeepSeek, GLM-4.5; Qwen2-MoE's single `shared_expert`): the step's
    # per-layer adapter dict holds them as "shared_w_gate" etc. beside the attention's.
    # Llama 4's dense MLPs.
    "feed_forward.gate_proj": ("mlp", "w_gate"),
    "feed_forward.up_proj": ("mlp", "w_up"),
    "feed_forward.down_proj": ("mlp", "w_down"),
    # Shared experts (DeepSeek, GLM-4.5; Qwen2-MoE's single `shared_expert`, Hunyuan's
    # `shared_mlp`, Llama 4's under `feed_forward`): the step's per-layer adapter dict holds
    # them as "shared_w_gate" etc. beside the attention's.
    **{
        f"{shared}.{hf}": ("shared", "shared_" + leaf)
        for shared in (
            "mlp.shared_experts",
            "mlp.shared_expert",
            "mlp.shared_mlp",
            "feed_forward.shared_expert",
        )
        for hf, leaf in (("gate_proj", "w_gate"), ("up_proj", "w_up"), ("down_proj", "w_down"))
    },
}
# PEFT's names: base_model.model, then the model's own path to its layers (a causal LM's, or
# a multimodal wrapper's language model's, as transformers 5 or 4 lays it out, SmolVLM's
# text_model, an Omni model's thinker's; GPT-NeoX's, the GPT-2 kin's and BLOOM's
# `transformer.h`, MPT's `transformer.blocks`, OPT's decoder).
_NAME = re.compile(
    r"base_model\.model\.(?:(?:thinker\.)?model\.language_model\.|language_model\.model\."
    r"|model\.decoder\.|model\.text_model\.|(?:thinker\.)?model\.|gpt_neox\.|transformer\.)"
    r"(?:layers|h|blocks)\.(\d+)\."
    r"(.+)\.lora_([AB])\.weight"
)

Key = tuple[int, str, str]  # (layer, group, leaf)


def targets(cfg: ModelConfig) -> dict[Key, tuple[int, int]]:
    """Every projection an adapter may target in this model -> (K, N)."""
    if cfg.altup_num_inputs or cfg.shared_blocks:  # (Gemma 3n's, Zamba2's stacks: none)
        return {}
    specs = param_specs(cfg.replace(quantization=None))
    out = {}
    attn_weights = {k: v for k, v in ATTN_WEIGHTS.items() if k != "wkv_b"}
    attn_weights["wq_gate"] = 1  # (attn_output_gate: the query projection's gate half)
    for i, layer in enumerate(specs["layers"]):
        # MLA's kv_b_proj is folded into the query and output in latent space (absorbed):
        # no target. A linear-attention layer (no "attn") has none either.
        groups = [("attn", layer["attn"], attn_weights)] if "attn" in layer else []
        if "mlp" in layer:
            groups.append(("mlp", layer["mlp"], MLP_WEIGHTS))
        if "shared" in layer.get("moe", {}):
            shared = {"shared_" + k: v for k, v in layer["moe"]["shared"].items()}
            groups.append(("shared", shared, {"shared_" + k: v for k, v in MLP_WEIGHTS.items()}))
        for group, leaves, k_dims in groups:
            for name, spec in leaves.items():
                if name in k_dims:
                    out[(i, group, name)] = matrix_dims(spec.shape, 0, k_dims[name])
    return out


def _config(path: str, max_rank: int) -> tuple[int, float]:
    """(r, scale) from adapter_config.json; ValueError naming an unsupported field."""
    with open(os.path.join(path, CONFIG_FILE)) as f:
        try:
            c = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}/{CONFIG_FILE}: not JSON ({e})") from e
    if c.get("peft_type") != "LORA":
        raise ValueError(f"{CONFIG_FILE} peft_type={c.get('peft_type')!r}: only 'LORA'")
    r = c.get("r")
    if not isinstance(r, int) or isinstance(r, bool) or not 1 <= r <= max_rank:
        raise ValueError(f"{CONFIG_FILE} r={r!r}: must be in [1, max_lora_rank={max_rank}]")
    unsupported = {
        "use_dora": False,
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "rank_pattern": {},
        "alpha_pattern": {},
        "layer_replication": None,
        "lora_bias": False,
    }
    for field, off in unsupported.items():
        if c.get(field) not in (None, off):
            raise ValueError(f"{CONFIG_FILE} {field}={c.get(field)!r}: not supported ({off!r})")
    alpha = c.get("lora_alpha", r)
    if not isinstance(alpha, int | float) or isinstance(alpha, bool):
        raise ValueError(f"{CONFIG_FILE} lora_alpha={alpha!r}: must be a number")
    return r, float(alpha) / (math.sqrt(r) if c.get("use_rslora") else r)


def fingerprint(path: str) -> str:
    """What identifies an adapter's weights across engines and ids: a hash of its two files."""
    h = hashlib.sha256()
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        with open(os.path.join(path, name), "rb") as f:
            h.update(hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()[:16]


def load_adapter(path: str, cfg: ModelConfig, max_rank: int) -> dict[Key, tuple]:
    """{(layer, group, leaf): (A [K, r], B [r, N] times the scale)} as float32 numpy arrays,
    from a PEFT LoRA directory. FileNotFoundError / ValueError naming the file, field or
    tensor, before anything is kept."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"lora_path={path!r}: no such directory")
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not os.path.isfile(os.path.join(path, name)):
            raise FileNotFoundError(f"lora_path={path!r}: no {name}")
    r, scale = _config(path, max_rank)
    dims = targets(cfg)
    pairs: dict[Key, dict[str, np.ndarray]] = {}
    try:
        with safe_open(os.path.join(path, WEIGHTS_FILE), framework="np") as f:
            for name in f.keys():
                m = _NAME.fullmatch(name)
                key = None
                if m and m.group(2) in MODULES:
                    key = (int(m.group(1)), *MODULES[m.group(2)])
                fused = key is not None and key[2] == "wqkv" and (key[0], "attn", "wq") in dims
                if key not in dims and not fused:
                    raise ValueError(
                        f"adapter tensor {name!r}: not a projection LoRA can target in this "
                        f"{cfg.model_type} model (attention projections but MLA's kv_b_proj; "
                        "dense MLPs' and shared experts' gate/up/down_proj)"
                    )
                pairs.setdefault(key, {})[m.group(3)] = f.get_tensor(name)
    except SafetensorError as e:
        raise ValueError(f"{path}/{WEIGHTS_FILE}: corrupt ({e})") from e
    if cfg.attn_output_gate:
        _split_gate(pairs, cfg)
    _split_qkv(pairs, cfg)
    out = {}
    for key, ab in sorted(pairs.items()):
        k, n = dims[key]
        where = f"layers.{key[0]}.{key[1]}.{key[2]}"
        if set(ab) != {"A", "B"}:
            raise ValueError(f"adapter {where}: lora_A and lora_B must both be present")
        if ab["A"].shape != (r, k) or ab["B"].shape != (n, r):
            raise ValueError(
                f"adapter {where}: lora_A {ab['A'].shape}, lora_B {ab['B'].shape}; expected "
                f"{(r, k)} and {(n, r)} (r={r})"
            )
        out[key] = (
            np.asarray(ab["A"], np.float32).T,
            np.asarray(ab["B"], np.float32).T * np.float32(scale),
        )
    if not out:
        raise ValueError(f"lora_path={path!r}: {WEIGHTS_FILE} holds no LoRA tensors")
    return out


def _split_gate(pairs: dict[Key, dict[str, np.ndarray]], cfg: ModelConfig) -> None:
    """Qwen3-Next's q_proj (attn_output_gate) adapted: its lora_B rows are, per head, the
    query's then the gate's (as the weight's, models/checkpoint_names.py), the engine's wq
    and wq_gate; both take lora_A. A B of any other shape is left to the shape check."""
    h, dh = cfg.num_heads, cfg.head_dim
    for (i, group, name), ab in list(pairs.items()):
        if name == "wq" and "B" in ab and ab["B"].shape[0] == 2 * h * dh:
            b = ab["B"].reshape(h, 2, dh, -1)
            ab["B"] = b[:, 0].reshape(h * dh, -1)
            pairs[(i, group, "wq_gate")] = {**ab, "B": b[:, 1].reshape(h * dh, -1)}


def _split_qkv(pairs: dict[Key, dict[str, np.ndarray]], cfg: ModelConfig) -> None:
    """A fused q/k/v projection adapted (GPT-NeoX's, Falcon's, BLOOM's, Persimmon's
    query_key_value, GPT-BigCode's c_attn, MPT's Wqkv, CodeGen's qkv_proj): its lora_B rows
    come as the weight's (checkpoint_names.fused_qkv_layout: groups, each a run of rows per
    target); the engine's wq, wk and wv take them, each with the one lora_A. ValueError where
    B's rows are not the projection's."""
    h, k, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    groups, order = fused_qkv_layout(cfg)
    share = {"wq": h * dh // groups, "wk": k * dh // groups, "wv": k * dh // groups}
    for (i, group, name), ab in list(pairs.items()):
        if name != "wqkv":
            continue
        del pairs[(i, group, name)]
        b = ab.get("B")
        if b is None or "A" not in ab or b.shape[0] != (h + 2 * k) * dh:
            got = None if b is None else b.shape
            raise ValueError(
                f"adapter layers.{i}.attn's fused q/k/v: lora_A and lora_B [{(h + 2 * k) * dh}, "
                f"r] needed (got lora_B {got})"
            )
        rows = b.reshape(groups, (h + 2 * k) * dh // groups, -1)
        start = 0
        for leaf in order:
            part = rows[:, start : start + share[leaf]]
            start += share[leaf]
            pairs[(i, group, leaf)] = {"A": ab["A"], "B": part.reshape(-1, b.shape[1])}


def slot_mask(lora: list | None, slots: jax.Array | None) -> jax.Array | None:
    """[T, S] one-hot of each token's adapter slot (None without adapters in the step)."""
    stacks = [a for layer in lora or () for a, _ in layer.values()]
    if not stacks or slots is None:
        return None
    return jax.nn.one_hot(slots, stacks[0].shape[0])


def make_delta(lora_layer: dict | None, mask: jax.Array | None):
    """delta(leaf, x) -> the LoRA term of projection `leaf` for x [T, *K], shaped [T, N]
    (None when the layer has no such target or no adapters run). `mask`: slot_mask."""
    if not lora_layer or mask is None:
        return lambda name, x: None

    def delta(name: str, x: jax.Array) -> jax.Array | None:
        if name not in lora_layer:
            return None
        a, b = lora_layer[name]  # [S, K, R], [S, R, N]
        # (S x R columns: a narrow product in the batch-invariant step, models/reductions.py)
        down = lambda x, a: jnp.einsum("tk,skr->tsr", x, a)  # noqa: E731
        xa = narrow_product(down, x.reshape(x.shape[0], -1), a)
        return jnp.einsum("tsr,srn->tn", xa * mask[..., None].astype(xa.dtype), b)

    return delta


def add(y: jax.Array, d: jax.Array | None) -> jax.Array:
    """y [T, *N] plus a delta [T, N] (None: y)."""
    return y if d is None else y + d.reshape(y.shape).astype(y.dtype)
