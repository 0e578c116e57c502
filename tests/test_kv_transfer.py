"""Disaggregated prefill / decode (LLM(kv_transfer_config=...), engine/kv_transfer.py).

The host half: the scheduler's admissions of sequences whose prompt KV is in the store,
with exact page ids, on a fake device that writes the stored positions when an item loads
them (so a load that is missing, misplaced or repeated fails its KV-ownership checks), in
order and with steps built ahead, through preemption and cancelled launches. The engine
half: a consumer decoding prompts a producer computed gives the Hugging Face fixtures'
greedy tokens (other page size: the rows are stored token by token), and in batch-invariant
mode the same bits as one engine that computed the prompt itself (fp8 pages too); a store
made with other settings is refused before anything is queued.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import random
import threading

import numpy as np
import pytest
from safetensors import safe_open

from engine import LLM, KVTransferConfig, LoRARequest, SamplingParams
from engine.disagg_proxy import DisaggProxy
from engine.sequence import Sequence
from engine.server import Server
from tests.sampler_cases import POOL
from tests.scheduler_cases import (
    FakeDevice,
    HybridDevice,
    make_seq,
    new_scheduler,
    reference,
    run_async,
    run_to_the_end,
    step,
    summary,
    workload_scheduler,
)
from tests.test_server import _request, post, stream

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


class StoreDevice(FakeDevice):
    """A FakeDevice that, before a step, writes an item's `num_loaded` stored positions as
    the sequence's own (what the runner writes from the store)."""

    def __init__(self, page_size: int, seqs: dict[str, Sequence]):
        super().__init__(page_size)
        self.seqs = seqs
        self.num_loaded = 0

    def run(self, out):
        for rid in out.preempted:  # (here, not in FakeDevice.run: the loads are of this life)
            self.life[rid] += 1
        for it in out.items:
            assert it.num_loaded in (0, it.start_pos)
            prompt, life = self.seqs[it.request_id].prompt_token_ids, self.life[it.request_id]
            for pos in range(it.num_loaded):
                self.cache[self._slot(it.page_ids, pos)] = (it.request_id, life, pos, prompt[pos])
            self.num_loaded += it.num_loaded
        return super().run(dataclasses.replace(out, preempted=()))


def stored(seq: Sequence, n: int) -> Sequence:
    seq.num_external_tokens = n
    return seq


def test_an_admission_takes_new_pages_and_computes_only_past_the_stored_positions():
    a = stored(make_seq("a", 10, max_tokens=3), 9)
    b = make_seq("b", 5, 20, max_tokens=3)
    sched, dev = new_scheduler(8, 4, a, b), StoreDevice(4, {"a": a, "b": b})
    out, res = step(sched, dev)
    assert summary(out) == [("a", 9, 1, (0, 1, 2), True), ("b", 0, 5, (3, 4), True)]
    assert [it.num_loaded for it in out.items] == [9, 0]
    assert out.items[0].token_ids == a.prompt_token_ids[9:]
    assert out.num_batched_tokens == 6
    assert sched.stats()["num_loaded_kv_tokens"] == 9
    assert sched.stats()["num_prompt_tokens_shared"] == 0
    out, res = step(sched, dev)  # decodes: nothing loads again
    assert [it.num_loaded for it in out.items] == [0, 0]
    while sched.has_unfinished():
        _, more = step(sched, dev)
        res += more
    assert {r.request_id: r.num_cached_tokens for r in res if r.finished} == {"a": 9, "b": 0}
    for seq in (a, b):
        assert (seq.output_token_ids, "length") == reference(seq, 64)
    assert sched.stats()["num_pages_free"] == 8


