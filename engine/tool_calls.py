"""Tool calls in the chat API: vLLM's `tool_choice` with `--enable_auto_tool_choice
--tool_call_parser`, and forced calls.

A chat request's `tools` (OpenAI's [{"type": "function", "function": {"name", "description",
"parameters"}}]) go to the chat template; `tool_choice` says what the answer may be:
- "none": text only.
- "auto" (the default with tools): the model decides. Needs the server's parser, which reads
  the calls out of the finished text: "hermes" (Qwen2.5 / Qwen3 / Hermes: `<tool_call>{"name":
  ..., "arguments": {...}}</tool_call>` blocks) or "deepseek_v3" (DeepSeek-V3's
  `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` + a ```json block +
  `<｜tool▁call▁end｜>` ... `<｜tool▁calls▁end｜>`) or "glm45" (GLM-4.5 / 4.6 / 4.7:
  `<tool_call>NAME` then `<arg_key>K</arg_key><arg_value>V</arg_value>` pairs) or
  "minimax_m2" (MiniMax-M2 / M2.1 / M2.5: `<minimax:tool_call>` holding `<invoke name="F">`
  blocks of `<parameter name="K">V</parameter>`, each value read as its parameter's JSON
  schema type says: string (or no type) as it is, integer, number, boolean, object / array
  as JSON, "null" as null) or "qwen3_coder" (Qwen3-Coder, Qwen3.5: `<tool_call>` holding
  `<function=F>` with `<parameter=K>` blocks, values read by type the same way, only the
  newline after the tag and before its end dropped, so code keeps its indentation) or
  "kimi_k2" (Kimi-K2 / K2-Thinking: `<|tool_calls_section_begin|>` holding
  `<|tool_call_begin|>functions.NAME:I<|tool_call_argument_begin|>{JSON}<|tool_call_end|>`
  calls, whose `functions.NAME:I` becomes the call's id, as Kimi's template names the
  tool results after it). Found calls
  become message.tool_calls and the finish reason "tool_calls"; the text before them is the
  content. Text that does not parse whole stays content, as vLLM's parsers leave it.
- "required", or {"type": "function", "function": {"name": NAME}}: the output is held to JSON
  by structured outputs (engine/structured.py), whatever the model: a non-empty array of
  {"name", "parameters"} objects over the tools, or the named function's parameters; the
  calls are read from that JSON (vLLM's way).
The parsers read the text decoded with special tokens kept (DeepSeek's markers are special
tokens), and the content stays the plain text before the first marker. Streamed, the content
goes out as it comes while no marker has begun (the last characters held back while they may
still start one); with "auto" each call goes out once its block has closed (the rest, and
forced calls, at the end).
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid

from engine.structured import StructuredOutputsParams

CHOICES = ("none", "auto", "required")
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)\Z", re.DOTALL)
_DS_CALLS = "<｜tool▁calls▁begin｜>"
_DS_CALL = re.compile(
    r"<｜tool▁call▁begin｜>(?P<kind>.*?)<｜tool▁sep｜>(?P<name>.*?)\n```json\n"
    r"(?P<args>.*?)\n```<｜tool▁call▁end｜>",
    re.DOTALL,
)
_GLM = re.compile(r"<tool_call>([^\n<]*)\n?(.*?)</tool_call>", re.DOTALL)
_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


_MINIMAX = "<minimax:tool_call>"
_MM_BLOCK = re.compile(r"<minimax:tool_call>(.*?)(?:</minimax:tool_call>|\Z)", re.DOTALL)
_MM_INVOKE = re.compile(r"<invoke name=([^>]*)>(.*?)</invoke>", re.DOTALL)
_MM_PARAM = re.compile(r"<parameter name=([^>]*)>(.*?)</parameter>", re.DOTALL)
_QC_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_QC_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)(?:</function>|\Z)", re.DOTALL)
_QC_PARAM = re.compile(r"<parameter=([^>\n]*)>(.*?)</parameter>", re.DOTALL)


def _hermes(raw: str, schemas: dict) -> list[tuple[str, str]] | None:
    """(name, arguments JSON) per <tool_call> block; None if a block is not such JSON."""
    calls = []
    for done, open_end in _HERMES.findall(raw):
        try:
            call = json.loads(done or open_end)
            name, args = call["name"], call.get("arguments", call.get("parameters", {}))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            return None
        if not isinstance(name, str):
            return None
        calls.append((name, json.dumps(args, ensure_ascii=False)))
    return calls


def _deepseek_v3(raw: str, schemas: dict) -> list[tuple[str, str]] | None:
    calls = []
    for m in _DS_CALL.finditer(raw):
        try:
            json.loads(m["args"])
        except json.JSONDecodeError:
            return None
        calls.append((m["name"], m["args"]))
    return calls


def _glm45(raw: str, schemas: dict) -> list[tuple[str, str]] | None:
    """GLM-4.5 / 4.6 / 4.7: the name, then key / value pairs (a value JSON if it parses,
    else the string)."""
    calls = []
    for name, body in _GLM.findall(raw):
        if not name.strip():
            return None
        args = {}
        for key, value in _GLM_ARG.findall(body):
            try:
                args[key.strip()] = json.loads(value)
            except json.JSONDecodeError:
                args[key.strip()] = value
        calls.append((name.strip(), json.dumps(args, ensure_ascii=False)))
    return calls


def _unquoted(name: str) -> str:
    name = name.strip()
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "\"'":
        return name[1:-1]
    return name


def _typed(value: str, schema) -> object:
    """A MiniMax-M2 / Qwen3-Coder parameter's text as its JSON schema's type reads it, as
    MiniMax's tool calling guide converts it: "null" is null; no schema or no type: text; a
    value that does not read as its type stays text."""
    kind = schema.get("type", "string") if isinstance(schema, dict) else "string"
    if isinstance(kind, list):  # ["integer", "null"]: the first that is not null
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind).lower()
    if value.lower() == "null":
        return None
    if kind in ("string", "str", "text"):
        return value
    if kind in ("boolean", "bool"):
        return value.lower() in ("true", "1")
    try:
        if kind in ("integer", "int"):
            return int(value)
        if kind in ("number", "float"):
            number = float(value)
            return int(number) if number.is_integer() else number
        return json.loads(value)  # object, array, or a type not named here
    except (ValueError, OverflowError):  # (json.JSONDecodeError is a ValueError)
        return value


def _minimax_m2(raw: str, schemas: dict) -> list[tuple[str, str]] | None:
    calls = []
    for block in _MM_BLOCK.findall(raw):
        for name, body in _MM_INVOKE.findall(block):
            name = _unquoted(name)
            if not name:
                return None
            params = [(_unquoted(k), v.strip()) for k, v in _MM_PARAM.findall(body)]
            calls.append(_typed_call(name, params, schemas))
    return calls


def _typed_call(name: str, params: list[tuple[str, str]], schemas: dict) -> tuple[str, str]:
    """(name, arguments JSON) of an XML-format call: each parameter's text typed by its
    tool's schema (`_typed`)."""
    properties = schemas.get(name, {})
    args = {key: _typed(value, properties.get(key)) for key, value in params}
    return name, json.dumps(args, ensure_ascii=False)


