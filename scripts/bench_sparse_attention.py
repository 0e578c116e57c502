"""DeepSeek Sparse Attention against dense MLA: one layer's attention at DeepSeek-V3.2's shapes.

  python -m scripts.bench_sparse_attention                   # the figures in docs/benchmarks.md
  python -m scripts.bench_sparse_attention --contexts=64 --decodes=2 --heads=2 \
      --index_heads=2 --topk=16 --chunk=8                    # a quick check

For each context L in --contexts: --decodes sequences decoding one token over L keys, and one
--chunk-token prefill chunk ending at L. Three programs, each jitted and run in turn, best of
--repeats: the engine's dense MLA for a model without sparse attention (engine/step.py's
mla_attention: absorbed, long prefill spans expanded), the engine's DSA layer
(engine/sparse_mla.py: the indexer's top --topk, then absorbed MLA over the chosen keys),
and the indexer's selection alone. Shapes: --heads MLA heads of DeepSeek-V3's per-head
sizes (latent 512, rope 64, nope 128, value 128), an indexer of --index_heads x 128,
float32 (this CPU) or --dtype. Attention only: no projections but W_UK / W_UV.
"""

from __future__ import annotations

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from configs.presets import get_preset
from engine import mla_expanded, sparse_mla
from engine import paged_attention as pa
from engine import step as engine_step
from engine.attention_ops import get_attention_ops
from long_context.latency import paged_batch
from models.attention import AttnInputs
from scripts.flag_checks import check_count, check_output_file, parse_ints

_CONTEXTS = flags.DEFINE_list("contexts", ["2048", "8192", "32768"], "Keys before each query.")
_DECODES = flags.DEFINE_integer("decodes", 8, "Decoding sequences per decode scenario.")
_CHUNK = flags.DEFINE_integer("chunk", 64, "Tokens of the prefill scenario's chunk.")
_HEADS = flags.DEFINE_integer("heads", 128, "MLA heads (DeepSeek-V3.2: 128).")
_INDEX_HEADS = flags.DEFINE_integer("index_heads", 64, "Indexer heads (DeepSeek-V3.2: 64).")
_TOPK = flags.DEFINE_integer("topk", 2048, "Keys each query keeps (DeepSeek-V3.2: 2048).")
_PAGE_SIZE = flags.DEFINE_integer("page_size", 64, "KV page size in tokens.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Activations, pages.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs of each program (best counts).")
_JSON = flags.DEFINE_string("json_out", None, "Write the results here as JSON.")

RANK, ROPE, NOPE, VALUE, INDEX_DIM = 512, 64, 128, 128, 128
KV_BLOCK_TOKENS = 128  # the engine's decode KV block (kv_block_pages * page_size)


