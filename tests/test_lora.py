"""Multi-LoRA serving (engine/lora.py, models/lora.py) against transformers + peft.

tests/fixtures/lora (make_lora_fixture.py): two PEFT adapters of the llama fixture (r = 4 on
all seven projections; r = 2 with rsLoRA on q/v of layer 1), one of the qwen3_moe fixture
(r = 8 on its attention), and the greedy tokens and logprobs a PeftModel gives with each
(and with none).
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import threading

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from engine import LLM, LoRARequest, SamplingParams
from engine.kv_pages import PageManager
from engine.scheduler import Scheduler
from tests.scheduler_cases import make_seq

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
LORA = FIXTURES / "lora"
REFS = json.loads((LORA / "reference.json").read_text())
REF = REFS["llama"]
PROMPTS = REF["prompts"]
N = len(REF["adapters"]["base"]["greedy_tokens"][0])
A = LoRARequest("a", 1, str(LORA / "adapter_a"))
B = LoRARequest("b", 2, str(LORA / "adapter_b"))
NAMES = {None: "base", A: "adapter_a", B: "adapter_b"}
TOL = 1e-4  # float32 engine vs float32 torch: measured up to 2.4e-6


def _engine(max_loras: int, **options) -> LLM:
    return LLM(
        str(FIXTURES / "llama"),
        enable_lora=True,
        max_loras=max_loras,
        max_lora_rank=8,
        num_pages=64,
        max_model_len=128,
        **options,
    )


@pytest.fixture(scope="module")
def llm2() -> LLM:
    return _engine(2)


def _check(outs, loras) -> None:
    for i, (out, lora) in enumerate(zip(outs, loras, strict=True)):
        want = REF["adapters"][NAMES[lora]]
        assert out.token_ids == want["greedy_tokens"][i % 3], (NAMES[lora], i)
        np.testing.assert_allclose(out.logprobs, want["logprobs"][i % 3], atol=TOL, rtol=0)


def test_one_step_serves_two_adapters_and_the_base_model_as_peft(llm2):
    loras = [None] * 3 + [A] * 3 + [B] * 3
    slots_seen = []
    assign = llm2._lora.assign
    llm2._lora.assign = lambda ids: slots_seen.append(set(ids) - {0}) or assign(ids)
    try:
        outs = llm2.generate(PROMPTS * 3, SamplingParams(temperature=0, max_tokens=N), loras)
    finally:
        llm2._lora.assign = assign
    _check(outs, loras)
    assert {1, 2} in slots_seen  # both adapters in one step
    # The adapters differ from the base model and from each other here.
    assert len({tuple(o.token_ids) for o in outs[::3]}) == 3


def test_max_loras_one_runs_one_adapter_at_a_time_and_swaps_slots():
    llm = _engine(1)
    loras = [A, B, None, B, A, None]
    slots_seen = []
    assign = llm._lora.assign
    llm._lora.assign = lambda ids: slots_seen.append(set(ids) - {0}) or assign(ids)
    outs = llm.generate([PROMPTS[i % 3] for i in range(6)], SamplingParams(max_tokens=N), loras)
    for i, (out, lora) in enumerate(zip(outs, loras, strict=True)):
        want = REF["adapters"][NAMES[lora]]
        assert out.token_ids == want["greedy_tokens"][i % 3], (NAMES[lora], i)
    assert all(len(s) <= 1 for s in slots_seen) and {1} in slots_seen and {2} in slots_seen
    assert llm._lora.num_loads >= 2


def test_streaming_requests_name_their_adapter(llm2):
    rid = llm2.add_request(PROMPTS[1], SamplingParams(max_tokens=N), lora_request=B)
    base = llm2.add_request(PROMPTS[1], SamplingParams(max_tokens=N))
    tokens = {rid: [], base: []}
    while llm2.has_unfinished():
        for d in llm2.step():
            tokens[d.request_id] += d.token_ids
    assert tokens[rid] == REF["adapters"]["adapter_b"]["greedy_tokens"][1]
    assert tokens[base] == REF["adapters"]["base"]["greedy_tokens"][1]


def _bad_adapter(tmp_path, rename=None, drop=None, **config) -> str:
    path = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
    shutil.copytree(LORA / "adapter_b", path)
    cfg = json.loads((path / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps({**cfg, **config}))
    tensors = load_file(path / "adapter_model.safetensors")
    if rename:
        tensors = {k.replace(*rename): v for k, v in tensors.items()}
    if drop:
        tensors = {k: v for k, v in tensors.items() if drop not in k}
    save_file(tensors, path / "adapter_model.safetensors")
    return str(path)


def test_bad_adapters_and_arguments_are_refused_before_anything_is_queued(llm2, tmp_path):
    sp = SamplingParams(max_tokens=2)
    cases = [
        (LoRARequest("x", 9, str(tmp_path / "none")), FileNotFoundError, "no such directory"),
        (LoRARequest("x", 9, _bad_adapter(tmp_path, r=16)), ValueError, r"r=16: must be in \[1, "),
    ]
    for req, err, match in cases:
        with pytest.raises(err, match=match):
            llm2.generate(PROMPTS[0], sp, req)
    bad = _bad_adapter(tmp_path, rename=("self_attn.q_proj", "mlp.experts.0.gate_proj"))
    with pytest.raises(ValueError, match="adapter tensor .*experts.0.gate_proj.*not a projection"):
        llm2.generate(PROMPTS[0], sp, LoRARequest("x", 9, bad))
    bad = _bad_adapter(tmp_path, drop="v_proj.lora_B")
    with pytest.raises(ValueError, match="layers.1.attn.wv: lora_A and lora_B must both be"):
        llm2.generate(PROMPTS[0], sp, LoRARequest("x", 9, bad))
    bad = _bad_adapter(tmp_path, use_dora=True)
    with pytest.raises(ValueError, match="use_dora=True: not supported"):
        llm2.generate(PROMPTS[0], sp, LoRARequest("x", 9, bad))
    with pytest.raises(ValueError, match="lora_request: 2 given for 3 prompts"):
        llm2.generate(PROMPTS, sp, [A, B])
    with pytest.raises(ValueError, match="lora_int_id=0: must be an int >= 1"):
        LoRARequest("x", 0, "p")
    assert llm2.stats()["num_waiting"] == 0 and not llm2.has_unfinished()
    # Still serves; then another adapter under the id it serves is refused.
    _check(llm2.generate(PROMPTS, SamplingParams(max_tokens=N), A), [A] * 3)
    with pytest.raises(ValueError, match="lora_int_id=1: already names adapter 'a'"):
        llm2.generate(PROMPTS[0], sp, LoRARequest("other", 1, str(LORA / "adapter_b")))
    assert llm2.stats()["num_waiting"] == 0 and not llm2.has_unfinished()


@pytest.mark.parametrize(
    "arch, adapter",
    [
        ("qwen3_moe", "adapter_moe"),
        ("deepseek_v3", "adapter_mla"),
        ("qwen3_next", "adapter_next"),
        ("gemma4", "adapter_gemma4"),
        ("laguna", "adapter_laguna"),
    ],
)
def test_moe_models_take_attention_adapters(arch, adapter, tmp_path):
    """qwen3_moe (experts in every layer): q/k/v/o; deepseek_v3: MLA's q_a / q_b /
    kv_a_proj_with_mqa / o_proj; qwen3_next (gated DeltaNet layers beside gated attention):
    q_proj (its query and output-gate halves), k/v/o, the dense MLP and the shared experts;
    gemma4: q/k/o, v where a layer has one (a global layer's values are k_proj's, adapted
    with it), the dense MLP beside the experts; laguna: q/k/v/o as wide as each layer's query
    heads (4 or 8), the first layer's dense MLP. Beside requests without one, as peft
    computes."""
    ref = REFS[arch]
    # (max_model_len: one KV block of page table, the attention that compiles fastest)
    llm = LLM(
        str(FIXTURES / arch), enable_lora=True, max_lora_rank=8, num_pages=64, max_model_len=128
    )
    req = LoRARequest(adapter, 1, str(LORA / adapter))
    n = len(ref["adapters"]["base"]["greedy_tokens"][0])
    prompts = ref["prompts"] * 2
    outs = llm.generate(prompts, SamplingParams(max_tokens=n), [req] * 3 + [None] * 3)
    for i, out in enumerate(outs):
        want = ref["adapters"][adapter if i < 3 else "base"]
        assert out.token_ids == want["greedy_tokens"][i % 3], i
        np.testing.assert_allclose(out.logprobs, want["logprobs"][i % 3], atol=TOL, rtol=0)
    # No experts' MLPs, nor MLA's absorbed kv_b_proj: refused, naming the tensor.
    # Nor the DeltaNet's projections.
    if arch == "qwen3_moe":
        bad, match = LoRARequest("a", 2, A.lora_path), r"layers\.0\.mlp\.down_proj\.lora_A"
    else:
        old, new, match = {
            "deepseek_v3": ("q_b_proj", "kv_b_proj", r"layers\.0\.self_attn\.kv_b_proj"),
            "qwen3_next": ("1.self_attn.k_proj", "0.linear_attn.in_proj_qkvz", r"linear_attn"),
            "gemma4": ("0.self_attn.v_proj", "1.self_attn.v_proj", r"layers\.1\.self_attn\.v"),
            "laguna": ("1.self_attn.k_proj", "1.self_attn.g_proj", r"layers\.1\.self_attn\.g"),
        }[arch]
        path = tmp_path / "renamed"
        shutil.copytree(LORA / adapter, path)
        tensors = load_file(path / "adapter_model.safetensors")
        renamed = {k.replace(old, new): v for k, v in tensors.items()}
        save_file(renamed, path / "adapter_model.safetensors")
        bad = LoRARequest("renamed", 2, str(path))
    with pytest.raises(ValueError, match=match + r".*: not a projection LoRA can target"):
        llm.generate(prompts[0], SamplingParams(max_tokens=1), bad)


@pytest.mark.parametrize(
    "arch, adapter",
    [
        ("gpt_neox", "adapter_neox"),
        ("falcon", "adapter_falcon"),
        ("mpt", "adapter_mpt"),
        ("bloom", "adapter_bloom"),
        ("codegen", "adapter_codegen"),
    ],
)
def test_fused_qkv_models_take_adapters(arch, adapter, tmp_path):
    """GPT-NeoX (a KV head per query head) and Falcon (8 query heads over 2 KV heads): PEFT's
    adapters on the fused query_key_value (lora_B's rows split per KV head into q, k and v,
    each with the one lora_A), the output projection `dense` and the MLP; MPT's on Wqkv (its
    rows all q, all k, all v; ALiBi attention), out_proj and the MLP; BLOOM's as Falcon's
    names them (a KV head per query head, ALiBi); CodeGen's on qkv_proj (4 groups of a quarter
    of q's, v's and k's rows), out_proj, fc_in and fc_out; beside requests
    without one, as peft computes; a lora_B whose rows are not the projection's is refused
    by name."""
    ref = REFS[arch]
    llm = LLM(
        str(FIXTURES / arch), enable_lora=True, max_lora_rank=8, num_pages=64, max_model_len=128
    )
    req = LoRARequest(adapter, 1, str(LORA / adapter))
    n = len(ref["adapters"]["base"]["greedy_tokens"][0])
    params = SamplingParams(max_tokens=n, ignore_eos=True)  # (the references run past EOS)
    outs = llm.generate(ref["prompts"] * 2, params, [req] * 3 + [None] * 3)
    for i, out in enumerate(outs):
        want = ref["adapters"][adapter if i < 3 else "base"]
        assert out.token_ids == want["greedy_tokens"][i % 3], i
        np.testing.assert_allclose(out.logprobs, want["logprobs"][i % 3], atol=TOL, rtol=0)
    path = tmp_path / "cut"
    shutil.copytree(LORA / adapter, path)
    tensors = load_file(path / "adapter_model.safetensors")
    name = next(k for k in tensors if re.search(r"(query_key_value|Wqkv|qkv_proj)\.lora_B", k))
    tensors[name] = tensors[name][:-1]
    save_file(tensors, path / "adapter_model.safetensors")
    with pytest.raises(ValueError, match=r"attn's fused q/k/v: lora_A and lora_B \["):
        llm.generate(
            ref["prompts"][0], SamplingParams(max_tokens=1), LoRARequest("cut", 2, str(path))
        )


def test_engine_settings_are_checked():
    with pytest.raises(ValueError, match="built without enable_lora=True"):
        LLM("tiny-llama", num_pages=8).generate([1, 2], SamplingParams(max_tokens=1), A)
    with pytest.raises(ValueError, match="max_loras=0: must be an int >= 1"):
        LLM("tiny-llama", enable_lora=True, max_loras=0)


def test_prefix_caching_keeps_each_adapters_pages_to_itself():
    """A cached page's KV depends on the adapter that computed it: the same prompt under two
    adapters and the base model hits only its own pages, each giving peft's tokens."""
    llm = _engine(2, enable_prefix_caching=True)
    loras = [A, B, None]
    for cached in (0, 32):  # a 33-token prompt: its 2 whole pages short of the last token
        outs = llm.generate([PROMPTS[2]] * 3, SamplingParams(max_tokens=N), loras)
        assert [o.num_cached_tokens for o in outs] == [cached] * 3
        for out, lora in zip(outs, loras, strict=True):
            want = REF["adapters"][NAMES[lora]]
            assert out.token_ids == want["greedy_tokens"][2], NAMES[lora]
            np.testing.assert_allclose(out.logprobs, want["logprobs"][2], atol=TOL, rtol=0)
    (out,) = llm.generate([PROMPTS[2]], SamplingParams(max_tokens=N), A)  # A's pages again
    assert out.num_cached_tokens == 32
    assert llm.stats()["prefix_cache_hits"] == 4 * 32


