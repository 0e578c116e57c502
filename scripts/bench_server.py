"""The OpenAI-compatible server's price: the same requests through HTTP and in process.

  python -m scripts.bench_server        # the figures in docs/benchmarks.md

`n` greedy requests of random `prompt_len`-token prompts, `max_tokens` tokens each, run on
one engine three ways: `LLM.generate` of all of them in process, and through the server
(engine/server.py, on a local port) as `n` clients at once, whole responses and streamed.
Each is timed after a first run compiled its steps; the server's texts must equal the
decoded in-process tokens (the script fails otherwise).
"""

from __future__ import annotations

import functools
import http.client
import json
import sys
import threading
import time

import numpy as np
from absl import app, flags

from engine import LLM, SamplingParams
from engine.server import Server
from scripts.flag_checks import check_count

_MODEL = flags.DEFINE_string("model", "tests/fixtures/llama", "HF dir (with a tokenizer.json).")
_N = flags.DEFINE_integer("n", 16, "Requests (and clients).")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 32, "Prompt tokens.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 32, "New tokens per request.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per mode (the best is shown).")


def over_http(port: int, prompts: list[list[int]], stream: bool) -> list[str]:
    """Every prompt as its own client, all at once; their texts."""
    texts = [""] * len(prompts)

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        body = {"prompt": prompts[i], "max_tokens": _MAX_TOKENS.value, "temperature": 0}
        conn.request("POST", "/v1/completions", json.dumps({**body, "stream": stream}))
        raw = conn.getresponse().read().decode()
        conn.close()
        if not stream:
            texts[i] = json.loads(raw)["choices"][0]["text"]
            return
        events = [e[len("data: ") :] for e in raw.split("\n\n") if e]
        texts[i] = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return texts


def best_time(fn, repeats: int) -> tuple[float, object]:
    fn()  # compiles
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main(argv):
    del argv
    try:
        check_count("--n", _N.value, low=1, high=256)
        check_count("--prompt_len", _PROMPT_LEN.value, low=1, high=1 << 16)
        check_count("--max_tokens", _MAX_TOKENS.value, low=1, high=1 << 16)
        check_count("--repeats", _REPEATS.value, low=1, high=100)
        n, length = _N.value, _PROMPT_LEN.value
        llm = LLM(
            model=_MODEL.value,
            max_num_seqs=n,
            max_model_len=length + _MAX_TOKENS.value,
            num_pages=n * (-(-(length + _MAX_TOKENS.value) // 16)),
        )
        server = Server(("127.0.0.1", 0), llm)
    except ValueError as e:
        sys.exit(f"bench_server: {e}")
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, llm.config.vocab_size, size=length).tolist() for _ in range(n)]
    params = SamplingParams(temperature=0.0, max_tokens=_MAX_TOKENS.value)
    seconds, outs = best_time(lambda: llm.generate(prompts, params), _REPEATS.value)
    rows = [("LLM.generate, in process", seconds, [o.text for o in outs])]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        for stream in (False, True):
            run = functools.partial(over_http, port, prompts, stream)
            seconds, texts = best_time(run, _REPEATS.value)
            rows.append((f"HTTP, {n} clients, {'streamed' if stream else 'whole'}", seconds, texts))
    finally:
        server.shutdown()
        server.close()
    if any(texts != rows[0][2] for _, _, texts in rows):
        sys.exit("bench_server: the server's texts differ from the engine's")
    tokens = sum(len(o.token_ids) for o in outs)
    print(f"{llm.config.name}: {n} requests, {length}-token prompts, {tokens} tokens out")
    print("| mode | s | tokens/s | x in process |")
    print("|---|---|---|---|")
    for mode, seconds, _ in rows:
        print(f"| {mode} | {seconds:.3f} | {tokens / seconds:.0f} | {seconds / rows[0][1]:.2f} |")


if __name__ == "__main__":
    app.run(main)
