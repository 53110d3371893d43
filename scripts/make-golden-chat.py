#!/usr/bin/env python3
"""Writes golden chat-template renderings made by transformers' own renderer
(jinja2 in a sandbox, as `apply_chat_template` sets it up), an implementation
independent of headroom's:

  tests/data/chat/golden/<name>.json   one file per template: the bos/eos
                                       texts used and, for every conversation
                                       in tests/data/chat/conversations.json
                                       and add_generation_prompt false/true,
                                       the rendering or the error raised; then
                                       two conversations with each extra
                                       context of tests/data/chat/contexts.json
                                       (tools, enable_thinking); then each
                                       conversation of tool-conversations.json
                                       (assistant tool_calls, tool results)
                                       with the tools context

Templates rendered:
  templates/<stem>.jinja   the chat templates of public models shipped with
                           llama.cpp (scripts/fetch-reference-data.sh)
  gguf-<file stem>         tokenizer.chat_template of a GGUF in the model cache
  builtin-<name>           the templates headroom falls back to when a GGUF has
                           none, transcribed here from the models' tokenizer
                           configs (Gemma 3, Meta-Llama-3-8B-Instruct, ChatML)

strftime_now() is pinned to FIXED_NOW so renderings that print today's date
are reproducible; the C++ test pins its clock to the same instant.

Run with a Python that has transformers and jinja2>=3.1.6 (the reference
environment), with HEADROOM_MODELS_DIR pointing at the model cache.
"""
import datetime as dt
import json
import os
import pathlib
import sys

import jinja2
from gguf import GGUFReader
from transformers.utils import chat_template_utils as ctu

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "chat"
MODELS = pathlib.Path(os.environ.get("HEADROOM_MODELS_DIR", ROOT / "models"))

# 2025-07-26 12:34:56 UTC; the C++ test uses the same Unix time (1753533296).
FIXED_NOW = dt.datetime(2025, 7, 26, 12, 34, 56)


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


ctu.datetime = FixedDatetime

