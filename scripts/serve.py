"""Serve a model over an OpenAI-compatible HTTP API (engine/server.py).

python -m scripts.serve --model=tests/fixtures/llama --port=8000
curl localhost:8000/v1/completions -H 'Content-Type: application/json' \
    -d '{"prompt": "the cat sat on", "max_tokens": 16, "temperature": 0}'

The model needs a tokenizer.json (the API speaks text); /v1/chat/completions needs a chat
template (the model's, or "chat_template" in the request). Ctrl-C stops the server.
"""

from __future__ import annotations

import sys

from absl import app, flags

from engine import LLM
from engine.server import Server
from scripts.flag_checks import check_count

_MODEL = flags.DEFINE_string("model", "tests/fixtures/llama", "HF dir or orbax dir.")
_NAME = flags.DEFINE_string("served_model_name", None, "The API's model id; default: --model.")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to listen on.")
_PORT = flags.DEFINE_integer("port", 8000, "Port to listen on (0: any free one).")
_DTYPE = flags.DEFINE_string("dtype", None, "Override the parameter dtype.")
_PAGE_SIZE = flags.DEFINE_integer("page_size", 16, "KV page size in tokens.")
_NUM_PAGES = flags.DEFINE_integer("num_pages", None, "KV pages; default from a memory budget.")
_MAX_BATCHED = flags.DEFINE_integer("max_num_batched_tokens", 2048, "Token budget per step.")
_MAX_SEQS = flags.DEFINE_integer("max_num_seqs", 64, "Sequences per step at most.")
_MAX_MODEL_LEN = flags.DEFINE_integer("max_model_len", None, "Longest sequence.")
_ATTN = flags.DEFINE_enum(
    "attention_impl", "auto", ["auto", "xla", "pallas", "mosaic"], "Attention."
)
_KV_CACHE_DTYPE = flags.DEFINE_enum(
    "kv_cache_dtype", "auto", ["auto", "fp8", "fp8_e4m3"], "KV pages: the model dtype, or fp8."
)
_BATCH_INVARIANT = flags.DEFINE_bool("batch_invariant", False, "Bitwise-deterministic mode.")
_PREFIX_CACHING = flags.DEFINE_bool(
    "enable_prefix_caching", False, "Reuse the KV pages of prompts' shared prefixes."
)
_MESH = flags.DEFINE_string("mesh", "", "Device mesh, e.g. 'dp=1,tp=2,ep=4'.")


def main(argv):
    del argv
    try:
        check_count("--port", _PORT.value, low=0, high=65535)
        llm = LLM(
            model=_MODEL.value,
            dtype=_DTYPE.value,
            mesh=_MESH.value,
            page_size=_PAGE_SIZE.value,
            num_pages=_NUM_PAGES.value,
            max_num_batched_tokens=_MAX_BATCHED.value,
            max_num_seqs=_MAX_SEQS.value,
            max_model_len=_MAX_MODEL_LEN.value,
            batch_invariant=_BATCH_INVARIANT.value,
            attention_impl=_ATTN.value,
            kv_cache_dtype=_KV_CACHE_DTYPE.value,
            enable_prefix_caching=_PREFIX_CACHING.value,
        )
        server = Server((_HOST.value, _PORT.value), llm, _NAME.value or _MODEL.value)
    except (ValueError, OSError) as e:  # bad flags, a model that cannot serve, a busy port
        sys.exit(f"serve: {e}")
    host, port = server.server_address[:2]
    print(f"serving {server.model_name!r} on http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


if __name__ == "__main__":
    app.run(main)
