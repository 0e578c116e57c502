"""Reasoning models' thinking apart from their answer (vLLM's --reasoning-parser).

Chat answers of reasoning models (DeepSeek-R1 and V3.1+, Qwen3, GLM-4.5, ...) begin with
their thinking between `<think>` and `</think>`. With a parser the server returns it as
`message.reasoning_content` and the rest as `content` (streamed: `delta.reasoning_content`,
then `delta.content`):
- "deepseek_r1": the chat template opens the thinking in the prompt, so the answer is
  thinking until `</think>` (a leading `<think>` is dropped); without `</think>` all of it.
- "qwen3": thinking only when the answer starts with `<think>` (Qwen3's thinking can be
  switched off: then the answer is all content).
- "minimax_m2": as "deepseek_r1" (MiniMax-M2's template ends the prompt with `<think>`).
While streaming, the characters that may be the start of `</think>` are held back. Tool
calls (engine/tool_calls.py) are read from the content only.
"""

from __future__ import annotations

PARSERS = ("deepseek_r1", "qwen3", "minimax_m2")
START, END = "<think>", "</think>"


def check(parser: str | None) -> None:
    if parser is not None and parser not in PARSERS:
        raise ValueError(f"reasoning_parser={parser!r}: expected one of {list(PARSERS)}")


def split(parser: str, text: str, final: bool) -> tuple[str | None, str]:
    """(reasoning or None, content) of an answer so far; `final`: it is finished."""
    if text.startswith(START):
        body = text[len(START) :]
    elif not final and START.startswith(text):
        return None, ""  # (it may still open with <think>)
    elif parser == "qwen3":
        return None, text  # thinking off
    else:
        body = text
    end = body.find(END)
    if end >= 0:
        return body[:end], body[end + len(END) :]
    if not final:  # hold back what may be the start of END
        for n in range(min(len(END) - 1, len(body)), 0, -1):
            if END.startswith(body[-n:]):
                return body[:-n], ""
    return body, ""
