# moeserve: `make demo`, `make test`. Everything runs from the project's own .venv.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Python >= 3.12 (jax 0.11.2 needs it): first one that really runs, from PATH or pyenv.
PYTHON_CANDIDATES := $(PYTHON) python3.13 python3.12 python3 \
	$(wildcard $(shell pyenv root 2>/dev/null)/versions/3.1[2-9]*/bin/python3) \
	$(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3) \
	$(wildcard /usr/local/bin/python3.1[2-9] /usr/bin/python3.1[2-9])

.PHONY: setup demo test lint format clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@set -e; found=""; \
	for c in $(PYTHON_CANDIDATES); do \
	  if $$c -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then \
	    found=$$c; break; fi; \
	done; \
	if [ -z "$$found" ]; then \
	  echo "make setup: no Python >= 3.12 found (tried: $(PYTHON_CANDIDATES))." >&2; \
	  echo "Install one (e.g. 'pyenv install 3.12') or run 'make setup PYTHON=/path/to/python3.12'." >&2; \
	  exit 1; fi; \
	echo "make setup: using $$found ($$($$found --version))"; \
	[ -x $(PY) ] || $$found -m venv $(VENV); \
	$(PY) -m pip install -q --upgrade pip; \
	$(PY) -m pip install -q -e '.[dev]'; \
	touch $(STAMP)

demo: setup
	$(PY) -m scripts.generate --model=tiny-deepseek-v3 --num_prompts=8 --max_tokens=24

# tests/run_files.sh runs one pytest process per test file, TEST_JOBS at a time (why: its
# header), longest first so the two workers finish close together: FIRST_TESTS and
# LATER_TESTS by their time in a full run (50th session, 2 cores: test_engine ~190 s,
# test_sharding_mesh ~172 s, test_hf_parity ~124 s, test_scripts ~122 s ...; test_mtp first, as test_scripts' MTP run
# reuses its programs, test_engine after the mesh test, whose one-device runs it shares,
# and test_eplb after both: four of its six base engines are mesh-test layouts, whose
# programs the run's compilation cache then holds), then any file not listed.
# Shorter files run several to a process (a process's start, jax and the engine's imports
# and pytest's collection, is 2-3 s; 49th session): GROUP_A and GROUP_B (10-30 s each),
# placed in that order by their totals, and QUICK_TESTS (a few seconds each) last.
# Compiling is most of the suite's time on CPU and many files compile the same step
# programs, so the run shares JAX's persistent compilation cache: a fresh directory per run
# (what a clean checkout pays), removed after.
TEST_JOBS ?= 2
tests_of = $(wildcard $(patsubst %,tests/test_%.py,$(1)))
FIRST_TESTS := $(call tests_of,mtp sharding_mesh engine eplb scripts hf_parity pallas_bench \
	linear_attention)
GROUP_A := $(call tests_of,inputs checkpoints prefix_cache long_context_evals server \
	models_ops parallel_sampling)
GROUP_B := $(call tests_of,beam_search kv_offload structured sparse_attention bad_words \
	gemma4 bailing_hybrid mamba_hybrids)
LATER_TESTS := $(call tests_of,long_context kv_quant pallas_engine lora batch_invariance \
	paged_attention kv_transfer penalties deepseek_v4 pallas_attention speculative \
	pallas_mosaic int4 token_lists sampling_options quantization long_context_bench \
	determinism_check)
QUICK_TESTS := $(call tests_of,capacity sampler pallas_lowering long_context_policy \
	param_counts sharding pallas_kv_write mxfp4 runner kv_pages scheduler scheduler_windows \
	hf_config hf_config_defaults hf_config_mla tool_calls priority_scheduling fp8_schemes \
	int4_gptq_awq chat family_configs mimo lfm2 longcat jamba minimax sarvam cohere hyv3 \
	granite_swa dbrx lfm3 phi3 smollm3 dense_families gemma3 laguna \
	olmo_hybrid moe_kin alibi vl_wrappers gemma_small zamba2)
LISTED := $(FIRST_TESTS) $(GROUP_A) $(GROUP_B) $(LATER_TESTS) $(QUICK_TESTS)
OTHER_TESTS := $(filter-out $(LISTED),$(sort $(wildcard tests/test_*.py)))
# (a group in quotes: one argument, one pytest process)
group = $(if $(1),"$(1)")

test: setup
	@set -e; cache=$$(mktemp -d); trap 'rm -rf "$$cache"' EXIT; \
	export JAX_COMPILATION_CACHE_DIR=$$cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0; \
	tests/run_files.sh $(PY) $(TEST_JOBS) $(FIRST_TESTS) $(call group,$(GROUP_A)) \
	  $(call group,$(GROUP_B)) $(LATER_TESTS) $(OTHER_TESTS) $(call group,$(QUICK_TESTS))

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
