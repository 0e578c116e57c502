"""Every tensor of a Hugging Face checkpoint the loader (models/hf_loader.py) reads: its name,
expected shape and the params leaves it fills (`hf_tensor_names`), per family; where a
checkpoint keeps them (the "model." / "lm_head." prefixes of a causal LM, or a multimodal
wrapper's: configs/hf_wrappers.py MULTIMODAL_WRAPPERS); and Mistral's own names, in which
Mistral Large 4 ships.
"""

from __future__ import annotations

from configs.hf_moe import ERNIE_MOE
from configs.hf_rope import HUNYUAN_TYPES
from configs.model_config import GATELESS_MLP_ACTS, ModelConfig
from models.expert_names import gpt_oss_moe_names, llama4_moe_names, mlp_names, step_moe_names
from models.gemma_names import GEMMA_LAYOUT, altup_names, gemma_layer_names
from models.hf_tensors import HFTensor, Path_
from models.hf_tensors import linear as _linear
from models.hf_tensors import vector as _vector
from models.linear_names import linear_attn_names
from models.release_names import (
    DIFFUSERS_ATTENTION,
    FALCON_PARALLEL_NORMS,
    NATIVE,
    ROUTER_BIAS,
    mistral_native_name,
    renamed,
)
from models.zamba2_names import zamba2_names

EXPERT_LAYOUTS = ("per_expert", "fused")


def _attn_names(cfg: ModelConfig, pre: str, at: Path_, layer: int) -> dict[str, HFTensor]:
    d, h = cfg.hidden_size, cfg.layer_num_heads(layer)
    hunyuan = cfg.model_type in HUNYUAN_TYPES
    names = {}
    if cfg.is_mla:
        dq = cfg.qk_head_dim
        r, dr = cfg.kv_lora_rank, cfg.layer_rope_dim(layer)
        if cfg.q_lora_rank:
            rq = cfg.q_lora_rank
            names[f"{pre}.q_a_proj.weight"] = _linear(rq, d, at + ("wq_a",))
            names[f"{pre}.q_a_layernorm.weight"] = _vector(rq, at + ("q_a_norm",))
            names[f"{pre}.q_b_proj.weight"] = _linear(h * dq, rq, at + ("wq_b",))
            if cfg.mla_query_gate:  # (A.X K2: per head, its query rows then its gate rows)
                rows, targets = h * (dq + cfg.v_head_dim), (at + ("wq_b",), at + ("wq_gate",))
                grouped = HFTensor((rows, 2 * rq), targets, "grouped", groups=h)
                names[f"{pre}.q_b_proj.weight"] = grouped
        else:
            names[f"{pre}.q_proj.weight"] = _linear(h * dq, d, at + ("wq",))
        if cfg.kv_source(layer) == layer:
            names[f"{pre}.kv_a_proj_with_mqa.weight"] = _linear(r + dr, d, at + ("wkv_a",))
            names[f"{pre}.kv_a_layernorm.weight"] = _vector(r, at + ("kv_a_norm",))
        kv_b_out = h * (cfg.layer_nope_dim(layer) + cfg.v_head_dim)
        names[f"{pre}.kv_b_proj.weight"] = _linear(kv_b_out, r, at + ("wkv_b",))
        names[f"{pre}.o_proj.weight"] = _linear(d, h * cfg.v_head_dim, at + ("wo",))
        if cfg.head_gate:  # (Ling 2.5)
            names[f"{pre}.g_proj.weight"] = _linear(h, d, at + ("w_head_gate",))
        if cfg.query_log_scale:
            names[f"{pre}.softmax_scaling.scale"] = _vector(h, at + ("q_scale",))
            names[f"{pre}.softmax_scaling.bias"] = _vector(h, at + ("q_scale_bias",))
        if cfg.indexes(layer):
            hi, di, idx = cfg.index_n_heads, cfg.index_head_dim, f"{pre}.indexer"
            q_in = cfg.q_lora_rank or d
            names[f"{idx}.wq_b.weight"] = _linear(hi * di, q_in, at + ("idx_wq",))
            if not cfg.q_lora_rank:  # Mistral Large 4: queries from the normed hidden state
                names[f"{idx}.q_input_norm.weight"] = _vector(d, at + ("idx_q_norm",))
                names[f"{idx}.q_input_norm.bias"] = _vector(d, at + ("idx_q_bias",))
            if cfg.query_log_scale:
                names[f"{idx}.softmax_scaling.scale"] = _vector(hi, at + ("idx_q_scale",))
                names[f"{idx}.softmax_scaling.bias"] = _vector(hi, at + ("idx_q_scale_bias",))
            names[f"{idx}.wk.weight"] = _linear(di, d, at + ("idx_wk",))
            names[f"{idx}.k_norm.weight"] = _vector(di, at + ("idx_k_norm",))
            names[f"{idx}.k_norm.bias"] = _vector(di, at + ("idx_k_bias",))
            names[f"{idx}.weights_proj.weight"] = _linear(hi, d, at + ("idx_w",))
        return names
    k, dh = cfg.layer_num_kv_heads(layer), cfg.layer_head_dim(layer)
    fused = ("gpt_neox", "falcon", "gpt_bigcode", "gpt2", "bloom", "mpt", "codegen", "persimmon")
    if cfg.model_type in fused:
        return _fused_qkv_names(cfg, pre, at)
    k_eq_v = cfg.attention_k_eq_v and cfg.is_global_layer(layer)  # (Gemma 4: no v_proj)
    dv, keeps_kv = cfg.layer_v_head_dim(layer), cfg.kv_source(layer) == layer
    projections = (("q", h * dh),) + ((("k", k * dh),) if keeps_kv else ())  # (else: shared)
    for proj, rows in projections + ((("v", k * dv),) if keeps_kv and not k_eq_v else ()):
        names[f"{pre}.{proj}_proj.weight"] = _linear(rows, d, at + (f"w{proj}",))
        if cfg.attention_bias:
            names[f"{pre}.{proj}_proj.bias"] = _vector(rows, at + (f"b{proj}",))
    own = {"afmoe": "gate_proj", "laguna": "g_proj", "beam": "gate_proj", "step3p5": "g_proj"}
    own = own.get(cfg.model_type)
    if own and cfg.attn_output_gate:  # (AFMoE's gate's own projection; Laguna's per-element)
        names[f"{pre}.{own}.weight"] = _linear(h * dh, d, at + ("wq_gate",))
    elif cfg.attn_output_gate:  # Qwen3-Next: per head, its query rows then its gate rows
        targets = (at + ("wq",), at + ("wq_gate",))
        names[f"{pre}.q_proj.weight"] = HFTensor((2 * h * dh, d), targets, "grouped", groups=h)
    if cfg.attn_gate_bias:  # (Beam's, per head)
        names[f"{pre}.gate_bias"] = _vector(h, at + ("gate_bias",))
    names[f"{pre}.o_proj.weight"] = _linear(d, h * dv, at + ("wo",))
    if cfg.head_gate:  # (LFM3: one gate per head)
        names[f"{pre}.g_proj.weight"] = _linear(h, d, at + ("w_head_gate",))
    if cfg.o_proj_bias:
        names[f"{pre}.o_proj.bias"] = _vector(d, at + ("bo",))
    if cfg.layer_sinks(layer):
        names[f"{pre}.sinks"] = _vector(h, at + ("sinks",))
    if cfg.qk_norm and cfg.model_type == "cohere":  # (Command R+: a weight per head, [H, Dh])
        names[f"{pre}.q_norm.weight"] = HFTensor((h, dh), (at + ("q_norm",),), "copy")
        names[f"{pre}.k_norm.weight"] = HFTensor((k, dh), (at + ("k_norm",),), "copy")
    elif cfg.qk_norm:
        width_q, width_k = (h * dh, k * dh) if cfg.qk_norm_full else (dh, dh)
        q_norm, k_norm = ("query_layernorm", "key_layernorm") if hunyuan else ("q_norm", "k_norm")
        names[f"{pre}.{q_norm}.weight"] = _vector(width_q, at + ("q_norm",))
        if keeps_kv:
            names[f"{pre}.{k_norm}.weight"] = _vector(width_k, at + ("k_norm",))
    return names


