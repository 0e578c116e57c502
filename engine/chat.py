"""Chat templates: conversations rendered to prompt token ids as transformers renders them.

A model directory's template is a chat_template.jinja file beside its tokenizer.json, else
its tokenizer_config.json "chat_template" (a string, or a list of named templates: the one
named "default"), as transformers reads them. It is rendered by jinja2 in a sandbox set up
as transformers' apply_chat_template sets up its own: trim_blocks and lstrip_blocks, the
loop-controls extension, a `tojson` filter that keeps non-ASCII characters, the globals
raise_exception (a ValueError here) and strftime_now, and the tokenizer config's special
tokens (bos_token, eos_token, ...) as variables. The text is then tokenized without the
tokenizer's own special tokens: the template writes them (transformers does the same).
Checked against transformers' renderings (tests/fixtures/make_chat_fixture.py).
"""

from __future__ import annotations

import datetime
import functools
import json
import os
from collections.abc import Mapping, Sequence

from models.load import CHAT_TEMPLATE_FILE

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token")


def read_template(tokenizer_config: dict, model_dir: str) -> tuple[str | None, dict[str, str]]:
    """(The model's chat template or None, its special tokens as strings by name)."""
    special = {}
    for name in SPECIAL_TOKENS:
        token = tokenizer_config.get(name)
        if isinstance(token, dict):  # an AddedToken
            token = token.get("content")
        if isinstance(token, str):
            special[name] = token
    path = os.path.join(model_dir, CHAT_TEMPLATE_FILE)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return f.read(), special
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return (template if isinstance(template, str) else None), special


def conversations(messages) -> list[list[dict]]:
    """One conversation (a list of messages) or a list of them, each message checked: a
    dict with a string "role" and a "content" that is a string, a list of parts or None."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages: must be a non-empty list of {'role', 'content'} dicts")
    single = isinstance(messages[0], Mapping)
    convs = [messages] if single else list(messages)
    for c, conv in enumerate(convs):
        where = "messages" if single else f"messages[{c}]"
        if isinstance(conv, str | bytes) or not isinstance(conv, Sequence) or not conv:
            raise ValueError(f"{where}: must be a non-empty list of {{'role', 'content'}} dicts")
        for i, m in enumerate(conv):
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
                raise ValueError(f"{where}[{i}]: must be a dict with a string 'role'")
            content = m.get("content")
            if content is not None and not isinstance(content, str | list | tuple):
                raise ValueError(
                    f"{where}[{i}]['content']: must be a string, a list of parts or None, "
                    f"not {type(content).__name__}"
                )
    return [[dict(m) for m in conv] for conv in convs]


def prompt_ids(
    tokenizer,
    template: str | None,
    messages,
    special_tokens: Mapping[str, str] | None = None,
    **render_kw,
) -> list[list[int]]:
    """Each conversation in `messages` (one or a list) as prompt token ids."""
    convs = conversations(messages)
    if tokenizer is None:
        raise ValueError("messages: chat needs the model's tokenizer (a tokenizer.json)")
    if template is None:
        raise ValueError(
            f"chat_template: the model has none (no {CHAT_TEMPLATE_FILE} and no "
            "tokenizer_config.json chat_template); pass one"
        )
    texts = [render(template, conv, special_tokens=special_tokens, **render_kw) for conv in convs]
    return [tokenizer.encode(text, add_special_tokens=False).ids for text in texts]


def render(
    template: str,
    messages: list[dict],
    add_generation_prompt: bool = True,
    tools: list[dict] | None = None,
    special_tokens: Mapping[str, str] | None = None,
    continue_final_message: bool = False,
    **kwargs,
) -> str:
    """The text `template` makes of one conversation (ValueError if the template fails).
    `continue_final_message`: the text ends with the last message's content (whatever the
    template writes after it is cut), for the model to go on with it."""
    import jinja2  # only chat needs it

    if continue_final_message and add_generation_prompt:
        raise ValueError(
            "continue_final_message=True: the last message goes on, so add_generation_prompt "
            "must be False"
        )
    try:
        text = _compiled(template).render(
            messages=messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            **{**(special_tokens or {}), **kwargs},
        )
    except jinja2.TemplateError as e:
        raise ValueError(f"chat_template: {e}") from None
    return _cut_after(text, messages[-1]) if continue_final_message else text


def _cut_after(text: str, message: dict) -> str:
    """`text` up to the last place the message's content (its last text part; else with
    its spaces stripped, as a template that trims writes it) ends."""
    content = message.get("content")
    if isinstance(content, list | tuple):
        texts = [p.get("text") for p in content if isinstance(p, Mapping)]
        content = next((t for t in reversed(texts) if isinstance(t, str)), None)
    for piece in (content, content.strip()) if isinstance(content, str) else ():
        if piece and piece in text:
            return text[: text.rindex(piece) + len(piece)]
    raise ValueError(
        "continue_final_message=True: the last message's text is not in the rendered chat"
    )


def _raise_exception(message: str):
    raise ValueError(f"chat_template: {message}")


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@functools.lru_cache(maxsize=16)
def _compiled(template: str):
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.TemplateError as e:
        raise ValueError(f"chat_template: does not compile ({e})") from None