def test_batch_invariant_mode_keeps_an_adapters_bits_whatever_shares_the_step():
    llm = LLM(
        str(FIXTURES / "llama"),
        enable_lora=True,
        max_loras=2,
        max_lora_rank=8,
        num_pages=128,
        max_model_len=128,
        max_num_batched_tokens=64,
        batch_invariant=True,
    )
    sp = SamplingParams(max_tokens=N)
    alone = llm.generate(PROMPTS[2], sp, A)[0]
    assert alone.token_ids == REF["adapters"]["adapter_a"]["greedy_tokens"][2]
    rng = np.random.default_rng(0)
    others = [rng.integers(3, 500, int(rng.integers(5, 40))).tolist() for _ in range(7)]
    mixed = llm.generate(
        others[:3] + [PROMPTS[2]] + others[3:], sp, [B, None, A, A, B, None, A, None]
    )[3]
    assert mixed.token_ids == alone.token_ids
    assert (
        np.asarray(mixed.logprobs, np.float32).tobytes()
        == np.asarray(alone.logprobs, np.float32).tobytes()
    )


def test_the_scheduler_admits_past_a_request_whose_adapter_has_no_room():
    sched = Scheduler(PageManager(64, 4), 64, 8, 64, max_loras=1)
    seqs = [make_seq(str(i), 5, max_tokens=3) for i in range(4)]
    for seq, lora_id in zip(seqs, (1, 2, 1, 0), strict=True):
        seq.lora_id = lora_id
        sched.add(seq)
    out = sched.schedule()
    assert [it.request_id for it in out.items] == ["0", "2", "3"]
    assert [it.lora_id for it in out.items] == [1, 1, 0]
    while {s.lora_id for s in sched._running} & {1}:
        sched.update(out, {it.request_id: (7, -1.0) for it in out.items if it.sample})
        out = sched.schedule()
    assert [it.request_id for it in out.items] == ["1"]  # adapter 2 once adapter 1 is done