def fused_qkv_layout(cfg: ModelConfig) -> tuple[int, tuple[str, str, str]]:
    """How a fused q/k/v projection's rows come (its weight's, its LoRA's lora_B's): in how
    many groups, each a run of rows per target in the order given. Per KV head, its query
    heads' rows, then k's, then v's (GPT-NeoX, Falcon, BLOOM, Persimmon, GPT-BigCode); MPT's
    and GPT-2's in one group, all q, all k, all v; CodeGen's in 4 (its training's model-parallel
    shards, transformers' mp_num), each a quarter of q's, then of v's, then of k's."""
    if cfg.model_type == "codegen":
        return 4, ("wq", "wv", "wk")
    return (1 if cfg.model_type in ("mpt", "gpt2") else cfg.num_kv_heads), ("wq", "wk", "wv")


def _fused_qkv_names(cfg: ModelConfig, pre: str, at: Path_) -> dict[str, HFTensor]:
    """GPT-NeoX's, Falcon's, BLOOM's and GPT-BigCode's attention: query_key_value's (c_attn's)
    rows per KV head, its query heads' rows then its k and v rows (GPT-NeoX, BLOOM: a KV head
    per query head; Falcon-7B, StarCoder: one KV head for all), weight and bias; MPT's Wqkv,
    all q rows, all k, all v; CodeGen's qkv_proj, 4 groups of a quarter of q's rows, then
    v's, then k's; the output projection (o_proj, models/release_names.py renames it dense,
    c_proj or out_proj) with its bias."""
    d, h, dh = cfg.hidden_size, cfg.num_heads, cfg.head_dim
    rows = (h + 2 * cfg.num_kv_heads) * dh
    qkv = {"gpt_bigcode": "c_attn", "gpt2": "c_attn", "mpt": "Wqkv", "codegen": "qkv_proj"}.get(
        cfg.model_type, "query_key_value"
    )
    groups, order = fused_qkv_layout(cfg)
    # (GPT-2's c_attn: a Conv1D, [in, out])
    shape, kind = ((d, rows), "grouped_T") if cfg.model_type == "gpt2" else ((rows, d), "grouped")
    names = {
        f"{pre}.{qkv}.weight": HFTensor(
            shape, tuple(at + (w,) for w in order), kind, groups=groups
        ),
        f"{pre}.o_proj.weight": _linear(d, h * dh, at + ("wo",)),
    }
    if cfg.attention_bias:
        biases = tuple(at + ("b" + w[1],) for w in order)  # (wq -> bq ...)
        names[f"{pre}.{qkv}.bias"] = HFTensor((rows,), biases, "grouped", groups=groups)
    if cfg.o_proj_bias:
        names[f"{pre}.o_proj.bias"] = _vector(d, at + ("bo",))
    if cfg.qk_norm:  # (Persimmon's: a LayerNorm over each head's channels, weight and bias)
        for n in ("q_norm", "k_norm"):
            names[f"{pre}.{n}.weight"] = _vector(dh, at + (n,))
            names[f"{pre}.{n}.bias"] = _vector(dh, at + (f"{n}_bias",))
    return names


