"""Batch-invariant mode: what it pins, and the measurements behind it.

Temperature zero removes sampling randomness but not floating-point randomness: XLA picks
kernels by shape, so the batch a request lands in can move its logits in the last bits.
The mode pins every reduction to an order that does not depend on the batch:

- Matmuls: XLA:CPU's dot kernel regime follows M (rows). Measured on jax 0.11.2 (one fixed
  row placed in [M, K] x [K, N], float32, shapes of the tiny and bench models): the row's
  result is bitwise identical for all M >= 64 in every shape tried (96x240: {1..48} vs
  {64..}; 1536x512: {1} vs {2,3} vs {4..}; 512x1536: {1, 33..} vs {2..32}). On an AMD EPYC
  with AVX2 and no AVX-512 (48th session, M in 16..2048) the narrow products split later:
  K x N of 64 x 4, 64 x 8, 96 x 4, 128 x 8, 512 x 8 and 2048 x 8 (a tiny model's router,
  a gated DeltaNet's beta and decay projections) give {16..80} vs {96..}; the others
  tried (N 2, 16, 64, 96, 240, 512, 1536) one regime from 64 rows. So the step pads tokens
  T and sampled rows S to at least MIN_ROWS = 64, and its narrow products (fewer than 16
  output columns: routers, DeltaNet's beta and decay, indexer and head gates, DeepSeek-V4's
  hyper-connections; `models.reductions.narrow_product`) compute over at least NARROW_ROWS
  = 128 rows a shard (their padding rows dropped after). Before the 52nd session every
  step was padded to 128 rows (64 let Qwen3-Next's probe move by a few ulps: its narrow
  products), and a 64-sequence decode computed twice its rows: the mode ran at 0.53-0.75x
  the default's throughput (docs/benchmarks.md "Batch-invariant mode: cost").
- Sums over a row (norms, softmaxes, attention blocks, log-softmax, top-p mass):
  `fixed_order_sum`, a pairwise tree whose order depends only on the summed length
  (jnp.sum over V=1000 changed a row's last bit between 1..4 and >= 5 rows). The model's
  row sums (`models.reductions.row_sum`) take the tree only in this mode's step, since it
  costs compile time (5-20% of a tiny model's step program on XLA:CPU); the sampler's take
  it in every step.
- Attention: reduced over fixed-size KV blocks aligned to absolute position 0, one token at a
  time, so chunking, decode vs prefill and neighbours do not change a token's reduction.
- MoE: on CPU each expert's rows are multiplied in fixed tiles of GROUP_TILE rows
  (`models.moe.grouped_swiglu`; a row's products were bitwise the same at every place in a tile
  and for any tile count), and the top-k expert outputs are combined in slot order 0..k-1 in
  float32. On GPU the grouped matmul is `jax.lax.ragged_dot`, not yet shown invariant there.
- Pallas kernels (`attention_impl="pallas"`): each program reduces one fixed query tile
  over KV blocks aligned to position 0, in order, so they need no extra mode; bitwise
  invariance is tested in interpret mode on CPU (tests/test_batch_invariance.py), not yet on
  a GPU.
- Gated DeltaNet layers (Qwen3-Next, Qwen3.5: models/linear_attention.py): the delta rule
  runs one token at a time (never the chunked form, whose rounding follows where a step's
  chunks begin), its sums over the key width in fixed order, so a sequence's state and
  outputs do not depend on the batch or on how its prompt was split into steps.
- Sampling: each request draws from fold_in(key(seed), step), independent of its row.
- Prefix-cache hits (LLM(enable_prefix_caching=True)): a cached page's K/V rows are what
  the request would compute itself, since no row depends on the step, chunk or batch that
  wrote it; a hit is one more chunking. Tested bitwise for GQA and MLA
  (tests/test_prefix_cache.py).
- LoRA adapters (LLM(enable_lora=True)): each target's two adapter matmuls run over the
  step's padded T rows like the projection itself, with every slot's columns whatever the
  batch holds (models/lora.py), so a row's LoRA term does not depend on its neighbours or
  their adapters. Tested bitwise (tests/test_lora.py).
- Meshes: tokens are split over dp x ep, so the padding is MIN_ROWS x dp x ep rows and
  every shard stays in the same regime; expert compute is local and the combine runs in slot
  order, so ep=1, 2 and 4 give bitwise-equal output (tests/test_sharding_mesh.py). Tensor
  parallelism is not covered: its all-reduces sum partial products across devices in an
  order XLA chooses, so tp > 1 is deterministic run to run but not claimed equal to tp=1.
"""

from __future__ import annotations

from models.reductions import fixed_order_sum

__all__ = ["MIN_ROWS", "fixed_order_sum"]

MIN_ROWS = 64  # a padded M past the last regime change of every measured dot shape but...
NARROW_ROWS = 128  # ...the narrow ones' (fewer than 16 columns: models.reductions.narrow_product)