def test_the_server_serves_each_adapter_as_a_model(llm2):
    """vLLM's --lora-modules: a request's "model" names the adapter (the last test here:
    closing the server stops its engine thread, the engine itself stays usable)."""
    from engine.server import Server
    from tests.test_server import _request, post

    srv = Server(("127.0.0.1", 0), llm2, "base", [A, B])
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        conn, resp = _request(srv, "GET", "/v1/models")
        models = json.loads(resp.read())["data"]
        conn.close()
        assert [(m["id"], m["parent"]) for m in models] == [
            ("base", None),
            ("a", "base"),
            ("b", "base"),
        ]
        for model, lora in (("b", B), ("base", None), (None, None)):
            body = {"prompt": PROMPTS[2], "max_tokens": N, "temperature": 0}
            status, got = post(srv, "/v1/completions", {**body, "model": model})
            assert status == 200, got
            want = REF["adapters"][NAMES[lora]]["greedy_tokens"][2]
            assert got["choices"][0]["text"] == srv.detokenize(want)
        status, got = post(srv, "/v1/completions", {"model": "c", "prompt": "x"})
        assert status == 404 and "['base', 'a', 'b']" in got["error"]["message"]
    finally:
        srv.shutdown()
        srv.close()
    with pytest.raises(ValueError, match="lora_modules: names must differ"):
        Server(("127.0.0.1", 0), llm2, "a", [A])


