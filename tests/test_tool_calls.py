"""Tool calls and reasoning in the chat API (engine/tool_calls.py, engine/reasoning.py,
engine/server.py).

The parsers and the request rules on the host, with exact expectations; then over HTTP on
the llama fixture (random weights, so its choices are the grammar's): a named function and
"required" hold the answer to the calls' JSON, which parses into tool_calls; "auto" reads a
hermes block out of an answer held to one by structured outputs, whole and streamed; a
reasoning parser puts the <think> part of such an answer in reasoning_content.
"""

from __future__ import annotations

import json
import re
import threading

import pytest

from engine.reasoning import split
from engine.server import Server
from engine.tool_calls import ToolChoice
from tests.test_server import FIXTURES, POOL, post, stream

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_hermes_blocks_become_calls_and_the_text_before_them_the_content():
    auto = ToolChoice("auto", parser="hermes")
    text = f'Let me look.\n{CALL}\n<tool_call>\n{{"name": "get_time"}}\n</tool_call>'
    assert auto.calls(text, text) == [("get_weather", '{"city": "Paris"}'), ("get_time", "{}")]
    fields, called = auto.message(text, text)
    assert called and fields["content"] == "Let me look.\n"
    assert [c["function"]["name"] for c in fields["tool_calls"]] == ["get_weather", "get_time"]
    assert all(
        c["type"] == "function" and c["id"].startswith("call_") for c in fields["tool_calls"]
    )
    # An answer cut before its closing tag still parses; one that is not JSON stays text.
    assert auto.calls(CALL[: -len("</tool_call>")], CALL[: -len("</tool_call>")]) == [
        ("get_weather", '{"city": "Paris"}')
    ]
    broken = "<tool_call>{not json}</tool_call>"
    assert auto.message(broken, broken) == ({"content": broken}, False)
    assert auto.message("no call", "no call") == ({"content": "no call"}, False)


def test_deepseek_v3_calls_read_from_its_special_tokens():
    auto = ToolChoice("auto", parser="deepseek_v3")
    raw = (
        "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Rome"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>'
    )
    text = 'Checking.functionget_weather\n```json\n{"city": "Rome"}\n```'  # special tokens gone
    fields, called = auto.message(text, raw)
    assert called and fields["content"] == "Checking."
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in fields["tool_calls"]] == [
        ("get_weather", '{"city": "Rome"}')
    ]


def test_glm45_calls_read_from_key_value_pairs():
    auto = ToolChoice("auto", parser="glm45")
    text = (
        "I'll check.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris"
        "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
        "<tool_call>get_time\n</tool_call>"
    )
    fields, called = auto.message(text, text)
    assert called and fields["content"] == "I'll check."
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in fields["tool_calls"]]
    assert calls == [("get_weather", '{"city": "Paris", "days": 3}'), ("get_time", "{}")]
    nameless = "<tool_call>\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>"
    assert auto.message(nameless, nameless) == ({"content": nameless}, False)


