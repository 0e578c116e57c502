"""The OpenAI-compatible server (engine/server.py) over HTTP on a local port.

Anchored to Hugging Face: greedy completions of the llama fixture's prompts are the text of
the fixture's greedy tokens, with their logprobs. The rest holds the server to the engine
and to itself: streamed text equals the whole response's, chat equals a completion of the
prompt the template renders, stop strings cut the text, n samples, concurrent clients, bad
requests (HTTP 400 naming the field, nothing queued), and a closed stream aborts its request.
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from tokenizers import Tokenizer

from engine import LLM, SamplingParams, chat
from engine.server import Server, _Choice, _Handler
from tests.sampler_cases import POOL

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
REF = json.loads((FIXTURES / "llama" / "reference.json").read_text())
TOKENIZER_DECODE = Tokenizer.from_file(str(FIXTURES / "llama" / "tokenizer.json")).decode
CHATML = json.loads((FIXTURES / "chat" / "reference.json").read_text())["templates"]["chatml"]


@pytest.fixture(scope="module")
def server():
    # test_parallel_sampling's engine shape (sampler_cases.POOL): the same step programs.
    llm = LLM(model=str(FIXTURES / "llama"), max_num_seqs=8, max_num_batched_tokens=64, **POOL)
    srv = Server(("127.0.0.1", 0), llm, "llama")
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.close()


def _request(server, method: str, path: str, body=None, raw: bytes | None = None):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=120)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def post(server, path: str, body: dict) -> tuple[int, dict]:
    conn, resp = _request(server, "POST", path, body)
    try:
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def stream(server, path: str, body: dict) -> list:
    """The events of a streamed response ("[DONE]" last)."""
    conn, resp = _request(server, "POST", path, {**body, "stream": True})
    try:
        assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
        events = []
        for line in resp.read().decode().split("\n\n"):
            if line:
                assert line.startswith("data: ")
                payload = line[len("data: ") :]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
        return events
    finally:
        conn.close()


GREEDY = {"temperature": 0, "max_tokens": 16, "ignore_eos": True}


def test_models_and_health(server):
    conn, resp = _request(server, "GET", "/v1/models")
    models = json.loads(resp.read())
    conn.close()
    assert [m["id"] for m in models["data"]] == ["llama"]
    assert models["data"][0]["max_model_len"] == 128
    conn, resp = _request(server, "GET", "/health")
    assert (resp.status, json.loads(resp.read())) == (200, {})
    conn.close()


def test_greedy_completions_are_the_hf_tokens_text(server):
    status, out = post(
        server,
        "/v1/completions",
        {"model": "llama", "prompt": REF["prompts"], "logprobs": 0, **GREEDY},
    )
    assert status == 200 and out["object"] == "text_completion"
    decode = server.llm.tokenizer.decode
    for choice, i in zip(out["choices"], range(3), strict=True):
        assert choice["index"] == i and choice["finish_reason"] == "length"
        assert choice["text"] == decode(REF["greedy_tokens"][i])
        np.testing.assert_allclose(
            choice["logprobs"]["token_logprobs"], REF["logprobs"][i], atol=2e-3, rtol=0
        )
    prompt_tokens = sum(map(len, REF["prompts"]))
    assert out["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 48,
        "total_tokens": prompt_tokens + 48,
    }


def test_a_stream_adds_up_to_the_whole_response(server):
    body = {"prompt": REF["prompts"][2], **GREEDY}
    _, whole = post(server, "/v1/completions", body)
    events = stream(server, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    assert events[-2]["usage"] == whole["usage"] and events[-2]["choices"] == []
    chunks = events[:-2]
    assert "".join(e["choices"][0]["text"] for e in chunks) == whole["choices"][0]["text"]
    assert [e["choices"][0]["finish_reason"] for e in chunks][-1] == "length"
    assert all(e["choices"][0]["finish_reason"] is None for e in chunks[:-1])


def test_stop_strings_cut_the_text_streamed_or_not(server):
    body = {"prompt": REF["prompts"][2], **GREEDY}
    _, plain = post(server, "/v1/completions", body)
    text = plain["choices"][0]["text"]
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    _, cut = post(server, "/v1/completions", {**body, "stop": stop})
    choice = cut["choices"][0]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
    assert choice["text"] == text[: text.index(stop)]
    events = stream(server, "/v1/completions", {**body, "stop": [stop]})
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == choice["text"]


def test_chat_is_a_completion_of_the_rendered_prompt(server):
    messages = [{"role": "user", "content": "what is the cat doing"}]
    (ids,) = chat.prompt_ids(server.llm.tokenizer, CHATML, [messages], server.llm.special_tokens)
    body = {"messages": messages, "chat_template": CHATML, "max_tokens": 12, "temperature": 0}
    status, out = post(
        server, "/v1/chat/completions", {**body, "logprobs": True, "top_logprobs": 2}
    )
    assert status == 200 and out["object"] == "chat.completion"
    _, plain = post(server, "/v1/completions", {"prompt": ids, "max_tokens": 12, "temperature": 0})
    message = out["choices"][0]["message"]
    assert message == {"role": "assistant", "content": plain["choices"][0]["text"]}
    assert out["usage"]["prompt_tokens"] == len(ids)
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"]
    assert all(len(t["top_logprobs"]) == 2 for t in content)
    events = stream(server, "/v1/chat/completions", body)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events[1:-1])
    assert streamed == message["content"]
    # Without a template (the fixture has none) chat is refused, naming it.
    status, err = post(server, "/v1/chat/completions", {"messages": messages})
    assert status == 400 and "chat_template" in err["error"]["message"]


def test_n_seeded_samples_and_concurrent_clients(server):
    body = {"prompt": REF["prompts"][1], "max_tokens": 8, "temperature": 1.0, "seed": 3}
    _, out = post(server, "/v1/completions", {**body, "n": 3})
    texts = [c["text"] for c in out["choices"]]
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    # Sample k draws with seed + k (engine/samples.py): the same as a request of its own.
    _, third = post(server, "/v1/completions", {**body, "seed": 5})
    assert third["choices"][0]["text"] == texts[2]
    results = [None] * 6

    def client(i):
        results[i] = post(server, "/v1/completions", {**body, "seed": 3 + i % 3})[1]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["choices"][0]["text"] for r in results] == texts * 2


@pytest.mark.parametrize(
    "path,body,status,message",
    [
        ("/v1/completions", {"prompt": [1, 2], "temperature": -1}, 400, "temperature"),
        ("/v1/completions", {"prompt": [1, 2], "max_tokens": 1000}, 400, "max_model_len"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "echo": True, "chat_template": CHATML},
            400,
            "echo: only on /v1/completions",
        ),
        ("/v1/completions", {"max_tokens": 3}, 400, "prompt: missing"),
        ("/v1/completions", {"prompt": [1, 2], "logit_bias": {"x": 1}}, 400, "logit_bias"),
        ("/v1/completions", {"prompt": [1, 2], "model": "gpt-4"}, 404, "model='gpt-4'"),
        ("/v1/embeddings", {"input": "x"}, 404, "not found"),
        (
            "/v1/completions",
            {"prompt": [1, 2], "response_format": {"type": "xml"}},
            400,
            "response_format.type",
        ),
    ],
)
def test_bad_requests_are_refused_by_field(server, path, body, status, message):
    got, out = post(server, path, body)
    assert got == status and message in out["error"]["message"]
    assert server.loop.num_unfinished() == 0


def test_echo_gives_the_prompts_logprobs_as_eval_harnesses_read_them(server):
    """ "echo" with "logprobs" (lm-eval-harness's loglikelihood request): the prompt's text and
    tokens first, the first without a logprob; a continuation's logprobs are transformers'
    and its tokens the top ones where it is greedy. Streamed, the pieces add up to it."""
    prompt, greedy = REF["prompts"][0], REF["greedy_tokens"][0]
    ids = prompt + greedy
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True}
    status, resp = post(server, "/v1/completions", body)
    assert status == 200, resp
    (choice,) = resp["choices"]
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(ids) + 1
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["tokens"][: len(ids)] == [
        TOKENIZER_DECODE([t], skip_special_tokens=False) for t in ids
    ]
    cont = lp["token_logprobs"][len(prompt) : len(ids)]
    np.testing.assert_allclose(cont, REF["logprobs"][0], atol=2e-3, rtol=0)
    for token, top in zip(
        lp["tokens"][len(prompt) :], lp["top_logprobs"][len(prompt) :], strict=True
    ):
        assert max(top, key=top.get) == token  # greedy: each token its position's best
    assert choice["text"].startswith(TOKENIZER_DECODE(ids))
    events = stream(server, "/v1/completions", body)[:-1]
    streamed = [c for e in events for c in e["choices"]]
    assert "".join(c["text"] for c in streamed) == choice["text"]
    joined = [x for c in streamed if c["logprobs"] for x in c["logprobs"]["token_logprobs"]]
    assert joined == lp["token_logprobs"]
    # Without logprobs: the text only; with max_tokens=0, the prompt's alone.
    status, plain = post(server, "/v1/completions", {**body, "logprobs": None})
    assert plain["choices"][0]["text"] == choice["text"] and plain["choices"][0]["logprobs"] is None
    status, bare = post(server, "/v1/completions", {**body, "logprobs": None, "max_tokens": 0})
    assert status == 200 and bare["choices"][0]["text"] == TOKENIZER_DECODE(ids)
    status, refused = post(server, "/v1/completions", {**body, "max_tokens": 0})
    assert status == 400 and "max_tokens=0: echo with logprobs" in refused["error"]["message"]


def test_bad_json_and_a_closed_stream(server):
    conn, resp = _request(server, "POST", "/v1/completions", raw=b"{not json")
    assert resp.status == 400 and "not valid JSON" in json.loads(resp.read())["error"]["message"]
    conn.close()
    # A client that goes away mid-stream: its request is aborted, the engine goes on.
    body = {"prompt": REF["prompts"][0], "max_tokens": 100, "ignore_eos": True, "stream": True}
    conn, resp = _request(server, "POST", "/v1/completions", body)
    assert resp.fp.readline().startswith(b"data: ")
    resp.close()
    conn.close()
    for _ in range(200):
        if server.loop.num_unfinished() == 0:
            break
        time.sleep(0.05)
    assert server.loop.num_unfinished() == 0
    assert server.llm.stats()["num_pages_free"] == POOL["num_pages"]
    status, _ = post(server, "/v1/completions", {"prompt": REF["prompts"][0], **GREEDY})
    assert status == 200


def test_the_serve_script_answers_and_stops_on_sigterm():
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts.serve", "--model=tests/fixtures/llama", "--port=0"]
        + ["--num_pages=32", "--max_model_len=128", "--max_num_batched_tokens=64"],
        cwd=FIXTURES.parent.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving 'tests/fixtures/llama' on http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        body = {"prompt": REF["prompts"][1], **GREEDY}
        conn.request("POST", "/v1/completions", body=json.dumps(body))
        out = json.loads(conn.getresponse().read())
        conn.close()
        assert out["model"] == "tests/fixtures/llama"
        assert out["choices"][0]["text"] == TOKENIZER_DECODE(REF["greedy_tokens"][1])
        # SIGTERM: a process started in the background (CI) inherits SIGINT ignored.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--port=70000"], "serve: --port=70000: must be in [0,"),
        (["--lora_modules=a=/x"], "serve: --lora_modules: needs --enable_lora"),
        (["--enable_lora", "--lora_modules=a"], "serve: --lora_modules='a': expected name=path"),
    ],
)
def test_the_serve_script_refuses_bad_flags(flags, message):
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.serve", "--model=no-such-model", *flags],
        cwd=FIXTURES.parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr


def test_tokenize_detokenize_and_metrics(server):
    text = "the cat sat on the mat"
    _, out = post(server, "/tokenize", {"prompt": text})
    assert out["tokens"] == server.llm.tokenize(text) and out["count"] == len(out["tokens"])
    _, back = post(server, "/detokenize", {"tokens": out["tokens"]})
    assert back == {"prompt": TOKENIZER_DECODE(out["tokens"])}
    status, err = post(server, "/detokenize", {"tokens": [10**6]})
    assert status == 400 and "tokens: ids must be in [0," in err["error"]["message"]

    def metrics() -> dict[str, float]:
        conn, resp = _request(server, "GET", "/metrics")
        text = resp.read().decode()
        conn.close()
        rows = [line.split() for line in text.splitlines() if not line.startswith("#")]
        return {row[0].split("{")[0]: float(row[1]) for row in rows}

    before = metrics()
    post(server, "/v1/completions", {"prompt": REF["prompts"][1], **GREEDY})
    after = metrics()
    assert after["moeserve:request_success_total"] - before["moeserve:request_success_total"] == 1
    assert (
        after["moeserve:generation_tokens_total"] - before["moeserve:generation_tokens_total"] == 16
    )
    assert after["moeserve:prompt_tokens_total"] - before["moeserve:prompt_tokens_total"] == len(
        REF["prompts"][1]
    )
    assert after["moeserve:num_requests_running"] == 0
    assert after["moeserve:kv_cache_usage_perc"] == 0.0


def test_a_client_gone_is_seen_on_its_socket():
    a, b = socket.socketpair()
    handler = SimpleNamespace(connection=a)
    try:
        assert not _Handler._client_gone(handler)
        b.close()
        assert _Handler._client_gone(handler)
    finally:
        a.close()


def test_streamed_text_decodes_only_new_tokens_and_adds_up():
    """Byte-level BPE (the structured-output fixture's tokenizer): characters of several
    bytes split over tokens; the pieces streamed add up to the whole text."""
    tok = Tokenizer.from_file(str(FIXTURES / "structured" / "tokenizer.json"))
    fake = SimpleNamespace(detokenize=lambda ids, skip_special_tokens=True: tok.decode(ids))
    text = "héllo wörld — naïve café ✓ 日本語 done"
    ids = tok.encode(text).ids
    choice = _Choice(0, SamplingParams(), want_logprobs=False)
    streamed = ""
    for t in ids:
        choice.token_ids.append(t)
        piece = Server.text(fake, choice, final=False)
        assert piece.startswith(streamed) and "\ufffd" not in piece
        streamed = piece
    assert streamed == tok.decode(ids) and choice.prefix < len(ids)
