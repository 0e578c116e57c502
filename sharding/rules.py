"""Logical axis -> mesh axis rules: the one table that maps model names to devices.

Model code (models/specs.py, models/transformer.py) names logical axes only; this file turns
them into PartitionSpecs for parameters, the paged KV cache and layer-boundary activations.

Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): q heads and the dense / expert MLP
widths are split over `tp`, so attention and each MLP need one all-reduce on their output.
KV heads are split too when `tp` divides them, and replicated otherwise (tp > num_kv_heads:
each device keeps every KV head and uses the ones its q heads read). MLA: the cached latent
[c_kv | k_pe] is shared by all heads, so the latent pages are replicated over `tp` while the
absorbed queries, the per-head attention and W_UV are split by heads.

Data-parallel attention: the step's tokens are split over `dp` at every layer boundary, so
each replica projects and attends for its own tokens; the KV pages stay replicated over `dp`
(every replica writes every token) because the scheduler hands out pages from one pool.
Routed experts are split over `ep` and reached through the all-to-all in
sharding/expert_parallel.py, where the tokens are split over (dp, ep).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from configs.model_config import ModelConfig
from models.quantization import is_quantized, matrix_dims
from models.specs import is_spec, param_specs
from sharding.mesh import AXES, DP, EP, TP, MeshConfig, mesh_config_of

MeshAxes = str | tuple[str, ...] | None

# Logical axis -> mesh axis (or axes, or None = replicated).
RULES: dict[str, MeshAxes] = {
    "batch": DP,  # the step's flattened tokens, outside the expert exchange
    "expert_batch": (DP, EP),  # tokens entering the expert exchange
    "embed": None,
    "vocab": TP,
    "q_heads": TP,
    "kv_heads": TP,  # replicated instead when tp does not divide num_kv_heads
    "head_dim": None,
    "q_lora": None,
    "kv_lora": None,
    "mlp": TP,
    "experts": EP,
    "expert_mlp": TP,
    "kv_pages": None,  # one page pool for all dp replicas (see the module docstring)
    "page_slots": None,
    "kv_latent": None,  # MLA latent row, read by every head
    # Gated DeltaNet layers (models/linear_attention.py): their key and value heads, split
    # like the attention's (replicated where tp does not divide them), and the per-sequence
    # state rows (replicated over dp like the pages).
    "linear_k_heads": TP,
    "linear_v_heads": TP,
    "state_rows": None,
}

# Logical axes of the paged KV cache (PLAN.md layout): per layer (k_pages, v_pages) for GQA,
# (latent_pages,) for MLA.
GQA_PAGES_AXES = ("kv_pages", "page_slots", "kv_heads", "head_dim")  # [N, P, K, Dh]
MLA_PAGES_AXES = ("kv_pages", "page_slots", "kv_latent")  # [N, P, R + Dr]


def rules_for(cfg: ModelConfig, mc: MeshConfig) -> dict[str, MeshAxes]:
    """RULES adapted to one model: KV heads replicated when tp does not divide them, and so
    the vocabulary (GPT-2's 50,257 tokens: the embedding and lm_head whole on each device;
    vLLM pads it instead)."""
    rules = dict(RULES)
    if cfg.vocab_size % mc.tp:
        rules["vocab"] = None
    kv_heads = {cfg.layer_num_kv_heads(i) for i in range(cfg.num_layers)}
    if not cfg.is_mla and any(k % mc.tp for k in kv_heads):
        rules["kv_heads"] = None
    # (Mamba-1's B and C: one key head every channel reads, no array of it split by heads.)
    keys = cfg.linear_num_key_heads if cfg.linear_attention_kind != "mamba1" else mc.tp
    if keys % mc.tp or cfg.linear_num_value_heads % mc.tp:
        rules["linear_k_heads"] = rules["linear_v_heads"] = None
    return rules


def logical_to_spec(axes: tuple[str | None, ...], rules: Mapping[str, MeshAxes]) -> P:
    """PartitionSpec for one array's logical axes; ValueError on a name or mesh-axis clash."""
    used: set[str] = set()
    out = []
    for name in axes:
        if name is None:
            out.append(None)
            continue
        if name not in rules:
            raise ValueError(f"logical axis {name!r} has no rule; known: {sorted(rules)}")
        mesh_axes = rules[name]
        flat = (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes or ())
        for m in flat:
            if m not in AXES:
                raise ValueError(f"rule {name!r} -> {m!r}: mesh axis must be one of {AXES}")
            if m in used:
                raise ValueError(f"logical axes {axes}: mesh axis {m!r} used twice")
            used.add(m)
        out.append(mesh_axes)
    return P(*out)


def _axis_count(mc: MeshConfig, mesh_axes: MeshAxes) -> int:
    flat = (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes or ())
    count = 1
    for m in flat:
        count *= getattr(mc, m)
    return count


def _check_divides(what: str, shape, axes, spec: P, mc: MeshConfig) -> None:
    for size, name, mesh_axes in zip(shape, axes, spec, strict=True):
        count = _axis_count(mc, mesh_axes)
        if size % count:
            raise ValueError(
                f"{what}: logical axis {name!r} of size {size} is split over mesh axis "
                f"{mesh_axes}={count}, which does not divide it"
            )


