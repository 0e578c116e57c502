"""What callers pass to LLM (engine/inputs.py): prompt forms as vLLM users write them,
constructor arguments, and refusals that name the field and leave the engine clean."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from engine import LLM, SamplingParams
from engine.inputs import (
    as_bool,
    as_int,
    as_model_path,
    default_sampling_params,
    prompt_text_or_ids,
    sampling_list,
    split_prompts,
)
from long_context.policy import LongPrefillPolicy

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "llama"  # has a tokenizer.json
P = [5, 17, 42, 9]
PARAMS = SamplingParams(max_tokens=4, ignore_eos=True)
_ENGINES: dict = {}


def _llm(**kwargs) -> LLM:
    """One engine per argument set; all share the step programs (same model and pool)."""
    key = tuple(sorted(kwargs.items()))
    if key not in _ENGINES:
        _ENGINES[key] = LLM(model=str(FIXTURE), max_model_len=64, num_pages=16, **kwargs)
    return _ENGINES[key]


def _clean(llm: LLM) -> bool:
    stats = llm.stats()
    return (
        stats["num_pages_free"] == stats["num_pages_total"]
        and not llm.has_unfinished()
        and not llm._outputs
    )


@pytest.mark.parametrize(
    "prompts, want",
    [
        ("a b", ["a b"]),
        (P, [P]),
        (tuple(P), [P]),
        (range(3, 6), [[3, 4, 5]]),
        (np.array(P), [P]),
        (np.array(P, np.uint16), [P]),
        (jnp.asarray(P), [P]),
        (np.array([P, P]), [P, P]),
        ([np.int64(5), np.int32(6)], [[5, 6]]),
        ({"prompt_token_ids": P}, [P]),
        ({"prompt_token_ids": jnp.asarray(P)}, [P]),
        ({"prompt": "a b"}, ["a b"]),
        ([{"prompt": "a"}, "b", P, {"prompt_token_ids": np.array(P)}], ["a", "b", P, P]),
        ((p for p in (P, "x")), [P, "x"]),
    ],
)
def test_prompt_forms(prompts, want):
    assert [prompt_text_or_ids(p) for p in split_prompts(prompts)] == want


@pytest.mark.parametrize(
    "prompts, match",
    [
        (b"hello", "prompts: bytes"),
        ([b"hello"], "prompt: bytes"),
        # A bytearray is a sequence of ints: refused, not read as the token ids of its bytes.
        (bytearray(b"hi"), "prompts: bytes"),
        ([bytearray(b"hi")], "prompt: bytes"),
        (None, "prompts: expected a string, token ids"),
        (5, "prompts: expected"),
        (5.0, "prompts: expected"),
        (object(), "prompts: expected"),
        (np.array(5), "prompts: a 0-d array"),
        ([], "at least one prompt"),
        ({"prompt": "a", "x": 1}, r"exactly one of \('prompt', 'prompt_token_ids'\)"),
        ({"text": "a"}, "got keys"),
        ({"prompt": 5}, "'prompt' must be a string"),
        ({"prompt_token_ids": "abc"}, "'prompt_token_ids' must be token ids"),
        ({"prompt_token_ids": {5: 1}}, "expected a string or a list of token ids, got dict"),
        (
            {"prompt_token_ids": jnp.zeros((2, 2), jnp.int32)},
            r"1-D, got an array of shape \(2, 2\)",
        ),
        ([True, False, True], "token ids must be integers, got True"),
        ([5.0, 17, 42], "token ids must be integers, got 5.0"),
        ([[5], [6.5]], "got 6.5"),
        ([[5, [6]]], r"got \[6\]"),
        (np.zeros((2, 2, 2), np.int32), "must be 1-D"),
        (np.array([1.0, 2.0]), "token ids must be integers, got 1.0"),
        (np.array([True, False]), "token ids must be integers, got True"),
        ([None], "got NoneType"),
    ],
)
def test_prompt_refusals_name_the_field(prompts, match):
    with pytest.raises(ValueError, match=match):
        [prompt_text_or_ids(p) for p in split_prompts(prompts)]


def test_token_ids_come_back_as_python_ints():
    for prompt in ([np.int64(5), np.uint8(6)], np.array([5, 6], np.int32), jnp.asarray([5, 6])):
        ids = prompt_text_or_ids(prompt)
        assert ids == [5, 6] and [type(t) for t in ids] == [int, int], prompt


def test_sampling_params_forms_and_refusals():
    sp = SamplingParams(max_tokens=3)
    assert sampling_list(None, 2) == [SamplingParams()] * 2
    assert sampling_list(sp, 2) == [sp, sp]
    assert sampling_list((sp for _ in range(2)), 2) == [sp, sp]
    for bad, match in [
        ({"max_tokens": 4}, "expected a SamplingParams or a list of them, got dict"),
        (SamplingParams, "got type"),
        (5, "got int"),
        ("greedy", "got str"),
        (b"ab", "got bytes"),
        ([sp], "1 given for 2 prompts"),
        ([sp, sp, sp], "3 given for 2 prompts"),
        ([sp, None], "expected SamplingParams, got NoneType"),
        ([sp, {"max_tokens": 4}], "expected SamplingParams, got dict"),
    ]:
        with pytest.raises(ValueError, match=match):
            sampling_list(bad, 2)


def test_scalar_arguments():
    assert as_int("page_size", np.int64(16)) == 16 and type(as_int("x", np.int32(3))) is int
    for bad in (True, np.bool_(True), "16", 16.0, None):
        with pytest.raises(ValueError, match="page_size="):
            as_int("page_size", bad)
    with pytest.raises(ValueError, match=r"seed=4294967296: must be an integer in \[0, 4294967295"):
        as_int("seed", 2**32, low=0, high=2**32 - 1)
    # Both ends of the range are allowed, one past either end is not.
    assert as_int("seed", 0, low=0, high=2**32 - 1) == 0
    assert as_int("seed", 2**32 - 1, low=0, high=2**32 - 1) == 4294967295
    assert as_int("num_pages", 1) == 1 and as_int("num_pages", 2**31 - 1) == 2147483647
    for bad in (0, -1, 2**31):
        with pytest.raises(ValueError, match=rf"num_pages={bad}: must be an integer in \[1, "):
            as_int("num_pages", bad)
    with pytest.raises(ValueError, match=r"page_size=np.True_: must be an integer, not a bool"):
        as_int("page_size", np.bool_(True))
    assert as_bool("batch_invariant", np.bool_(False)) is False
    for bad in ("False", 0, 2, [False], None):
        with pytest.raises(ValueError, match="batch_invariant="):
            as_bool("batch_invariant", bad)
    assert as_model_path(pathlib.Path("models/llama")) == "models/llama"
    assert as_model_path("tiny-llama") == "tiny-llama"


def test_every_prompt_form_generates_what_its_token_ids_do():
    llm = _llm()
    want = llm.generate([P], PARAMS)[0].token_ids
    text = "the cat sat on the"
    want_text = llm.generate([text], PARAMS)[0].token_ids
    for prompts in ({"prompt_token_ids": P}, np.array(P), tuple(P), [np.array(P)]):
        (out,) = llm.generate(prompts, PARAMS)
        assert out.token_ids == want and out.prompt_token_ids == P, prompts
    assert llm.generate({"prompt": text}, PARAMS)[0].token_ids == want_text
    outs = llm.generate([{"prompt": text}, {"prompt_token_ids": P}], PARAMS)
    assert [o.token_ids for o in outs] == [want_text, want]
    assert [len(x) for x in llm.score({"prompt_token_ids": P})] == [len(P) - 1]
    assert _clean(llm)


def test_truncate_prompt_tokens_keeps_the_prompts_last_tokens():
    llm = _llm()  # max_model_len 64
    long = list(range(3, 103))  # 100 tokens: refused whole
    with pytest.raises(ValueError, match="length 100 exceeds max_model_len=64"):
        llm.generate([long], PARAMS)
    cut = dataclasses.replace(PARAMS, truncate_prompt_tokens=40, prompt_logprobs=True)
    want = llm.generate([long[-40:]], dataclasses.replace(cut, truncate_prompt_tokens=None))
    # Token ids and text alike; a prompt shorter than k is kept whole.
    outs = llm.generate([long, "the cat sat on the", P], cut)
    assert outs[0].prompt_token_ids == long[-40:]
    assert (outs[0].token_ids, outs[0].prompt_logprobs) == (
        want[0].token_ids,
        want[0].prompt_logprobs,
    )
    assert len(outs[0].prompt_logprobs) == 39
    whole = llm.generate(["the cat sat on the"], PARAMS)[0].prompt_token_ids
    assert len(whole) == 5 and outs[1].prompt_token_ids == whole  # a word a token
    two = llm.generate(["the cat sat on the"], dataclasses.replace(cut, truncate_prompt_tokens=2))
    assert two[0].prompt_token_ids == whole[-2:]  # cut after tokenizing
    assert outs[2].prompt_token_ids == P
    for bad in (0, -1, 2.0, True, "8"):
        with pytest.raises(ValueError, match=f"truncate_prompt_tokens={bad!r}: must be an integer"):
            SamplingParams(truncate_prompt_tokens=bad)
    assert SamplingParams(truncate_prompt_tokens=np.int64(8)).truncate_prompt_tokens == 8
    assert _clean(llm)


def test_a_batch_that_fails_while_queueing_is_taken_back_whole(monkeypatch):
    """All or nothing: the requests queued before the failing one are withdrawn at once."""
    llm = _llm()
    want = llm.generate([P], PARAMS)[0].token_ids
    real_add, calls = llm._scheduler.add, []

    def add(seq):
        calls.append(seq.request_id)
        if len(calls) == 3:
            raise RuntimeError("injected")
        return real_add(seq)

    monkeypatch.setattr(llm._scheduler, "add", add)
    with pytest.raises(RuntimeError, match="injected"):
        llm.generate([P, P, P], PARAMS)
    assert len(calls) == 3 and _clean(llm)
    monkeypatch.undo()
    assert llm.generate([P], PARAMS)[0].token_ids == want and _clean(llm)


def test_a_request_that_fails_while_its_record_is_made_is_not_queued(monkeypatch):
    import engine.llm

    llm = _llm()
    real, made = engine.llm.RequestOutput.new, []

    def record(*args):
        made.append(args[0])
        if len(made) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(engine.llm.RequestOutput, "new", record)
    with pytest.raises(KeyboardInterrupt):
        llm.generate([P, P, P], PARAMS)
    assert len(made) == 2 and _clean(llm) and not llm._scheduler.has_request(made[1])


def test_sampling_params_subclasses_keep_their_fields():
    @dataclasses.dataclass(frozen=True)
    class Tagged(SamplingParams):
        tag: str = "x"

    llm = _llm()
    outs = llm.generate([P, P], [SamplingParams(max_tokens=4, seed=1), Tagged(max_tokens=4)])
    assert [len(o.token_ids) for o in outs] == [4, 4] and _clean(llm)
    # The engine's seed is filled in without losing the subclass or its fields.
    rid = llm.add_request(P, Tagged(max_tokens=4, tag="mine"))
    params = llm._scheduler._active[rid].sampling_params
    assert type(params) is Tagged and params.tag == "mine" and params.seed is not None
    llm.abort(rid)
    llm.step()
    assert _clean(llm)


def test_engine_seed_takes_numpy_ints_and_refuses_what_it_cannot_use():
    sampled = SamplingParams(max_tokens=6, temperature=1.0, ignore_eos=True)
    # Fresh engines: unseeded requests draw from (engine seed, request number).
    fresh = [
        LLM(model=str(FIXTURE), max_model_len=64, num_pages=16, seed=s) for s in (3, np.int64(3))
    ]
    a, b = (llm.generate([P], sampled)[0].token_ids for llm in fresh)
    assert a == b
    for bad in (-1, 2**32, "0", 1.5, None, True):
        with pytest.raises(ValueError, match=r"seed=.*must be an integer"):
            LLM(model="/not/read", seed=bad)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(model=None), "model=None: expected a preset name"),
        (dict(model=b"tiny-llama"), "model=b'tiny-llama'"),
        (dict(page_size=True), "page_size=True: must be an integer, not a bool"),
        (dict(max_num_seqs="8"), "max_num_seqs='8'"),
        (dict(max_num_batched_tokens=2**40), r"max_num_batched_tokens=.*\[1, 2147483647\]"),
        (dict(num_pages=2**31), "num_pages="),
        (dict(num_pages=0), "num_pages=0"),
        (dict(batch_invariant="False"), "batch_invariant='False': must be True or False"),
        (dict(async_scheduling=1), "async_scheduling=1"),
        (dict(kv_cache_dtype=["fp8"]), r"kv_cache_dtype=\['fp8'\]"),
        (dict(long_prefill=5), "long_prefill=5: expected a LongPrefillPolicy"),
        (dict(max_model_len=True), "max_model_len=True"),
    ],
)
def test_engine_arguments_are_checked_before_the_model_is_read(kwargs, match, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the model was read before the arguments were checked")

    monkeypatch.setattr("engine.llm.model_config", no_loading)
    monkeypatch.setattr("engine.llm.load_model", no_loading)
    with pytest.raises(ValueError, match=match):
        LLM(**{"model": str(FIXTURE), **kwargs})


def test_a_kv_pool_larger_than_memory_is_refused_before_the_weights_are_read(monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were read before the pool was checked")

    monkeypatch.setattr("engine.llm.load_model", no_loading)
    with pytest.raises(
        ValueError, match=r"num_pages=100000000: the KV pool .* needs .* GiB of host RAM"
    ):
        LLM(model=str(FIXTURE), num_pages=10**8)


def test_other_arguments_in_numpy_or_path_form():
    llm = LLM(model=FIXTURE, max_model_len=np.int64(64), num_pages=np.int32(16))
    assert llm.max_model_len == 64 and llm.num_pages == 16
    assert llm.generate([P], PARAMS)[0].token_ids == _llm().generate([P], PARAMS)[0].token_ids


@pytest.mark.parametrize(
    "field, value",
    [
        ("chunk_quantum", 2.5),
        ("long_prompt_tokens", "8"),
        ("max_long_prefills", 1.5),
        ("probe_every", True),
        ("smoothing", "0.5"),
        ("max_decode_slowdown", float("nan")),
    ],
)
def test_long_prefill_policy_fields_are_typed(field, value):
    with pytest.raises(ValueError, match=f"{field}="):
        LongPrefillPolicy(**{field: value})


def test_long_prefill_policy_takes_numpy_numbers_as_python_ones():
    policy = LongPrefillPolicy(long_prompt_tokens=np.int64(4096), smoothing=np.float32(0.25))
    assert policy == LongPrefillPolicy(long_prompt_tokens=4096, smoothing=0.25)
    assert type(policy.long_prompt_tokens) is int and type(policy.smoothing) is float


def test_request_ids_are_strings_and_huge_top_k_means_off():
    llm = _llm()
    with pytest.raises(ValueError, match=r"request_id=5: must be a string"):
        llm.add_request(P, PARAMS, request_id=5)
    assert _clean(llm)
    sampled = dict(max_tokens=6, temperature=1.0, seed=7, ignore_eos=True)
    want = llm.generate([P], SamplingParams(**sampled))[0].token_ids
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warned casting 10**12 to int32 on every step
        got = llm.generate([P], SamplingParams(**sampled, top_k=2**31 - 1))[0].token_ids
    assert got == want
    # Larger ones cannot ride in the step's int32 (10**400 failed mid-step, not at the call).
    for k in (2**31, 10**12, 10**400):
        with pytest.raises(ValueError, match=r"top_k=.*must be an integer in \[0, 2147483647\]"):
            SamplingParams(top_k=k)


class _FakeGpu:
    platform = "gpu"

    def memory_stats(self):
        return {"bytes_limit": 1 << 30}


@pytest.mark.parametrize(
    "preset, mesh, share",
    [
        # MLA latent: pages replicated over dp and ep, never split; one device holds it all.
        ("tiny-deepseek-v3", "dp=2,ep=2", 1),
        ("tiny-qwen3", "dp=2", 1),
        # GQA over tp=2 (2 KV heads): each device holds half of every page.
        ("tiny-qwen3", "tp=2", 2),
        ("tiny-qwen3", "", 1),
    ],
)
def test_kv_pool_is_held_against_what_one_device_keeps(preset, mesh, share, monkeypatch):
    """On a GPU each device keeps its own share of the pool (the whole of it unless tp splits
    KV heads), checked against one device's memory (1 GiB here)."""
    from configs.presets import get_preset
    from engine import kv_quant
    from engine.kv_budget import check_kv_fits
    from sharding.mesh import parse_mesh

    cfg = get_preset(preset)
    monkeypatch.setattr("jax.devices", lambda *a: [_FakeGpu()])
    mc = parse_mesh(mesh) if mesh else None
    # The most 16-token pages one device holds whole, times the ways tp splits each page.
    most = (1 << 30) // (16 * kv_quant.bytes_per_token(cfg)) * share
    check_kv_fits(cfg, most, 16, None, mc)
    too_big = most + share
    with pytest.raises(ValueError, match=f"num_pages={too_big}: .*of one gpu device's memory"):
        check_kv_fits(cfg, too_big, 16, None, mc)