# bos/eos texts per template family (substring of the file name, first match
# wins); the defaults for the rest are Llama 2's.
SPECIAL_TOKENS = [
    ("Llama-3", "<|begin_of_text|>", "<|eot_id|>"),
    ("Hermes", "<|begin_of_text|>", "<|im_end|>"),
    ("firefunction", "<|begin_of_text|>", "<|eot_id|>"),
    ("functionary", "<|begin_of_text|>", "<|eot_id|>"),
    ("DeepSeek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("gemma", "<bos>", "<eos>"),
    ("Qwen", "", "<|im_end|>"),
    ("SmolLM3", "", "<|im_end|>"),
    ("Phi-3", "<s>", "<|endoftext|>"),
    ("granite", "<|end_of_text|>", "<|end_of_text|>"),
    ("gpt-oss", "<|startoftext|>", "<|return|>"),
    ("Cohere", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
]

BUILTIN = {
    # google/gemma-3-4b-it tokenizer_config.json
    "gemma": (
        "{{ bos_token }}\n"
        "{%- if messages[0]['role'] == 'system' -%}\n"
        "    {%- if messages[0]['content'] is string -%}\n"
        "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
        "    {%- else -%}\n"
        "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
        "    {%- endif -%}\n"
        "    {%- set loop_messages = messages[1:] -%}\n"
        "{%- else -%}\n"
        "    {%- set first_user_prefix = \"\" -%}\n"
        "    {%- set loop_messages = messages -%}\n"
        "{%- endif -%}\n"
        "{%- for message in loop_messages -%}\n"
        "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
        "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
        "    {%- endif -%}\n"
        "    {%- if (message['role'] == 'assistant') -%}\n"
        "        {%- set role = \"model\" -%}\n"
        "    {%- else -%}\n"
        "        {%- set role = message['role'] -%}\n"
        "    {%- endif -%}\n"
        "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
        "    {%- if message['content'] is string -%}\n"
        "        {{ message['content'] | trim }}\n"
        "    {%- elif message['content'] is iterable -%}\n"
        "        {%- for item in message['content'] -%}\n"
        "            {%- if item['type'] == 'image' -%}\n"
        "                {{ '<start_of_image>' }}\n"
        "            {%- elif item['type'] == 'text' -%}\n"
        "                {{ item['text'] | trim }}\n"
        "            {%- endif -%}\n"
        "        {%- endfor -%}\n"
        "    {%- else -%}\n"
        "        {{ raise_exception(\"Invalid content type\") }}\n"
        "    {%- endif -%}\n"
        "    {{ '<end_of_turn>\\n' }}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}\n"
        "    {{'<start_of_turn>model\\n'}}\n"
        "{%- endif -%}\n"
    ),
    # meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
        "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
        "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
        "{% endif %}"
    ),
    # ChatML as in transformers' former default template
    "chatml": (
        "{% for message in messages %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
}

# GGUF files whose embedded template is rendered, and those without one that
# exercise a built-in template (file, built-in name).
GGUF_WITH_TEMPLATE = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "llama.cpp/vocab/ggml-vocab-qwen2.gguf",
    "llama.cpp/vocab/ggml-vocab-qwen35.gguf",
    "llama.cpp/vocab/ggml-vocab-phi-3.gguf",
    "llama.cpp/vocab/ggml-vocab-gemma-4.gguf",
    "llama.cpp/vocab/ggml-vocab-command-r.gguf",
]
GGUF_BUILTIN = [
    ("gemma-3-270m-q4_k_m.gguf", "gemma"),
    ("llama.cpp/vocab/ggml-vocab-llama-bpe.gguf", "llama3"),
    ("llama.cpp/vocab/ggml-vocab-llama-spm.gguf", "chatml"),
]


def special_tokens(name):
    for key, bos, eos in SPECIAL_TOKENS:
        if key in name:
            return bos, eos
    return "<s>", "</s>"


def gguf_info(path):
    r = GGUFReader(path)

    def field(key):
        f = r.fields.get(key)
        return f.contents() if f is not None else None

    tokens = r.fields["tokenizer.ggml.tokens"]
    bos_id, eos_id = field("tokenizer.ggml.bos_token_id"), field("tokenizer.ggml.eos_token_id")
    bos = tokens.contents(bos_id) if bos_id is not None else ""
    eos = tokens.contents(eos_id) if eos_id is not None else ""
    return field("tokenizer.chat_template"), bos, eos


def render(template, messages, add_generation_prompt, bos, eos, context=None):
    context = dict(context or {})
    tools = context.pop("tools", None)
    try:
        out, _ = ctu.render_jinja_template(
            conversations=[messages], chat_template=template, tools=tools,
            add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos, **context)
        return {"output": out[0]}
    except jinja2.TemplateError as e:
        # raise_exception() raises the base TemplateError; jinja2's own errors
        # are subclasses (syntax, undefined, security).
        kind = "raise_exception" if type(e) is jinja2.TemplateError else type(e).__name__
        return {"error": str(e), "error_type": kind}
    except Exception as e:  # Python errors inside the template (TypeError, ...)
        return {"error": str(e), "error_type": type(e).__name__}


CONTEXT_CONVERSATIONS = ["user", "system_multi_turn"]


def write_golden(name, template, bos, eos, conversations, contexts, tool_conversations,
                 extra=None):
    cases = []
    for conv_name, messages in conversations.items():
        for agp in (False, True):
            case = {"conversation": conv_name, "add_generation_prompt": agp}
            case.update(render(template, messages, agp, bos, eos))
            cases.append(case)
    for ctx_name, context in contexts.items():
        for conv_name in CONTEXT_CONVERSATIONS:
            case = {"conversation": conv_name, "add_generation_prompt": True, "context": ctx_name}
            case.update(render(template, conversations[conv_name], True, bos, eos, context))
            cases.append(case)
    for conv_name, messages in tool_conversations.items():
        case = {"conversation": conv_name, "add_generation_prompt": True, "context": "tools"}
        case.update(render(template, messages, True, bos, eos, contexts["tools"]))
        cases.append(case)
    doc = {"name": name, "bos_token": bos, "eos_token": eos}
    doc.update(extra or {})
    doc["cases"] = cases
    path = DATA / "golden" / f"{name}.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_ok = sum("output" in c for c in cases)
    print(f"{name}: {n_ok}/{len(cases)} rendered", file=sys.stderr)


def main():
    conversations = json.loads((DATA / "conversations.json").read_text(encoding="utf-8"))
    contexts = json.loads((DATA / "contexts.json").read_text(encoding="utf-8"))
    tools = json.loads((DATA / "tool-conversations.json").read_text(encoding="utf-8"))
    (DATA / "golden").mkdir(parents=True, exist_ok=True)
    for path in sorted((MODELS / "llama.cpp" / "templates").glob("*.jinja")):
        bos, eos = special_tokens(path.stem)
        template = path.read_text(encoding="utf-8")
        write_golden(f"templates-{path.stem}", template, bos, eos, conversations, contexts,
                     tools, {"template": f"llama.cpp/templates/{path.name}"})
    for rel in GGUF_WITH_TEMPLATE:
        template, bos, eos = gguf_info(MODELS / rel)
        stem = pathlib.Path(rel).stem
        write_golden(f"gguf-{stem}", template, bos, eos, conversations, contexts, tools,
                     {"gguf": rel})
    for rel, builtin in GGUF_BUILTIN:
        template, bos, eos = gguf_info(MODELS / rel)
        assert template is None, f"{rel} has a chat template"
        stem = pathlib.Path(rel).stem
        write_golden(f"builtin-{builtin}-{stem}", BUILTIN[builtin], bos, eos, conversations, contexts,
                     tools, {"gguf": rel, "builtin": builtin, "template_text": BUILTIN[builtin]})


if __name__ == "__main__":
    main()
