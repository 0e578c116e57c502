"""Long-context evaluation harness: prompt construction (exact length, needle at the requested
depth), scoring against stub models that always / never / half retrieve, perplexity on stub
scorers, the LLM adapter, JSON / PNG output, and the script end to end on a tiny preset."""

from __future__ import annotations

import json
import math
import pathlib
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from long_context.evals import (
    TextTask,
    TokenTask,
    build_sample,
    check_perplexity_args,
    check_retrieval_args,
    perplexity_dataset,
    plot_heatmap,
    plot_perplexity,
    read_tokens,
    retrieval_dataset,
    run_perplexity,
    run_retrieval,
    write_json,
)
from long_context.evals.model import LLMAdapter

REPO = pathlib.Path(__file__).resolve().parents[1]
DEPTHS = [0.0, 0.25, 0.5, 0.75, 1.0]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class CharCodec:
    """One token per character: lengths and positions are easy to reason about."""

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(int(i)) for i in ids)


def _tasks():
    codec = CharCodec()
    return [
        TokenTask("passkey", vocab_size=512, reserved_ids=(0, 1, 2), seed=3, bos_token_id=1),
        TokenTask("needle", vocab_size=512, reserved_ids=(0, 1, 2), seed=3, bos_token_id=1),
        TextTask("passkey", codec, bos_token_id=1),
        TextTask("needle", codec, bos_token_id=1),
        TextTask("needle", codec, haystack_text="Alpha beta gamma. Delta epsilon! Zeta eta?"),
    ]


def _find(seq: list[int], sub: list[int], start: int = 0) -> int:
    for i in range(start, len(seq) - len(sub) + 1):
        if seq[i : i + len(sub)] == sub:
            return i
    return -1


def reader(task, visible: float = 1.0):
    """A stub model that reads the needle out of the prompt, as a perfect model would; it sees
    only the first `visible` fraction of the prompt (plus the question), like a model that
    fails past some depth."""

    def read(prompt: list[int]):
        seen = prompt[: math.ceil(visible * len(prompt))]
        if isinstance(task, TextTask):
            text = CharCodec().decode(seen)
            pattern = (
                r"pass key is (\d+)" if task.name == "passkey" else r"numbers for \S+ is: (\d+)"
            )
            m = re.search(pattern, text)
            return " " + m.group(1) + "." if m else " I do not know."
        at = _find(seen, task.needle_ids)
        if at < 0:
            return [task.needle_ids[0]] * 5
        at += len(task.needle_ids)
        if task.name == "needle":
            at = _find(seen, task.is_ids, at) + len(task.is_ids)
        return seen[at : at + 5]

    return lambda prompts, max_new_tokens: [read(p) for p in prompts]


def wrong(task):
    """A stub model that never answers right: the right answer with its first digit / id off."""

    def answer(prompt):
        out = reader(task)([prompt], 5)[0]
        if isinstance(out, str):
            digit = re.search(r"\d", out).start()
            return out[:digit] + str((int(out[digit]) + 1) % 10) + out[digit + 1 :]
        return [out[0] + 1, *out[1:]]

    return lambda prompts, max_new_tokens: [answer(p) for p in prompts]


@pytest.mark.parametrize("task", _tasks(), ids=lambda t: f"{type(t).__name__}-{t.name}")
def test_prompt_has_the_exact_length_and_the_needle_at_the_requested_depth(task):
    for length in (600, 1000, 4096):
        for depth in DEPTHS:
            s = build_sample(task, length, depth, trial=0, seed=5)
            prompt = s.prompt.tolist()
            assert len(prompt) == length
            assert prompt[: len(task.prefix)] == task.prefix
            assert s.haystack_start == len(task.prefix)
            # The needle sits at a unit boundary next to depth x haystack (units are sentences,
            # at most ~70 characters here), exactly at the ends for depths 0 and 1.
            offset = s.needle_start - s.haystack_start
            assert abs(offset - depth * s.haystack_len) <= 70, (length, depth, offset)
            if depth == 0.0:
                assert offset == 0
            if depth == 1.0:
                assert offset == s.haystack_len
            needle = prompt[s.needle_start : s.needle_start + s.needle_len]
            if isinstance(task, TextTask):
                assert s.answer in CharCodec().decode(needle)
            else:
                assert _find(needle, list(s.answer)) >= 0
                assert _find(prompt, task.needle_ids, s.needle_start + 1) < 0  # only one needle