# MiniMax-M2's format, and its examples' answers, from MiniMax's tool calling guide
# (MiniMax-AI/MiniMax-M2.5, docs/tool_calling_guide.md: "MiniMax-M2.5 supports the same
# toolcall syntax as MiniMax-M2").
MM_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["location", "unit"],
        },
    },
}
MM_SEARCH = {
    "type": "function",
    "function": {
        "name": "search_web",
        "parameters": {
            "type": "object",
            "properties": {
                "query_list": {"type": "array", "items": {"type": "string"}},
                "query_tag": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}


def test_minimax_m2_invokes_read_as_their_parameters_types():
    auto = ToolChoice.of({"tools": [MM_WEATHER, MM_SEARCH]}, "minimax_m2")
    text = (
        'Let me help you query the weather.\n<minimax:tool_call>\n<invoke name="get_weather">'
        '\n<parameter name="location">San Francisco</parameter>\n<parameter name="unit">celsius'
        "</parameter>\n</invoke>\n</minimax:tool_call>"
    )
    fields, called = auto.message(text, text)
    assert called and fields["content"] == "Let me help you query the weather.\n"
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in fields["tool_calls"]]
    assert calls == [("get_weather", '{"location": "San Francisco", "unit": "celsius"}')]
    # Two invokes in one block, arrays as JSON (the guide's search_web example).
    search = (
        '<minimax:tool_call>\n<invoke name="search_web">\n<parameter name="query_tag">'
        '["technology", "events"]</parameter>\n<parameter name="query_list">'
        '["\\"OpenAI\\" \\"latest\\" \\"release\\""]</parameter>\n</invoke>\n'
        '<invoke name="search_web">\n<parameter name="query_tag">["technology", "events"]'
        '</parameter>\n<parameter name="query_list">["\\"Gemini\\" \\"latest\\" '
        '\\"release\\""]</parameter>\n</invoke>\n</minimax:tool_call>'
    )
    got = [(n, json.loads(a)) for n, a in auto.calls(search, search)]
    assert got == [
        ("search_web", {"query_tag": ["technology", "events"], "query_list": [q]})
        for q in ('"OpenAI" "latest" "release"', '"Gemini" "latest" "release"')
    ]
    # Each type as its schema says; no type (or an unknown parameter) stays text.
    typed = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "type": "object",
                "properties": {
                    "n": {"type": "integer"},
                    "x": {"type": "number"},
                    "whole": {"type": "number"},
                    "ok": {"type": "boolean"},
                    "opt": {"type": ["integer", "null"]},
                    "bad": {"type": "integer"},
                    "gone": {"type": "string"},
                    "any": {},
                },
            },
        },
    }
    values = {
        "n": "42", "x": "2.5", "whole": "3.0", "ok": "True", "opt": "7", "bad": "seven",
        "gone": "null", "any": "123", "extra": "[1]",
    }  # fmt: skip
    params = "".join(f"<parameter name='{k}'>\n{v}\n</parameter>" for k, v in values.items())
    one = f"<minimax:tool_call><invoke name='f'>{params}</invoke></minimax:tool_call>"
    ((name, args),) = ToolChoice.of({"tools": [typed]}, "minimax_m2").calls(one, one)
    assert name == "f" and json.loads(args) == {
        "n": 42, "x": 2.5, "whole": 3, "ok": True, "opt": 7, "bad": "seven", "gone": None,
        "any": "123", "extra": "[1]",
    }  # fmt: skip
    assert '"whole": 3,' in args  # a whole number as an integer (3 == 3.0 above)
    # Streamed: each call once its invoke closes; content held back while a marker may begin.
    first = text.index("</invoke>") + len("</invoke>")
    assert auto.closed_calls(text[: first - 1]) == []
    assert auto.closed_calls(text[:first]) == calls
    assert auto.content("Sure <minimax:to", "Sure <minimax:to", final=False) == "Sure "
    nameless = '<minimax:tool_call><invoke name="">x</invoke></minimax:tool_call>'
    assert auto.message(nameless, nameless) == ({"content": nameless}, False)


# Qwen3-Coder's (and Qwen3.5's) format: what its chat template renders an assistant's call
# as (a value: a string as it is, else JSON), and what its parser reads back.
QC_EDIT = {
    "type": "function",
    "function": {
        "name": "write_file",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "lines": {"type": "array"},
                "mode": {"type": "integer"},
                "force": {"type": "boolean"},
            },
        },
    },
}


def test_qwen3_coder_functions_keep_their_values_text_and_types():
    auto = ToolChoice.of({"tools": [QC_EDIT, WEATHER]}, "qwen3_coder")
    code = "def f():\n    return 1\n"
    text = (
        "Writing it.\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a.py\n"
        f"</parameter>\n<parameter=content>\n{code}\n</parameter>\n<parameter=lines>\n[1, 2]\n"
        "</parameter>\n<parameter=mode>\n644\n</parameter>\n<parameter=force>\nTrue\n"
        "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>"
    )
    fields, called = auto.message(text, text)
    assert called and fields["content"] == "Writing it.\n"
    got = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in fields["tool_calls"]
    ]
    written = {"path": "src/a.py", "content": code, "lines": [1, 2], "mode": 644, "force": True}
    assert got == [("write_file", written), ("get_weather", {"city": "Rome"})]
    # Indentation kept (one newline off each end, not all whitespace); a call cut short
    # (max_tokens) keeps the parameters that closed.
    indented = "<tool_call>\n<function=write_file>\n<parameter=content>\n    x = 1\n</parameter>\n"
    assert json.loads(auto.calls(indented, indented)[0][1]) == {"content": "    x = 1"}
    # Streamed: each function once it closes; a hermes JSON block is not this format.
    first = text.index("</function>") + len("</function>")
    assert [n for n, _ in auto.closed_calls(text[:first])] == ["write_file"]
    assert auto.closed_calls(text[: first - 1]) == []
    assert auto.message(CALL, CALL) == ({"content": CALL}, False)