_KIMI = "<|tool_calls_section_begin|>"
_KIMI_CALL = re.compile(
    r"<\|tool_call_begin\|>\s*(?P<id>[^<\s]+?)\s*<\|tool_call_argument_begin\|>"
    r"\s*(?P<args>.*?)\s*<\|tool_call_end\|>",
    re.DOTALL,
)


def _kimi_k2(raw: str, schemas: dict) -> list[tuple[str, ...]] | None:
    """(name, arguments JSON, the call's own id) per call."""
    calls = []
    for m in _KIMI_CALL.finditer(raw):
        name = m["id"].rsplit(":", 1)[0].removeprefix("functions.")
        try:
            json.loads(m["args"])
        except json.JSONDecodeError:
            return None
        if not name:
            return None
        calls.append((name, m["args"], m["id"]))
    return calls


def _one_newline_off(value: str) -> str:
    """A Qwen3-Coder value without the newline after its tag and the one before its end."""
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def _qwen3_coder(raw: str, schemas: dict) -> list[tuple[str, str]] | None:
    calls = []
    for block in _QC_BLOCK.findall(raw):
        found = _QC_FUNCTION.findall(block)
        if not found:
            return None  # (a hermes JSON block, say: not this format)
        for name, body in found:
            name = name.strip()
            if not name:
                return None
            params = [(k.strip(), _one_newline_off(v)) for k, v in _QC_PARAM.findall(body)]
            calls.append(_typed_call(name, params, schemas))
    return calls


# parser name -> (the marker its calls start with, the parser, the marker a call ends with);
# a parser takes the raw text and each tool's parameter schemas by name.
PARSERS = {
    "hermes": ("<tool_call>", _hermes, "</tool_call>"),
    "deepseek_v3": (_DS_CALLS, _deepseek_v3, "<｜tool▁call▁end｜>"),
    "glm45": ("<tool_call>", _glm45, "</tool_call>"),
    "minimax_m2": (_MINIMAX, _minimax_m2, "</invoke>"),
    "qwen3_coder": ("<tool_call>", _qwen3_coder, "</function>"),
    "kimi_k2": (_KIMI, _kimi_k2, "<|tool_call_end|>"),
}