def test_depths_move_only_the_needle_and_trials_change_it():
    task = TokenTask("needle", vocab_size=512, seed=0)
    a, b = build_sample(task, 500, 0.0, 0), build_sample(task, 500, 1.0, 0)
    hay = lambda s: np.delete(s.prompt, np.arange(s.needle_start, s.needle_start + s.needle_len))
    # Same filler whatever the depth; the needle (and so the question) differs per cell.
    q = len(task.question_ids) + task.NEEDLE_KEY_LEN + len(task.is_ids)
    np.testing.assert_array_equal(hay(a)[:-q], hay(b)[:-q])
    assert build_sample(task, 500, 0.5, 0).answer != build_sample(task, 500, 0.5, 1).answer
    np.testing.assert_array_equal(
        build_sample(task, 500, 0.5, 3).prompt, build_sample(task, 500, 0.5, 3).prompt
    )


@pytest.mark.parametrize("task", _tasks()[:4], ids=lambda t: f"{type(t).__name__}-{t.name}")
def test_perfect_model_scores_one_and_wrong_model_zero_on_every_cell(task):
    lengths, depths = [600, 1200], [0.0, 0.5, 1.0]
    good = run_retrieval(task, reader(task), lengths, depths, 2, batch_size=4, progress=False)
    assert good.accuracy.shape == (2, 3)
    np.testing.assert_array_equal(good.accuracy, np.ones((2, 3)))
    assert len(good.samples) == 12 and all(r["correct"] for r in good.samples)
    bad = run_retrieval(task, wrong(task), lengths, depths, 2, batch_size=5, progress=False)
    np.testing.assert_array_equal(bad.accuracy, np.zeros((2, 3)))
    assert bad.overall_accuracy == 0.0


def test_accuracy_is_indexed_by_length_then_depth():
    # A model that sees only the first 60% of the prompt finds shallow needles only.
    task = TokenTask("passkey", vocab_size=512, seed=1)
    lengths = [256, 512, 1024]
    res = run_retrieval(task, reader(task, 0.6), lengths, DEPTHS, 1, progress=False)
    expected = np.tile([1.0, 1.0, 1.0, 0.0, 0.0], (3, 1))
    np.testing.assert_array_equal(res.accuracy, expected)
    for rec in res.samples:
        assert rec["correct"] == (rec["depth"] <= 0.5)


def test_text_task_through_a_real_tokenizer():
    from tokenizers import Tokenizer

    from long_context.evals import TokenizerCodec

    tok = Tokenizer.from_file(str(REPO / "tests" / "fixtures" / "llama" / "tokenizer.json"))
    task = TextTask("passkey", TokenizerCodec(tok), bos_token_id=1)
    s = build_sample(task, 400, 0.5, 0)
    assert len(s.prompt) == 400 and s.prompt[0] == 1 and 1 not in s.prompt[1:].tolist()
    needle = s.prompt[s.needle_start : s.needle_start + s.needle_len].tolist()
    key = s.answer
    assert needle == task.codec.encode(
        f" The pass key is {key}. Remember it. {key} is the pass key."
    )


def test_scoring_rules():
    text = TextTask("passkey", CharCodec())
    assert text.is_correct("12345", " 12345. Remember")
    assert text.is_correct("12345", CharCodec().encode("The pass key is 12345"))
    assert not text.is_correct("12345", " 123456")
    assert not text.is_correct("12345", " 1234 5")
    assert not text.is_correct("12345", "")
    tok = TokenTask("passkey", vocab_size=64)
    assert tok.is_correct((5, 6, 7), [5, 6, 7, 9])
    assert not tok.is_correct((5, 6, 7), [5, 6])
    assert not tok.is_correct((5, 6, 7), [4, 5, 6, 7])
    with pytest.raises(ValueError, match="output"):
        tok.is_correct((5, 6, 7), "5 6 7")


def test_bad_grid_raises_naming_the_field():
    task = TokenTask("passkey", vocab_size=512)
    with pytest.raises(ValueError, match="lengths: 10 is too short"):
        build_sample(task, 10, 0.5, 0)
    with pytest.raises(ValueError, match="depths"):
        retrieval_dataset(task, [100], [0.5, 1.5], 1)
    with pytest.raises(ValueError, match="lengths"):
        retrieval_dataset(task, [], [0.5], 1)
    with pytest.raises(ValueError, match="lengths"):
        retrieval_dataset(task, [100, 100], [0.5], 1)
    with pytest.raises(ValueError, match="num_samples"):
        retrieval_dataset(task, [100], [0.5], 0)
    with pytest.raises(ValueError, match="task"):
        TokenTask("haystack", vocab_size=512)
    with pytest.raises(ValueError, match="generate_fn"):
        run_retrieval(task, lambda p, n: [], [100], [0.5], progress=False)


