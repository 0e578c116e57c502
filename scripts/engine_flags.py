"""The engine's settings as absl flags, for the scripts that build one LLM from the command
line (generate, serve, eval_long_context): defined here once, read by `llm_kwargs()`."""

from __future__ import annotations

from absl import flags

DTYPE = flags.DEFINE_string("dtype", None, "Override the parameter dtype.")
MESH = flags.DEFINE_string("mesh", "", "Device mesh, e.g. 'dp=1,tp=2,ep=4'.")
PAGE_SIZE = flags.DEFINE_integer("page_size", 16, "KV page size in tokens.")
NUM_PAGES = flags.DEFINE_integer("num_pages", None, "KV pages; default from a memory budget.")
MAX_BATCHED = flags.DEFINE_integer("max_num_batched_tokens", 2048, "Token budget per step.")
MAX_SEQS = flags.DEFINE_integer("max_num_seqs", 64, "Sequences per step at most.")
TOKEN_BUCKETS = flags.DEFINE_list(
    "token_buckets",
    None,
    "Token counts steps pad to, powers of two, e.g. 16,256,2048: fewer programs to compile "
    "for more padding (default: every power of two from 8 up to max_num_batched_tokens).",
)
MAX_MODEL_LEN = flags.DEFINE_integer(
    "max_model_len", None, "Longest sequence (default: the model's, or what the script needs)."
)
ATTN = flags.DEFINE_enum(
    "attention_impl", "auto", ["auto", "xla", "pallas", "mosaic"], "Attention."
)
KV_CACHE_DTYPE = flags.DEFINE_enum(
    "kv_cache_dtype", "auto", ["auto", "fp8", "fp8_e4m3"], "KV pages: the model dtype, or fp8."
)
QUANTIZATION = flags.DEFINE_enum(
    "quantization",
    None,
    ["fp8", "int4", "gptq", "gptq_marlin", "awq", "awq_marlin", "compressed-tensors"],
    "Weights: the model dtype (unset), fp8 with block scales, or int4 with group scales "
    "(vLLM's gptq / awq / compressed-tensors names: a checkpoint of that format, as int4, or "
    "as fp8 for compressed-tensors' float-quantized one).",
)
BATCH_INVARIANT = flags.DEFINE_bool("batch_invariant", False, "Bitwise-deterministic mode.")
PREFIX_CACHING = flags.DEFINE_bool(
    "enable_prefix_caching", False, "Reuse the KV pages of prompts' shared prefixes."
)
KV_OFFLOADING_SIZE = flags.DEFINE_float(
    "kv_offloading_size",
    None,
    "GiB of host memory keeping the prefix cache's evicted KV pages (needs prefix caching).",
)
MAMBA_BLOCK_SIZE = flags.DEFINE_integer(
    "mamba_block_size",
    None,
    "Linear-attention models' prefix caching: tokens between state snapshots (default 512).",
)
STATE_SNAPSHOTS = flags.DEFINE_integer(
    "num_state_snapshots",
    None,
    "Linear-attention models' prefix caching: state snapshots kept (default max_num_seqs).",
)
SWA_RATIO = flags.DEFINE_float(
    "swa_full_tokens_ratio",
    None,
    "Hybrid sliding-window models: the windowed layers' pool as this fraction (0, 1] of the "
    "full-attention pool's pages (default: what the running sequences' windows need); more "
    "keeps cached prefixes' windows longer.",
)

ENABLE_LORA = flags.DEFINE_bool("enable_lora", False, "Serve LoRA adapters (engine/lora.py).")
MAX_LORAS = flags.DEFINE_integer("max_loras", 1, "LoRA adapters running at once.")
MAX_LORA_RANK = flags.DEFINE_integer("max_lora_rank", 16, "Largest LoRA rank served.")

KV_TRANSFER = flags.DEFINE_string(
    "kv_transfer_config",
    None,
    "Disaggregated prefill / decode, vLLM's JSON: "
    '\'{"kv_role": "kv_producer" | "kv_consumer" | "kv_both", '
    '"kv_connector_extra_config": {"shared_storage_path": DIR}}\'.',
)

ENABLE_EPLB = flags.DEFINE_bool(
    "enable_eplb", False, "Expert-parallel load balancing: redundant experts placed by load."
)
EPLB_CONFIG = flags.DEFINE_string(
    "eplb_config",
    None,
    'vLLM\'s JSON: \'{"num_redundant_experts": R, "window_size": 1000, '
    '"step_interval": 3000}\' (R a multiple of ep).',
)

SCHEDULING_POLICY = flags.DEFINE_enum(
    "scheduling_policy", "fcfs", ["fcfs", "priority"], "Request order (priority: lower first)."
)

SPEC_TOKENS = flags.DEFINE_integer(
    "num_speculative_tokens", 0, "Speculative decoding: drafts per decode; 0 = off."
)
SPEC_METHOD = flags.DEFINE_enum(
    "speculative_method",
    "ngram",
    ["ngram", "mtp", "draft_model"],
    "Drafts from prompt lookup (ngram), the model's MTP module (mtp: DeepSeek-V3, GLM), or "
    "a smaller model of the same vocabulary (draft_model: --speculative_model).",
)
SPEC_MODEL = flags.DEFINE_string(
    "speculative_model", None, "The draft model (--speculative_method=draft_model)."
)


# Integers when parsed (the engine checks the rest: powers of two, the largest >= the budget).
flags.register_validator(
    "token_buckets",
    lambda v: v is None or all(x.strip().isdigit() for x in v),
    "expected powers of two, e.g. 16,256,2048",
)

flags.register_validator(
    "swa_full_tokens_ratio", lambda v: v is None or 0 < v <= 1, "must be in (0, 1]"
)


def llm_kwargs(**overrides) -> dict:
    """LLM's keyword arguments from the flags (`overrides` win)."""
    return {
        "dtype": DTYPE.value,
        "mesh": MESH.value,
        "page_size": PAGE_SIZE.value,
        "num_pages": NUM_PAGES.value,
        "max_num_batched_tokens": MAX_BATCHED.value,
        "max_num_seqs": MAX_SEQS.value,
        "token_buckets": TOKEN_BUCKETS.value and [int(x) for x in TOKEN_BUCKETS.value],
        "max_model_len": MAX_MODEL_LEN.value,
        "attention_impl": ATTN.value,
        "kv_cache_dtype": KV_CACHE_DTYPE.value,
        "quantization": QUANTIZATION.value,
        "enable_lora": ENABLE_LORA.value,
        "max_loras": MAX_LORAS.value,
        "max_lora_rank": MAX_LORA_RANK.value,
        "batch_invariant": BATCH_INVARIANT.value,
        "enable_prefix_caching": PREFIX_CACHING.value,
        "kv_offloading_size": KV_OFFLOADING_SIZE.value,
        "mamba_block_size": MAMBA_BLOCK_SIZE.value,
        "num_state_snapshots": STATE_SNAPSHOTS.value,
        "swa_full_tokens_ratio": SWA_RATIO.value,
        "kv_transfer_config": KV_TRANSFER.value,
        "scheduling_policy": SCHEDULING_POLICY.value,
        "enable_eplb": ENABLE_EPLB.value,
        "eplb_config": EPLB_CONFIG.value,
        "speculative_config": {
            "method": SPEC_METHOD.value,
            "num_speculative_tokens": SPEC_TOKENS.value,
            **({"model": SPEC_MODEL.value} if SPEC_MODEL.value else {}),
        }
        if SPEC_TOKENS.value
        else None,
        **overrides,
    }