def test_kimi_k2_calls_keep_their_own_ids():
    """Kimi-K2's special-token format (its calls' `functions.NAME:I` become the ids its chat
    template names tool results by)."""
    auto = ToolChoice.of({"tools": [WEATHER, TIME]}, "kimi_k2")
    raw = (
        "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>\n<|tool_call_begin|>'
        "functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|>"
    )
    text = 'Checking.functions.get_weather:0{"city": "Paris"}\nfunctions.get_time:1{}'
    fields, called = auto.message(text, raw)
    assert called and fields["content"] == "Checking."
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in
            fields["tool_calls"]] == [
        ("functions.get_weather:0", "get_weather", '{"city": "Paris"}'),
        ("functions.get_time:1", "get_time", "{}"),
    ]  # fmt: skip
    first = raw.index("<|tool_call_end|>") + len("<|tool_call_end|>")
    assert auto.closed_calls(raw[:first]) == [
        ("get_weather", '{"city": "Paris"}', "functions.get_weather:0")
    ]
    broken = raw.replace('{"city": "Paris"}', "{city")
    assert auto.message(text, broken) == ({"content": text}, False)


def test_streamed_content_stops_where_a_call_may_begin():
    auto = ToolChoice("auto", parser="hermes")
    assert auto.content("Hi <tool", "Hi <tool", final=False) == "Hi "
    assert auto.content("Hi <tab", "Hi <tab", final=False) == "Hi <tab"
    assert auto.content("Hi <tool", "Hi <tool", final=True) == "Hi <tool"
    assert auto.content("Hi <tool_call>{", "Hi <tool_call>{", final=False) == "Hi "
    assert ToolChoice("named", name="f").content("{", "{", final=False) == ""


