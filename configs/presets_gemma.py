"""Presets of Google's Gemma 4 (transformers' gemma4_text, configs/hf_gemma4.py): the test-size
model of tests/fixtures/gemma4 (tests/test_hf_config.py reads its config.json back to this
preset) and the shapes of Gemma 4 26B-A4B and 31B (MaxText's gemma4-26b / gemma4-31b model
configs; the releases' config.json files are not on this machine)."""

from __future__ import annotations

from configs.hf_gemma4 import kv_sources
from configs.model_config import ModelConfig

GEMMA: dict[str, ModelConfig] = {}


def _gemma4(name: str, **fields) -> ModelConfig:
    """Gemma 4's fixed fields: q/k norms, weightless v norm, attention scale 1, norms after
    the blocks, GeGLU, layer scalars, tied embeddings times sqrt(hidden_size); the full
    layers' proportional RoPE (a quarter of the pairs, base 1e6), the windowed ones' 1e4."""
    hidden = fields["hidden_size"]
    return ModelConfig(
        name=name,
        model_type="gemma4_text",
        qk_norm=True,
        v_norm=True,
        attention_multiplier=1.0,
        sandwich_norms=True,
        layer_scalars=True,
        mlp_act="geglu",
        expert_act="geglu",
        norm_topk_prob=True,
        tie_word_embeddings=True,
        embedding_multiplier=hidden**0.5,
        rope_theta=1e6,
        sliding_rope_theta=1e4,
        rope_proportional=True,
        partial_rotary_factor=0.25,
        attention_k_eq_v=True,
        **fields,
    )


def _every_sixth(num_layers: int) -> tuple[int, ...]:
    """Gemma 4's full-attention layers: each sixth (5 windowed, then 1)."""
    return tuple(range(5, num_layers, 6))


# tests/fixtures/gemma4: 4 layers 64 wide, 4 heads; layers 0 and 2 an 8-key window over 2 KV
# heads of 16, layers 1 and 3 global over 1 KV head of 32 (values the keys' projection); on
# every layer a GeGLU MLP 48 wide beside top-2 of 8 GeGLU experts 24 wide; logits capped at 4.
GEMMA["tiny-gemma4"] = _gemma4(
    "tiny-gemma4",
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    global_head_dim=32,
    global_num_kv_heads=1,
    sliding_window=8,
    full_attention_layers=(1, 3),
    intermediate_size=48,
    max_position_embeddings=2048,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    dense_beside_moe=True,
    final_logit_softcapping=4.0,
    bos_token_id=1,
    eos_token_ids=(2,),
)
# tests/fixtures/gemma4_dense: tiny-gemma4 without experts (a GeGLU MLP 96 wide), its global
# layers' values their own projection (2 KV heads of 32: no attention_k_eq_v), logits uncapped.
GEMMA["tiny-gemma4-dense"] = GEMMA["tiny-gemma4"].replace(
    name="tiny-gemma4-dense",
    global_num_kv_heads=2,
    attention_k_eq_v=False,
    intermediate_size=96,
    num_experts=0,
    num_experts_per_tok=0,
    moe_intermediate_size=0,
    dense_beside_moe=False,
    final_logit_softcapping=0.0,
)
# Gemma 4 26B-A4B: 30 layers 2,816 wide, 16 heads; windowed layers (1,024 keys) over 8 KV heads
# of 256, every sixth layer global over 2 KV heads of 512; a GeGLU MLP 2,112 wide beside top-8
# of 128 experts 704 wide on every layer; 262,144 tokens of vocabulary and of context.
GEMMA["gemma-4-26b-a4b"] = _gemma4(
    "gemma-4-26b-a4b",
    vocab_size=262144,
    hidden_size=2816,
    num_layers=30,
    num_heads=16,
    num_kv_heads=8,
    head_dim=256,
    global_head_dim=512,
    global_num_kv_heads=2,
    sliding_window=1024,
    full_attention_layers=_every_sixth(30),
    intermediate_size=2112,
    max_position_embeddings=262144,
    num_experts=128,
    num_experts_per_tok=8,
    moe_intermediate_size=704,
    dense_beside_moe=True,
    final_logit_softcapping=30.0,
    bos_token_id=2,
    eos_token_ids=(1,),
    dtype="bfloat16",
)
# Gemma 4 31B (dense): 60 layers 5,376 wide, 32 heads; windowed layers over 16 KV heads of
# 256, every sixth global over 4 KV heads of 512; a GeGLU MLP 21,504 wide.
GEMMA["gemma-4-31b"] = GEMMA["gemma-4-26b-a4b"].replace(
    name="gemma-4-31b",
    hidden_size=5376,
    embedding_multiplier=5376**0.5,
    num_layers=60,
    num_heads=32,
    num_kv_heads=16,
    global_num_kv_heads=4,
    full_attention_layers=_every_sixth(60),
    intermediate_size=21504,
    num_experts=0,
    num_experts_per_tok=0,
    moe_intermediate_size=0,
    dense_beside_moe=False,
)


