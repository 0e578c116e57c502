"""The absl entry points run end to end on tiny presets (each in its own process, as users
run them: absl flags are process-global). Each process is a fork of one that has imported
jax and the project (tests/script_fork.py), not a fresh Python: the same run (a test
compares the two) without a Python start and jax's import per script (~2 s each)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.script_fork import ForkServer

ROOT = pathlib.Path(__file__).parent.parent


ENV = {"JAX_PLATFORMS": "cpu"}
FORKS = ForkServer(ENV, str(ROOT))


def _fresh_process(module: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **ENV},
    )


def _process(module: str, *flags: str) -> subprocess.CompletedProcess:
    return FORKS.run(module, *flags)


def _run(module: str, *flags: str) -> str:
    proc = _process(module, *flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _generate(*flags: str) -> str:
    """scripts.generate with sequences of at most 128 tokens (these tests' are shorter): a
    page table of one KV block, whose attention compiles without loops (about half the
    run's time, against the fixtures' 2,048-token default); every step padded to 64 tokens
    (--token_buckets: one step program, not one per power of two the run reaches)."""
    bounds = ("--max_model_len=128", "--max_num_batched_tokens=64", "--token_buckets=64")
    return _run("scripts.generate", *bounds, *flags)


def test_generate_prints_tokens_and_throughput():
    out = _generate(
        "--model=tiny-qwen3",
        "--num_prompts=3",
        "--max_tokens=5",
        "--truncate_prompt_tokens=3",
        "--n=2",
        "--num_speculative_tokens=2",  # (greedy: n-gram drafts where the text repeats)
        "--enable_prefix_caching",
        "--kv_offloading_size=0.001",
    )
    assert out.count("(length)") == 6
    assert "prefix cache hits" in out and "pages to / from host memory 0 / 0" in out
    lens = [
        int(line.split("prompt ")[1].split(" tok")[0])
        for line in out.splitlines()
        if " -> " in line
    ]
    assert lens and max(lens) <= 3, out  # random prompts of up to 32 tokens, cut to their last 3
    labels = [line.split("]")[0] for line in out.splitlines() if " -> " in line]
    assert labels == ["[0.0", "[0.1", "[1.0", "[1.1", "[2.0", "[2.1"]
    assert "tok/s" in out


def test_generate_drafts_with_the_mtp_module():
    # 2 greedy requests of 6 tokens: each decode step feeds its k = 3 MTP drafts. The engine
    # settings are tests/test_mtp.py's, so under make test (one compilation cache, test_mtp
    # first) the step programs come from that file's run.
    from tests.test_mtp import ENGINE, K

    out = _run(
        "scripts.generate",
        f"--model={ROOT}/tests/fixtures/deepseek_v3_mtp",
        "--speculative_method=mtp",
        f"--num_speculative_tokens={K}",
        "--num_prompts=2",
        "--max_tokens=6",
        *(
            f"--{name}={','.join(map(str, v)) if isinstance(v, tuple) else v}"
            for name, v in ENGINE.items()
        ),
    )
    assert out.count("(length)") == 2
    kept, fed = map(int, out.split("drafts kept ")[1].split()[::2][:2])
    assert fed >= 2 * K and kept <= fed, out


def test_generate_from_text_with_a_tokenizer():
    # Sampled: equal prompts get seeds --seed + i, so their samples differ.
    out = _generate(
        f"--model={ROOT}/tests/fixtures/llama",
        "--prompt=the cat sat on the",
        "--prompt=the cat sat on the",
        "--max_tokens=8",
        "--temperature=1.0",
    )
    replies = [line.split(" -> ")[1] for line in out.splitlines() if " -> " in line]
    assert len(replies) == 2 and all(r.endswith("(length)") for r in replies), out
    assert replies[0] != replies[1], out


def test_generate_sends_prompts_through_the_chat_template(tmp_path):
    model = tmp_path / "llama"
    shutil.copytree(ROOT / "tests" / "fixtures" / "llama", model)
    # Word-level tokenizer: "system" and "user" are words of its vocabulary, "[" is not.
    template = "{% for m in messages %}the {{ m.role }} said {{ m.content }} {% endfor %}of"
    (model / "chat_template.jinja").write_text(template)
    out = _generate(f"--model={model}", "--prompt=the cat", "--chat", "--max_tokens=2")
    # "the user said the cat of": 6 tokens, where the bare prompt is 2.
    assert "[0] prompt 6 tok -> " in out, out


def test_generate_stops_at_a_stop_string():
    # transformers 5.24's greedy generate on this fixture continues the prompt with "well well
    # well w397 w488 w251 or have w488 well well w443" (12 tokens, no EOS).
    out = _generate(
        f"--model={ROOT}/tests/fixtures/llama",
        "--prompt=the cat sat on the",
        "--max_tokens=12",
        "--stop=w397",
    )
    (reply,) = [line.split(" -> ")[1] for line in out.splitlines() if " -> " in line]
    assert reply == "well well well  (stop)", out


def test_generate_applies_a_repetition_penalty():
    # transformers 5.24's generate(max_new_tokens=12, do_sample=False, repetition_penalty=1.5)
    # on this fixture and the prompt's ids [3, 0, 0, 16, 3] gives the text below (without
    # the penalty: "well well well w397 ...", test_generate_stops_at_a_stop_string).
    out = _generate(
        f"--model={ROOT}/tests/fixtures/llama",
        "--prompt=the cat sat on the",
        "--max_tokens=12",
        "--repetition_penalty=1.5",
    )
    (reply,) = [line.split(" -> ")[1] for line in out.splitlines() if " -> " in line]
    assert reply == "well w251 or have w356 w380 w355 w367 need w398 w417 be (length)", out


def test_generate_applies_logit_bias_and_min_tokens():
    # transformers 5.24's generate(max_new_tokens=12, min_new_tokens=12, do_sample=False,
    # sequence_bias={(157,): -100.0}) on this fixture and the ids [3, 0, 0, 16, 3] (157 is
    # "well", the unbiased decode's first token) gives the text below.
    out = _generate(
        f"--model={ROOT}/tests/fixtures/llama",
        "--prompt=the cat sat on the",
        "--max_tokens=12",
        "--min_tokens=12",
        "--logit_bias=157:-100",
    )
    (reply,) = [line.split(" -> ")[1] for line in out.splitlines() if " -> " in line]
    assert reply == "have or or have have have have have have have have have (length)", out


def test_every_bench_sampling_mode_is_valid():
    from engine import SamplingParams
    from scripts.bench_throughput import SAMPLING_MODES  # defines its absl flags, unparsed

    assert set(SAMPLING_MODES) == {"greedy", "sampled", "logprobs", "penalties", "logit_bias"}
    for name, kwargs in SAMPLING_MODES.items():
        params = SamplingParams(max_tokens=4, **kwargs)  # validates every field
        for field, value in kwargs.items():
            got = getattr(params, field)
            assert (dict(got) if field == "logit_bias" else got) == value, (name, field)


@pytest.mark.parametrize(
    "module, flags, expect",
    [
        (
            "scripts.bench_throughput",
            [
                "--models=tiny-llama",
                "--batch_sizes=1,2",
                "--decode_steps=3",
                "--copy_mb=16",
                "--kv_cache_dtype=fp8",
                "--quantization=fp8",  # fp8 weights: their .data/.scale leaves counted
                # Two of the modes (each builds and compiles an engine of its own); every
                # mode's parameters are checked in test_every_bench_sampling_mode_is_valid.
                "--sampling=greedy,logit_bias",
            ],
            "| tiny-llama | fp8 | logit_bias | 2 |",
        ),
        (
            "scripts.bench_determinism",
            ["--model=tiny-llama", "--num_requests=4", "--max_tokens=3", "--repeats=1"],
            "batch-invariant / default throughput",
        ),
        (
            # Expert biases (gpt-oss): the compute phase's weights include b_gate/b_up.
            "scripts.bench_moe",
            ["--model=tiny-gpt-oss", "--mesh=ep=1", "--num_tokens=16", "--iters=1"],
            "tiny-gpt-oss, mesh ep=1 on 1 cpu devices, 16 tokens, top-2 of 8 experts",
        ),
        (
            "scripts.bench_stop_strings",
            ["--num_tokens=300", "--checks=5", "--repeats=1"],
            "| byte fallback | '</answer>', '###', '\\nUser:' |",
        ),
        (
            # A 40-token prompt in pages of 8, 3 samples of 16 tokens: they share 4 pages
            # (32 tokens) and hold 3 more each; the prompt is computed 40 + 2 * 8 times.
            "scripts.bench_parallel_sampling",
            ["--model=tiny-llama", "--prompt_len=40", "--n=3", "--page_size=8"],
            "| 56 | 13 |",
        ),
        (
            # 3 requests of a 40-token prefix + 5 in pages of 8, all in the first step: each
            # computes its 45 tokens cold; warm, each takes 5 pages and computes 5.
            "scripts.bench_prefix_cache",
            ["--model=tiny-llama", "--prefix_len=40", "--suffix_len=5", "--n=3", "--page_size=8"],
            "| 15 | 3/3 |",
        ),
        (
            # The same on gpt-oss (an 8-key window on layer 0), after 3 other requests: each
            # takes its 5 pages and the windowed one at place 4 (keys 33-39 for its query 40).
            "scripts.bench_prefix_cache",
            ["--model=tiny-gpt-oss", "--prefix_len=40", "--suffix_len=5", "--n=3"]
            + ["--page_size=8", "--other_tokens=8", "--swa_full_tokens_ratio=1"],
            "| 15 | 3/3 |",
        ),
        (
            # 4 documents of 64 tokens (4 pages), 2 rounds of 48-token questions (with 16 new
            # tokens, 128: a page table of one KV block, the attention that compiles
            # fastest); the device holds one request: round 2 finds only the host tier's
            # copies, 4 x 64 tokens, so the steps compute 4 x 2 x 112 - 256 = 640 prompt
            # tokens.
            "scripts.bench_kv_offload",
            ["--model=tiny-llama", "--doc_len=64", "--question_len=48", "--docs=4"]
            + ["--rounds=2", "--device_docs=1"],
            "| 640 |",
        ),
        (
            "scripts.bench_speculative",
            ["--model=tiny-llama", "--n=2", "--prompt_len=16", "--max_tokens=8"],
            "| self-quoting prompts | ngram |",
        ),
        (
            "scripts.bench_speculative",
            ["--model=tiny-llama", "--n=2", "--prompt_len=16", "--max_tokens=8"]
            + ["--method=draft_model", "--draft_model=tiny-qwen3"],
            "| self-quoting prompts | draft_model |",
        ),
        (
            "scripts.bench_lora",
            ["--model=tiny-llama", "--n=2", "--max_tokens=3", "--rank=4", "--max_loras=2"],
            "| LoRA engine, 2 adapters |",
        ),
        (
            # Also fails unless the consumer's tokens equal the colocated engine's (4/4).
            "scripts.bench_disagg",
            [
                "--models=tiny-llama",
                "--prompt_len=40",
                "--decodes=2",
                "--decode_tokens=12",
                "--arrivals=2",
                "--every=3",
                "--long_tokens=4",
            ],
            "| tiny-llama | 4/4 |",
        ),
        (
            # A linear-attention model: its prompts' states stored beside their rows.
            "scripts.bench_disagg",
            [
                "--models=tiny-nemotron-h",
                "--prompt_len=40",
                "--decodes=2",
                "--decode_tokens=12",
                "--arrivals=2",
                "--every=3",
                "--long_tokens=4",
            ],
            "| tiny-nemotron-h | 4/4 | 512 | 16,896 |",
        ),
        (
            # 2 prompts of 16 tokens (one page), width 4, 3 steps: 16 + 4 x 17 + 4 x 18
            # tokens each without the cache (312); with it each beam computes only past the
            # page: 2 x 16 + 8 x 1 + 8 x 2 = 56, and the beams are the same.
            "scripts.bench_beam_search",
            ["--model=tiny-llama", "--prompt_len=16", "--n=2", "--max_tokens=3"],
            "| 56 | True |",
        ),
        (
            # Also fails unless the server's texts equal the engine's.
            "scripts.bench_server",
            ["--n=2", "--prompt_len=4", "--max_tokens=3", "--repeats=1"],
            "| HTTP, 2 clients, streamed |",
        ),
    ],
)
def test_benchmarks_run_small(module, flags, expect):
    assert expect in _run(module, *flags)


def test_bench_sparse_attention_times_dense_and_sparse_layers(tmp_path):
    """Top 16 keys: the 8-token chunk ending at 40 keeps 16 a query, and at 16 every query
    keeps all it sees, so DSA's output is dense attention's there."""
    out = tmp_path / "dsa.json"
    flags = ["--contexts=40,16", "--decodes=2", "--heads=2", "--index_heads=2", "--chunk=8"]
    flags += ["--page_size=16", "--repeats=1", "--topk=16", f"--json_out={out}"]
    table = _run("scripts.bench_sparse_attention", *flags)
    assert "| 8-token chunk ending at 40 |" in table
    rows = json.loads(out.read_text())
    assert [r["keys_kept"] for r in rows] == [2 * 16, 8 * 16, 2 * 16, sum(range(9, 17))]
    assert min(r["max_abs_diff_from_dense"] for r in rows[:2]) > 1e-3  # some keys left out
    assert max(r["max_abs_diff_from_dense"] for r in rows[2:]) < 1e-4
    assert all(r["seconds"]["sparse"] > 0 for r in rows)


# (module, flags, what stderr must say): each a bad flag that must be refused before any model
# is looked up (most name a preset that does not exist).
BAD_FLAGS = [
    (
        "scripts.bench_throughput",
        ["--models=no-such-preset", "--decode_steps=1"],
        "--decode_steps=1: must be >= 2",
    ),
    (
        "scripts.bench_determinism",
        ["--model=no-such-preset", "--max_tokens=0"],
        "--max_tokens=0: must be >= 1",
    ),
    ("scripts.generate", ["--model=no-such-preset", "--prompt_len=0"], "--prompt_len=0"),
    (
        "scripts.generate",
        ["--model=tiny-llama", "--kv_transfer_config={kv_role"],
        "kv_transfer_config='{kv_role': not JSON",
    ),
    (
        "scripts.generate",
        ["--model=tiny-deepseek-v3", "--enable_eplb"],
        "enable_eplb=True: needs a mesh with ep >= 2 (ep=1)",
    ),
    (
        "scripts.bench_disagg",
        ["--models=no-such-preset", "--decode_tokens=8", "--arrivals=2", "--every=4"],
        "--decode_tokens=8: must exceed --arrivals x --every=8",
    ),
    ("scripts.disagg_proxy", ["--decode=http://127.0.0.1:1"], "prefill_urls: needs at least"),
    (
        "scripts.serve",
        ["--model=/no/such/dir", "--enable_auto_tool_choice"],
        "--enable_auto_tool_choice and --tool_call_parser: give both",
    ),
    (
        "scripts.serve",
        ["--model=/no/such/dir", "--allow_runtime_lora_updating"],
        "--allow_runtime_lora_updating: needs --enable_lora",
    ),
    (
        "scripts.disagg_proxy",
        ["--prefill=ftp://x", "--decode=http://127.0.0.1:1"],
        "server url='ftp://x': expected http://host:port",
    ),
    ("scripts.generate", ["--model=/no/such/dir"], "model='/no/such/dir': no such directory"),
    ("scripts.generate", ["--model=tiny-qwen3", "--stop=x"], "has no tokenizer.json"),
    ("scripts.bench_stop_strings", ["--num_tokens=0"], "--num_tokens=0: must be in [1, "),
    (
        "scripts.bench_stop_strings",
        ["--tokenizers=/no/such.json"],
        "--tokenizers: '/no/such.json' is not a file",
    ),
    (
        "scripts.bench_stop_strings",
        ["--tokenizers=tests/fixtures/sampler/hf_warpers.json"],
        "--tokenizers: 'tests/fixtures/sampler/hf_warpers.json' is not a tokenizer.json (",
    ),
    ("scripts.generate", ["--model=tiny-qwen3", "--prompt=hi"], "--prompt: model='tiny-q"),
    (
        "scripts.bench_throughput",
        ["--models=no-such-preset", "--sampling=greedy,beam"],
        "--sampling=greedy,beam: must list one or more of greedy, sampled, logprobs, "
        "penalties, logit_bias",
    ),
    ("scripts.generate", ["--model=no-such-preset", "--stop="], "non-empty str"),
    ("scripts.generate", ["--model=tests/fixtures/llama", "--chat"], "--chat: needs --prompt"),
    (
        "scripts.generate",
        ["--model=tiny-qwen3", "--bad_words=x"],
        "--bad_words=['x']: model='tiny-qwen3' has no tokenizer.json",
    ),
    (
        "scripts.generate",
        ["--model=tiny-qwen3", "--choice=yes,no"],
        "--regex/--choice/--json_schema: model='tiny-qwen3' has no tokenizer.json",
    ),
    ("scripts.generate", ["--regex=a+", "--choice=a"], "--regex, --choice, --json_schema: give"),
    ("scripts.bench_structured", ["--rows=0"], "--rows=0: must be in [1, 4096]"),
    # A file's path is read as the schema: README.md is no JSON.
    ("scripts.generate", ["--json_schema=README.md"], "structured_outputs.json: not valid JSON"),
    (
        "scripts.generate",
        ["--model=tests/fixtures/llama", "--chat", "--prompt=hi"],
        "--chat: model='tests/fixtures/llama' has no chat template",
    ),
    (
        "scripts.generate",
        ["--model=no-such-preset", "--n=0"],
        "n=0: must be an integer in [1, 128]",
    ),
    (
        "scripts.bench_parallel_sampling",
        ["--model=no-such-preset", "--n=1"],
        "--n=1: must be in [2,",
    ),
    (
        "scripts.generate",
        ["--model=no-such-preset", "--presence_penalty=3"],
        "presence_penalty=3.0: must be in [-2.0, 2.0]",
    ),
    ("scripts.generate", ["--model=no-such-preset", "--logit_bias=3"], "'3' is not id:bias"),
    (
        "scripts.generate",
        ["--model=no-such-preset", "--truncate_prompt_tokens=0"],
        "truncate_prompt_tokens=0: must be an integer >= 1",
    ),
    (
        "scripts.generate",
        ["--model=no-such-preset", "--logit_bias=5:1,5:-100"],
        "logit_bias: token id 5 given twice",
    ),
    (
        "scripts.generate",
        ["--model=no-such-preset", "--allowed_token_ids=1,x"],
        "--allowed_token_ids: 'x' is not a token id",
    ),
    (
        "scripts.generate",
        ["--model=no-such-preset", "--min_tokens=20"],
        "min_tokens=20: must be an integer in [0, max_tokens=16]",
    ),
    (
        "scripts.generate",
        ["--model=no-such-preset", "--repetition_penalty=0"],
        "repetition_penalty=0.0: must be in [0.01, 100.0]",
    ),
    (
        "scripts.bench_long_context",
        ["--part=itl", "--itl_model=no-such-preset", "--stream_tokens=3"],
        "stream_tokens=3: must be > 4",  # a stream that stops first hung the warm-up
    ),
    # Output paths are checked before the run, not when the results are written.
    (
        "scripts.bench_throughput",
        ["--models=no-such-preset", "--json_out=/no/such/dir/x.json"],
        "json_out='/no/such/dir/x.json': its folder '/no/such/dir' does not exist",
    ),
    (
        "scripts.determinism_check",
        ["--model=no-such-preset", "--golden=/no/such/dir/g.json"],
        "no folder '/no/such/dir' to write it",
    ),
    ("scripts.bench_kernels", ["--smoke", "--out=/no/such/dir/x.json"], "--out="),
    ("scripts.bench_kernels", ["--smoke", "--num_warps=3"], "KernelConfig.num_warps=3"),
    # From a flag fuzz: each of these ran (some for the whole benchmark) before failing,
    # with a traceback or a message that did not name the flag, or was taken silently.
    ("scripts.bench_kernels", ["--smoke", "--out=tests"], "--out='tests': is a directory"),
    (
        "scripts.bench_kernels",
        ["--smoke", "--batches=100000000000"],
        "batch x context must be < 2**31",
    ),
    (
        "scripts.bench_throughput",
        ["--models=no-such-preset", "--json_out=tests"],
        "--json_out='tests': is a directory",
    ),
    (
        "scripts.bench_throughput",
        ["--models=no-such-preset", "--quantization=none,int8"],
        "--quantization=none,int8: must list none, fp8, int4 and/or int4-gptq",
    ),
    (
        "scripts.bench_throughput",
        ["--models=no-such-preset", "--batch_sizes=1,1"],
        "--batch_sizes=1,1: has repeats",
    ),
    (
        "scripts.bench_throughput",
        ["--models=no-such-preset", "--copy_mb=1000000000"],
        "--copy_mb=1000000000: must be in [1, ",
    ),
    (
        "scripts.bench_moe",
        ["--model=no-such-preset", "--json_out=/no/such/dir/x.json"],
        "its folder '/no/such/dir' does not exist",
    ),
    ("scripts.bench_moe", ["--model=no-such-preset", "--seed=-1"], "--seed=-1: must be >= 0"),
    ("scripts.bench_eplb", ["--num_prompts=0"], "--num_prompts=0: must be >= 1"),
    (
        "scripts.bench_eplb",
        ["--model=tiny-qwen3-moe"],
        "--model=tiny-qwen3-moe: needs DeepSeek-V3 (noaux_tc) routing",
    ),
    (
        "scripts.bench_moe",
        ["--model=tiny-deepseek-v3", "--num_tokens=10000000000"],
        "--num_tokens=10000000000: must be in [1, 2048]",
    ),
    (
        "scripts.generate",
        ["--model=no-such-preset", "--num_prompts=100000000000"],
        "--num_prompts=100000000000: must be in [1, 1048576]",
    ),
    (
        "scripts.generate",
        ["--model=tiny-llama", "--prompt_len=100000000"],
        "--prompt_len=100000000: must be <= max_model_len=2048",
    ),
    (
        "scripts.bench_determinism",
        ["--model=no-such-preset", "--num_requests=10000000000"],
        "--num_requests=10000000000: must be <= 1048576",
    ),
    (
        "scripts.determinism_check",
        ["--model=no-such-preset", "--num_probes=100000000000"],
        "--num_probes=100000000000: must be in [1, 1048576]",
    ),
    (
        "scripts.determinism_check",
        ["--model=no-such-preset", "--golden=tests"],
        "golden='tests': is a directory",
    ),
    (
        "scripts.eval_long_context",
        ["--model=no-such-preset", "--output_dir=README.md"],
        "--output_dir=",
    ),
    (
        "scripts.eval_long_context",
        ["--model=no-such-preset", "--num_samples=10000000000", "--lengths=64"],
        "must be <= 1048576 prompts",
    ),
    ("scripts.convert_hf", ["--hf_dir=tests/fixtures/llama", "--out_dir="], "--out_dir: empty"),
    (
        "scripts.generate",
        ["--model=no-such-preset", "--token_buckets=16,abc"],
        "flag --token_buckets=['16', 'abc']: expected powers of two",
    ),
    (
        "scripts.generate",
        ["--model=no-such-preset", "--swa_full_tokens_ratio=1.5"],
        "flag --swa_full_tokens_ratio=1.5: must be in (0, 1]",
    ),
    (
        "scripts.bench_sparse_attention",
        ["--contexts=64", "--page_size=48"],
        "--page_size=48: must divide 128",
    ),
    (
        "scripts.bench_linear_attention",
        ["--model=tiny-llama", "--iters=1"],
        "--model=tiny-llama: has no linear-attention layers",
    ),
    (
        "scripts.bench_kv_offload",
        ["--model=no-such-preset", "--kv_offloading_size=0"],
        "--kv_offloading_size=0.0: must be > 0 GiB",
    ),
    (
        "scripts.bench_long_context",
        ["--part=pack", "--pack_contexts=16,abc"],
        "--pack_contexts=16,abc: expected integers",
    ),
    (
        "scripts.bench_long_context",
        ["--part=mla", "--mla_impls=foo"],
        "--mla_impls=foo: expected xla and/or pallas",
    ),
    (
        "scripts.bench_long_context",
        ["--part=ttft", "--models=tiny-llama,no-such-preset", "--prompt_lens=64"],
        "model='no-such-preset': unknown preset",
    ),
    (
        "scripts.bench_long_context",
        ["--part=pack", "--json_out=tests"],
        "--json_out='tests': is a directory",
    ),
    (
        "scripts.bench_long_context",
        ["--part=itl", "--itl_from=docs/long_context_itl.json", "--png_out=/no/such/x.png"],
        "--png_out='/no/such/x.png': its folder '/no/such' does not exist",
    ),
]


@pytest.fixture(scope="module")
def bad_flag_runs(tmp_path_factory) -> list[dict]:
    """Every BAD_FLAGS case, each in its own process: forks of one process that imported jax
    once (tests/script_fork.py), in place of ~45 Python starts."""
    tmp = tmp_path_factory.mktemp("bad_flags")
    (tmp / "cases.json").write_text(json.dumps([[m, f] for m, f, _ in BAD_FLAGS]))
    proc = _fresh_process("tests.script_fork", str(tmp / "cases.json"), str(tmp / "results.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = json.loads((tmp / "results.json").read_text())
    assert len(runs) == len(BAD_FLAGS)
    return runs


@pytest.mark.parametrize("case", range(len(BAD_FLAGS)), ids=lambda i: BAD_FLAGS[i][0])
def test_benchmarks_reject_bad_flags_before_building_a_model(bad_flag_runs, case):
    # A preset that does not exist: the flag error must come before any model is looked up.
    run, expect = bad_flag_runs[case], BAD_FLAGS[case][2]
    assert run["returncode"] != 0 and expect in run["stderr"], run["stderr"][-3000:]
    assert "Traceback" not in run["stderr"], run["stderr"][-3000:]  # one line, for a person


def test_a_forked_script_run_is_the_run_of_a_fresh_process(bad_flag_runs):
    """The fork runner gives what a fresh `python -m` gives: same exit status and stderr
    (and the fork server, which runs every other script here, the same again)."""
    for case in (0, len(BAD_FLAGS) - 1):
        module, flags, _ = BAD_FLAGS[case]
        want = (bad_flag_runs[case]["returncode"], bad_flag_runs[case]["stderr"])
        for proc in (_fresh_process(module, *flags), _process(module, *flags)):
            assert (proc.returncode, proc.stderr) == want


def test_bench_throughput_checks_every_model_before_the_first_runs():
    proc = _process("scripts.bench_throughput", "--models=tiny-llama,no-such-preset")
    assert proc.returncode != 0 and "model='no-such-preset': unknown preset" in proc.stderr
    assert "copy bandwidth" not in proc.stdout, proc.stdout  # nothing was measured