def test_adapters_are_added_and_removed_at_run_time(llm2, tmp_path):
    """LLM.add_lora / remove_lora / list_loras (vLLM's), and the server's
    /v1/load_lora_adapter and /v1/unload_lora_adapter (--allow_runtime_lora_updating)."""
    from engine.server import Server
    from tests.test_server import _request, post

    c = LoRARequest("c", 7, str(LORA / "adapter_b"))
    assert llm2.add_lora(c) and not llm2.add_lora(c)  # read now; then held already
    assert 7 in llm2.list_loras()
    with pytest.raises(ValueError, match="lora_int_id=7: already names adapter 'c'"):
        llm2.add_lora(LoRARequest("d", 7, str(LORA / "adapter_a")))
    rid = llm2.add_request(PROMPTS[2], SamplingParams(max_tokens=2), lora_request=c)
    with pytest.raises(ValueError, match="lora_int_id=7: queued or running requests use it"):
        llm2.remove_lora(7)
    while llm2.has_unfinished():
        llm2.step()
    assert llm2.remove_lora(7) and not llm2.remove_lora(7) and 7 not in llm2.list_loras()
    (out,) = llm2.generate(PROMPTS[2], SamplingParams(max_tokens=N), c)  # read again
    assert out.token_ids == REF["adapters"]["adapter_b"]["greedy_tokens"][2], rid
    with pytest.raises(ValueError, match="built without enable_lora=True"):
        LLM("tiny-llama", num_pages=8).remove_lora(1)

    load = {"lora_name": "bb", "lora_path": str(LORA / "adapter_b")}
    # One server at a time: each runs an engine thread on the LLM.
    closed = Server(("127.0.0.1", 0), llm2, "base")
    threading.Thread(target=closed.serve_forever, daemon=True).start()
    try:
        status, got = post(closed, "/v1/load_lora_adapter", load)
        assert status == 404 and "--allow_runtime_lora_updating" in got["error"]["message"]
    finally:
        closed.shutdown()
        closed.close()
    srv = Server(("127.0.0.1", 0), llm2, "base", [A], allow_runtime_lora_updating=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        body = {"prompt": PROMPTS[2], "max_tokens": N, "temperature": 0, "model": "bb"}
        assert post(srv, "/v1/completions", body)[0] == 404
        conn, resp = _request(srv, "POST", "/v1/load_lora_adapter", load)
        assert (resp.status, resp.read()) == (200, b"Success: LoRA adapter 'bb' added.")
        conn.close()
        assert srv.loras["bb"].lora_int_id == 8  # past every id the engine gave (7: "c")
        status, got = post(srv, "/v1/completions", body)
        assert status == 200, got
        want = REF["adapters"]["adapter_b"]["greedy_tokens"][2]
        assert got["choices"][0]["text"] == srv.detokenize(want)
        for path, sent, code, message in [
            ("/v1/load_lora_adapter", load, 400, "lora_name='bb': already served"),
            ("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": str(tmp_path)}, 400, ""),
            ("/v1/load_lora_adapter", {"lora_path": "p"}, 400, "lora_name=None"),
            ("/v1/unload_lora_adapter", {"lora_name": "zz"}, 404, "lora_name='zz': not loaded"),
        ]:
            status, got = post(srv, path, sent)
            assert status == code and message in got["error"]["message"], got
        conn, resp = _request(srv, "POST", "/v1/unload_lora_adapter", {"lora_name": "bb"})
        assert (resp.status, resp.read()) == (200, b"Success: LoRA adapter 'bb' removed.")
        conn.close()
        assert post(srv, "/v1/completions", body)[0] == 404
        assert 8 not in llm2.list_loras()
    finally:
        srv.shutdown()
        srv.close()


@pytest.mark.parametrize("path", ["model.language_model.", "language_model.model."])
def test_an_adapter_of_a_multimodal_wrapper_loads_as_the_language_models(path, tmp_path):
    """PEFT on a multimodal wrapper (Mistral 3, Llama 4, Qwen3-VL...) names the language
    model's layers under its path there (transformers 5's or 4's): the same adapter."""
    from configs.presets import get_preset
    from models.lora import load_adapter

    cfg = get_preset("tiny-llama")
    moved = tmp_path / "wrapped"
    shutil.copytree(LORA / "adapter_a", moved)
    tensors = load_file(moved / "adapter_model.safetensors")
    renamed = {
        k.replace("base_model.model.model.", "base_model.model." + path): v
        for k, v in tensors.items()
    }
    assert renamed.keys() != tensors.keys()
    save_file(renamed, moved / "adapter_model.safetensors")
    want = load_adapter(str(LORA / "adapter_a"), cfg, 8)
    got = load_adapter(str(moved), cfg, 8)
    assert got.keys() == want.keys()
    for key in want:
        for a, b in zip(got[key], want[key], strict=True):
            np.testing.assert_array_equal(a, b)
