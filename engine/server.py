"""An OpenAI-compatible HTTP server over one LLM: the part of `vllm serve`'s API that
applications call.

  GET  /health, /v1/models, /metrics (Prometheus text: requests, KV use, tokens, steps)
  POST /v1/completions        prompt: text, token ids, or a list of either
  POST /v1/chat/completions   messages, rendered by the model's chat template (engine/chat.py)
  POST /tokenize, /detokenize (vLLM's)

Both POSTs answer whole or, with "stream": true, as server-sent events ending in "data:
[DONE]"; with "use_beam_search": true (vLLM's), `n` beams, answered whole; "echo": true
(completions) puts the prompt (with logprobs, its tokens') before the answer. Request fields
are the OpenAI API's (max_tokens, temperature, top_p, n, stop, seed, logprobs,
presence/frequency_penalty, logit_bias, response_format, ...) plus vLLM's extras (top_k,
min_p, repetition_penalty, min_tokens, ignore_eos, stop_token_ids, structured_outputs,
chat_template, ...); unknown fields are ignored, as vLLM does. Fields left out take the
model's generation_config values, else the OpenAI API's defaults (temperature 1; max_tokens
16 for completions, what fits in max_model_len for chat).
A bad request gets HTTP 400 with the engine's ValueError message (it names the field)
before anything is queued; a client that closes its connection (streaming or waiting for
the whole answer) has its request aborted.

The LLM is not thread-safe: one engine thread (EngineLoop) owns it and runs step() while
requests are unfinished; HTTP handler threads (ThreadingHTTPServer) queue requests under
its lock and read their deltas from a queue each. Standard library only.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import queue
import select
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator

from engine import chat, samples, stop_strings, tool_calls
from engine import reasoning as reasoning_lib
from engine.beam_search import search
from engine.llm import LLM
from engine.lora import LoRARequest, lora_ids, require
from engine.openai_params import beam_search_params, default_params, sampling_params
from engine.sampling_params import SamplingParams, StreamDelta

MAX_BODY_BYTES = 64 << 20


class HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.kind = status, kind


class EngineLoop:
    """Owns the LLM on one thread; `submit` queues a request from any thread."""

    def __init__(self, llm: LLM):
        self.llm = llm
        self._lock = threading.Condition()
        self._queues: dict[str, queue.SimpleQueue] = {}  # request or sample id -> its deltas
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._thread.start()

    def submit(
        self, prompt_ids: list[int], params: SamplingParams, lora_request=None, priority=0
    ) -> tuple[str, queue.SimpleQueue]:
        """Queue a request (ValueError, nothing queued, when the engine refuses it); its
        deltas (every sample's) arrive on the returned queue, an Exception if a step fails."""
        with self._lock:
            if self._closed:
                raise HTTPError(503, "the server is shutting down", "server_error")
            rid = self.llm.add_request(prompt_ids, params, None, lora_request, priority)
            deltas = queue.SimpleQueue()
            for sid in samples.sample_ids(rid, params.n):
                self._queues[sid] = deltas
            self._lock.notify()
        return rid, deltas

    def abort(self, request_id: str) -> None:
        with self._lock:
            self.llm.abort(request_id)

    def stats(self) -> dict:
        """LLM.stats(), between steps."""
        return self.locked(self.llm.stats)

    def locked(self, fn, *args):
        """fn(*args) between steps (it may use the LLM)."""
        with self._lock:
            return fn(*args)

    def num_unfinished(self) -> int:
        with self._lock:
            return len(self._queues)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self.llm.has_unfinished():
                    self._lock.wait()
                if self._closed:
                    return
                try:
                    deltas = self.llm.step()
                except Exception as e:  # the engine stays usable (LLM.step): fail these
                    for rid in list(self._queues):
                        self.llm.abort(rid)
                        self._queues.pop(rid).put(e)
                    continue
                for d in deltas:
                    target = self._queues.get(d.request_id)
                    if d.finish_reason is not None:
                        self._queues.pop(d.request_id, None)
                    if target is not None:
                        target.put(d)


@dataclasses.dataclass
class _Choice:
    """One sample's output so far, and the text already sent of it."""

    index: int
    params: SamplingParams
    want_logprobs: bool  # the response lists each token's logprob
    token_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    top: list = dataclasses.field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    sent: int = 0  # characters of text streamed
    thought_sent: int = 0  # characters of reasoning streamed (a reasoning parser's)
    # Streaming: the text of token_ids[:read], grown by decoding only the tokens from
    # `prefix` on (a few, for the decoder's context), so a stream costs O(tokens).
    decoded: str = ""
    prefix: int = 0
    read: int = 0
    tokens_sent: int = 0  # tokens whose logprobs were streamed
    # "echo" (completions): the prompt's ids, until its text (and logprobs) went out.
    echo: list[int] | None = None
    prompt_logprobs: tuple = ()  # log p(prompt[i] | prompt[:i]), i >= 1 (with echo)
    prompt_top: tuple = ()  # their top alternatives
    calls_sent: int = 0  # tool calls streamed

    def add(self, d: StreamDelta) -> None:
        if d.prompt_logprobs is not None:
            self.prompt_logprobs, self.prompt_top = d.prompt_logprobs, d.prompt_top_logprobs or ()
        self.token_ids.extend(d.token_ids)
        self.logprobs.extend(d.logprobs)
        if d.top_logprobs:
            self.top.extend(d.top_logprobs)
        if d.finish_reason is not None:
            self.finish_reason, self.stop_reason = d.finish_reason, d.stop_reason


class Server(http.server.ThreadingHTTPServer):
    """`Server((host, port), llm)`; `serve_forever()`, then `shutdown()` and `close()`."""

    daemon_threads = True

    def __init__(
        self,
        address,
        llm: LLM,
        model_name: str | None = None,
        lora_modules=(),
        allow_runtime_lora_updating: bool = False,
        tool_call_parser: str | None = None,
        reasoning_parser: str | None = None,
    ):
        """`lora_modules`: LoRARequests (engine/lora.py) served as models of their own name
        (vLLM's --lora-modules): a request's "model" picks one; read here, so a bad adapter
        fails the start. `allow_runtime_lora_updating` (vLLM's
        VLLM_ALLOW_RUNTIME_LORA_UPDATING): POST /v1/load_lora_adapter and
        /v1/unload_lora_adapter add and remove adapters while the server runs.
        `tool_call_parser` (vLLM's --enable-auto-tool-choice --tool-call-parser): how
        tool_choice "auto" reads calls from a chat answer (engine/tool_calls.py).
        `reasoning_parser` (vLLM's): a chat answer's thinking goes to reasoning_content
        (engine/reasoning.py)."""
        reasoning_lib.check(reasoning_parser)
        if tool_call_parser is not None and tool_call_parser not in tool_calls.PARSERS:
            raise ValueError(
                f"tool_call_parser={tool_call_parser!r}: expected one of {list(tool_calls.PARSERS)}"
            )
        if llm.tokenizer is None:
            raise ValueError("llm: the server needs the model's tokenizer (a tokenizer.json)")
        self.llm = llm
        self.model_name = model_name or llm.config.name
        self.loras = {r.lora_name: r for r in lora_modules}
        self.allow_runtime_lora_updating = allow_runtime_lora_updating
        self.tool_call_parser = tool_call_parser
        self.reasoning_parser = reasoning_parser
        if self.model_name in self.loras or len(self.loras) < len(lora_modules):
            raise ValueError(
                f"lora_modules: names must differ from each other and from {self.model_name!r}"
            )
        if lora_modules:
            lora_ids(llm._lora, list(lora_modules), len(lora_modules))
        self.defaults = default_params(llm)
        self.loop = EngineLoop(llm)
        self.created = int(time.time())
        self.prompt_tokens = self.num_answered = 0  # of answered requests (/metrics)
        self._counting = threading.Lock()
        super().__init__(address, _Handler)

    def close(self) -> None:
        self.server_close()
        self.loop.close()

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that went away
            super().handle_error(request, client_address)

    def answered(self, prompts: list[list[int]]) -> None:
        with self._counting:
            self.num_answered += len(prompts)
            self.prompt_tokens += sum(map(len, prompts))

    def metrics(self) -> str:
        """The engine's counters and gauges in Prometheus' text format (GET /metrics)."""
        stats = self.loop.stats()
        total = stats["num_pages_total"]
        values = [
            ("num_requests_running", "gauge", "Requests admitted", stats["num_running"]),
            ("num_requests_waiting", "gauge", "Requests queued", stats["num_waiting"]),
            (
                "kv_cache_usage_perc",
                "gauge",
                "Share of KV pages held",
                (total - stats["num_pages_free"]) / total,
            ),
            ("num_preemptions_total", "counter", "Preemptions", stats["num_preemptions"]),
            (
                "generation_tokens_total",
                "counter",
                "Tokens generated",
                stats["num_tokens_generated"],
            ),
            (
                "prompt_tokens_total",
                "counter",
                "Prompt tokens of answered requests",
                self.prompt_tokens,
            ),
            ("request_success_total", "counter", "Requests answered", self.num_answered),
            ("num_steps_total", "counter", "Engine steps", stats["num_steps"]),
        ]
        keys = ["prefix_cache_queries", "prefix_cache_hits"]
        if "kv_transfer_saved_tokens" in stats:  # disaggregated: prompt tokens stored, loaded
            keys += ["kv_transfer_saved_tokens", "num_loaded_kv_tokens"]
        for key in keys:
            if key in stats:
                values.append((key + "_total", "counter", f"Tokens ({key})", stats[key]))
        if "kv_offload_pages" in stats:  # KV offloading to host memory (engine/kv_offload.py)
            pages = stats["kv_offload_pages"]
            values.append(("kv_offload_pages", "gauge", "KV pages in host memory", pages))
            for key in ("kv_offload_stored_pages", "kv_offload_loaded_pages"):
                values.append((key + "_total", "counter", f"Pages ({key})", stats[key]))
        eplb = stats.get("eplb")  # expert-parallel load balancing (engine/eplb.py)
        if eplb is not None:
            values.append(
                ("eplb_rebalances_total", "counter", "Rebalances", eplb["num_rebalances"])
            )
            if eplb["balancedness"] is not None:
                doc = "Token copies per ep device since the last rebalance, mean / max"
                values.append(("eplb_balancedness", "gauge", doc, eplb["balancedness"]))
        label = json.dumps(self.model_name)
        lines = []
        for name, kind, doc, value in values:
            lines += [
                f"# HELP moeserve:{name} {doc}.",
                f"# TYPE moeserve:{name} {kind}",
                f"moeserve:{name}{{model_name={label}}} {value}",
            ]
        return "\n".join(lines) + "\n"

    def load_lora(self, name: str, body: dict) -> None:
        """Serve the adapter at body["lora_path"] as model `name` (under the engine's lock)."""
        if name == self.model_name or name in self.loras:
            raise ValueError(f"lora_name={name!r}: already served")
        # An id the engine never gave an adapter (one id, one adapter for its life).
        lora_id = require(self.llm._lora).next_free_id()
        request = LoRARequest(name, lora_id, body.get("lora_path"))
        self.llm.add_lora(request)
        # A new dict, never one changed in place: handler threads read it without the lock.
        self.loras = {**self.loras, name: request}

    def unload_lora(self, name: str, body: dict) -> None:
        """Stop serving adapter `name` and drop its weights (under the engine's lock)."""
        if name not in self.loras:
            raise HTTPError(404, f"lora_name={name!r}: not loaded", "not_found_error")
        self.llm.remove_lora(self.loras[name].lora_int_id)
        self.loras = {k: v for k, v in self.loras.items() if k != name}

    def detokenize(self, ids, skip_special_tokens: bool = True) -> str:
        return self.llm.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def text(self, choice: _Choice, final: bool) -> str:
        """The sample's text: once finished the whole text (cut at its stop string); before,
        the part no later token can change (no half character at the end, none of what a
        stop string might still start)."""
        if not choice.params.detokenize:
            return ""
        detok = stop_strings.for_params(self.detokenize, choice.params)
        if final:
            return stop_strings.final_text(
                detok, choice.token_ids, choice.params, choice.stop_reason
            )
        ids = choice.token_ids
        before = detok(ids[choice.prefix : choice.read])
        after = detok(ids[choice.prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):  # no half character
            choice.decoded += after[len(before) :]
            choice.prefix, choice.read = choice.read, len(ids)
        hold = max(map(len, choice.params.stop), default=1) - 1
        return choice.decoded[: len(choice.decoded) - hold]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 (the base class's signature)
        pass

    # ---- routing --------------------------------------------------------------------

    def do_GET(self):
        self._guarded(self._get)

    def do_POST(self):
        self._guarded(self._post)

    def _guarded(self, handle) -> None:
        try:
            handle()
        except HTTPError as e:
            self._error(e.status, str(e), e.kind)
        except ValueError as e:
            self._error(400, str(e), "invalid_request_error")
        except ConnectionError:  # the client went away (a stream's request is aborted)
            pass

    def _get(self) -> None:
        if self.path == "/health":
            return self._json(200, {})
        if self.path == "/v1/models":
            server = self.server
            models = [
                {
                    "id": name,
                    "object": "model",
                    "created": server.created,
                    "owned_by": "moeserve",
                    "root": lora.lora_path if lora else name,
                    "parent": server.model_name if lora else None,
                    "max_model_len": server.llm.max_model_len,
                }
                for name, lora in [(server.model_name, None), *server.loras.items()]
            ]
            return self._json(200, {"object": "list", "data": models})
        if self.path == "/metrics":
            return self._send(200, self.server.metrics().encode(), "text/plain; version=0.0.4")
        raise HTTPError(404, f"path={self.path!r}: not found", "not_found_error")

    def _post(self) -> None:
        routes = {"/v1/completions": False, "/v1/chat/completions": True}
        if self.path in ("/tokenize", "/detokenize"):
            return self._tokens(self._body())
        if self.path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
            return self._lora_update(self._body())
        if self.path not in routes:
            raise HTTPError(404, f"path={self.path!r}: not found", "not_found_error")
        body = self._body()
        model = body.get("model")
        served = [self.server.model_name, *self.server.loras]
        if model is not None and model not in served:
            raise HTTPError(
                404, f"model={model!r}: not served (this server serves {served})", "not_found_error"
            )
        lora = self.server.loras.get(model)
        chat_api = routes[self.path]
        tools = tool_calls.ToolChoice.of(body, self.server.tool_call_parser) if chat_api else None
        prompts = [self._chat_prompt(body)] if chat_api else self._prompts(body)
        params = sampling_params(body, self.server.defaults, chat_api)
        forced = tools and tools.structured(body["tools"])
        if forced:  # "required" or a named function: JSON of the call(s)
            if params.structured_outputs is not None:
                raise ValueError("tool_choice: a forced call takes no structured outputs too")
            params = dataclasses.replace(params, structured_outputs=forced)
        if (
            chat_api
            and body.get("max_tokens") is None
            and body.get("max_completion_tokens") is None
        ):
            # vLLM's chat default: what fits in max_model_len (or generation_config's cap).
            room = max(self.server.llm.max_model_len - len(prompts[0]), 1)
            cap = self.server.defaults.get("max_tokens", room)
            params = dataclasses.replace(params, max_tokens=min(room, cap))
        limit = self.server.llm.max_model_len
        for ids in prompts:  # the OpenAI API refuses what cannot fit (the engine would cut)
            if len(ids) + params.max_tokens > limit:
                raise ValueError(
                    f"max_tokens={params.max_tokens}: with the prompt's {len(ids)} tokens "
                    f"exceeds max_model_len={limit}"
                )
        # Completions: logprobs=k (0: the tokens' own only); chat: logprobs=true.
        want = bool(body.get("logprobs")) if chat_api else body.get("logprobs") is not None
        if body.get("use_beam_search"):
            reqs = self._beam_search(body, prompts, params, want, lora)
        else:
            reqs = self._submit(prompts, params, want, lora, body.get("priority", 0))
        if body.get("echo"):
            for _, ids, _, choices in reqs:
                for c in choices:
                    c.echo = ids
        try:
            if body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                self._stream(reqs, chat_api, usage, tools)
            else:
                self._whole(reqs, chat_api, tools)
        finally:
            for rid, _, _, choices in reqs:
                if any(c.finish_reason is None for c in choices):
                    self.server.loop.abort(rid)

    # ---- requests -------------------------------------------------------------------

    def _body(self) -> dict:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit() or int(length) > MAX_BODY_BYTES:
            raise ValueError(f"Content-Length: must be given, at most {MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(self.rfile.read(int(length)))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"body: not valid JSON ({e})") from e
        if not isinstance(body, dict):
            raise ValueError("body: must be a JSON object")
        return body

    def _prompts(self, body: dict) -> list[list[int]]:
        prompt = body.get("prompt")
        if prompt is None:
            raise ValueError("prompt: missing")
        many = isinstance(prompt, list) and prompt and not isinstance(prompt[0], int)
        return [self.server.llm.tokenize(p) for p in (prompt if many else [prompt])]

    def _chat_prompt(self, body: dict) -> list[int]:
        llm = self.server.llm
        template = body.get("chat_template") or llm.chat_template
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise ValueError("chat_template_kwargs: must be an object")
        (ids,) = chat.prompt_ids(
            llm.tokenizer,
            template,
            [body.get("messages")]
            if isinstance(body.get("messages"), list)
            else body.get("messages"),
            llm.special_tokens,
            add_generation_prompt=body.get("add_generation_prompt", True),
            tools=body.get("tools"),
            continue_final_message=bool(body.get("continue_final_message")),
            **kwargs,
        )
        return ids

    def _submit(self, prompts, params: SamplingParams, want_logprobs: bool, lora, priority) -> list:
        """Queue every prompt (all or none): (id, prompt ids, deltas, choices) each;
        `priority`: the request's (vLLM's extra field, scheduling_policy="priority")."""
        reqs = []
        try:
            for i, ids in enumerate(prompts):
                rid, deltas = self.server.loop.submit(ids, params, lora, priority)
                choices = [
                    _Choice(i * params.n + k, samples.sample_params(params, k), want_logprobs)
                    for k in range(params.n)
                ]
                reqs.append((rid, ids, deltas, choices))
        except BaseException:
            for rid, *_ in reqs:
                self.server.loop.abort(rid)
            raise
        return reqs

    def _beam_search(self, body: dict, prompts, params: SamplingParams, want_logprobs, lora):
        """vLLM's use_beam_search: `n` beams (engine/beam_search.py), each round's requests
        through the engine loop beside other requests; each prompt's n best sequences as
        its choices, best first, finished (answered whole, never streamed)."""
        beam = beam_search_params(body, params)
        width, priority = beam.beam_width, body.get("priority", 0)

        def run(token_lists, step):
            round_ = self._submit(token_lists, step, False, lora, priority)
            try:
                for _ in self._deltas(round_):
                    pass
            finally:
                for rid, _, _, (choice,) in round_:
                    if choice.finish_reason is None:
                        self.server.loop.abort(rid)
            return [choice.top[0] for *_, (choice,) in round_]

        llm = self.server.llm
        best = search(prompts, beam, llm.config.eos_token_ids, llm.max_model_len, run)
        rid = f"beam-{uuid.uuid4().hex}"
        reqs = []
        for i, (ids, seqs) in enumerate(zip(prompts, best, strict=True)):
            choices = [
                _Choice(
                    i * width + k,
                    params,
                    want_logprobs,
                    token_ids=seq.tokens[len(ids) :],
                    logprobs=seq.logprobs,
                    finish_reason=seq.finish_reason,
                )
                for k, seq in enumerate(seqs)
            ]
            reqs.append((f"{rid}-{i}", ids, None, choices))
        return reqs

    def _deltas(self, reqs) -> Iterator[tuple[_Choice, StreamDelta]]:
        """Every sample's deltas as they come, until all have finished."""
        for rid, _, deltas, choices in reqs:
            by_id = dict(zip(samples.sample_ids(rid, len(choices)), choices, strict=True))
            while any(c.finish_reason is None for c in choices):
                try:
                    d = deltas.get(timeout=0.25)
                except queue.Empty:
                    if self._client_gone():  # _post's cleanup aborts what is unfinished
                        raise ConnectionAbortedError("the client closed its connection") from None
                    continue
                if isinstance(d, Exception):
                    raise HTTPError(500, f"engine step failed: {d}", "server_error")
                choice = by_id[d.request_id]
                choice.add(d)
                yield choice, d

    def _client_gone(self) -> bool:
        """Whether the client closed its connection (while it waits it sends nothing, so a
        readable socket with no bytes means it is gone)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # ---- responses ------------------------------------------------------------------

    def _usage(self, reqs) -> dict:
        prompt = sum(len(ids) for _, ids, _, _ in reqs)
        completion = sum(len(c.token_ids) for *_, choices in reqs for c in choices)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _logprobs(self, c: _Choice, start: int, chat_api: bool):
        """The OpenAI logprobs object of a choice's tokens from `start` on (None if not
        asked for)."""
        if not c.want_logprobs:
            return None
        ids, lps = c.token_ids[start:], c.logprobs[start:]
        top = c.top[start:] if c.top else [()] * len(ids)
        piece = lambda t: self.server.detokenize([t], skip_special_tokens=False)  # noqa: E731
        if chat_api:
            content = [
                {
                    "token": piece(t),
                    "logprob": lp,
                    "top_logprobs": [{"token": piece(a), "logprob": b} for a, b in alts],
                }
                for t, lp, alts in zip(ids, lps, top, strict=True)
            ]
            return {"content": content}
        return {
            "tokens": [piece(t) for t in ids],
            "token_logprobs": lps,
            "top_logprobs": [{piece(a): b for a, b in alts} for alts in top],
        }

    def _echo(self, c: _Choice, entry: dict) -> None:
        """A completion choice's first entry with "echo": the prompt's text before its text
        and, with logprobs, the prompt's tokens before its tokens (the first without a
        logprob, as OpenAI's)."""
        if c.echo is None:
            return
        ids, c.echo = c.echo, None
        entry["text"] = self.server.detokenize(ids) + entry["text"]
        got = entry["logprobs"]
        if got is None:
            return
        piece = lambda t: self.server.detokenize([t], skip_special_tokens=False)  # noqa: E731
        tops = c.prompt_top or [()] * len(c.prompt_logprobs)
        got["tokens"][:0] = [piece(t) for t in ids]
        got["token_logprobs"][:0] = [None, *c.prompt_logprobs]
        got["top_logprobs"][:0] = [None] + [{piece(a): b for a, b in alts} for alts in tops]

    def _answer(self, tools, c: _Choice, text: str, done: bool) -> tuple:
        """A chat choice's (reasoning or None, content, tool_calls or None, finish_reason):
        its thinking apart with the server's reasoning parser (engine/reasoning.py), tool
        calls read from the rest with `tools` (a ToolChoice, or None)."""
        parser, reasoning = self.server.reasoning_parser, None
        raw = tools and self.server.detokenize(c.token_ids, skip_special_tokens=False)
        if parser is not None:
            reasoning, text = reasoning_lib.split(parser, text, done)
            raw = raw and reasoning_lib.split(parser, raw, done)[1]
        if tools is None:
            return reasoning, text, None, c.finish_reason
        if not done:  # (streaming: the calls closed since the last delta)
            closed = tool_calls.tool_calls(tools.closed_calls(raw)[c.calls_sent :])
            return reasoning, tools.content(text, raw, final=False), closed or None, None
        fields, called = tools.message(text, raw)
        if not called and c.calls_sent:  # cut (or broken) after calls went out: they stand
            fields = {"content": tools.content(text, raw, final=True) or None}
            fields["tool_calls"] = tool_calls.tool_calls(tools.closed_calls(raw))
        # OpenAI's: "tool_calls" when the model chose to call; a named function: "stop".
        finish = c.finish_reason
        if (called or c.calls_sent) and finish == "stop" and tools.mode != "named":
            finish = "tool_calls"
        calls = (fields.get("tool_calls") or [])[c.calls_sent :]
        return reasoning, fields["content"] or "", calls or None, finish

    def _whole(self, reqs, chat_api: bool, tools=None) -> None:
        for _ in self._deltas(reqs):
            pass
        choices = [c for *_, cs in reqs for c in cs]
        out = []
        for c in choices:
            text = self.server.text(c, final=True)
            entry = {
                "index": c.index,
                "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason,
            }
            if chat_api:
                reasoning, content, calls, entry["finish_reason"] = self._answer(
                    tools, c, text, True
                )
                entry["message"] = {"role": "assistant", "content": content}
                if self.server.reasoning_parser is not None:
                    entry["message"]["reasoning_content"] = reasoning
                if calls:
                    entry["message"].update(content=content or None, tool_calls=calls)
            else:
                entry["text"] = text
            entry["logprobs"] = self._logprobs(c, 0, chat_api)
            self._echo(c, entry)
            out.append(entry)
        self.server.answered([ids for _, ids, _, _ in reqs])
        self._json(
            200,
            {
                "id": self._response_id(reqs, chat_api),
                "object": "chat.completion" if chat_api else "text_completion",
                "created": int(time.time()),
                "model": self.server.model_name,
                "choices": out,
                "usage": self._usage(reqs),
            },
        )

    def _stream(self, reqs, chat_api: bool, include_usage: bool, tools=None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        rid = self._response_id(reqs, chat_api)
        kind = "chat.completion.chunk" if chat_api else "text_completion"
        created = int(time.time())

        def event(choices: list[dict], usage=None) -> None:
            chunk = {"id": rid, "object": kind, "created": created, "model": self.server.model_name}
            chunk["choices"] = choices
            if usage is not None:
                chunk["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()

        if chat_api:
            event(
                [
                    {
                        "index": c.index,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                    for *_, cs in reqs
                    for c in cs
                ]
            )
        for c, d in self._deltas(reqs):
            done = d.finish_reason is not None
            text, calls, finish = self.server.text(c, final=done), None, c.finish_reason
            thought = ""
            if chat_api:
                reasoning, text, calls, finish = self._answer(tools, c, text, done)
                thought = (reasoning or "")[c.thought_sent :]
                c.thought_sent += len(thought)
            new, c.sent = text[c.sent :], max(c.sent, len(text))
            if not new and not thought and not calls and not done:
                continue
            entry = {"index": c.index, "finish_reason": finish}
            if done:
                entry["stop_reason"] = c.stop_reason
            if chat_api:
                entry["delta"] = {"content": new} if new else {}
                if thought:
                    entry["delta"]["reasoning_content"] = thought
                if calls:
                    entry["delta"]["tool_calls"] = [
                        {"index": c.calls_sent + i, **t} for i, t in enumerate(calls)
                    ]
                    c.calls_sent += len(calls)
            else:
                entry["text"] = new
            entry["logprobs"] = self._logprobs(c, c.tokens_sent, chat_api)
            self._echo(c, entry)
            c.tokens_sent = len(c.token_ids)
            event([entry])
        if include_usage:
            event([], self._usage(reqs))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.server.answered([ids for _, ids, _, _ in reqs])

    @staticmethod
    def _response_id(reqs, chat_api: bool) -> str:
        return ("chatcmpl-" if chat_api else "cmpl-") + reqs[0][0]

    def _tokens(self, body: dict) -> None:
        """vLLM's /tokenize ({"prompt": text} or {"messages": [...]}) and /detokenize
        ({"tokens": [...]})."""
        llm = self.server.llm
        if self.path == "/detokenize":
            ids = body.get("tokens")
            if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
                raise ValueError("tokens: must be a list of token ids")
            if any(not 0 <= t < llm.config.vocab_size for t in ids):
                raise ValueError(f"tokens: ids must be in [0, {llm.config.vocab_size})")
            return self._json(200, {"prompt": self.server.detokenize(ids)})
        ids = self._chat_prompt(body) if "messages" in body else llm.tokenize(body.get("prompt"))
        self._json(200, {"tokens": ids, "count": len(ids), "max_model_len": llm.max_model_len})

    def _lora_update(self, body: dict) -> None:
        """vLLM's /v1/load_lora_adapter ({"lora_name", "lora_path"}) and
        /v1/unload_lora_adapter ({"lora_name"}), when the server allows them."""
        server = self.server
        if not server.allow_runtime_lora_updating:
            raise HTTPError(
                404,
                f"path={self.path!r}: not found (the server runs without "
                "--allow_runtime_lora_updating)",
                "not_found_error",
            )
        name = body.get("lora_name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"lora_name={name!r}: must be a non-empty string")
        load = self.path == "/v1/load_lora_adapter"
        try:
            server.loop.locked(server.load_lora if load else server.unload_lora, name, body)
        except FileNotFoundError as e:
            raise ValueError(f"lora_path: {e}") from e
        done = "added" if load else "removed"
        self._send(200, f"Success: LoRA adapter {name!r} {done}.".encode(), "text/plain")

    def _json(self, status: int, payload: dict) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str) -> None:
        self.close_connection = True
        self._json(status, {"error": {"message": message, "type": kind, "code": status}})
