#!/usr/bin/env python3
"""`headroom serve` with SmolLM2-135M-Instruct, driven by the openai Python
package: the model list, chat (non-streaming with logprobs, and streaming with
usage) and completions; greedy outputs must equal `headroom run --temp 0` for
the same prompts.

`run -p` encodes its prompt with BOS as the model's metadata says and special
tokens recognised, as the server's completions do. For chat, `run -p` gets the
conversation rendered with the model's own chat template (read from the GGUF
by the gguf package) by jinja2, set up as transformers' apply_chat_template
sets it up; headroom's server renders it with its own template interpreter.
SmolLM2 adds no BOS, so both give the same tokens if both render the same text.

  test_openai_client.py [DEVICE]   cpu (the default) or vulkan; with vulkan,
                                   skipped (exit code 77) where there is no device
"""
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from serverlib import Server, fail_if, headroom_bin  # noqa: E402
from testlib import model_path, skip_without_vulkan  # noqa: E402

import gguf  # noqa: E402
import jinja2  # noqa: E402
import jinja2.sandbox  # noqa: E402
import openai  # noqa: E402

N_TOKENS = 4
DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
MEMORY_FLAGS = ["--max-model-len", "1024", "--kv-cache-memory", "32MiB", "--device", DEVICE]
if DEVICE != "cpu":
    skip_without_vulkan()


def render_chat(path, messages):
    """The conversation as transformers renders it (apply_chat_template)."""
    reader = gguf.GGUFReader(path)
    source = reader.fields["tokenizer.chat_template"].contents()
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    bos = tokens[reader.fields["tokenizer.ggml.bos_token_id"].contents()]
    eos = tokens[reader.fields["tokenizer.ggml.eos_token_id"].contents()]
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(source).render(messages=messages, add_generation_prompt=True,
                                          bos_token=bos, eos_token=eos)


def run_greedy(path, prompt):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
    p = subprocess.run([headroom_bin(), "run", "-m", path, *MEMORY_FLAGS, "--temp", "0",
                        "-n", str(N_TOKENS), "-f", f.name, "-q"],
                       capture_output=True, timeout=600)
    os.unlink(f.name)
    fail_if(p.returncode != 0, f"run failed: {p.stderr.decode()}")
    return p.stdout.decode("utf-8")


path = model_path("smollm2-135m")
messages = [{"role": "user", "content": "What is the capital of France?"}]
completion_prompt = "The capital of France is"

with Server(["-m", path, *MEMORY_FLAGS, "--served-model-name", "smollm2", "-q"]) as server:
    # Loading SmolLM2 takes long enough for /health to be polled during it.
    fail_if(not any(s == 503 and b == {"status": "loading"} for s, b in server.health_seen),
            f"/health never said loading: {server.health_seen[:3]}")
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0,
                           timeout=900)

    models = client.models.list()
    fail_if([m.id for m in models.data] != ["smollm2"], f"models: {models}")
    fail_if(models.data[0].object != "model", f"model object: {models.data[0]}")

    chat = client.chat.completions.create(model="smollm2", messages=messages,
                                          max_tokens=N_TOKENS, temperature=0, logprobs=True,
                                          top_logprobs=2)
    choice = chat.choices[0]
    fail_if(chat.object != "chat.completion", f"object {chat.object}")
    fail_if(choice.message.role != "assistant", f"role {choice.message.role}")
    fail_if(choice.finish_reason not in ("stop", "length"), f"finish {choice.finish_reason}")
    fail_if(chat.usage.completion_tokens > N_TOKENS, f"usage {chat.usage}")
    fail_if(choice.finish_reason == "length" and chat.usage.completion_tokens != N_TOKENS,
            f"length finish with {chat.usage.completion_tokens} tokens")
    fail_if(chat.usage.total_tokens != chat.usage.prompt_tokens + chat.usage.completion_tokens,
            f"usage {chat.usage}")
    # Greedy: each chosen token is the most likely one, and the logprobs are a
    # distribution's (at most 0, alternatives in decreasing order).
    content = choice.logprobs.content
    fail_if(not content, "no logprobs")
    fail_if("".join(t.token for t in content) != choice.message.content,
            f"logprob tokens {[t.token for t in content]} vs {choice.message.content!r}")
    for t in content:
        fail_if(len(t.top_logprobs) != 2, f"top_logprobs {t.top_logprobs}")
        fail_if(not (t.logprob <= 0 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob),
                f"logprobs {t}")
        fail_if(not math.isclose(t.logprob, t.top_logprobs[0].logprob, abs_tol=1e-5),
                f"greedy token is not the most likely: {t}")
        fail_if(bytes(t.bytes) != t.token.encode(), f"bytes of {t}")

    stream = client.chat.completions.create(model="smollm2", messages=messages,
                                            max_tokens=N_TOKENS, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    pieces, finish, usage, roles = [], None, None, []
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            if c.delta.content:
                pieces.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    fail_if(roles != ["assistant"], f"stream roles {roles}")
    fail_if("".join(pieces) != choice.message.content,
            f"stream {''.join(pieces)!r} != non-stream {choice.message.content!r}")
    fail_if(finish != choice.finish_reason, f"stream finish {finish}")
    fail_if(usage is None or usage.completion_tokens != chat.usage.completion_tokens or
            usage.prompt_tokens != chat.usage.prompt_tokens, f"stream usage {usage}")
    # The same prompt again: its full blocks come from the prefix cache.
    fail_if(usage.prompt_tokens_details.cached_tokens == 0, f"no cached tokens: {usage}")

    comp = client.completions.create(model="smollm2", prompt=completion_prompt,
                                     max_tokens=N_TOKENS, temperature=0)
    fail_if(comp.object != "text_completion", f"object {comp.object}")
    fail_if(comp.choices[0].finish_reason not in ("stop", "length"), f"{comp.choices[0]}")
    fail_if(comp.usage.completion_tokens > N_TOKENS, f"usage {comp.usage}")

    code = server.stop()
    fail_if(code != 0, f"server exit code {code}")

rendered = render_chat(path, messages)
run_chat = run_greedy(path, rendered)
fail_if(run_chat != choice.message.content,
        f"chat: server {choice.message.content!r} != run {run_chat!r}")
run_comp = run_greedy(path, completion_prompt)
fail_if(run_comp != comp.choices[0].text,
        f"completion: server {comp.choices[0].text!r} != run {run_comp!r}")
print(f"ok ({DEVICE}): models, chat {choice.message.content!r} (stream equal, logprobs greedy), "
      f"completion {comp.choices[0].text!r}, both equal to `run --temp 0`")