def test_retrieval_inputs_are_a_grain_pipeline_in_grid_order():
    import grain

    task = TokenTask("needle", vocab_size=512)
    ds = retrieval_dataset(task, [100, 200], [0.0, 1.0], 3)
    assert isinstance(ds, grain.MapDataset) and len(ds) == 12
    cells = [(s.length, s.depth, s.trial) for s in ds]
    assert cells == [(n, d, t) for n in (100, 200) for d in (0.0, 1.0) for t in range(3)]


def test_a_128k_prompt_builds_quickly_and_exactly():
    task = TokenTask("needle", vocab_size=128256, reserved_ids=(0, 128000, 128001))
    s = build_sample(task, 131072, 0.3, 0)
    assert s.prompt.shape == (131072,) and abs(s.actual_depth - 0.3) < 1e-3


# ---- perplexity ------------------------------------------------------------------------


def test_perplexity_windows_are_disjoint_stretches_of_the_text_after_bos():
    tokens = np.arange(10, 110)
    ds = perplexity_dataset(tokens, [10, 30], num_windows=5, bos_token_id=1)
    windows = list(ds)
    assert [(w.length, w.index) for w in windows] == [(10, i) for i in range(5)] + [
        (30, i) for i in range(3)
    ]  # 100 tokens hold only three 29-token windows
    assert windows[1].prompt.tolist() == [1, *range(19, 28)]
    assert windows[6].prompt.tolist() == [1, *range(39, 68)]
    with pytest.raises(ValueError, match="lengths: 200 is longer than the text"):
        perplexity_dataset(tokens, [200], 1)


def test_perplexity_of_stub_scorers():
    tokens = np.arange(3, 503)
    lengths = [9, 33, 65]
    # A model that is sure of every token: perplexity 1.
    sure = run_perplexity(lambda ps: [np.zeros(len(p) - 1) for p in ps], tokens, lengths, 3,
                          progress=False)  # fmt: skip
    assert sure.perplexity == [1.0, 1.0, 1.0] and sure.num_windows == [3, 3, 3]
    # Uniform over 512 tokens everywhere: perplexity 512.
    uniform = lambda ps: [np.full(len(p) - 1, -math.log(512)) for p in ps]
    res = run_perplexity(uniform, tokens, lengths, 2, bos_token_id=1, progress=False)
    np.testing.assert_allclose(res.perplexity, 512.0, rtol=1e-12)
    np.testing.assert_allclose(res.tail_perplexity, 512.0, rtol=1e-12)

    # Better with more context: logprob -2 in the first 3/4 of a window, -1 in the last quarter.
    def improving(ps):
        out = []
        for p in ps:
            n = len(p) - 1
            lp = np.full(n, -2.0)
            lp[n - math.ceil(n / 4) :] = -1.0
            out.append(lp)
        return out

    res = run_perplexity(improving, tokens, [9], 4, progress=False)
    np.testing.assert_allclose(res.tail_perplexity, [math.e])
    np.testing.assert_allclose(res.perplexity, [math.exp((6 * 2 + 2 * 1) / 8)])


def test_perplexity_rejects_a_scorer_of_the_wrong_shape():
    tokens = np.arange(3, 103)
    with pytest.raises(ValueError, match="score_fn: expected 9 logprobs"):
        run_perplexity(lambda ps: [np.zeros(len(p)) for p in ps], tokens, [10], progress=False)
    with pytest.raises(ValueError, match="score_fn"):
        run_perplexity(lambda ps: [np.ones(len(p) - 1) for p in ps], tokens, [10], progress=False)


# ---- the adapter over LLM, and output files -----------------------------------------------


def _fake_llm(**extra):
    cfg = SimpleNamespace(bos_token_id=1, eos_token_ids=(2,), vocab_size=512)
    calls = []

    def generate(prompts, params):
        calls.append((prompts, params))
        return [SimpleNamespace(token_ids=[7] * params.max_tokens) for _ in prompts]

    return SimpleNamespace(config=cfg, tokenizer=None, generate=generate, **extra), calls