def _kv_shared(kinds: list[str], shared: int) -> tuple[int, ...]:
    """Gemma 4's KV sources for these layer kinds (configs/hf_gemma4.py's rule)."""
    return tuple(kv_sources(kinds, shared))


# tests/fixtures/gemma4_e (Gemma 4 E2B's kind): 6 layers 64 wide, windowed (8 keys) and global
# in turn, 2 KV heads of 16 and of 32; layers 3-5 read layer 1's and 2's K and V, their MLPs
# 96 wide (the others' 48); per-layer inputs 8 wide per layer; logits uncapped.
_E_KINDS = ["sliding", "full"] * 3
GEMMA["tiny-gemma4-e"] = GEMMA["tiny-gemma4-dense"].replace(
    name="tiny-gemma4-e",
    num_layers=6,
    full_attention_layers=(1, 3, 5),
    intermediate_size=48,
    layer_intermediate_sizes=(48,) * 3 + (96,) * 3,
    kv_source_layers=_kv_shared(_E_KINDS, 3),
    per_layer_input_dim=8,
    per_layer_vocab_size=512,
)
# tests/fixtures/gemma4_unified (Gemma 4 unified's text model, read as Gemma 4's): 6 layers 64
# wide, two windowed (8 keys, 2 KV heads of 16) to one global (1 KV head of 32, its values the
# keys' projection); layers 4 and 5 read layer 3's and layer 2's K and V; a GeGLU MLP 96 wide.
_U_KINDS = ["sliding", "sliding", "full"] * 2
GEMMA["tiny-gemma4-unified"] = GEMMA["tiny-gemma4-dense"].replace(
    name="tiny-gemma4-unified",
    num_layers=6,
    full_attention_layers=(2, 5),
    global_num_kv_heads=1,
    attention_k_eq_v=True,
    kv_source_layers=_kv_shared(_U_KINDS, 2),
)
# Gemma 4 E2B: 35 layers 1,536 wide, 8 heads over 1 KV head (256 wide windowed, 512 global),
# each fifth layer global; the last 20 read layers 13's and 14's K and V, their MLPs 12,288
# wide (the others' 6,144); per-layer inputs 256 wide per layer (a 262,144 x 8,960 table);
# logits capped at 30 (its config.json as third-party loaders transcribe it).
_E2B_KINDS = (["sliding"] * 4 + ["full"]) * 7
GEMMA["gemma-4-e2b"] = GEMMA["gemma-4-26b-a4b"].replace(
    name="gemma-4-e2b",
    hidden_size=1536,
    embedding_multiplier=1536**0.5,
    num_layers=35,
    num_heads=8,
    num_kv_heads=1,
    global_num_kv_heads=1,
    attention_k_eq_v=False,
    sliding_window=512,
    full_attention_layers=tuple(range(4, 35, 5)),
    intermediate_size=6144,
    layer_intermediate_sizes=(6144,) * 15 + (12288,) * 20,
    kv_source_layers=_kv_shared(_E2B_KINDS, 20),
    per_layer_input_dim=256,
    per_layer_vocab_size=262144,
    max_position_embeddings=131072,
    num_experts=0,
    num_experts_per_tok=0,
    moe_intermediate_size=0,
    dense_beside_moe=False,
)