def time_scenario(scenario: list[tuple[int, int]]) -> dict:
    """Best seconds of the three programs on one scenario, and how far DSA's output is from
    dense attention's (0 where every query keeps all its keys)."""
    heads, index_heads, topk, page = _HEADS.value, _INDEX_HEADS.value, _TOPK.value, _PAGE_SIZE.value
    dtype = jnp.dtype(_DTYPE.value)
    cfg = get_preset("tiny-deepseek-v32").replace(
        num_heads=heads,
        kv_lora_rank=RANK,
        qk_nope_head_dim=NOPE,
        qk_rope_head_dim=ROPE,
        v_head_dim=VALUE,
        index_topk=topk,
        index_n_heads=index_heads,
        index_head_dim=INDEX_DIM,
    )
    meta_args, num_pages = paged_batch(scenario, page)
    num_tokens = int(meta_args[0][-1])
    rng = np.random.default_rng(0)

    def draw(*shape, scale=1.0):
        return jnp.asarray(rng.standard_normal(shape, np.float32) * scale, dtype)

    arrays = dict(
        latent=draw(num_pages, page, RANK + ROPE),
        index_keys=draw(num_pages, page, INDEX_DIM),
        q_nope=draw(num_tokens, heads, NOPE),
        q_pe=draw(num_tokens, heads, ROPE),
        idx_q=draw(num_tokens, index_heads, INDEX_DIM),
        idx_w=draw(num_tokens, index_heads).astype(jnp.float32),
        wkv_b=draw(RANK, heads, NOPE + VALUE, scale=RANK**-0.5),
    )
    ops = get_attention_ops("xla")._replace(mla_expanded=mla_expanded.paged_attention_mla_expanded)
    scale = (NOPE + ROPE) ** -0.5

    def inputs(a):
        meta = pa.build_metadata(*a["meta"], num_tokens)
        x = AttnInputs(
            q_nope=a["q_nope"], q_pe=a["q_pe"], idx_q=a["idx_q"], idx_w=a["idx_w"], scale=scale
        )
        return meta, x, {"wkv_b": a["wkv_b"]}

    def dense(a):
        meta, x, p = inputs(a)
        split = engine_step.mla_split_for(ops, cfg, meta, num_tokens, len(scenario))
        block = KV_BLOCK_TOKENS // page
        return engine_step.mla_attention(ops, p, cfg, x, a["latent"], meta, block, split)

    def sparse(a):
        meta, x, p = inputs(a)
        selected = sparse_mla.select(cfg, x, a["index_keys"], meta)
        return sparse_mla.attention(p, cfg, x, a["latent"], selected, meta)

    def select(a):
        meta, x, _ = inputs(a)
        return sparse_mla.select_keys(x.idx_q, x.idx_w, a["index_keys"], meta, topk)

    args = arrays | {"meta": tuple(jnp.asarray(m) for m in meta_args)}
    programs = {
        name: jax.jit(fn).lower(args).compile()
        for name, fn in (("dense", dense), ("sparse", sparse), ("indexer", select))
    }
    outs = {name: c(args) for name, c in programs.items()}
    best = dict.fromkeys(programs, float("inf"))
    for _ in range(_REPEATS.value):
        for name, compiled in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(args))
            best[name] = min(best[name], time.perf_counter() - start)
    diff = np.abs(np.asarray(outs["dense"], np.float32) - np.asarray(outs["sparse"], np.float32))
    kept = np.asarray(outs["indexer"]) >= 0
    return dict(
        seconds=best,
        temp_mib={n: c.memory_analysis().temp_size_in_bytes / 2**20 for n, c in programs.items()},
        keys_kept=int(kept.sum()),
        max_abs_diff_from_dense=float(diff.max()),
    )


def main(argv):
    del argv
    try:
        contexts = parse_ints("--contexts", _CONTEXTS.value, low=1, high=1 << 20)
        check_count("--decodes", _DECODES.value, low=1, high=4096)
        check_count("--chunk", _CHUNK.value, low=1, high=1 << 16)
        for flag, value in (("--heads", _HEADS), ("--index_heads", _INDEX_HEADS)):
            check_count(flag, value.value, low=1, high=1024)
        check_count("--topk", _TOPK.value, low=1, high=1 << 20)
        check_count("--page_size", _PAGE_SIZE.value, low=1, high=4096)
        check_count("--repeats", _REPEATS.value, low=1, high=1000)
        if KV_BLOCK_TOKENS % _PAGE_SIZE.value:
            raise ValueError(f"--page_size={_PAGE_SIZE.value}: must divide {KV_BLOCK_TOKENS}")
        if _JSON.value:
            check_output_file("--json_out", _JSON.value)
    except ValueError as e:
        sys.exit(f"bench_sparse_attention: {e}")
    rows = []
    for context in contexts:
        for name, scenario in (
            (f"{_DECODES.value} decodes at {context}", [(1, context)] * _DECODES.value),
            (
                f"{_CHUNK.value}-token chunk ending at {context}",
                [(min(_CHUNK.value, context), context)],
            ),
        ):
            row = dict(scenario=name, context=context) | time_scenario(scenario)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(
        f"One attention layer: {_HEADS.value} MLA heads (latent {RANK}, rope {ROPE}), indexer "
        f"{_INDEX_HEADS.value} x {INDEX_DIM}, top {_TOPK.value} keys, {_DTYPE.value}, "
        f"{jax.devices()[0].platform}; ms, best of {_REPEATS.value}"
    )
    print("| scenario | dense MLA | sparse (DSA) | of which the indexer | dense / sparse |")
    print("|---|---|---|---|---|")
    for r in rows:
        s = r["seconds"]
        print(
            f"| {r['scenario']} | {1e3 * s['dense']:.1f} | {1e3 * s['sparse']:.1f} | "
            f"{1e3 * s['indexer']:.1f} | {s['dense'] / s['sparse']:.2f}x |"
        )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    app.run(main)
