#!/usr/bin/env python3
"""Several answers for one prompt through `headroom serve` with SmolLM2,
driven by the openai Python package: n samples (whole and streamed, the
stream's chunks interleaving the choices by index), best_of, and beam search
(vLLM's request extensions), with usage counting the prompt once. Sample i
of a request with a seed is what a request of one sample with seed + i
gives; beam search gives what `headroom run --beam-width` gives. The forks
share the prompt's blocks and copy the partial one on the backend, so an
answer equal to a request of its own says the copies are right.

  test_n_choices.py [DEVICE]   cpu (the default) or vulkan; with vulkan,
                               skipped (exit code 77) where there is no device
"""
import os
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from serverlib import Server, fail_if, headroom_bin  # noqa: E402
from testlib import model_path, skip_without_vulkan  # noqa: E402

import openai  # noqa: E402

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
FLAGS = ["--max-model-len", "512", "--kv-cache-memory", "48MiB", "--max-num-seqs", "8",
         "--device", DEVICE]
PROMPT = "Once upon a time, there was a little robot who"
TOKENS = 16 if DEVICE == "cpu" else 6  # a software Vulkan device is slow
path = model_path("smollm2-135m")
if DEVICE != "cpu":
    skip_without_vulkan()

with Server(["-m", path, *FLAGS, "--served-model-name", "smollm2", "-q"]) as server:
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
    messages = [{"role": "user", "content": "Write one sentence about the sea."}]
    common = dict(model="smollm2", messages=messages, max_tokens=TOKENS, temperature=0.9,
                  seed=7, extra_body={"ignore_eos": True})

    # n = 3 in one response.
    r = client.chat.completions.create(n=3, **common)
    fail_if([c.index for c in r.choices] != [0, 1, 2], f"indices {[c.index for c in r.choices]}")
    texts = [c.message.content for c in r.choices]
    fail_if(any(c.finish_reason != "length" for c in r.choices), "every choice runs to length")
    fail_if(len(set(texts)) != 3, f"three samples with one seed must differ: {texts}")
    one = client.chat.completions.create(n=1, **common)
    fail_if(r.usage.prompt_tokens != one.usage.prompt_tokens,
            f"the prompt counts once: {r.usage.prompt_tokens} vs {one.usage.prompt_tokens}")
    fail_if(r.usage.completion_tokens != 3 * TOKENS,
            f"completion tokens {r.usage.completion_tokens}, expected 3 x {TOKENS}")
    again = client.chat.completions.create(n=3, **common)
    fail_if([c.message.content for c in again.choices] != texts, "a seeded request repeats")
    for i in range(3):
        alone = client.chat.completions.create(
            n=1, **dict(common, seed=7 + i)).choices[0].message.content
        fail_if(alone != texts[i], f"sample {i} must equal one sample with seed {7 + i}")
    print("n=3:", texts)

    # The wire format's own logic, the same on every device: tested on the CPU.
    if DEVICE == "cpu":
        # Streamed: the same three texts, chunks interleaved, one finish per choice.
        stream = client.chat.completions.create(n=3, stream=True,
                                                stream_options={"include_usage": True}, **common)
        parts, finish, order, usage = ["", "", ""], [None] * 3, [], None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                parts[c.index] += c.delta.content or ""
                if c.delta.content:
                    order.append(c.index)
                if c.finish_reason:
                    fail_if(finish[c.index] is not None, f"choice {c.index} finished twice")
                    finish[c.index] = c.finish_reason
        fail_if(parts != texts, f"streamed {parts} != whole {texts}")
        fail_if(finish != ["length"] * 3, f"finish reasons {finish}")
        switches = sum(1 for a, b in zip(order, order[1:]) if a != b)
        fail_if(switches < TOKENS // 3, f"the choices must interleave as they are made: {order}")
        fail_if(usage is None or usage.completion_tokens != 3 * TOKENS, f"stream usage {usage}")
        print(f"stream: {len(order)} content chunks, the choice changes {switches} times")

        # best_of: the n of highest cumulative logprob among best_of samples.
        r = client.completions.create(model="smollm2", prompt=PROMPT, n=2, best_of=4,
                                      max_tokens=TOKENS, seed=3, temperature=1.0,
                                      extra_body={"ignore_eos": True})
        fail_if(len(r.choices) != 2 or [c.index for c in r.choices] != [0, 1], "best_of: 2 choices")
        fail_if(r.usage.completion_tokens != 2 * TOKENS, f"best_of usage {r.usage}")

    # Beam search: deterministic, what `run --beam-width 4` gives.
    beam = dict(model="smollm2", prompt=PROMPT, max_tokens=12, n=2,
                extra_body={"use_beam_search": True, "beam_width": 4})
    b1 = client.completions.create(**beam)
    b2 = client.completions.create(**beam)
    fail_if([c.text for c in b1.choices] != [c.text for c in b2.choices], "beams repeat")
    fail_if(len(b1.choices) != 2 or b1.choices[0].text == b1.choices[1].text,
            f"two different beams: {[c.text for c in b1.choices]}")
    run = subprocess.run([headroom_bin(), "run", "-m", path, "--max-model-len", "512",
                          "--device", DEVICE, "--beam-width", "4", "-n", "12", "-p", PROMPT, "-q"],
                         capture_output=True, text=True, check=True)
    fail_if(run.stdout != b1.choices[0].text,
            f"run --beam-width 4: {run.stdout!r}, server: {b1.choices[0].text!r}")
    print("beams:", [c.text for c in b1.choices])

    metrics = urllib.request.urlopen(server.base + "/metrics").read().decode()
    peak = [ln for ln in metrics.splitlines() if ln.startswith("headroom_kv_shared_bytes_peak ")]
    fail_if(not peak or float(peak[0].split()[1]) <= 0, "the shared bytes' peak is in /metrics")
    shared = [ln for ln in metrics.splitlines()
              if ln.startswith("headroom_request_kv_blocks_shared_total ")]
    fail_if(not shared or float(shared[0].split()[1]) <= 0, "requests' shared blocks in /metrics")
    print("ok")