def test_llm_adapter_generates_greedily_and_scores_through_llm_score():
    llm, calls = _fake_llm(score=lambda prompts: [[-0.5] * (len(p) - 1) for p in prompts])
    adapter = LLMAdapter(llm)
    assert adapter.generate([np.array([5, 6]), [8]], 3) == [[7, 7, 7], [7, 7, 7]]
    ((prompts, params),) = calls
    assert prompts == [[5, 6], [8]] and params.temperature == 0.0 and params.max_tokens == 3
    scores = adapter.score([[1, 5, 6]])
    assert isinstance(scores[0], np.ndarray) and scores[0].tolist() == [-0.5, -0.5]
    task = adapter.retrieval_task("passkey")
    assert isinstance(task, TokenTask) and task.prefix[0] == 1
    assert not {0, 1, 2} & set(task.content_ids.tolist())
    with pytest.raises(ValueError, match="mode"):
        adapter.retrieval_task("passkey", mode="text")


def test_llm_adapter_without_llm_score_says_what_is_missing():
    adapter = LLMAdapter(_fake_llm()[0])
    with pytest.raises(NotImplementedError, match="LLM.score"):
        adapter.score([[1, 2, 3]])


def test_results_are_written_as_json_and_png(tmp_path):
    task = TokenTask("passkey", vocab_size=512)
    res = run_retrieval(task, reader(task, 0.6), [128, 256], [0.0, 1.0], 1, progress=False)
    write_json(res, str(tmp_path / "r.json"))
    plot_heatmap(res, str(tmp_path / "r.png"))
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["accuracy"] == [[1.0, 0.0], [1.0, 0.0]] and d["overall_accuracy"] == 0.5
    assert d["lengths"] == [128, 256] and d["depths"] == [0.0, 1.0] and len(d["samples"]) == 4
    assert (tmp_path / "r.png").read_bytes()[:8] == PNG_MAGIC

    uniform = lambda ps: [np.full(len(p) - 1, -1.0) for p in ps]
    ppl = run_perplexity(uniform, np.arange(3, 203), [16, 64], 2, progress=False)
    write_json(ppl, str(tmp_path / "p.json"))
    plot_perplexity(ppl, str(tmp_path / "p.png"))
    d = json.loads((tmp_path / "p.json").read_text())
    assert d["task"] == "perplexity" and d["lengths"] == [16, 64]
    np.testing.assert_allclose(d["perplexity"], [math.e, math.e])
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG_MAGIC


def test_argument_checks_name_the_flag():
    check_retrieval_args([64, 128], [0.0, 1.0], 1, None, 1)
    check_perplexity_args([64, 128], 1, 1)
    for args, field in [
        (([64], [0.5, 2.0], 1, None, 1), "depths"),
        (([64, 64], [0.5], 1, None, 1), "lengths"),
        (([64], [0.5], 0, None, 1), "num_samples=0"),
        (([64], [0.5], 1, 0, 1), "max_new_tokens=0"),
        (([64], [0.5], 1, None, 0), "batch_size=0"),
    ]:
        with pytest.raises(ValueError, match=field):
            check_retrieval_args(*args)
    for args, field in [(([], 1, 1), "lengths"), (([64], 0, 1), "num_windows=0")]:
        with pytest.raises(ValueError, match=field):
            check_perplexity_args(*args)
    with pytest.raises(ValueError, match="batch_size=0"):
        run_retrieval(TokenTask("passkey", 512), lambda p, n: [], [64], [0.5], batch_size=0)
    with pytest.raises(FileNotFoundError, match="text_file='/nope.npy'"):
        read_tokens("/nope.npy", None)


