"""Chat templates (engine/chat.py) against transformers' apply_chat_template, and LLM.chat.

tests/fixtures/chat/reference.json holds transformers' text and token ids for three
templates x four conversations x add_generation_prompt (make_chat_fixture.py), with the
llama fixture's tokenizer; the templates lean on what transformers sets up (trim_blocks,
lstrip_blocks, loop controls, tojson, raise_exception, the special tokens).
"""

import json
import pathlib
import shutil

import pytest
from tokenizers import Tokenizer

from engine import LLM, SamplingParams, chat
from models.load import convert_hf_to_orbax
from tests.sampler_cases import POOL

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
REF = json.loads((FIXTURES / "chat" / "reference.json").read_text())
TOKENIZER = Tokenizer.from_file(str(FIXTURES / "llama" / "tokenizer.json"))


def _args(case) -> tuple[str, list[dict], dict]:
    kw = dict(add_generation_prompt=case["add_generation_prompt"], tools=case["tools"])
    kw["continue_final_message"] = case["continue_final_message"]
    return REF["templates"][case["template"]], REF["conversations"][case["conversation"]], kw


@pytest.mark.parametrize(
    "case",
    REF["cases"],
    ids=lambda c: (
        f"{c['template']}-{c['conversation']}-"
        f"{int(c['add_generation_prompt'])}{int(c['continue_final_message'])}"
    ),
)
def test_text_and_ids_equal_transformers(case):
    template, conv, kw = _args(case)
    if "error" in case:  # the template's raise_exception
        with pytest.raises(ValueError, match=f"chat_template: {case['error']}"):
            chat.render(template, conv, special_tokens=REF["special_tokens"], **kw)
        return
    assert chat.render(template, conv, special_tokens=REF["special_tokens"], **kw) == case["text"]
    ids = chat.prompt_ids(TOKENIZER, template, conv, REF["special_tokens"], **kw)
    assert ids == [case["ids"]]


def test_the_fixture_covers_what_the_templates_lean_on():
    texts = [c.get("text", "") for c in REF["cases"]]
    assert any("[SYS]   answer in one word" in t and '"description": "Weather' in t for t in texts)
    assert any(t.startswith("<s><user>") for t in texts)  # bos_token from the special tokens
    assert any("°C" in t for t in texts)  # tojson keeps non-ASCII characters
    assert any(t == "user: look at the cat\n" for t in texts)  # continue and break
    assert sum("error" in c for c in REF["cases"]) == 2
    # continue_final_message: cut after the content as written, or as the template trims it.
    continued = {
        (c["template"], c["conversation"]): c["text"]
        for c in REF["cases"]
        if c["continue_final_message"]
    }
    assert continued["blocks", 4].endswith("<assistant>  the mat and ")
    assert continued["chatml", 4].endswith("<|im_start|>assistant\nthe mat and")


def test_continue_final_message_needs_its_text_and_no_generation_prompt():
    conv = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b c"}]
    with pytest.raises(ValueError, match="add_generation_prompt must be False"):
        chat.render("{{ messages[-1].content }}", conv, continue_final_message=True)
    with pytest.raises(ValueError, match="the last message's text is not in the rendered chat"):
        chat.render("x", conv, add_generation_prompt=False, continue_final_message=True)


def test_the_template_is_read_as_transformers_reads_it(tmp_path):
    cfg = {"chat_template": "A{{ bos_token }}", "bos_token": {"content": "<s>"}, "eos_token": 7}
    assert chat.read_template(cfg, str(tmp_path)) == ("A{{ bos_token }}", {"bos_token": "<s>"})
    named = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    assert chat.read_template({"chat_template": named}, str(tmp_path))[0] == "D"
    assert chat.read_template({}, str(tmp_path)) == (None, {})
    (tmp_path / "chat_template.jinja").write_text("J")  # the file wins over the config
    assert chat.read_template(cfg, str(tmp_path))[0] == "J"


@pytest.mark.parametrize(
    "messages, error",
    [
        ("hi", "messages: must be a non-empty list"),
        ([], "messages: must be a non-empty list"),
        ([{"content": "x"}], r"messages\[0\]: must be a dict with a string 'role'"),
        ([{"role": "user", "content": 5}], r"messages\[0\]\['content'\]: must be a string"),
        ([[{"role": "user", "content": "a"}], "b"], r"messages\[1\]: must be a non-empty list"),
        ([[{"role": "user", "content": "a"}], [{"role": 1}]], r"messages\[1\]\[0\]: must be"),
    ],
)
def test_bad_conversations_are_refused_by_field(messages, error):
    with pytest.raises(ValueError, match=error):
        chat.prompt_ids(TOKENIZER, "x", messages)


def test_a_template_that_does_not_compile_is_refused():
    with pytest.raises(ValueError, match="chat_template: does not compile"):
        chat.render("{% for %}", [{"role": "user", "content": "a"}])


def _llama(path=FIXTURES / "llama") -> LLM:
    # test_sampling_options' engine settings: the same step programs in a `make test` run.
    return LLM(model=str(path), max_num_seqs=8, max_num_batched_tokens=64, **POOL)


@pytest.fixture(scope="module")
def llm():
    return _llama()


def test_llm_chat_generates_from_transformers_prompt_ids(llm):
    cases = [c for c in REF["cases"] if c["template"] == "chatml" and "ids" in c]
    case = next(c for c in cases if c["conversation"] == 1 and c["add_generation_prompt"])
    template, conv, _ = _args(case)
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    # Two conversations at once; the first alone must be the generate() of its ids.
    outs = llm.chat([conv, REF["conversations"][0]], params, chat_template=template)
    assert [o.prompt_token_ids for o in outs][0] == case["ids"]
    (want,) = llm.generate([case["ids"]], params)
    assert outs[0].token_ids == want.token_ids and len(outs) == 2


def test_llm_chat_reads_the_models_template_and_refuses_without_one(llm, tmp_path):
    with pytest.raises(ValueError, match="chat_template: the model has none"):
        llm.chat([{"role": "user", "content": "the cat"}])
    with pytest.raises(ValueError, match="chat needs the model's tokenizer"):
        LLM(model="tiny-llama").chat([{"role": "user", "content": "the cat"}], chat_template="x")
    model = tmp_path / "llama"
    shutil.copytree(FIXTURES / "llama", model)
    config = {"chat_template": REF["templates"]["blocks"], "bos_token": "<s>", "eos_token": "</s>"}
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    with_template = _llama(model)
    assert with_template.chat_template == REF["templates"]["blocks"]
    case = next(c for c in REF["cases"] if c["template"] == "blocks" and c["conversation"] == 0)
    conv = REF["conversations"][0]
    (out,) = with_template.chat(conv, SamplingParams(max_tokens=1), add_generation_prompt=False)
    assert out.prompt_token_ids == case["ids"]
    # A chat_template.jinja wins over the config's, and goes along into an orbax checkpoint.
    (model / "chat_template.jinja").write_text(REF["templates"]["chatml"])
    convert_hf_to_orbax(str(model), str(tmp_path / "orbax"))
    assert LLM(model=str(tmp_path / "orbax")).chat_template == REF["templates"]["chatml"]
