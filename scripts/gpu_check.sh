#!/usr/bin/env bash
# The Pallas kernels' GPU checks in one command (a few minutes on an H200): the Mosaic GPU
# kernels, never yet run on a GPU, first (and the engine on them); the kernel tests compiled
# for the GPU against their _ref twins; the engine's HF parity on them; fp8 pages and
# batch invariance; a tuning sweep; then scripts/bench_kernels.py (table on stdout, JSON and
# logs in OUT_DIR; both benches also print each row as it is measured).
#
#   scripts/gpu_check.sh [OUT_DIR]        # device tool: run command 'scripts/gpu_check.sh "$OUT"'
#   STAGES="env kernels sweep" scripts/gpu_check.sh "$OUT"    # a subset, in this order
#   BENCH_FLAGS="--block_rows=16" scripts/gpu_check.sh ...    # extra flags for both benches
#   STAGES=mla scripts/gpu_check.sh "$OUT"   # optional, not in the default run (no time left
#       in it): MLA prefill absorbed on the Pallas kernel vs expanded on XLA, 128 heads bf16
#   STAGES=bf16 scripts/gpu_check.sh "$OUT"  # optional too: the engine in bfloat16 on the
#       kernels against transformers' bfloat16 noise (tests/test_hf_parity.py, four fixtures)
#   STAGES=int4 scripts/gpu_check.sh "$OUT"  # optional: int4 weights on the GPU vs transformers
#   STAGES=mtp scripts/gpu_check.sh "$OUT"   # optional: MTP drafts vs transformers', and what
#       a step with k drafts costs (random MTP) or buys (drafts always right) on the GPU
#   STAGES=dsa scripts/gpu_check.sh "$OUT"   # optional: DeepSeek sparse attention on the GPU
#       (its tests, then one layer's dense MLA vs DSA at V3.2's shapes in bf16, to 128k)
#   STAGES=linear scripts/gpu_check.sh "$OUT"  # optional: Qwen3-Next's gated DeltaNet
#       (its tests, then chunked vs row-by-row prefill and a decode batch, bf16)
#
# Stage limits from the first H200 runs (kernels 30 s, engine 96 s, sweep 46 s for 23 rows,
# bench 48 s) grown with what was added since (Mosaic rows, more sweep configs).
# Runs under the GPU image's python3 (jax 0.11.2 with the CUDA plugin, flax, orbax,
# safetensors, tokenizers, absl, pytest); the project's .venv is a CPU build. Each stage has
# its own time limit (580 s together) so the whole run ends inside one
# 10-minute device command, and a stage that fails does not stop the next.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-/tmp/gpu_check}}"
PY="${PYTHON:-python3}"
STAGES="${STAGES:-env mosaic kernels engine fp8 sweep bench}"
read -r -a EXTRA <<<"${BENCH_FLAGS:-}"
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

status=0
stage() {  # stage NAME SECONDS CMD...: run, log to OUT_DIR/NAME.log, remember a failure
  local name=$1 limit=$2
  shift 2
  [[ " $STAGES " == *" $name "* ]] || return 0
  echo "=== $name (limit ${limit}s)"
  local start=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$OUT_DIR/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc after $((SECONDS - start))s"
  [ "$rc" -eq 0 ] || status=1
}

stage env 20 "$PY" -c 'import jax, jaxlib; print(jax.__version__, jaxlib.__version__, jax.devices())'
# Kernels compiled for the GPU (the interpret-mode twins of these run on CPU in make test).
M=tests/test_pallas_engine.py::test_mosaic_engine_scores_like_the_pallas_engine_on_hopper
stage mosaic 90 "$PY" -m pytest -q -p no:cacheprovider --durations=5 -m gpu \
  tests/test_pallas_mosaic.py "$M"
stage kernels 60 "$PY" -m pytest -q -p no:cacheprovider --durations=5 -m gpu \
  tests/test_pallas_attention.py tests/test_pallas_kv_write.py
# The engine on the kernels ("pallas" compiles them; "auto" must pick them on a GPU).
stage engine 100 "$PY" -m pytest -q -p no:cacheprovider --durations=0 tests/test_pallas_engine.py \
  --deselect "$M"
