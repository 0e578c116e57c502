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
# header), longest first so the two workers finish close together: ORDERED_TESTS by their
# time in a full run (45th session, 2 cores: test_sharding_mesh ~250 s, test_engine ~200 s,
# test_eplb ~140 s ...; test_mtp first, as test_scripts' MTP run reuses its programs,
# test_engine after the mesh test, whose one-device runs it shares, and test_eplb after
# both: four of its six base engines are mesh-test layouts, whose programs the run's
# compilation cache then holds),
# then any file not listed, then QUICK_TESTS (a few seconds each, most of it the process's
# start) together in one process.
# Compiling is most of the suite's time on CPU and many files compile the same step
# programs, so the run shares JAX's persistent compilation cache: a fresh directory per run
# (what a clean checkout pays), removed after.
TEST_JOBS ?= 2
ORDERED_TESTS := $(wildcard $(patsubst %,tests/test_%.py,mtp sharding_mesh engine eplb \
	scripts hf_parity pallas_bench long_context kv_quant pallas_engine batch_invariance \
	paged_attention linear_attention sampling_options penalties pallas_attention pallas_mosaic \
	int4 lora token_lists sparse_attention quantization beam_search models_ops structured \
	speculative long_context_bench kv_transfer parallel_sampling server long_context_evals \
	determinism_check checkpoints inputs prefix_cache kv_offload bad_words))
QUICK_TESTS := $(wildcard $(patsubst %,tests/test_%.py,capacity sampler pallas_lowering \
	long_context_policy param_counts sharding pallas_kv_write mxfp4 runner kv_pages \
	scheduler scheduler_windows hf_config hf_config_defaults hf_config_mla \
	tool_calls priority_scheduling fp8_schemes int4_gptq_awq chat))
TEST_FILES := $(ORDERED_TESTS) \
	$(filter-out $(ORDERED_TESTS) $(QUICK_TESTS),$(sort $(wildcard tests/test_*.py)))

test: setup
	@set -e; cache=$$(mktemp -d); trap 'rm -rf "$$cache"' EXIT; \
	export JAX_COMPILATION_CACHE_DIR=$$cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0; \
	tests/run_files.sh $(PY) $(TEST_JOBS) $(TEST_FILES) $(if $(QUICK_TESTS),"$(QUICK_TESTS)")

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