@dataclasses.dataclass(frozen=True)
class ToolChoice:
    """What a chat request's `tools` and `tool_choice` ask for (`of`)."""

    mode: str  # "auto" | "required" | "named"
    parser: str | None = None  # "auto": the server's parser
    name: str | None = None  # "named": the function
    # "auto": each tool's parameter schemas by name (what minimax_m2 reads values as)
    schemas: dict = dataclasses.field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, body: dict, parser: str | None) -> ToolChoice | None:
        """None when the answer is text only; ValueError naming the field when the request
        cannot be served (bad tools, an unknown function, "auto" without a parser)."""
        tools, choice = body.get("tools"), body.get("tool_choice")
        names = _tool_names(tools)
        if choice is None:
            choice = "auto" if names else "none"
        if choice == "none":
            return None
        if not names:
            raise ValueError(f"tool_choice={choice!r}: needs tools")
        if isinstance(choice, dict):
            fn = choice.get("function") if choice.get("type") == "function" else None
            name = fn.get("name") if isinstance(fn, dict) else None
            if name not in names:
                raise ValueError(
                    f"tool_choice={choice!r}: expected {{'type': 'function', 'function': "
                    f"{{'name': one of {names}}}}}"
                )
            return cls("named", name=name)
        if choice not in CHOICES:
            raise ValueError(f"tool_choice={choice!r}: expected one of {CHOICES} or a function")
        if choice == "required":
            return cls("required")
        if parser is None:
            raise ValueError(
                'tool_choice="auto": needs the server started with --enable_auto_tool_choice '
                "and --tool_call_parser (or tool_choice 'none', 'required' or a function)"
            )
        return cls("auto", parser=parser, schemas=_schemas(tools))

    def structured(self, tools: list[dict]) -> StructuredOutputsParams | None:
        """The JSON a forced choice holds the output to (None for "auto")."""
        params = {t["function"]["name"]: _parameters(t["function"]) for t in tools}
        if self.mode == "named":
            return StructuredOutputsParams(json=params[self.name])
        if self.mode == "required":
            one = [
                {
                    "type": "object",
                    "properties": {"name": {"enum": [name]}, "parameters": schema},
                    "required": ["name", "parameters"],
                }
                for name, schema in params.items()
            ]
            return StructuredOutputsParams(
                json={"type": "array", "minItems": 1, "items": {"anyOf": one}}
            )
        return None

    def calls(self, text: str, raw: str) -> list[tuple[str, ...]] | None:
        """(name, arguments JSON[, the call's own id]) per call in a finished answer (`text`
        decoded plainly, `raw` with special tokens); None: no call (the text is the
        content)."""
        if self.mode == "named":
            return [(self.name, text)]
        if self.mode == "required":
            try:
                return [(c["name"], json.dumps(c["parameters"])) for c in json.loads(text)]
            except (json.JSONDecodeError, KeyError, TypeError):
                return None  # (cut by max_tokens)
        marker, parse, _ = PARSERS[self.parser]
        return (parse(raw, self.schemas) or None) if marker in raw else None

    def closed_calls(self, raw: str) -> list[tuple[str, ...]]:
        """Streaming, "auto": the calls whose blocks have closed so far (none while what
        has closed does not parse); the others come whole at the end (`calls`)."""
        if self.mode != "auto":
            return []
        marker, parse, close = PARSERS[self.parser]
        end = raw.rfind(close)
        if marker not in raw or end < 0:
            return []
        return parse(raw[: end + len(close)], self.schemas) or []

    def content(self, text: str, raw: str, final: bool) -> str:
        """The part of `text` to show as content: all of it with no call, else what comes
        before the first marker (before it ends: what cannot yet be one)."""
        if self.mode != "auto":
            return ""
        marker = PARSERS[self.parser][0]
        if marker in raw:  # (a special-token marker shows only in `raw`)
            cut = text.find(marker)
            return text[:cut] if cut >= 0 else raw[: raw.find(marker)]
        if final:
            return text
        return text[: len(text) - _partial_suffix(text, marker)]

    def message(self, text: str, raw: str) -> tuple[dict, bool]:
        """(the assistant message's fields, whether it calls tools)."""
        calls = self.calls(text, raw)
        if calls is None:
            return {"content": text}, False
        content = self.content(text, raw, final=True)
        return {"content": content or None, "tool_calls": tool_calls(calls)}, True


def tool_calls(calls: list[tuple[str, ...]]) -> list[dict]:
    """The OpenAI API's tool_calls entries: (name, arguments JSON[, the call's own id]) each,
    a new id where the format names none."""
    return [
        {
            "id": call[2] if len(call) > 2 else f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": call[0], "arguments": call[1]},
        }
        for call in calls
    ]


def _partial_suffix(text: str, marker: str) -> int:
    """Characters at the end of `text` that could be the start of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def _parameters(fn: dict) -> dict:
    schema = fn.get("parameters")
    return {"type": "object", "properties": {}} if schema is None else schema


def _schemas(tools: list[dict]) -> dict:
    """{function name: {parameter: its JSON schema}} of checked `tools`."""
    out = {}
    for t in tools:
        properties = _parameters(t["function"]).get("properties")
        out[t["function"]["name"]] = properties if isinstance(properties, dict) else {}
    return out


def _tool_names(tools) -> list[str]:
    """The functions' names; ValueError naming what is not a tool."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ValueError("tools: must be a list")
    names = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"tools[{i}]: expected {{'type': 'function', 'function': {{'name'...")
        if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
            raise ValueError(f"tools[{i}].function.parameters: must be a JSON schema object")
        names.append(fn["name"])
    return names