def _model_with_generation_config(folder: pathlib.Path, gen: dict | str) -> str:
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).symlink_to(FIXTURE / name)
    (folder / "generation_config.json").write_text(gen if isinstance(gen, str) else json.dumps(gen))
    return str(folder)


def test_generation_config_sets_the_default_sampling_params(tmp_path):
    # vLLM's keys (max_new_tokens as max_tokens); do_sample and eos_token_id are not sampling
    # settings here.
    gen = dict(temperature=0.6, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1)
    gen.update(max_new_tokens=7, do_sample=True, eos_token_id=[2, 3])
    model = _model_with_generation_config(tmp_path / "m", gen)
    want = SamplingParams(
        temperature=0.6, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1, max_tokens=7
    )
    assert default_sampling_params("auto", model) == want
    assert default_sampling_params(model, "tiny-llama") == want  # a folder path
    assert default_sampling_params("vllm", model) == SamplingParams()
    assert default_sampling_params("auto", "tiny-llama") == SamplingParams()  # a preset
    assert default_sampling_params("auto", str(FIXTURE)) == SamplingParams()  # no such keys
    for gen, match in [
        ({"temperature": -1}, r"generation_config.json: temperature=-1.*>= 0"),
        ({"top_k": "20"}, r"generation_config.json: top_k='20'"),
        ("[1, 2]", "generation_config.json: must hold a JSON object"),
        ("{oops", "generation_config.json: not valid JSON"),
    ]:
        bad = _model_with_generation_config(tmp_path / f"bad{len(list(tmp_path.iterdir()))}", gen)
        with pytest.raises(ValueError, match=match):
            LLM(model=bad)  # before the weights are read
    with pytest.raises(FileNotFoundError, match="generation_config='/no/such': no such dir"):
        default_sampling_params("/no/such", model)
    with pytest.raises(FileNotFoundError, match="generation_config.json' does not exist"):
        default_sampling_params(str(tmp_path), model)
    with pytest.raises(ValueError, match="generation_config=None: 'auto', 'vllm' or a folder"):
        default_sampling_params(None, model)


def test_requests_without_sampling_params_take_the_generation_config(tmp_path):
    gen = {"max_new_tokens": 3, "repetition_penalty": 1.3}
    model = _model_with_generation_config(tmp_path / "m", gen)
    llm = LLM(model=model, max_model_len=64, num_pages=16)
    assert llm.get_default_sampling_params() == SamplingParams(max_tokens=3, repetition_penalty=1.3)
    (out,) = llm.generate([P])
    (want,) = llm.generate([P], SamplingParams(max_tokens=3, repetition_penalty=1.3))
    assert out.token_ids == want.token_ids and len(out.token_ids) == 3
    rid = llm.add_request(P)
    deltas = [d for _ in range(8) for d in llm.step() if d.request_id == rid]
    assert [d.token_ids[0] for d in deltas if d.token_ids] == want.token_ids
    assert LLM(model=model, generation_config="vllm").get_default_sampling_params() == (
        SamplingParams()
    )