def test_a_producers_prefill_stops_short_of_the_last_prompt_token():
    """Sequence.prefill_stop (a linear-attention model's producer): the chunk ends there
    with budget left, another request still admitted beside it; the last prompt token is
    fed (and samples) in the next step."""
    a, b = make_seq("a", 10, max_tokens=2), make_seq("b", 5, 20, max_tokens=2)
    a.prefill_stop = 9
    sched, dev = new_scheduler(8, 4, a, b), StoreDevice(4, {"a": a, "b": b})
    out, _ = step(sched, dev)
    assert summary(out) == [("a", 0, 9, (0, 1, 2), False), ("b", 0, 5, (3, 4), True)]
    out, _ = step(sched, dev)
    assert summary(out)[0] == ("a", 9, 1, (0, 1, 2), True)
    while sched.has_unfinished():
        step(sched, dev)
    for seq in (a, b):
        assert (seq.output_token_ids, "length") == reference(seq, 64)


def test_a_cancelled_launch_computes_the_stored_positions_instead():
    """The load may not have run: the retry computes the whole prompt on the same pages."""
    a = stored(make_seq("a", 10, max_tokens=2), 9)
    sched, dev = new_scheduler(8, 4, a), StoreDevice(4, {"a": a})
    out = sched.schedule()
    assert summary(out) == [("a", 9, 1, (0, 1, 2), True)]
    sched.cancel(out)
    assert sched.stats()["num_loaded_kv_tokens"] == 0
    out, _ = step(sched, dev)
    assert summary(out) == [("a", 0, 10, (0, 1, 2), True)]
    assert out.items[0].num_loaded == 0
    while sched.has_unfinished():
        step(sched, dev)
    assert (a.output_token_ids, "length") == reference(a, 64)


def test_a_preempted_sequence_loads_its_prompt_again_and_recomputes_its_outputs():
    a = make_seq("a", 7, max_tokens=4)
    b = stored(make_seq("b", 7, 20, max_tokens=3), 6)
    sched, dev = new_scheduler(4, 4, a, b), StoreDevice(4, {"a": a, "b": b})
    out, _ = step(sched, dev)
    assert summary(out) == [("a", 0, 7, (0, 1), True), ("b", 6, 1, (2, 3), True)]
    step(sched, dev)
    out, _ = step(sched, dev)  # "a" needs a third page: "b" goes
    assert out.preempted == ("b",) and b.num_loaded_tokens == 0
    out, _ = step(sched, dev)
    assert summary(out) == [("a", 9, 1, (0, 1, 2), True)]
    out, _ = step(sched, dev)  # back: its prompt's 6 stored positions, then 3 computed
    assert summary(out) == [("b", 6, 3, (3, 0, 1), True)]
    assert out.items[0].num_loaded == 6
    assert out.items[0].token_ids == b.prompt_token_ids[6:] + tuple(b.output_token_ids[:2])
    assert sched.stats()["num_loaded_kv_tokens"] == 12
    for seq in (a, b):
        assert (seq.output_token_ids, "length") == reference(seq, 64)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ahead", [False, True])
def test_random_workload_with_stored_prompts(seed, ahead):
    rnd = random.Random(seed)
    seqs = []
    for i in range(12):
        seq = make_seq(f"r{i}", rnd.randint(1, 20), base=rnd.randint(1, 40), max_tokens=8)
        seqs.append(stored(seq, rnd.choice([0, seq.num_prompt_tokens - 1])))
    sched = new_scheduler(10, 4, budget=16, max_num_seqs=4, max_model_len=40)
    dev = StoreDevice(4, {s.request_id: s for s in seqs})
    run_to_the_end(sched, dev, seqs, ahead, 40)
    assert dev.num_loaded == sched.stats()["num_loaded_kv_tokens"] > 0
    assert sched.stats()["num_pages_free"] == 10