@pytest.mark.parametrize(
    "flags, error",
    [
        (["--task=passkey", "--num_samples=0"], "num_samples=0: must be >= 1"),
        (["--task=perplexity", "--text_file=/nope.txt"], "text_file='/nope.txt': no such file"),
        # a reply needs room past the prompt: cut off at max_model_len, it would score wrong
        (
            ["--task=passkey", "--max_model_len=64", "--max_new_tokens=5"],
            "max_model_len=64: must hold the longest length, 64, plus 5 reply tokens",
        ),
    ],
)
def test_eval_script_checks_flags_before_loading_the_model(tmp_path, flags, error):
    # A missing model directory would be reported first if the model were loaded first.
    cmd = [
        sys.executable, "-m", "scripts.eval_long_context", f"--model={tmp_path}/no_model",
        "--lengths=64", f"--output_dir={tmp_path}/out", *flags,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and f"eval_long_context: {error}" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_eval_script_names_where_its_default_max_model_len_comes_from(tmp_path):
    cmd = [
        sys.executable, "-m", "scripts.eval_long_context", "--model=tiny-llama",
        "--task=passkey", "--lengths=4k", f"--output_dir={tmp_path}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    want = "lengths up to 4096 plus 16 reply tokens: max_model_len=4112: must be in [1, max_pos"
    assert proc.returncode == 1 and want in proc.stderr, proc.stderr[-2000:]


def test_eval_script_runs_end_to_end_on_a_tiny_preset(tmp_path):
    cmd = [
        sys.executable, "-m", "scripts.eval_long_context", "--model=tiny-llama",
        "--task=needle", "--lengths=48,96", "--depths=0,1", "--num_samples=1",
        f"--output_dir={tmp_path}", "--max_num_batched_tokens=64", "--progress=false",
        "--batch_size=1",  # one prompt per generate call: three step shapes to compile
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads((tmp_path / "needle.json").read_text())
    assert d["task"] == "needle" and d["meta"]["mode"] == "TokenTask"
    assert np.asarray(d["accuracy"]).shape == (2, 2)
    assert [(r["length"], r["depth"]) for r in d["samples"]] == [
        (48, 0.0), (48, 1.0), (96, 0.0), (96, 1.0)
    ]  # fmt: skip
    for r in d["samples"]:
        assert len(r["output"]) <= TokenTask.NEEDLE_VALUE_LEN and len(r["answer"]) == 5
        assert r["correct"] == (r["output"] == r["answer"])
    assert (tmp_path / "needle.png").read_bytes()[:8] == PNG_MAGIC


# ---- edges found by mutation testing -------------------------------------------------------


def test_grid_and_size_edges_are_refused_up_front():
    with pytest.raises(ValueError, match="lengths"):
        check_perplexity_args([1], 1, 1)  # one token has nothing to score
    with pytest.raises(ValueError, match="depths.*repeats"):
        check_retrieval_args([64], [0.5, 0.5], 1, None, 1)
    with pytest.raises(ValueError, match="depths: 1.5"):
        build_sample(TokenTask("passkey", vocab_size=512), 100, 1.5, 0)
    with pytest.raises(ValueError, match="vocab_size=20"):
        TokenTask("passkey", vocab_size=20)
    from long_context.evals.data import batches

    with pytest.raises(ValueError, match="batch_size=0"):
        batches(perplexity_dataset(np.arange(10), [4], 1), 0)

    class Silent:  # encodes nothing: a haystack of it can never be built
        encode = staticmethod(lambda text: [] if text.startswith(" ") else [1])
        decode = staticmethod(lambda ids: "")

    with pytest.raises(ValueError, match="no sentence encodes"):
        TextTask("needle", Silent(), haystack_text="A. B.").unit(0)


def test_perplexity_windows_count_the_bos_token():
    ds = perplexity_dataset(np.arange(10, 19), [4], num_windows=3, bos_token_id=1)
    assert [w.prompt.tolist() for w in ds] == [[1, 10, 11, 12], [1, 13, 14, 15], [1, 16, 17, 18]]


def test_needle_placement_details():
    task = TokenTask("passkey", vocab_size=512, seed=2)
    fixed = 100 - build_sample(task, 100, 0.0, 0).haystack_len
    # No haystack at all is the shortest prompt the error message promises.
    assert len(build_sample(task, fixed, 0.5, 0).prompt) == fixed
    # depth x haystack halfway between two unit boundaries (8 and 16 of 24): the lower one.
    assert build_sample(task, fixed + 24, 0.5, 0).needle_start - len(task.prefix) == 8
    # Sentences of a haystack text are units: the needle goes between them.
    text = TextTask("needle", CharCodec(), haystack_text="Aa. Bb. Cc. Dd.")
    fixed = 500 - build_sample(text, 500, 0.0, 0).haystack_len
    assert build_sample(text, fixed + 16, 0.5, 0).actual_depth == 0.5
    # Marker ids never occur in the filler, and each cell draws its own needle.
    needle = TokenTask("needle", vocab_size=512, seed=2)
    s = build_sample(needle, 3000, 1.0, 0)
    hay = s.prompt[s.haystack_start : s.haystack_start + s.haystack_len]
    markers = needle.intro_ids + needle.needle_ids + needle.end_ids + needle.question_ids
    assert not set(hay.tolist()) & set(markers)
    assert build_sample(needle, 500, 0.0, 0).answer != build_sample(needle, 500, 1.0, 0).answer


def test_retrieval_asks_for_the_tasks_default_reply_length():
    task = TokenTask("needle", vocab_size=512)
    asked = []

    def generate(prompts, max_new_tokens):
        asked.append(max_new_tokens)
        return [[0] for _ in prompts]

    run_retrieval(task, generate, [64], [0.5], progress=False)
    assert asked == [task.default_max_new_tokens] == [5]