# Batch-invariant mode on the kernels (never yet run on a GPU; in the first H200 runs it
# queued behind deepseek_v3's fp8 case, which did not finish), then fp8 KV pages against HF
# with an fp8 cache, Pallas cases before the XLA ones, which matter less here.
F=tests/test_kv_quant.py::test_engine_with_fp8_kv_matches_hf_with_an_fp8_cache
stage fp8 90 "$PY" -m pytest -q -p no:cacheprovider --durations=0 \
  tests/test_batch_invariance.py::test_pallas_kernels_keep_the_mode "$F[llama-pallas]" \
  "$F[deepseek_v3-pallas]" "$F[deepseek_v3-xla]" "$F[llama-xla]"
# Tuning: the base configs, the prefill chunk's PREFILL_SWEEP (fast_softmax among them) and
# MOSAIC_PREFILL_SWEEP, each SWEEP config at the target decode shape, that shape in an
# engine's 128k-wide page table (ENGINE_TABLE_SWEEP), MLA at a tensor-parallel share of the
# heads, then the smaller batches' SMALL_SWEEP: about 65 compilations, in that order so
# that a run cut off at the limit loses the least useful rows; every finished row is in
# sweep.log ("row {json}").
stage sweep 130 "$PY" -m scripts.bench_kernels --batches=1,16,64 --contexts=8192 --sweep \
  --nobundled --nofp8 --out="$OUT_DIR/sweep.json" "${EXTRA[@]}"
stage bench 90 "$PY" -m scripts.bench_kernels --out="$OUT_DIR/bench_kernels.json" "${EXTRA[@]}"
# Optional (STAGES=mla): would the engine's GPU route gain from expanding long MLA prefill
# spans on the XLA path, as its CPU route does? (bench_long_context --part=mla)
stage mla 150 "$PY" -m scripts.bench_long_context --part=mla --mla_impls=pallas,xla \
  --mla_heads=128 --mla_dtype=bfloat16 --json_out="$OUT_DIR/mla_prefill.json"
# Optional (STAGES=bf16): bfloat16 on the GPU route (LLM's "auto" picks the kernels there).
stage bf16 60 "$PY" -m pytest -q -p no:cacheprovider --durations=0 tests/test_hf_parity.py \
  -k bfloat16
# Optional (STAGES=int4): int4 weights held packed, unpacked in the step on the GPU, against
# transformers' tokens (tests/test_int4.py).
stage int4 60 "$PY" -m pytest -q -p no:cacheprovider --durations=0 tests/test_int4.py \
  -k "decode or float_model"
# Optional (STAGES=mtp): the MTP module's drafts on the GPU (tests/test_mtp.py), then its
# price and, with drafts always right (--drafts=oracle), its gain (bench_speculative).
mtp_stage() {
  "$PY" -m pytest -q -p no:cacheprovider --durations=0 tests/test_mtp.py -k "greedy or kept" \
    || return 1
  for k in 1 3; do
    for drafts in model none oracle; do
      "$PY" -m scripts.bench_speculative --method=mtp --drafts="$drafts" \
        --model=bench-deepseek-v3-35m \
        --num_speculative_tokens="$k" || return 1
    done
  done
}
export -f mtp_stage
export PY
stage mtp 420 bash -c mtp_stage
# Optional (STAGES=dsa): DeepSeek-V3.2's sparse attention (the XLA path on every backend).
dsa_stage() {
  "$PY" -m pytest -q -p no:cacheprovider --durations=0 tests/test_sparse_attention.py \
    || return 1
  "$PY" -m scripts.bench_sparse_attention --dtype=bfloat16 --decodes=64 --chunk=2048 \
    --contexts=8192,32768,131072 --json_out="$OUT_DIR/bench_sparse_attention.json"
}
export -f dsa_stage
export OUT_DIR
stage dsa 300 bash -c dsa_stage
# Optional (STAGES=linear): Qwen3-Next's gated DeltaNet on the GPU (its tests: the layer
# against numpy, the engine against transformers, batch invariance), then one layer at
# Qwen3-Next's shapes in bf16: chunked prefill vs row by row, and a decode batch of 64.
linear_stage() {
  "$PY" -m pytest -q -p no:cacheprovider --durations=0 tests/test_linear_attention.py \
    || return 1
  "$PY" -m scripts.bench_linear_attention --dtype=bfloat16 --num_tokens=1024,8192 \
    --batch=64 --json_out="$OUT_DIR/bench_linear_attention.json"
}
export -f linear_stage
stage linear 240 bash -c linear_stage
exit $status