class HybridStoreDevice(HybridDevice):
    """StoreDevice for a hybrid model: a load writes the stored positions [0, n) through
    the item's page table and, through its windowed one, those its first query's window
    reads (the store holds no more of them)."""

    def __init__(self, page_size: int, window: int, seqs: dict[str, Sequence]):
        super().__init__(page_size, window)
        self.window, self.seqs, self.num_loaded = window, seqs, 0

    def run(self, out):
        for dev in (self.full, self.windowed):
            for rid in out.preempted:
                dev.life[rid] += 1
        for it in out.items:
            assert it.num_loaded in (0, it.start_pos)
            prompt, n = self.seqs[it.request_id].prompt_token_ids, it.num_loaded
            lo = max(0, n + 1 - self.window)
            for dev, table, first in (
                (self.full, it.page_ids, 0),
                (self.windowed, it.window_page_ids, lo),
            ):
                life = dev.life[it.request_id]
                for pos in range(first, n):
                    dev.cache[dev._slot(table, pos)] = (it.request_id, life, pos, prompt[pos])
            self.num_loaded += n
        return super().run(dataclasses.replace(out, preempted=()))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ahead", [False, True])
def test_a_hybrid_models_stored_prompts_take_only_their_windows_pages(seed, ahead):
    """A full-attention layer in 40 pages of 4 and a 6-key windowed one in 6 (a 20-token
    prompt alone would need 5 there): a stored prompt's admission holds windowed pages from
    its first query's window on, the places before released, and the device's checks of
    every key either layer reads pass; outputs are the plain reference's."""
    rnd = random.Random(seed)
    seqs = []
    for i in range(12):
        seq = make_seq(f"r{i}", rnd.randint(1, 20), base=rnd.randint(1, 40), max_tokens=8)
        seqs.append(stored(seq, rnd.choice([0, seq.num_prompt_tokens - 1])))
    sched, _ = workload_scheduler("hybrid")
    dev = HybridStoreDevice(4, 6, {s.request_id: s for s in seqs})
    for seq in seqs:
        sched.add(seq)
    if ahead:
        run_async(sched, dev)
    while sched.has_unfinished():
        step(sched, dev)
    for seq in seqs:
        assert (seq.output_token_ids, "length") == reference(seq, 40, window=6, hybrid=True)
    stats = sched.stats()
    assert dev.num_loaded == stats["num_loaded_kv_tokens"] > 0
    assert stats["num_pages_free"] == 40 and stats["num_window_pages_free"] == 6
    # A cancelled launch: the stored positions are computed instead, in windowed pages of
    # its own (none stood behind the window then), the sequence queued again at the front.
    a = stored(make_seq("a", 19, max_tokens=2), 18)
    dev.seqs["a"] = a
    sched.add(a)
    out = sched.schedule()
    assert (out.items[0].start_pos, a.window_page_ids[:3], a.num_released_window_pages) == (
        18,
        (0, 0, 0),
        3,
    )
    sched.cancel(out)
    assert a.window_page_ids == () and a.num_preemptions == 1
    out, _ = step(sched, dev)
    assert (out.items[0].start_pos, out.items[0].num_loaded) == (0, 0)
    while sched.has_unfinished():
        step(sched, dev)
    assert (a.output_token_ids, "length") == reference(a, 40, window=6, hybrid=True)
    assert sched.stats()["num_window_pages_free"] == 6


def _reference(arch: str) -> dict:
    return json.loads((FIXTURES / arch / "reference.json").read_text())


def _transfer(role: str, path) -> dict:
    """vLLM's form of the setting."""
    return {
        "kv_connector": "SharedStorageConnector",
        "kv_role": role,
        "kv_connector_extra_config": {"shared_storage_path": str(path)},
    }


def _bits(logprobs) -> list[int]:
    return np.asarray(logprobs, np.float32).view(np.uint32).tolist()