def _gemma3n(name: str, **fields) -> ModelConfig:
    """Gemma 3n's fixed fields (configs/hf_gemma3n.py): Gemma 4's attention and norms with
    Gemma 3's RoPE per layer kind (1e6 global, 1e4 windowed), AltUp over 4 streams."""
    hidden = fields["hidden_size"]
    return ModelConfig(
        name=name,
        model_type="gemma3n_text",
        qk_norm=True,
        v_norm=True,
        attention_multiplier=1.0,
        sandwich_norms=True,
        mlp_act="geglu",
        tie_word_embeddings=True,
        embedding_multiplier=hidden**0.5,
        rope_theta=1e6,
        sliding_rope_theta=1e4,
        final_logit_softcapping=30.0,
        altup_num_inputs=4,
        **fields,
    )


# tests/fixtures/gemma3n: 6 layers 64 wide, 4 heads over 2 KV heads of 16, windowed (8 keys) and
# global in turn; layers 3-5 read layer 1's and 2's K and V; MLPs 48, 48, 64, 64, 96, 96 wide,
# the first two's gates Gaussian top-k'd (0.95, 0.6); LAuReL of rank 4; per-layer inputs 8 wide
# per layer from a 384-row table.
GEMMA["tiny-gemma3n"] = _gemma3n(
    "tiny-gemma3n",
    vocab_size=512,
    hidden_size=64,
    num_layers=6,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    sliding_window=8,
    full_attention_layers=(1, 3, 5),
    intermediate_size=96,
    layer_intermediate_sizes=(48, 48, 64, 64, 96, 96),
    activation_sparsity=(0.95, 0.6, 0.0, 0.0, 0.0, 0.0),
    kv_source_layers=_kv_shared(_E_KINDS, 3),
    laurel_rank=4,
    per_layer_input_dim=8,
    per_layer_vocab_size=384,
    max_position_embeddings=2048,
    bos_token_id=1,
    eos_token_ids=(2,),
)


def _gemma3n_release(name: str, num_layers: int, width: int, shared: int) -> ModelConfig:
    """Gemma 3n E2B / E4B: layers 2,048 wide, 8 heads over 2 KV heads of 256, each fifth
    layer global, the others a 512-key window; the last `shared` layers read the last
    earlier layer of their kind's K and V; MLPs `width` wide, the first ten's gates top-k'd
    (0.95); LAuReL of rank 64; per-layer inputs 256 wide per layer from 262,144 rows; 262,400
    tokens of vocabulary, 32,768 of context (their config.json as transformers' defaults and
    third-party loaders spell them; not on this machine)."""
    kinds = ["full" if (i + 1) % 5 == 0 else "sliding" for i in range(num_layers)]
    return _gemma3n(
        name,
        vocab_size=262400,
        hidden_size=2048,
        num_layers=num_layers,
        num_heads=8,
        num_kv_heads=2,
        head_dim=256,
        sliding_window=512,
        full_attention_layers=tuple(i for i, k in enumerate(kinds) if k == "full"),
        intermediate_size=width,
        activation_sparsity=(0.95,) * 10 + (0.0,) * (num_layers - 10),
        kv_source_layers=_kv_shared(kinds, shared),
        laurel_rank=64,
        per_layer_input_dim=256,
        per_layer_vocab_size=262144,
        max_position_embeddings=32768,
        bos_token_id=2,
        eos_token_ids=(1,),
        dtype="bfloat16",
    )


GEMMA["gemma-3n-e2b"] = _gemma3n_release("gemma-3n-e2b", 30, 8192, 10)
GEMMA["gemma-3n-e4b"] = _gemma3n_release("gemma-3n-e4b", 35, 16384, 15)
