"""Serve a model over an OpenAI-compatible HTTP API (engine/server.py).

python -m scripts.serve --model=tests/fixtures/llama --port=8000
curl localhost:8000/v1/completions -H 'Content-Type: application/json' \
    -d '{"prompt": "the cat sat on", "max_tokens": 16, "temperature": 0}'

The model needs a tokenizer.json (the API speaks text); /v1/chat/completions needs a chat
template (the model's, or "chat_template" in the request). Ctrl-C or SIGTERM (what process
managers send) stops the server: requests in flight are cut off, the engine thread joined.
"""

from __future__ import annotations

import signal
import sys

from absl import app, flags

from engine import LLM, LoRARequest
from engine.server import Server
from scripts import engine_flags
from scripts.flag_checks import check_count

_MODEL = flags.DEFINE_string("model", "tests/fixtures/llama", "HF dir or orbax dir.")
_NAME = flags.DEFINE_string("served_model_name", None, "The API's model id; default: --model.")
_LORA_MODULES = flags.DEFINE_list(
    "lora_modules", [], "LoRA adapters served as models: name=path,... (needs --enable_lora)."
)
_RUNTIME_LORA = flags.DEFINE_bool(
    "allow_runtime_lora_updating",
    False,
    "POST /v1/load_lora_adapter and /v1/unload_lora_adapter (needs --enable_lora).",
)
_AUTO_TOOLS = flags.DEFINE_bool(
    "enable_auto_tool_choice", False, 'Serve tool_choice "auto" (needs --tool_call_parser).'
)
_TOOL_PARSER = flags.DEFINE_enum(
    "tool_call_parser",
    None,
    ["hermes", "deepseek_v3", "glm45", "minimax_m2", "qwen3_coder", "kimi_k2"],
    "How tool calls are read from a chat answer (engine/tool_calls.py).",
)
_REASONING = flags.DEFINE_enum(
    "reasoning_parser",
    None,
    ["deepseek_r1", "qwen3", "minimax_m2"],
    "A chat answer's <think> part goes to reasoning_content (engine/reasoning.py).",
)
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to listen on.")
_PORT = flags.DEFINE_integer("port", 8000, "Port to listen on (0: any free one).")


def main(argv):
    del argv
    try:
        check_count("--port", _PORT.value, low=0, high=65535)
        loras = [_lora_module(i, m) for i, m in enumerate(_LORA_MODULES.value)]
        if loras and not engine_flags.ENABLE_LORA.value:
            raise ValueError("--lora_modules: needs --enable_lora")
        if _RUNTIME_LORA.value and not engine_flags.ENABLE_LORA.value:
            raise ValueError("--allow_runtime_lora_updating: needs --enable_lora")
        if _AUTO_TOOLS.value != (_TOOL_PARSER.value is not None):
            raise ValueError("--enable_auto_tool_choice and --tool_call_parser: give both")
        llm = LLM(
            model=_MODEL.value,
            **engine_flags.llm_kwargs(),
        )
        server = Server(
            (_HOST.value, _PORT.value),
            llm,
            _NAME.value or _MODEL.value,
            loras,
            _RUNTIME_LORA.value,
            _TOOL_PARSER.value,
            _REASONING.value,
        )
    except (ValueError, OSError) as e:  # bad flags, a model that cannot serve, a busy port
        sys.exit(f"serve: {e}")
    signal.signal(signal.SIGTERM, _interrupt)
    host, port = server.server_address[:2]
    print(f"serving {server.model_name!r} on http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


def _lora_module(i: int, module: str) -> LoRARequest:
    name, sep, path = module.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"--lora_modules={module!r}: expected name=path")
    return LoRARequest(name, i + 1, path)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    app.run(main)