@pytest.mark.parametrize("arch", ["llama", "deepseek_v3", "gpt_oss"])
def test_a_consumer_decodes_what_a_producer_prefilled_as_hf(arch, tmp_path):
    """GQA, MLA and gpt-oss (an 8-key window on layer 0: its rows of each prompt's last 8
    positions only)."""
    ref = _reference(arch)
    # test_prefix_cache's engine shape (sampler_cases.POOL): the same step programs.
    shape = dict(model=str(FIXTURES / arch), max_num_seqs=8, max_num_batched_tokens=64)
    producer = LLM(**shape, **POOL, kv_transfer_config=_transfer("kv_producer", tmp_path))
    outs = producer.generate(ref["prompts"], dataclasses.replace(GREEDY, max_tokens=1))
    assert [o.token_ids for o in outs] == [t[:1] for t in ref["greedy_tokens"]]
    lengths = [len(p) for p in ref["prompts"]]
    stats = producer.stats()
    assert (stats["kv_transfer_saved_prompts"], stats["kv_transfer_saved_tokens"]) == (
        len(lengths),
        sum(lengths),
    )
    files = sorted(tmp_path.glob("*.safetensors"))
    assert len(files) == len(lengths)
    cfg = producer.config
    for f in files:  # token by token: [positions, KV heads, head_dim] or [positions, latent]
        with safe_open(f, "numpy") as h:
            n = h.get_tensor("token_ids").shape[0]
            assert n in lengths
            leaves = [h.get_tensor(k) for k in sorted(h.keys()) if k.startswith("leaf")]
        width = cfg.kv_lora_rank + cfg.qk_rope_head_dim
        row = (width,) if cfg.is_mla else (cfg.num_kv_heads, cfg.head_dim)
        assert len(leaves) == cfg.num_layers * (1 if cfg.is_mla else 2)
        rows = [min(n, 8) if cfg.attention_window(i // 2) else n for i in range(len(leaves))]
        assert [leaf.shape for leaf in leaves] == [(r, *row) for r in rows]
        assert all(leaf.dtype == np.float32 for leaf in leaves)
    # Another page size: the rows land on other slots of other pages.
    consumer = LLM(
        **shape,
        page_size=8,
        num_pages=64,
        max_model_len=128,
        kv_transfer_config=KVTransferConfig(
            kv_role="kv_consumer", kv_connector_extra_config={"shared_storage_path": str(tmp_path)}
        ),
    )
    outs = consumer.generate(ref["prompts"], GREEDY)
    for out, tokens, logprobs in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
        assert out.token_ids == tokens[:8]
        np.testing.assert_allclose(out.logprobs, logprobs[:8], atol=2e-3, rtol=0)
    assert [o.num_cached_tokens for o in outs] == [n - 1 for n in lengths]
    stats = consumer.stats()
    assert stats["num_loaded_kv_tokens"] == sum(lengths) - len(lengths)
    assert stats["num_pages_free"] == stats["num_pages_total"]
    if arch != "llama":
        return
    # Requests that need their whole prompt computed do not load; a prompt not stored is
    # computed; greedy samples of one request load its prompt once and share its pages.
    prompt = ref["prompts"][2]
    (out,) = consumer.generate([prompt], SamplingParams(max_tokens=1, prompt_logprobs=True))
    assert out.num_cached_tokens == 0 and out.token_ids == ref["greedy_tokens"][2][:1]
    (out,) = consumer.generate([prompt[:-1]], dataclasses.replace(GREEDY, max_tokens=1))
    assert out.num_cached_tokens == 0
    (out,) = consumer.generate([prompt], dataclasses.replace(GREEDY, n=3))
    assert [s.token_ids for s in out.samples] == [ref["greedy_tokens"][2][:8]] * 3
    assert consumer.stats()["num_loaded_kv_tokens"] == sum(lengths) - len(lengths) + 32


@pytest.mark.parametrize(
    ("arch", "kv_cache_dtype"), [("llama", "auto"), ("deepseek_v3", "fp8"), ("gpt_oss", "fp8")]
)
def test_batch_invariant_consumer_gives_the_bits_of_one_engine(arch, kv_cache_dtype, tmp_path):
    """The stored rows are the ones the consumer would compute itself: tokens and logprobs
    bitwise those of one engine that prefilled and decoded (GQA, MLA and gpt-oss's window,
    fp8 pages), also when the prefix cache then serves the loaded pages."""
    prompts = _reference(arch)["prompts"]
    # test_batch_invariance's decode-vs-prefill engine shape: its step programs.
    shape = dict(
        model=str(FIXTURES / arch),
        batch_invariant=True,
        max_model_len=128,
        num_pages=8,
        max_num_batched_tokens=64,
        kv_cache_dtype=kv_cache_dtype,
    )
    params = dataclasses.replace(GREEDY, max_tokens=10)
    alone = LLM(**shape).generate(prompts, params)
    LLM(**shape, kv_transfer_config=_transfer("kv_producer", tmp_path)).generate(
        prompts, dataclasses.replace(params, max_tokens=1)
    )
    # With prefix caching: the loaded pages are indexed, and the second round takes them
    # from the cache where it holds as much as the store (pages short of the last token).
    consumer = LLM(
        **shape, enable_prefix_caching=True, kv_transfer_config=_transfer("kv_both", tmp_path)
    )
    assert [len(p) for p in prompts] == [5, 17, 33]
    for loaded, hits in ((52, 0), (56, 48)):
        outs = consumer.generate(prompts, params)
        assert [o.num_cached_tokens for o in outs] == [4, 16, 32]
        for out, want in zip(outs, alone, strict=True):
            assert out.token_ids == want.token_ids
            assert _bits(out.logprobs) == _bits(want.logprobs)
        stats = consumer.stats()
        assert (stats["num_loaded_kv_tokens"], stats["prefix_cache_hits"]) == (loaded, hits)
    # kv_both: it stored nothing new (every prompt was there).
    assert consumer.stats()["kv_transfer_saved_prompts"] == 0


@pytest.mark.parametrize("arch", ["nemotron_h", "kimi_linear"])
def test_a_linear_attention_consumer_continues_the_producers_state(arch, tmp_path):
    """Mamba-2 and GQA (Nemotron-H), KDA and MLA (Kimi-Linear): the producer's prefill
    stops one token short of each prompt's end, where it stores the positions' rows and
    each linear layer's state row, then computes the last token (its first tokens HF's);
    a consumer with another page size loads both and decodes HF's tokens."""
    ref = _reference(arch)
    shape = dict(model=str(FIXTURES / arch), max_num_seqs=8, max_num_batched_tokens=64)
    producer = LLM(**shape, **POOL, kv_transfer_config=_transfer("kv_producer", tmp_path))
    outs = producer.generate(ref["prompts"], dataclasses.replace(GREEDY, max_tokens=1))
    assert [o.token_ids for o in outs] == [t[:1] for t in ref["greedy_tokens"]]
    lengths = [len(p) for p in ref["prompts"]]
    stats = producer.stats()
    assert stats["kv_transfer_saved_tokens"] == sum(lengths) - len(lengths)
    cfg = producer.config
    state_shapes = [(1, *shape) for shape in cfg.linear_state_shapes()]
    for f in sorted(tmp_path.glob("*.safetensors")):
        with safe_open(f, "numpy") as h:
            n = h.get_tensor("token_ids").shape[0]
            leaves = [h.get_tensor(f"leaf{i}") for i in range(len(h.keys()) - 1)]
        assert n + 1 in lengths
        per_layer = iter(leaves)
        for i in range(cfg.num_layers):  # a linear layer's state row, or n rows of pages
            if cfg.is_linear_layer(i):
                assert [next(per_layer).shape for _ in state_shapes] == state_shapes
            else:
                for _ in cfg.layer_kv_widths(i):
                    assert next(per_layer).shape[0] == n
        assert next(per_layer, None) is None
    consumer = LLM(
        **shape,
        page_size=8,
        num_pages=64,
        max_model_len=128,
        kv_transfer_config=_transfer("kv_consumer", tmp_path),
    )
    outs = consumer.generate(ref["prompts"], GREEDY)
    for out, tokens, logprobs in zip(outs, ref["greedy_tokens"], ref["logprobs"], strict=True):
        assert out.token_ids == tokens[:8]
        np.testing.assert_allclose(out.logprobs, logprobs[:8], atol=2e-3, rtol=0)
    assert [o.num_cached_tokens for o in outs] == [n - 1 for n in lengths]
    assert consumer.stats()["num_loaded_kv_tokens"] == sum(lengths) - len(lengths)


def test_batch_invariant_linear_attention_consumer_gives_the_bits_of_one_engine(tmp_path):
    """Nemotron-H in batch-invariant mode (its rule row by row): the state the producer
    stores after all but the last prompt token is the one a single engine reaches, so the
    consumer's tokens and logprobs are that engine's bits. Also where the producer's own
    prefix cache supplied a prompt up to that token (a snapshot at its 64-token block):
    stored before the step that computes the last token moves the state row past it."""
    prompts = _reference("nemotron_h")["prompts"]
    prompts = [*prompts, (prompts[2] * 2)[:65]]
    shape = dict(
        model=str(FIXTURES / "nemotron_h"),
        batch_invariant=True,
        max_model_len=128,
        num_pages=16,
        max_num_batched_tokens=64,
    )
    params = dataclasses.replace(GREEDY, max_tokens=10)
    alone = LLM(**shape).generate(prompts, params)
    producer = LLM(
        **shape,
        enable_prefix_caching=True,
        mamba_block_size=64,
        kv_transfer_config=_transfer("kv_producer", tmp_path),
    )
    first = dataclasses.replace(params, max_tokens=1)
    producer.generate(prompts, first)
    for f in tmp_path.glob("*.safetensors"):
        f.unlink()
    producer.generate(prompts, first)  # the long prompt: 64 of its 65 positions cached
    stats = producer.stats()
    assert (stats["prefix_cache_hits"], stats["kv_transfer_saved_prompts"]) == (64, 8)
    outs = LLM(**shape, kv_transfer_config=_transfer("kv_consumer", tmp_path)).generate(
        prompts, params
    )
    assert [o.num_cached_tokens for o in outs] == [len(p) - 1 for p in prompts]
    for out, want in zip(outs, alone, strict=True):
        assert (out.token_ids, _bits(out.logprobs)) == (want.token_ids, _bits(want.logprobs))


def test_a_store_made_with_other_settings_is_refused_before_queueing(tmp_path):
    ref = _reference("llama")
    shape = dict(model=str(FIXTURES / "llama"), max_num_seqs=8, max_num_batched_tokens=64)
    LLM(**shape, **POOL, kv_transfer_config=_transfer("kv_producer", tmp_path)).generate(
        ref["prompts"][:1], dataclasses.replace(GREEDY, max_tokens=1)
    )
    consumer = LLM(
        **shape, **POOL, kv_cache_dtype="fp8", kv_transfer_config=_transfer("kv_consumer", tmp_path)
    )
    with pytest.raises(ValueError, match="holds KV with rows=.*same kv_cache_dtype"):
        consumer.generate([ref["prompts"][1], ref["prompts"][0]], GREEDY)
    stats = consumer.stats()
    assert (stats["num_waiting"], stats["num_running"]) == (0, 0)
    (out,) = consumer.generate([ref["prompts"][1]], dataclasses.replace(GREEDY, max_tokens=2))
    assert out.num_cached_tokens == 0 and len(out.token_ids) == 2


def test_settings_are_checked_before_the_weights_are_read(tmp_path):
    good = _transfer("kv_consumer", tmp_path)
    assert KVTransferConfig.of(json.dumps(good)) == KVTransferConfig(**good)
    assert KVTransferConfig.of(None) is None
    cases = [
        ({**good, "kv_role": "kv_prefill"}, "kv_role='kv_prefill'"),
        ({**good, "kv_connector": "NixlConnector"}, "kv_connector='NixlConnector'"),
        ({**good, "kv_buffer_size": 1e9}, r"kv_transfer_config: unsupported keys \['kv_buffer_"),
        ({"kv_role": "kv_consumer"}, "shared_storage_path=None"),
        ({**good, "kv_connector_extra_config": ["x"]}, "expected a dict"),
        ({**good, "kv_connector_extra_config": {"path": "x"}}, r"unsupported keys \['path'\]"),
        ("{kv_role", "not JSON"),
        (["kv_consumer"], "expected a dict"),
    ]
    for value, match in cases:
        with pytest.raises(ValueError, match=match):
            KVTransferConfig.of(value)
    with pytest.raises(ValueError, match="kv_transfer_config: not supported for mistral"):
        LLM(model=str(FIXTURES / "mistral"), kv_transfer_config=good)


def test_a_proxy_serves_through_a_prefill_and_a_decode_server(tmp_path):
    """Over HTTP: the answers are the HF fixture's greedy text and logprobs, whole and
    streamed; the decode server computed one token of each prompt; the prefill server's
    400 is the client's answer, and the request goes no further; 502 without a server."""
    shape = dict(model=str(FIXTURES / "llama"), max_num_seqs=8, max_num_batched_tokens=64)
    servers, threads = [], []
    for role in ("kv_producer", "kv_consumer"):
        llm = LLM(**shape, **POOL, kv_transfer_config=_transfer(role, tmp_path))
        servers.append(Server(("127.0.0.1", 0), llm, "llama"))
    urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
    proxy = DisaggProxy(("127.0.0.1", 0), urls[:1], urls[1:])
    for srv in (*servers, proxy):
        threads.append(threading.Thread(target=srv.serve_forever, daemon=True))
        threads[-1].start()
    ref, decode = _reference("llama"), servers[1].llm.tokenizer.decode
    greedy = {"temperature": 0, "max_tokens": 8, "ignore_eos": True}
    try:
        body = {"model": "llama", "prompt": ref["prompts"], "logprobs": 0, **greedy}
        status, out = post(proxy, "/v1/completions", body)
        assert status == 200
        for choice, tokens, logprobs in zip(
            out["choices"], ref["greedy_tokens"], ref["logprobs"], strict=True
        ):
            assert choice["text"] == decode(tokens[:8])
            lps = choice["logprobs"]["token_logprobs"]
            np.testing.assert_allclose(lps, logprobs[:8], atol=2e-3, rtol=0)
        events = stream(proxy, "/v1/completions", {"prompt": ref["prompts"][2], **greedy})
        assert events[-1] == "[DONE]"
        assert "".join(e["choices"][0]["text"] for e in events[:-1]) == decode(
            ref["greedy_tokens"][2][:8]
        )
        lengths = [len(p) for p in ref["prompts"]]
        produced, consumed = (s.loop.stats() for s in servers)
        assert produced["kv_transfer_saved_tokens"] == sum(lengths)
        assert produced["num_tokens_generated"] == 4  # one token a request
        assert consumed["num_loaded_kv_tokens"] == sum(lengths) - 3 + lengths[2] - 1
        status, out = post(proxy, "/v1/completions", {"prompt": [1, 2], "temperature": -1})
        assert status == 400 and "temperature" in out["error"]["message"]
        assert proxy.num_requests == 2  # (the refused one never went to the decode server)
        chat = {
            "messages": [{"role": "user", "content": "the cat sat on the mat by the door"}],
            "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
            **greedy,
        }
        status, out = post(proxy, "/v1/chat/completions", chat)
        assert status == 200 and out["choices"][0]["message"]["content"]
        assert servers[1].loop.stats()["num_loaded_kv_tokens"] > consumed["num_loaded_kv_tokens"]
        conn, resp = _request(proxy, "GET", "/metrics")
        assert "moeserve:num_loaded_kv_tokens_total" in resp.read().decode()
        conn.close()
    finally:
        for srv in (proxy, *servers):
            srv.shutdown()
        proxy.server_close()
        for srv in servers:
            srv.close()
    # With the prefill server gone: 502, naming it.
    proxy = DisaggProxy(("127.0.0.1", 0), urls[:1], urls[1:])
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        status, out = post(proxy, "/v1/completions", {"prompt": [1, 2]})
        assert status == 502 and urls[0] in out["error"]["message"]
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.mark.parametrize("failing", ["step", "store"])
def test_a_failed_launch_computes_the_prompt_instead(failing, tmp_path, monkeypatch):
    """The step after a load fails once (e.g. out of device memory: step() raises), or the
    load itself (the file went away after the request was queued: no error): the engine
    takes the step back, and the retry computes the whole prompt; the tokens stay the
    fixture's."""
    ref = _reference("llama")
    shape = dict(model=str(FIXTURES / "llama"), max_num_seqs=8, max_num_batched_tokens=64)
    LLM(**shape, **POOL, kv_transfer_config=_transfer("kv_producer", tmp_path)).generate(
        ref["prompts"], dataclasses.replace(GREEDY, max_tokens=1)
    )
    consumer = LLM(**shape, **POOL, kv_transfer_config=_transfer("kv_consumer", tmp_path))
    real_step, calls = consumer._steps.plain, []

    def flaky_step(*args):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("RESOURCE_EXHAUSTED: injected")
        return real_step(*args)

    flaky_step._cache_size = real_step._cache_size  # for stats()
    if failing == "step":
        monkeypatch.setattr(consumer._steps, "plain", flaky_step)
    consumer.add_request(ref["prompts"][2], GREEDY, request_id="r")
    if failing == "store":
        for f in tmp_path.glob("*.safetensors"):
            f.unlink()
    if failing == "step":  # (a file gone is no error: the prompt is computed instead)
        with pytest.raises(RuntimeError, match="injected"):
            consumer.step()
    tokens = []
    while consumer.has_unfinished():
        tokens += [t for d in consumer.step() for t in d.token_ids]
    assert tokens == ref["greedy_tokens"][2][:8]
    assert consumer.stats()["num_loaded_kv_tokens"] == 0  # taken back: computed instead


def test_a_requests_adapter_keys_its_stored_kv(tmp_path):
    """With LoRA (tests/fixtures/lora): prompts prefilled under an adapter decode as peft
    decodes them on a consumer that knows the adapter by another name and id; the same
    prompts under no adapter or another adapter find no KV of their own and compute."""
    lora_dir = FIXTURES / "lora"
    ref = json.loads((lora_dir / "reference.json").read_text())["llama"]
    # test_lora's engine shape: its step programs.
    shape = dict(
        model=str(FIXTURES / "llama"),
        enable_lora=True,
        max_loras=2,
        max_lora_rank=8,
        num_pages=64,
        max_model_len=128,
    )
    a = LoRARequest("a", 1, str(lora_dir / "adapter_a"))
    producer = LLM(**shape, kv_transfer_config=_transfer("kv_producer", tmp_path))
    producer.generate(ref["prompts"], SamplingParams(max_tokens=1), a)
    consumer = LLM(**shape, kv_transfer_config=_transfer("kv_consumer", tmp_path))
    same_a = LoRARequest("adapter-a", 5, str(lora_dir / "adapter_a"))
    b = LoRARequest("b", 2, str(lora_dir / "adapter_b"))
    n = len(ref["adapters"]["base"]["greedy_tokens"][0])
    loras = [same_a] * 3 + [None] * 3 + [b] * 3
    outs = consumer.generate(ref["prompts"] * 3, SamplingParams(temperature=0, max_tokens=n), loras)
    for i, out in enumerate(outs):
        want = ref["adapters"][("adapter_a", "base", "adapter_b")[i // 3]]
        assert out.token_ids == want["greedy_tokens"][i % 3], i
        np.testing.assert_allclose(out.logprobs, want["logprobs"][i % 3], atol=1e-4, rtol=0)
    assert [o.num_cached_tokens for o in outs] == [len(p) - 1 for p in ref["prompts"]] + [0] * 6