def test_requests_are_checked():
    assert ToolChoice.of({}, None) is None
    assert ToolChoice.of({"tools": [WEATHER], "tool_choice": "none"}, None) is None
    assert ToolChoice.of({"tools": [WEATHER]}, "hermes") == ToolChoice("auto", parser="hermes")
    named = {"type": "function", "function": {"name": "get_time"}}
    assert ToolChoice.of({"tools": [WEATHER, TIME], "tool_choice": named}, None).name == "get_time"
    cases = [
        ({"tools": [WEATHER]}, 'tool_choice="auto": needs the server started with'),
        ({"tool_choice": "required"}, "tool_choice='required': needs tools"),
        ({"tools": [WEATHER], "tool_choice": "any"}, "tool_choice='any': expected one of"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            re.escape("expected {'type': 'function', 'function': {'name': one of ['get_"),
        ),
        ({"tools": {"a": 1}}, "tools: must be a list"),
        ({"tools": [{"type": "function"}]}, r"tools\[0\]: expected"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]},
            r"tools\[0\].function.parameters: must be a JSON schema object",
        ),
    ]
    for body, match in cases:
        with pytest.raises(ValueError, match=match):
            ToolChoice.of(body, None)
    required = json.loads(ToolChoice("required").structured([WEATHER, TIME]).json)
    assert required["type"] == "array" and required["minItems"] == 1
    names = [one["properties"]["name"]["enum"] for one in required["items"]["anyOf"]]
    assert names == [["get_weather"], ["get_time"]]
    named = ToolChoice("named", name="get_weather").structured([WEATHER]).json
    assert json.loads(named) == WEATHER["function"]["parameters"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """The llama fixture's weights with the byte-level BPE tokenizer of test_structured
    (structured outputs need one), served with the hermes parser."""
    from engine import LLM

    model = tmp_path_factory.mktemp("tools_llama")
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (model / name).symlink_to(FIXTURES / "llama" / name)
    (model / "tokenizer.json").symlink_to(FIXTURES / "structured" / "tokenizer.json")
    llm = LLM(model=str(model), max_num_seqs=8, max_num_batched_tokens=64, **POOL)
    hermes = Server(
        ("127.0.0.1", 0), llm, "llama", tool_call_parser="hermes", reasoning_parser="qwen3"
    )
    thread = threading.Thread(target=hermes.serve_forever, daemon=True)
    thread.start()
    yield hermes
    hermes.shutdown()
    hermes.close()


# A short prompt: its answers get most of the fixture pool's 128-token sequences.
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def _chat(**kw) -> dict:
    messages = [{"role": "user", "content": "Weather?"}]
    return {"messages": messages, "chat_template": TEMPLATE, "temperature": 0, **kw}


def test_a_named_function_holds_the_answer_to_its_arguments(servers):
    named = {"type": "function", "function": {"name": "get_weather"}}
    status, out = post(
        servers, "/v1/chat/completions", _chat(tools=[WEATHER], tool_choice=named, max_tokens=60)
    )
    assert status == 200, out
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "stop"  # OpenAI's, for a named function
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"])["city"] in ("Paris", "Rome")
    assert choice["message"]["content"] is None


def test_required_holds_the_answer_to_calls_of_the_tools(servers):
    # Random weights would go on adding calls: "]" (63) and EOS (2) favoured end the array
    # where the grammar allows it.
    body = _chat(
        tools=[WEATHER, TIME], tool_choice="required", max_tokens=110, logit_bias={63: 30, 2: 30}
    )
    status, out = post(servers, "/v1/chat/completions", body)
    assert status == 200, out
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "tool_calls", choice
    calls = choice["message"]["tool_calls"]
    assert calls and all(c["function"]["name"] in ("get_weather", "get_time") for c in calls)
    for c in calls:
        args = json.loads(c["function"]["arguments"])
        if c["function"]["name"] == "get_weather":
            assert args["city"] in ("Paris", "Rome")
    status, out = post(
        servers, "/v1/chat/completions", {**body, "response_format": {"type": "json_object"}}
    )
    assert status == 400 and "takes no structured outputs too" in out["error"]["message"]


@pytest.mark.parametrize("streamed", [False, True])
def test_auto_reads_a_hermes_block_out_of_the_answer(servers, streamed):
    # The random model's answer held to a fixed text (structured outputs): a call, or not.
    for text, called in ((f"Sure. {CALL}", True), ("No call here.", False)):
        body = _chat(tools=[WEATHER], max_tokens=80, structured_outputs={"choice": [text]})
        if not streamed:
            status, out = post(servers, "/v1/chat/completions", body)
            assert status == 200, out
            (choice,) = out["choices"]
            message, finish = choice["message"], choice["finish_reason"]
        else:
            events = stream(servers, "/v1/chat/completions", body)
            deltas = [e["choices"][0] for e in events[:-1] if e["choices"]]
            content = "".join(d["delta"].get("content", "") for d in deltas)
            calls = [c for d in deltas for c in d["delta"].get("tool_calls", [])]
            message = {"content": content or None, "tool_calls": calls or None}
            finish = deltas[-1]["finish_reason"]
        if called:
            assert finish == "tool_calls"
            assert message["content"] == "Sure. "
            (call,) = message["tool_calls"]
            assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
        else:
            assert finish == "stop" and message["content"] == text
            assert not message.get("tool_calls")


def test_auto_streams_each_call_once_its_block_closes(servers):
    """Two calls and text after them: streamed, the first call goes out before the answer
    ends, each once, indexed in order; the same calls and content as the whole answer."""
    short = {"type": "function", "function": {"name": "f"}}  # (the answer fits max_tokens)
    block = '<tool_call>\n{"name": "f", "arguments": {"n": %d}}\n</tool_call>'
    text = f"Ok. {block % 1}{block % 2} Done."
    body = _chat(tools=[short], max_tokens=120, structured_outputs={"choice": [text]})
    events = stream(servers, "/v1/chat/completions", body)
    deltas = [e["choices"][0] for e in events[:-1] if e["choices"]]
    sent = [(i, c) for i, d in enumerate(deltas) for c in d["delta"].get("tool_calls", [])]
    assert [c["index"] for _, c in sent] == [0, 1]
    assert sent[0][0] < sent[1][0] < len(deltas) - 1  # each as its block closed
    assert deltas[-1]["finish_reason"] == "tool_calls"
    status, out = post(servers, "/v1/chat/completions", body)
    assert status == 200, out
    whole = out["choices"][0]["message"]
    assert [c["function"] for _, c in sent] == [c["function"] for c in whole["tool_calls"]]
    assert whole["tool_calls"][1]["function"] == {"name": "f", "arguments": '{"n": 2}'}
    content = "".join(d["delta"].get("content", "") for d in deltas)
    assert content == whole["content"] == "Ok. "
    # Cut by max_tokens inside the second block: the first call stands, no markup as content.
    events = stream(servers, "/v1/chat/completions", {**body, "max_tokens": 75})
    deltas = [e["choices"][0] for e in events[:-1] if e["choices"]]
    sent = [c for d in deltas for c in d["delta"].get("tool_calls", [])]
    assert [c["function"]["arguments"] for c in sent] == ['{"n": 1}']
    assert "".join(d["delta"].get("content", "") for d in deltas) == "Ok. "
    assert deltas[-1]["finish_reason"] == "length"


def test_auto_needs_a_parser_and_none_is_text(servers):
    no_parser = Server(("127.0.0.1", 0), servers.llm, "llama")
    try:
        handler_body = _chat(tools=[WEATHER], max_tokens=2)
        with pytest.raises(ValueError, match='tool_choice="auto": needs the server'):
            ToolChoice.of(handler_body, no_parser.tool_call_parser)
    finally:
        no_parser.server_close()
        no_parser.loop.close()
    status, out = post(
        servers, "/v1/chat/completions", _chat(tools=[WEATHER], tool_choice="none", max_tokens=3)
    )
    assert status == 200 and "tool_calls" not in out["choices"][0]["message"]
    with pytest.raises(ValueError, match="tool_call_parser='x': expected one of"):
        Server(("127.0.0.1", 0), servers.llm, "llama", tool_call_parser="x")


def test_thinking_is_split_from_the_answer():
    assert split("qwen3", "<think>a b</think>\n\nThe answer.", True) == ("a b", "\n\nThe answer.")
    assert split("qwen3", "The answer.", True) == (None, "The answer.")  # thinking off
    assert split("qwen3", "<thi", False) == (None, "")  # may still open
    assert split("qwen3", "<think>a b</thi", False) == ("a b", "")  # may be closing
    assert split("qwen3", "<think>a b</thi", True) == ("a b</thi", "")
    # DeepSeek-R1's template opens the thinking in the prompt.
    assert split("deepseek_r1", "a b</think>Answer", True) == ("a b", "Answer")
    assert split("deepseek_r1", "still thinking", True) == ("still thinking", "")
    assert split("deepseek_r1", "<think>x</think>y", True) == ("x", "y")
    # MiniMax-M2's template too (its generation prompt ends with "<think>\n").
    assert split("minimax_m2", "\nplan</think>\n\nAnswer", True) == ("\nplan", "\n\nAnswer")


@pytest.mark.parametrize("streamed", [False, True])
def test_reasoning_content_comes_apart_from_content_and_calls(servers, streamed):
    for text, reasoning, content, called in (
        ("<think>Let me see.</think>It is sunny.", "Let me see.", "It is sunny.", False),
        (f"<think>A tool.</think>{CALL}", "A tool.", None, True),
        ("No thinking.", None, "No thinking.", False),
    ):
        body = _chat(tools=[WEATHER], max_tokens=100, structured_outputs={"choice": [text]})
        if not streamed:
            status, out = post(servers, "/v1/chat/completions", body)
            assert status == 200, out
            message = out["choices"][0]["message"]
        else:
            events = stream(servers, "/v1/chat/completions", body)
            deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
            message = {
                key: "".join(d.get(key, "") for d in deltas) or None
                for key in ("reasoning_content", "content")
            }
            message["tool_calls"] = [c for d in deltas for c in d.get("tool_calls", [])]
        assert (message["reasoning_content"], message["content"]) == (reasoning, content)
        assert bool(message.get("tool_calls")) == called