def param_partition_specs(cfg: ModelConfig, mc: MeshConfig) -> dict:
    """The params tree with a PartitionSpec per leaf, from the specs' logical axes."""
    rules = rules_for(cfg, mc)
    specs = param_specs(cfg)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(specs, is_leaf=is_spec)
    out = []
    for path, s in leaves:
        spec = logical_to_spec(s.axes, rules)
        _check_divides(f"param {jax.tree_util.keystr(path)}", s.shape, s.axes, spec, mc)
        out.append(spec)
    parts = jax.tree.unflatten(treedef, out)
    split = lambda part, spec: _split_scales(part, spec, mc)  # noqa: E731
    return jax.tree.map(split, parts, specs, is_leaf=is_quantized)


def _split_scales(part, spec, mc: MeshConfig):
    """A quantized weight's PartitionSpecs (`part`; `spec`: its ParamSpecs) with the scales
    (and zero points) split like the data where their blocks line up with the data's shards
    (models/specs.py gives them whole but for the expert axis; at tp = 8 that was a fifth of
    a device's fp8 bytes, docs/benchmarks.md): along the outputs when the blocks are one
    output wide (int4 groups, per-channel fp8), along the contracted axis when each shard of
    it holds whole blocks. Either side only when the data splits it on its first axis alone
    (the flattened axis then splits in the same contiguous chunks)."""
    if not is_quantized(part):
        return part
    data = tuple(part.data) + (None,) * (len(spec.data.shape) - len(part.data))
    lead, k_dims = part.lead, part.k_dims
    shape = list(spec.data.shape)
    if part.bits == 4:  # two values a byte along the last contracted axis
        shape[lead + k_dims - 1] *= 2
    k, _ = matrix_dims(tuple(shape), lead, k_dims)
    ins, outs = data[lead : lead + k_dims], data[lead + k_dims :]

    def first_only(axes):
        return None if any(a is not None for a in axes[1:]) else axes[0]

    k_axis = first_only(ins)
    if k_axis is not None and (
        part.g_idx is not None or k % (_axis_count(mc, k_axis) * part.block[0])
    ):
        k_axis = None  # act order reads any group's row; or shards cut blocks
    n_axis = first_only(outs) if part.block[1] == 1 else None
    if k_axis is None and n_axis is None:
        return part
    scale = P(*data[:lead], k_axis, n_axis)
    return dataclasses.replace(part, scale=scale, zero=None if part.zero is None else scale)


def param_shardings(cfg: ModelConfig, mesh: Mesh) -> dict:
    return jax.tree.map(
        lambda s: NamedSharding(mesh, s),
        param_partition_specs(cfg, mesh_config_of(mesh)),
        is_leaf=lambda x: isinstance(x, P),
    )


def kv_shardings(cfg: ModelConfig, mesh: Mesh, kv_dtype=None) -> list:
    """Per layer: (k, v), (latent,) or (latent, index keys) NamedShardings matching
    engine.step.init_kv_pages.

    fp8 pages (`kv_dtype` float8_e4m3fn) are (data, scale) pairs: the scales are split like
    the data's rows, without its last axis.
    """
    rules = rules_for(cfg, mesh_config_of(mesh))
    axes = MLA_PAGES_AXES if cfg.is_mla or cfg.is_dsv4 else GQA_PAGES_AXES
    pages = NamedSharding(mesh, logical_to_spec(axes, rules))
    if kv_dtype is not None and jnp.dtype(kv_dtype) == jnp.float8_e4m3fn:
        # Imported here: engine/ imports this module at its top.
        from engine.kv_quant import QuantizedPages

        pages = QuantizedPages(pages, NamedSharding(mesh, logical_to_spec(axes[:-1], rules)))
    state_axes = (
        ("state_rows", None, "linear_k_heads", None),
        ("state_rows", None, "linear_k_heads", None),
        ("state_rows", None, "linear_v_heads", None),
        ("state_rows", "linear_v_heads", None, None),
    )
    if cfg.linear_attention_kind == "short_conv":  # (LFM2: its conv's inputs, whole)
        state_axes = (("state_rows", None, None),)
    elif cfg.linear_attention_kind == "mamba1":  # (Jamba: x's conv inputs, the SSM state)
        state_axes = (("state_rows", None, "linear_v_heads"), state_axes[3])
    elif cfg.linear_attention_kind == "lightning":  # (MiniMax-01: no conv, the state alone)
        state_axes = state_axes[3:]
    state = tuple(NamedSharding(mesh, logical_to_spec(a, rules)) for a in state_axes)

    def arrays(i: int) -> int:  # (DeepSeek-V4's entry pages after its per-token ones)
        return len(cfg.layer_kv_widths(i)) + (len(cfg.v4_entry_widths(i)) if cfg.is_dsv4 else 0)

    return [
        state if cfg.is_linear_layer(i) else (pages,) * arrays(i) for i in range(cfg.num_kv_layers)
    ]


def activation_constrainer(cfg: ModelConfig, mesh: Mesh):
    """`constrain(x, logical_axes) -> x` pinned to the mesh, for models.transformer."""
    rules = rules_for(cfg, mesh_config_of(mesh))

    def constrain(x: jax.Array, axes: tuple[str | None, ...]) -> jax.Array:
        spec = logical_to_spec(axes, rules)
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

    return constrain


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())