# Tensors a checkpoint may hold that are not read, per model type (a pattern): MiniMax-01's
# lightning decays, buffers transformers saves, computed here from the layer's index
# (models/linear_attention.lightning_decays; tests/test_minimax.py checks them equal).
DERIVED_BUFFERS = {"minimax": r"\.self_attn\.(slope_rate|query_decay|key_decay|diagonal_decay)$"}
# Other names a checkpoint may give a tensor, per model type: transformers 5.25 saves
# Kimi-Linear's dense MLP under block_sparse_moe (its save reverses the load's renaming of
# block_sparse_moe to mlp), where the release has mlp.
ALTERNATE_NAMES = {
    "kimi_linear": ((".mlp.", ".block_sparse_moe."),),
    "nemotron_h": (("backbone.", "model."),),
    # Cosmos3's newer unified checkpoints (Qwen3-VL's language model) and Cosmos3 Edge's
    # (Arcee's): Diffusers' names
    **dict.fromkeys(("qwen3", "arcee"), DIFFUSERS_ATTENTION),
    # A.X K2's release (vLLM's names) and transformers 5.25's in-memory ones for its fused
    # query-and-gate projection and its gated norms' low-rank MLP
    "axk2": (
        ("self_attn.q_b_proj.", "self_attn.q_gate_proj."),
        ("W_down.", "mlp.fc1."),
        ("W_up.", "mlp.fc2."),
    ),
    # DeepSeek-V4's release names its tensors without "model." (transformers 5.25 renames
    # only the embedding, final norm and hyper-connection head back on save).
    "deepseek_v4": (
        ("model.embed_tokens.", "embed."),
        ("model.norm.", "norm."),
        ("model.hc_head.hc_", "hc_head_"),
        ("model.layers.", "layers."),
    ),
}


def _moe_names(cfg: ModelConfig, layer: str, at: Path_, layout: str) -> dict[str, HFTensor]:
    if cfg.model_type == "step3p5":
        return step_moe_names(cfg, layer, at)
    if cfg.model_type == "gpt_oss":
        return gpt_oss_moe_names(cfg, layer, at)
    if cfg.model_type in ("llama4_text", "aria_text"):
        return llama4_moe_names(cfg, layer, at)
    d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    # Mixtral's and MiniMax-M2's released per-expert names (w1 / w3 / w2 under
    # block_sparse_moe); transformers' fused layout is under mlp.
    legacy_mixtral = layout == "per_expert" and cfg.model_type in (
        "mixtral",
        "minimax_m2",
        "minimax",
        "phimoe",
        "kimi_linear",  # (Kimi-Linear's shared experts too)
    )
    pre = f"{layer}.block_sparse_moe" if legacy_mixtral else f"{layer}.mlp"
    # (Hunyuan's router is the gate's `wg`, AFMoE's its router's `gate`.)
    router = {"hunyuan_v1_moe": "gate.wg", "afmoe": "router.gate"}.get(cfg.model_type, "gate")
    ez = e + cfg.zero_experts  # (LongCat-Flash's zero-computation experts are routed too)
    names = {f"{pre}.{router}.weight": _linear(ez, d, at + ("router",))}
    if cfg.model_type in ERNIE_MOE:  # kept by Ernie4_5_MoeStatics as [1, E]
        # (ERNIE 4.5 VL's: its text and vision routers' [2, E], the text one's read; its
        # text router stored [D, E]; its vision experts after its text ones, unread)
        vl = cfg.model_type == ERNIE_MOE[1]
        names[f"{pre}.moe_statics.e_score_correction_bias"] = HFTensor(
            (1 + vl, e), (at + ("router_bias",),), "rows" if vl else "copy"
        )
        if vl:
            names[f"{pre}.gate.weight"] = HFTensor((d, e), (at + ("router",),), "copy")
    elif cfg.topk_method == "noaux_tc":  # (in the gate, or beside it, or in the experts)
        bias = ROUTER_BIAS.get(cfg.model_type, "gate.e_score_correction_bias")
        names[f"{pre}.{bias}"] = _vector(ez, at + ("router_bias",))
    if layout == "fused":
        names[f"{pre}.experts.gate_up_proj"] = HFTensor(
            (e, 2 * f, d), (at + ("w_gate",), at + ("w_up",)), "gate_up"
        )
        names[f"{pre}.experts.down_proj"] = HFTensor((e, d, f), (at + ("w_down",),), "experts_T")
    else:
        if legacy_mixtral:
            parts = (("w1", "w_gate", (f, d)), ("w3", "w_up", (f, d)), ("w2", "w_down", (d, f)))
        else:
            parts = (
                ("gate_proj", "w_gate", (f, d)),
                ("up_proj", "w_up", (f, d)),
                ("down_proj", "w_down", (d, f)),
            )
        for x in range(e):
            for hf, ours, shape in parts:
                names[f"{pre}.experts.{x}.{hf}.weight"] = HFTensor(
                    shape, (at + (ours,),), "expert", x
                )
    if cfg.num_shared_experts:
        # Qwen2-MoE names its one gated shared MLP `shared_expert` (Laguna, Flint ungated);
        # DeepSeek and GLM-4.5 `shared_experts`, Hunyuan `shared_mlp`.
        one = cfg.shared_expert_gate or cfg.model_type in ("laguna", "flint", "lara_mini")
        shared = "shared_expert" if one else "shared_experts"
        shared = "shared_mlp" if cfg.model_type == "hunyuan_v1_moe" else shared
        fs = cfg.shared_expert_width
        names.update(mlp_names(d, fs, f"{pre}.{shared}", at + ("shared",)))
    if cfg.shared_expert_gate:
        names[f"{pre}.shared_expert_gate.weight"] = _linear(1, d, at + ("shared_gate",))
    return names


def _v4_names(cfg: ModelConfig) -> dict[str, HFTensor]:
    """DeepSeek-V4 as transformers 5.25 saves it (conversion_mapping.py's "deepseek_v4"
    renames its layers back to the release's names; experts one per expert)."""
    d, v, h, dh, n = cfg.hidden_size, cfg.vocab_size, cfg.num_heads, cfg.head_dim, cfg.hc_mult
    rq, g, ro, e, f = (
        cfg.q_lora_rank,
        cfg.o_groups,
        cfg.o_lora_rank,
        cfg.num_experts,
        cfg.moe_intermediate_size,
    )
    names = {
        "model.embed_tokens.weight": HFTensor((v, d), (("embed",),), "copy"),
        "model.norm.weight": _vector(d, ("final_norm",)),
        "head.weight": _linear(v, d, ("lm_head",)),
        "model.hc_head.hc_fn": _linear(n, n * d, ("hc_head", "fn")),
        "model.hc_head.hc_base": _vector(n, ("hc_head", "base")),
        "model.hc_head.hc_scale": _vector(1, ("hc_head", "scale")),
    }
    mix = (2 + n) * n
    for i in range(cfg.num_layers):
        pre, at = f"model.layers.{i}", ("layers", i)
        a, att, kind, ratio = f"{pre}.attn", at + ("attn",), cfg.v4_layer_kinds[i], cfg.v4_ratio(i)
        names[f"{pre}.attn_norm.weight"] = _vector(d, at + ("attn_norm",))
        names[f"{pre}.ffn_norm.weight"] = _vector(d, at + ("mlp_norm",))
        for hf, ours in (("attn", "attn_hc"), ("ffn", "mlp_hc")):
            names[f"{pre}.hc_{hf}_fn"] = _linear(mix, n * d, at + (ours, "fn"))
            names[f"{pre}.hc_{hf}_base"] = _vector(mix, at + (ours, "base"))
            names[f"{pre}.hc_{hf}_scale"] = _vector(3, at + (ours, "scale"))
        names[f"{a}.attn_sink"] = _vector(h, att + ("sinks",))
        names[f"{a}.wq_a.weight"] = _linear(rq, d, att + ("wq_a",))
        names[f"{a}.q_norm.weight"] = _vector(rq, att + ("q_a_norm",))
        names[f"{a}.wq_b.weight"] = _linear(h * dh, rq, att + ("wq_b",))
        names[f"{a}.wkv.weight"] = _linear(dh, d, att + ("wkv",))
        names[f"{a}.norm.weight"] = _vector(dh, att + ("kv_norm",))
        names[f"{a}.wo_a.weight"] = _linear(g * ro, h * dh // g, att + ("wo_a",))
        names[f"{a}.wo_b.weight"] = _linear(d, g * ro, att + ("wo_b",))
        parts = []
        if ratio:
            parts.append((f"{a}.compressor", "c_", dh * (2 if kind == "csa" else 1), dh))
        if kind == "csa":
            hi, di = cfg.index_n_heads, cfg.index_head_dim
            parts.append((f"{a}.indexer.compressor", "i_", 2 * di, di))
            names[f"{a}.indexer.wq_b.weight"] = _linear(hi * di, rq, att + ("i_wq",))
            names[f"{a}.indexer.weights_proj.weight"] = _linear(hi, d, att + ("i_w",))
        for c, ours, width, norm in parts:
            names[f"{c}.wkv.weight"] = _linear(width, d, att + (ours + "wkv",))
            names[f"{c}.wgate.weight"] = _linear(width, d, att + (ours + "wgate",))
            names[f"{c}.ape"] = HFTensor((ratio, width), (att + (ours + "bias",),), "copy")
            names[f"{c}.norm.weight"] = _vector(norm, att + (ours + "norm",))
        m, mo = f"{pre}.ffn", at + ("moe",)
        names[f"{m}.gate.weight"] = _linear(e, d, mo + ("router",))
        if i in cfg.hash_moe_layers:
            k = cfg.num_experts_per_tok
            names[f"{m}.gate.tid2eid"] = HFTensor((v, k), (mo + ("tid2eid",),), "index")
        else:
            names[f"{m}.gate.bias"] = _vector(e, mo + ("router_bias",))
        parts = (("w1", "w_gate", (f, d)), ("w3", "w_up", (f, d)), ("w2", "w_down", (d, f)))
        for x in range(e):
            for hf, ours, shape in parts:
                names[f"{m}.experts.{x}.{hf}.weight"] = HFTensor(
                    shape, (mo + (ours,),), "expert", x
                )
        if cfg.num_shared_experts:
            fs = cfg.shared_expert_width
            for hf, ours, shape in (
                ("w1", "w_gate", (fs, d)),
                ("w3", "w_up", (fs, d)),
                ("w2", "w_down", (d, fs)),
            ):
                names[f"{m}.shared_experts.{hf}.weight"] = _linear(*shape, mo + ("shared", ours))
    return names


def _granite_ffn_names(cfg: ModelConfig, layer: str, at: Path_) -> dict[str, HFTensor]:
    """Granite's feed-forward block as released: the shared MLP (input_linear's gate rows,
    then up; Granite 3's granitemoe has none) and, with experts, block_sparse_moe's router
    and experts ([E, 2F, D] gate | up, [E, D, F] down)."""
    d, e, f = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    fs = cfg.shared_expert_width if e else cfg.intermediate_size
    mlp = at + (("moe", "shared") if e else ("mlp",))
    names = {}
    if fs:
        names[f"{layer}.shared_mlp.input_linear.weight"] = HFTensor(
            (2 * fs, d), (mlp + ("w_gate",), mlp + ("w_up",)), "grouped"
        )
        names[f"{layer}.shared_mlp.output_linear.weight"] = _linear(d, fs, mlp + ("w_down",))
    if e:
        moe, pre = at + ("moe",), f"{layer}.block_sparse_moe"
        # (Granite SWA's under transformers' own names: no conversion of its experts there)
        swa = cfg.model_type == "granitemoe_swa"
        router, gate_up, down = (
            ("router.weight", "experts.gate_up_proj", "experts.down_proj")
            if swa
            else ("router.layer.weight", "input_linear.weight", "output_linear.weight")
        )
        names[f"{pre}.{router}"] = _linear(e, d, moe + ("router",))
        names[f"{pre}.{gate_up}"] = HFTensor(
            (e, 2 * f, d), (moe + ("w_gate",), moe + ("w_up",)), "gate_up"
        )
        names[f"{pre}.{down}"] = HFTensor((e, d, f), (moe + ("w_down",),), "experts_T")
    return names


# Models whose checkpoints keep their blocks under "backbone." (Nemotron-H's; Mamba's,
# Falcon Mamba's and Mamba-2's: mixers alone, each its own block).
BACKBONE_TYPES = ("nemotron_h", "mamba", "falcon_mamba", "mamba2")


def nemotron_h_blocks(cfg: ModelConfig) -> list[tuple[int, int | None]]:
    """Nemotron-H's blocks (one mixer or one feed-forward block each) behind each decoder
    layer: (its mixer's block, its feed-forward block's or None: no_ffn_layers)."""
    out, block = [], 0
    for i in range(cfg.num_layers):
        ffn = None if i in cfg.no_ffn_layers else block + 1
        out.append((block, ffn))
        block += 1 if ffn is None else 2
    return out


def _nemotron_h_names(cfg: ModelConfig, layout: str) -> dict[str, HFTensor]:
    """Nemotron-H (and the BACKBONE_TYPES after it) as released and as transformers 5.25
    saves it ("backbone.", experts one per expert; its own load names, "model." and fused
    experts, are the alternates): each block a norm and a mixer; Mamba-2's in_proj rows z |
    x | B | C | dt and its conv's channels x | B | C (Mamba-1's: models/linear_names.py);
    relu2 MLPs and experts (up, down); the latent MoE's projections."""
    d, v, e, f = cfg.hidden_size, cfg.vocab_size, cfg.num_experts, cfg.moe_intermediate_size
    dx = cfg.moe_latent_size or d
    names = {
        "backbone.embeddings.weight": HFTensor((v, d), (("embed",),), "copy"),
        "backbone.norm_f.weight": _vector(d, ("final_norm",)),
    }
    if not cfg.tie_word_embeddings:
        names["lm_head.weight"] = _linear(v, d, ("lm_head",))
    for i, (mixer, ffn) in enumerate(nemotron_h_blocks(cfg)):
        at, pre = ("layers", i), f"backbone.layers.{mixer}"
        names[f"{pre}.norm.weight"] = _vector(d, at + ("attn_norm",))
        if not cfg.is_linear_layer(i):
            names.update(_attn_names(cfg, f"{pre}.mixer", at + ("attn",), i))
        else:
            names.update(linear_attn_names(cfg, f"{pre}.mixer", at + ("linear",)))
        if ffn is None:
            continue
        pre = f"backbone.layers.{ffn}"
        names[f"{pre}.norm.weight"] = _vector(d, at + ("mlp_norm",))
        if not cfg.is_moe_layer(i):
            names[f"{pre}.mixer.up_proj.weight"] = _linear(
                cfg.intermediate_size, d, at + ("mlp", "w_up")
            )
            names[f"{pre}.mixer.down_proj.weight"] = _linear(
                d, cfg.intermediate_size, at + ("mlp", "w_down")
            )
            continue
        m, mo = f"{pre}.mixer", at + ("moe",)
        names[f"{m}.gate.weight"] = _linear(e, d, mo + ("router",))
        names[f"{m}.gate.e_score_correction_bias"] = _vector(e, mo + ("router_bias",))
        if layout == "fused":  # (transformers' own: [E, F, L] and [E, L, F])
            names[f"{m}.experts.up_proj"] = HFTensor((e, f, dx), (mo + ("w_up",),), "experts_T")
            names[f"{m}.experts.down_proj"] = HFTensor((e, dx, f), (mo + ("w_down",),), "experts_T")
        else:
            for x in range(e):
                for hf, ours, shape in (
                    ("up_proj", "w_up", (f, dx)),
                    ("down_proj", "w_down", (dx, f)),
                ):
                    names[f"{m}.experts.{x}.{hf}.weight"] = HFTensor(
                        shape, (mo + (ours,),), "expert", x
                    )
        fs = cfg.shared_expert_width
        if fs:
            names[f"{m}.shared_experts.up_proj.weight"] = _linear(fs, d, mo + ("shared", "w_up"))
            names[f"{m}.shared_experts.down_proj.weight"] = _linear(
                d, fs, mo + ("shared", "w_down")
            )
        if cfg.moe_latent_size:
            names[f"{m}.fc1_latent_proj.weight"] = _linear(dx, d, mo + ("latent_in",))
            names[f"{m}.fc2_latent_proj.weight"] = _linear(d, dx, mo + ("latent_out",))
    return names


def _falcon_h1_names(cfg: ModelConfig) -> dict[str, HFTensor]:
    """Falcon-H1: HF layer j is decoder layers 2j (its attention, under self_attn) and 2j + 1
    (its Mamba-2 mixer, under mamba, and its feed_forward MLP); its input_layernorm is the
    first's attn_norm (the second reads its output: ModelConfig.parallel_hybrid),
    pre_ff_layernorm the MLP's norm."""
    d, v = cfg.hidden_size, cfg.vocab_size
    names = {
        "model.embed_tokens.weight": HFTensor((v, d), (("embed",),), "copy"),
        "model.final_layernorm.weight": _vector(d, ("final_norm",)),
    }
    if not cfg.tie_word_embeddings:
        names["lm_head.weight"] = _linear(v, d, ("lm_head",))
    for j in range(cfg.num_layers // 2):
        pre, attn, mixer = f"model.layers.{j}", ("layers", 2 * j), ("layers", 2 * j + 1)
        names[f"{pre}.input_layernorm.weight"] = _vector(d, attn + ("attn_norm",))
        names[f"{pre}.pre_ff_layernorm.weight"] = _vector(d, mixer + ("mlp_norm",))
        names.update(_attn_names(cfg, f"{pre}.self_attn", attn + ("attn",), 2 * j))
        names.update(linear_attn_names(cfg, f"{pre}.mamba", mixer + ("linear",)))
        f = cfg.intermediate_size
        names.update(mlp_names(d, f, f"{pre}.feed_forward", mixer + ("mlp",)))
    return names


def hf_tensor_names(cfg: ModelConfig, expert_layout: str = "per_expert") -> dict[str, HFTensor]:
    """Every tensor an HF checkpoint of `cfg` must hold -> expected shape and params target."""
    if expert_layout not in EXPERT_LAYOUTS:
        raise ValueError(f"expert_layout={expert_layout!r}: expected one of {EXPERT_LAYOUTS}")
    if cfg.is_dsv4:
        return _v4_names(cfg)
    if cfg.shortcut_moe:
        return _longcat_names(cfg, expert_layout)
    if cfg.model_type in BACKBONE_TYPES:
        return _nemotron_h_names(cfg, expert_layout)
    if cfg.parallel_hybrid:
        return _falcon_h1_names(cfg)
    if cfg.model_type == "dbrx":
        return _dbrx_names(cfg)
    if cfg.shared_blocks:  # (Zamba2)
        return zamba2_names(cfg)
    d, v = cfg.hidden_size, cfg.vocab_size
    names = {
        "model.embed_tokens.weight": HFTensor((v, d), (("embed",),), "copy"),
        "model.norm.weight": _vector(d, ("final_norm",)),
    }
    if cfg.cross_attention_layers:  # (Llama 3.2 Vision: 8 image-token rows after the vocabulary)
        names["model.embed_tokens.weight"] = HFTensor((v + 8, d), (("embed",),), "rows")
    if cfg.model_type == "molmo2_text":  # (its image tokens' rows after the vocabulary: unread)
        names["model.embed_tokens.weight"] = HFTensor((v, d), (("embed",),), "rows")
    if not cfg.tie_word_embeddings:  # (Apertus 1.5's: the first output_vocab_size ids')
        names["lm_head.weight"] = _linear(cfg.output_vocab_size or v, d, ("lm_head",))
    if cfg.norm_bias:  # (Phi-3.5-MoE's LayerNorms and head)
        names["model.norm.bias"] = _vector(d, ("final_norm_bias",))
    if cfg.lm_head_bias:
        names["lm_head.bias"] = _vector(v, ("lm_head_bias",))
    cross = cfg.cross_attention_layers
    text_layers = [i for i in range(cfg.num_layers + len(cross)) if i not in cross]
    for i, hf in enumerate(text_layers):  # (the checkpoint's index hf: Llama 3.2 Vision's)
        moe = cfg.is_moe_layer(i)
        names.update(_layer_names(cfg, f"model.layers.{hf}", ("layers", i), moe, expert_layout))
    if cfg.altup_num_inputs:  # (Gemma 3n's streams' projections)
        names.update(altup_names(cfg))
    if cfg.per_layer_input_dim:  # (Gemma 4 E2B / E4B's per-layer embeddings)
        rows, width = cfg.per_layer_vocab_size or v, cfg.num_layers * cfg.per_layer_input_dim
        names["model.embed_tokens_per_layer.weight"] = HFTensor(
            (rows, width), (("ple_embed",),), "rows"
        )
        names["model.per_layer_model_projection.weight"] = _linear(width, d, ("ple_proj",))
        names["model.per_layer_projection_norm.weight"] = _vector(
            width // cfg.num_layers, ("ple_norm",)
        )
    if cfg.learned_positions:  # (GPT-BigCode's wpe, models/release_names.py)
        rows = cfg.max_position_embeddings + cfg.position_offset
        names["model.embed_positions.weight"] = HFTensor((rows, d), (("pos_embed",),), "copy")
    if cfg.embed_norm:  # (BLOOM's word_embeddings_layernorm, models/release_names.py)
        names["model.embed_norm.weight"] = _vector(d, ("embed_norm",))
        if cfg.norm_bias:
            names["model.embed_norm.bias"] = _vector(d, ("embed_norm_bias",))
    if cfg.norm_weightless:  # (OLMo 1, NanoChat: their norms hold nothing)
        held = ("attn_norm", "mlp_norm", "final_norm", "embed_norm")
        names = {n: t for n, t in names.items() if t.targets[0][-1] not in held}
    if cfg.learned_rope_scale:  # LeRoPE's alpha, the model's one: a copy in every layer
        alpha = tuple(("layers", i, "attn", "rope_alpha") for i in range(cfg.num_layers))
        names["model.rotary_emb.alpha"] = HFTensor((cfg.qk_rope_head_dim // 2,), alpha, "copy")
    if cfg.mtp_drafts:
        # DeepSeek-V3's release layout (GLM-4.5's too): the MTP module is "layer" L =
        # num_layers. Its copies of the embedding (`embed_tokens`) and lm_head
        # (`shared_head.head`) are not read: it shares the model's, as transformers' MtpModel.
        layer, at = f"model.layers.{cfg.num_layers}", ("mtp",)
        names[f"{layer}.enorm.weight"] = _vector(d, at + ("enorm",))
        names[f"{layer}.hnorm.weight"] = _vector(d, at + ("hnorm",))
        names[f"{layer}.eh_proj.weight"] = _linear(d, 2 * d, at + ("eh_proj",))
        names[f"{layer}.shared_head.norm.weight"] = _vector(d, at + ("norm",))
        moe = bool(cfg.num_experts)
        names.update(_layer_names(cfg, layer, at + ("layer",), moe, expert_layout))
    if cfg.model_type == "mistral_large4_text":
        names = {mistral_native_name(n): t for n, t in names.items()}
    if cfg.model_type in FUSED:  # (q, k, v in one tensor; an MLP's gate and up)
        names = _fused_qkv(names, *FUSED[cfg.model_type])
    if cfg.model_type in NATIVE:  # (their releases' names; transformers saves them)
        names = {renamed(n, NATIVE[cfg.model_type]): t for n, t in names.items()}
    if cfg.model_type == "falcon" and cfg.parallel_norms:  # (Falcon-40B / 180B: ln_attn, ln_mlp)
        names = {renamed(n, FALCON_PARALLEL_NORMS): t for n, t in names.items()}
    if cfg.model_type == "gpt2":  # (its Conv1D weights: [in, out], the leaves' own order)
        names = {
            n: t._replace(shape=t.shape[::-1], kind="copy")
            if t.kind == "linear" and not n.startswith("lm_head.")
            else t
            for n, t in names.items()
        }
    return names


# Fused projections per model type: (the q/k/v tensor's name or None, the MLP gate/up's or
# None).
FUSED = {"sarvam_moe": ("query_key_value", None), "param2moe": ("query_key_value", None)}
FUSED.update(phi3=("qkv_proj", "gate_up_proj"), glm4=(None, "gate_up_proj"))
FUSED.update(glm=FUSED["glm4"], molmo2_text=("qkv_proj", "up_gate_proj"))


def _fused_qkv(names: dict[str, HFTensor], qkv, gate_up) -> dict[str, HFTensor]:
    """`names` with each attention's q_proj, k_proj and v_proj (weights, and biases where
    there are) as one `qkv` tensor (where given), their rows in that order; with `gate_up`,
    each dense MLP's gate_proj and up_proj as one tensor of that name (Phi-3's, GLM-4's; named
    up_gate_proj: up's rows first, Molmo2's)."""
    out = dict(names)
    fused = [(".self_attn.", ("q_proj", "k_proj", "v_proj"), qkv)] if qkv else []
    if gate_up:
        parts = ("up_proj", "gate_proj") if gate_up == "up_gate_proj" else ("gate_proj", "up_proj")
        fused.append((".mlp.", parts, gate_up))
    for name in names:
        for where, parts_of, into in fused:
            first = f"{where}{parts_of[0]}.weight"
            if not name.endswith(first):
                continue
            pre = name[: -len(first)] + where
            for kind in ("weight", "bias"):
                parts = [out.pop(f"{pre}{p}.{kind}", None) for p in parts_of]
                if all(parts):
                    shape = (sum(t.shape[0] for t in parts), *parts[0].shape[1:])
                    targets = tuple(t.targets[0] for t in parts)
                    out[f"{pre}{into}.{kind}"] = HFTensor(shape, targets, "grouped")
    return out


def _dbrx_names(cfg: ModelConfig) -> dict[str, HFTensor]:
    """DBRX as released: transformer.wte / blocks / norm_f; each block's norm_attn_norm
    (norm_1, attn.Wqkv with q, k, v rows fused, attn.out_proj, norm_2) and ffn (router.layer,
    experts.mlp.w1 / v1 / w2, each [E * F, D]: w2 the down projection transposed)."""
    d, v, e, f = cfg.hidden_size, cfg.vocab_size, cfg.num_experts, cfg.moe_intermediate_size
    h, k, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    names = {
        "transformer.wte.weight": HFTensor((v, d), (("embed",),), "copy"),
        "transformer.norm_f.weight": _vector(d, ("final_norm",)),
        "lm_head.weight": _linear(v, d, ("lm_head",)),
    }
    for i in range(cfg.num_layers):
        pre, at = f"transformer.blocks.{i}", ("layers", i)
        block, attn, moe = f"{pre}.norm_attn_norm", at + ("attn",), at + ("moe",)
        qkv = tuple(attn + (w,) for w in ("wq", "wk", "wv"))
        names[f"{block}.norm_1.weight"] = _vector(d, at + ("attn_norm",))
        names[f"{block}.norm_2.weight"] = _vector(d, at + ("mlp_norm",))
        names[f"{block}.attn.Wqkv.weight"] = HFTensor(((h + 2 * k) * dh, d), qkv, "grouped")
        names[f"{block}.attn.out_proj.weight"] = _linear(d, h * dh, attn + ("wo",))
        names[f"{pre}.ffn.router.layer.weight"] = _linear(e, d, moe + ("router",))
        for w, leaf, kind in (("w1", "w_gate", "experts_T"), ("v1", "w_up", "experts_T")):
            names[f"{pre}.ffn.experts.mlp.{w}"] = HFTensor((e * f, d), (moe + (leaf,),), kind)
        names[f"{pre}.ffn.experts.mlp.w2"] = HFTensor((e * f, d), (moe + ("w_down",),), "copy")
    return names


def _longcat_names(cfg: ModelConfig, layout: str) -> dict[str, HFTensor]:
    """LongCat-Flash: HF layer i holds decoder layers 2i and 2i + 1 (ours) as its sublayers
    j = 0, 1 (self_attn.j, mlps.j, input_layernorm.j, post_attention_layernorm.j), and the
    shortcut MoE of layer 2i as its `mlp` (router.classifier, router's correction bias,
    experts)."""
    d, v = cfg.hidden_size, cfg.vocab_size
    names = {
        "model.embed_tokens.weight": HFTensor((v, d), (("embed",),), "copy"),
        "model.norm.weight": _vector(d, ("final_norm",)),
        "lm_head.weight": _linear(v, d, ("lm_head",)),
    }
    for s in range(cfg.num_layers):
        (i, j), at = divmod(s, 2), ("layers", s)
        hf = f"model.layers.{i}"
        names[f"{hf}.input_layernorm.{j}.weight"] = _vector(d, at + ("attn_norm",))
        names[f"{hf}.post_attention_layernorm.{j}.weight"] = _vector(d, at + ("mlp_norm",))
        names.update(_attn_names(cfg, f"{hf}.self_attn.{j}", at + ("attn",), s))
        names.update(mlp_names(d, cfg.intermediate_size, f"{hf}.mlps.{j}", at + ("mlp",)))
        if cfg.is_moe_layer(s):  # (its router: the MoE's router.classifier)
            moe = _moe_names(cfg, hf, at + ("moe",), layout)
            names.update({n.replace(".mlp.gate.", ".mlp.router."): t for n, t in moe.items()})
            names[f"{hf}.mlp.router.classifier.weight"] = names.pop(f"{hf}.mlp.router.weight")
    if cfg.tie_word_embeddings:
        del names["lm_head.weight"]
    return names


def _layer_names(cfg: ModelConfig, layer: str, at: Path_, moe: bool, layout: str) -> dict:
    d = cfg.hidden_size
    index = at[1] if at[0] == "layers" else cfg.num_layers  # (the MTP module's layer: L)
    names = {
        f"{layer}.input_layernorm.weight": _vector(d, at + ("attn_norm",)),
        f"{layer}.post_attention_layernorm.weight": _vector(d, at + ("mlp_norm",)),
    }
    if cfg.model_type in GEMMA_LAYOUT:
        names.update(gemma_layer_names(cfg, layer, at, moe))
    elif cfg.gated_norm_rank:  # (A.X K2: norm.weight, W_down / W_up under a gated norm)
        gated = (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "mlp_norm"))
        for hf, ours in gated[: 1 + moe]:  # (a dense layer's second norm: a plain one)
            r, w = cfg.gated_norm_rank, names.pop(f"{layer}.{hf}.weight")
            names[f"{layer}.{hf}.norm.weight"] = w
            names[f"{layer}.{hf}.W_down.weight"] = _linear(r, d, at + (f"{ours}_gate_a",))
            names[f"{layer}.{hf}.W_up.weight"] = _linear(d, r, at + (f"{ours}_gate_b",))
    elif cfg.parallel_block or cfg.norm_bias:
        if cfg.norm_bias:  # (Phi-3.5-MoE's LayerNorms, Phi-2's, StarCoder2's)
            names[f"{layer}.input_layernorm.bias"] = _vector(d, at + ("attn_norm_bias",))
            names[f"{layer}.post_attention_layernorm.bias"] = _vector(d, at + ("mlp_norm_bias",))
        if cfg.parallel_block and not cfg.parallel_norms:  # (Cohere, Phi-2: one norm)
            del names[f"{layer}.post_attention_layernorm.weight"]
            names.pop(f"{layer}.post_attention_layernorm.bias", None)
    elif not cfg.pre_norms or (cfg.hybrid_post_norms and not cfg.is_linear_layer(index)):
        # (OLMo 2's layers, OLMo Hybrid's attention ones: the blocks' outputs normed only)
        names = {
            f"{layer}.post_attention_layernorm.weight": _vector(d, at + ("attn_post_norm",)),
            f"{layer}.post_feedforward_layernorm.weight": _vector(d, at + ("mlp_post_norm",)),
        }
    elif cfg.sandwich_norms:  # (AFMoE: post_attention_layernorm normalizes the attention's output)
        names.update(
            {
                f"{layer}.post_attention_layernorm.weight": _vector(d, at + ("attn_post_norm",)),
                f"{layer}.pre_mlp_layernorm.weight": _vector(d, at + ("mlp_norm",)),
                f"{layer}.post_mlp_layernorm.weight": _vector(d, at + ("mlp_post_norm",)),
            }
        )
    if cfg.is_linear_layer(index):  # (Kimi-Linear's KDA: under self_attn; Granite's: mamba)
        kinds = {
            "kimi_delta": "self_attn",
            "mamba2": "mamba",
            "mamba1": "mamba",
            "short_conv": "conv",
            "lightning": "self_attn",
        }
        where = kinds.get(cfg.linear_attention_kind)
        names.update(linear_attn_names(cfg, f"{layer}.{where or 'linear_attn'}", at + ("linear",)))
    else:
        names.update(_attn_names(cfg, f"{layer}.self_attn", at + ("attn",), index))
    if cfg.model_type in ("granitemoehybrid", "granitemoe", "granitemoeshared", "granitemoe_swa"):
        names.update(_granite_ffn_names(cfg, layer, at))
    elif cfg.model_type in GEMMA_LAYOUT:
        pass  # (gemma_layer_names)
    elif moe:
        names.update(_moe_names(cfg, layer, at + ("moe",), layout))
        if cfg.moe_post_norm:  # (A.X-K1's, kept at the layer: transformers' save too)
            names[f"{layer}.post_mlp_layernorm.weight"] = _vector(d, at + ("mlp_post_norm",))
    else:
        mlp = f"{layer}.feed_forward" if cfg.model_type == "llama4_text" else f"{layer}.mlp"
        names.update(mlp_names(d, cfg.intermediate_size, mlp, at + ("mlp",)))
        if cfg.mlp_act in GATELESS_MLP_ACTS:  # (no gate: Arcee's, StarCoder2's, GPT-2's ...)
            del names[f"{mlp}.gate_proj.weight"]
        if cfg.mlp_act == "xielu":  # (Apertus: its activation's parameters; beta, eps [])
            for x in ("alpha_p", "alpha_n", "beta", "eps"):
                shape = (1,) if x.startswith("alpha") else ()
                names[f"{mlp}.act_fn.{x}"] = HFTensor(shape, (at + ("mlp", f"act_{x}"),), "copy")
        if cfg.mlp_bias:  # (StarCoder2's)
            names[f"{mlp}.up_proj.bias"] = _vector(cfg.intermediate_size, at + ("mlp", "b_up"))
            names[f"{mlp}.down_proj.bias"] = _vector(d, at + ("mlp", "b_down"))
    return names


# Where a checkpoint keeps the language model: (its "model." prefix, its lm_head's), as
# causal LMs save it, then multimodal wrappers (configs/hf_wrappers.MULTIMODAL_WRAPPERS) as
# transformers 5 and as transformers 4 (and released Mistral 3 checkpoints) lay them out.
# The other tensors (a vision tower, its projector) are not read.
NAME_PREFIXES = (
    ("model.", "lm_head."),
    ("model.language_model.", "lm_head."),
    ("language_model.model.", "language_model.lm_head."),
    ("model.text_model.", "lm_head."),  # (Idefics3's, SmolVLM's)
    ("thinker.model.language_model.", "thinker.lm_head."),  # (an Omni model's thinker)
    ("thinker.model.", "thinker.lm_head."),
    ("language_model.backbone.", "language_model.lm_head."),  # (Nemotron-H's, wrapped)
    ("text_model.model.", "text_model.lm_head."),  # (Emu3's)
    ("", "lm_head."),  # (Cosmos3's unified checkpoints: the language model at the root)
)


def prefixes_of(headers) -> tuple[str, str]:
    """The NAME_PREFIXES entry whose embedding the checkpoint holds (embed_tokens, or
    Nemotron-H's embeddings; the first if none)."""
    for model, head in NAME_PREFIXES:
        if f"{model}embed_tokens.weight" in headers or f"{model}embeddings.weight" in headers:
            return model, head
    return NAME_PREFIXES[0]


def with_prefixes(names: dict, prefixes: tuple[str, str]) -> dict:
    """hf_tensor_names' `names` under a checkpoint's prefixes (prefixes_of); Nemotron-H's
    backbone.* as its model.*."""
    model, head = prefixes
    if (model, head) == NAME_PREFIXES[0]:
        return names
    return {
        head + n[len("lm_head.") :]
        if n.startswith("lm_head.")
        else model + n[len("backbone." if n.startswith("backbone.") else "model.") :]: t
        for n, t in names.items()
    }
