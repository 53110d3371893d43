#!/usr/bin/env python3
"""OpenAI semantics of `headroom serve` on a tiny random model, each checked
against an expectation the test derives itself:
  - a fixed seed gives the same text twice, streamed or not;
  - a stop string cuts the output where the unstopped output has it;
  - without max_tokens a request runs to max_model_len;
  - content parts and the developer role render as their plain equivalents;
  - completions logprobs (legacy format) cover every generated token;
  - /v1/memory has the shape and the plan of `run --memory-report-json`;
  - /v1/memory/blocks: a request of P prompt and N generated tokens holds
    ceil((P + N - 1) / 16) blocks (usage.kv_blocks) and leaves
    floor((P + N - 1) / 16) full blocks cached; the same prompt again finds
    its whole blocks; /v1/memory/history counts the generated tokens;
  - long chats: 400 naming the numbers by default; with --truncate-history or
    truncate_prompt_tokens the fewest oldest turns are dropped so that the
    rest fits, and the response says how many tokens and messages went. The
    expected prompt after each possible cut is measured on a server with room
    for the whole conversation.
  - reasoning: with --chat-template naming a template that thinks and
    chat_template_kwargs enable_thinking false, the prompt closes the
    reasoning block (seen in /tokenize's count); an answer forced by a
    regex to "<think>ab</think>12" comes back as reasoning_content "ab" and
    content "12", streamed as a reasoning delta and a content delta."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Server, fail_if, headroom_bin, sse_events, synth_tiny, scratch_dir  # noqa: E402

import openai  # noqa: E402

tmp = scratch_dir("headroom-serve-")
model = synth_tiny(tmp)
COMMON = ["-m", model, "--kv-cache-memory", "16MiB", "-t", "1", "-q"]
SMALL = 256  # the tiny model's trained context


def client_for(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=120)


system = {"role": "system", "content": "Be brief."}
turns = []
for i in range(16):
    turns.append({"role": "user", "content": f"Q{i}: cats?"})
    turns.append({"role": "assistant", "content": f"A{i}: fish."})
final = {"role": "user", "content": "Birds?"}


def conversation(n_dropped_turns):
    return [system] + turns[2 * n_dropped_turns:] + [final]


n_turns = len(turns) // 2 + 1  # the final question is a turn of its own

# No grammar cache, so that serve's plan is run's (which has none).
with Server(COMMON + ["--max-model-len", "4096", "--grammar-cache", "0"]) as big:
    c = client_for(big)
    # ---- Seeds and streaming -------------------------------------------------------
    kw = dict(model="tiny", prompt="the cat", max_tokens=24, temperature=1.0, seed=7,
              extra_body={"ignore_eos": True})
    a = c.completions.create(**kw).choices[0].text
    b = c.completions.create(**kw).choices[0].text
    s = "".join(ch.choices[0].text for ch in c.completions.create(stream=True, **kw))
    fail_if(not (a == b == s), f"seed 7 gave {a!r}, {b!r}, streamed {s!r}")
    other = c.completions.create(**dict(kw, seed=8)).choices[0].text
    fail_if(other == a, "seeds 7 and 8 gave the same 24 tokens")

    # ---- Stop strings --------------------------------------------------------------
    full = c.completions.create(model="tiny", prompt="what was", max_tokens=40, temperature=0,
                                extra_body={"ignore_eos": True}).choices[0].text
    at = next(i for i in range(4, len(full) - 3) if full[i:i + 3].isascii()
              and full[i:i + 3].strip() and full.find(full[i:i + 3]) == i)
    stop = full[at:at + 3]
    r = c.completions.create(model="tiny", prompt="what was", max_tokens=40, temperature=0,
                             stop=[stop, "never-appears"], extra_body={"ignore_eos": True})
    fail_if(r.choices[0].text != full[:at] or r.choices[0].finish_reason != "stop",
            f"stop {stop!r}: {r.choices[0].text!r} ({r.choices[0].finish_reason}), "
            f"expected {full[:at]!r}")
    streamed = [ch for ch in c.completions.create(model="tiny", prompt="what was", max_tokens=40,
                                                  temperature=0, stop=stop, stream=True,
                                                  extra_body={"ignore_eos": True})]
    fail_if("".join(ch.choices[0].text for ch in streamed) != full[:at],
            f"streamed stop: {[ch.choices[0].text for ch in streamed]}")
    fail_if(streamed[-1].choices[0].finish_reason != "stop", "streamed stop: finish reason")

    # ---- Legacy completions logprobs -----------------------------------------------
    r = c.completions.create(model="tiny", prompt="the dog", max_tokens=12, temperature=0,
                             logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    fail_if(len(lp.tokens) != 12 or len(lp.token_logprobs) != 12 or len(lp.top_logprobs) != 12,
            f"logprobs cover {len(lp.tokens)} of 12 tokens")
    for tok, p, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        fail_if(not (p <= 0 and len(top) <= 3 and max(top.values()) >= p - 1e-5),
                f"greedy token {tok!r} ({p}) is not among the best of {top}")
    offsets = [len("".join(lp.tokens[:i])) for i in range(12)]
    fail_if(lp.text_offset != offsets, f"text_offset {lp.text_offset} != {offsets}")

    # ---- Equivalent spellings of one prompt ----------------------------------------
    def prompt_tokens(messages):
        return c.chat.completions.create(model="tiny", messages=messages,
                                         max_tokens=1).usage.prompt_tokens

    parts = [{"role": "user", "content": [{"type": "text", "text": "first part"},
                                          {"type": "text", "text": "second part"}]}]
    fail_if(prompt_tokens(parts) != prompt_tokens([{"role": "user",
                                                    "content": "first part\nsecond part"}]),
            "content parts differ from their joined text")
    fail_if(prompt_tokens([{"role": "developer", "content": "be brief"}] + [final]) !=
            prompt_tokens([{"role": "system", "content": "be brief"}] + [final]),
            "developer role differs from system")

    # ---- /v1/memory has the shape of `run --memory-report-json` -------------------
    report = os.path.join(tmp, "report.json")
    subprocess.run([headroom_bin(), "run", *COMMON, "--max-model-len", "4096", "--max-num-seqs",
                    "32", "-p", "a", "-n", "1", "--memory-report-json", report], check=True,
                   capture_output=True, timeout=120)

    def shape(j):
        if isinstance(j, dict):
            return {k: shape(v) for k, v in j.items()}
        if isinstance(j, list):
            return [shape(v) for v in j]
        return type(j).__name__

    status, memory = big.request("GET", "/v1/memory")
    with open(report) as f:
        expected = json.load(f)
    fail_if(status != 200 or shape(memory) != shape(expected),
            f"/v1/memory shape differs from run's report:\n{shape(memory)}\n{shape(expected)}")
    fail_if(memory["config"] != expected["config"] or memory["predicted"] != expected["predicted"],
            f"same flags, different plan: {memory['config']} {expected['config']}")

    # ---- /v1/memory/blocks and /history: the block map against a hand count ------
    def blocks(server):
        status, b = server.request("GET", "/v1/memory/blocks")
        fail_if(status != 200, f"/v1/memory/blocks: {status} {b}")
        return b

    with Server(COMMON + ["--max-model-len", "1024", "--block-size", "16"]) as bm:
        b = blocks(bm)
        n_blocks = b["pools"][0]["n_blocks"]
        fail_if(b["pools"][0]["state"] != "f" * n_blocks or b["requests"] or b["blocks_used"],
                f"a fresh server's blocks: {b['pools'][0]['counts']}")
        P, N = 40, 25
        prompt = list(range(10, 10 + P))
        status, r = bm.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": N,
                                                           "ignore_eos": True, "temperature": 0})
        fail_if(status != 200, f"completion: {status} {r}")
        held, full = -(-(P + N - 1) // 16), (P + N - 1) // 16
        fail_if(r["usage"]["kv_blocks"] != held or r["usage"]["kv_blocks_shared"] != 0,
                f"usage {r['usage']}: expected {held} blocks held, none shared")
        deadline = time.time() + 10
        while time.time() < deadline:
            b = blocks(bm)
            if not b["requests"]:
                break
            time.sleep(0.05)
        counts = b["pools"][0]["counts"]
        fail_if(counts != {"free": n_blocks - full, "cached": full, "owned": 0, "shared": 0},
                f"after one request of {P} + {N} tokens: {counts}, expected {full} cached")
        fail_if(b["pools"][0]["owner"] != [0] * n_blocks, "finished blocks keep an owner")
        status, memory = bm.request("GET", "/v1/memory")
        fail_if(memory["kv_groups"][0]["blocks_cached"] != full,
                f"/v1/memory cached {memory['kv_groups'][0]['blocks_cached']}, the map {full}")
        status, r = bm.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 1})
        cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
        fail_if(cached != (P - 1) // 16 * 16, f"the same prompt again found {cached} tokens")
        for bad in ["abc", "-1", "", "99999999999999999999999"]:
            status, e = bm.request("GET", f"/v1/memory/blocks?detail={bad}")
            fail_if(status != 400 or "detail" not in json.dumps(e),
                    f"?detail={bad}: {status} {e}")
        time.sleep(1.2)  # one more history sample
        status, h = bm.request("GET", "/v1/memory/history")
        samples = h["samples"]
        fail_if(status != 200 or len(samples) < 2 or
                samples[-1]["generation_tokens"] != N + 1 or
                samples[-1]["kv_blocks_total"] != n_blocks or
                [s["t_s"] for s in samples] != sorted(s["t_s"] for s in samples),
                f"/v1/memory/history: {status} {samples[-3:]}")

    # ---- Prompt lengths after dropping 0..n_turns-1 turns, measured in full -------
    lengths = [prompt_tokens(conversation(k)) for k in range(n_turns)]
    fail_if(lengths != sorted(lengths, reverse=True) or lengths[0] <= SMALL + 100,
            f"conversation lengths {lengths}")
    fail_if(big.stop() != 0, "exit code")


def fewest_dropped(target):
    return next(k for k in range(n_turns) if lengths[k] <= target)


with Server(COMMON) as plain:
    status, reply = plain.request("POST", "/v1/chat/completions",
                                  {"messages": conversation(0), "max_tokens": 8})
    err = reply.get("error", {}) if isinstance(reply, dict) else {}
    fail_if(status != 400 or err.get("code") != "context_length_exceeded" or
            str(lengths[0]) not in err.get("message", "") or str(SMALL) not in err["message"],
            f"too long without truncation: {status} {reply}")
    # truncate_prompt_tokens: at most 100 prompt tokens.
    status, reply = plain.request("POST", "/v1/chat/completions",
                                  {"messages": conversation(0), "max_tokens": 8,
                                   "truncate_prompt_tokens": 100})
    k = fewest_dropped(100)
    fail_if(status != 200 or reply["usage"]["prompt_tokens"] != lengths[k] or
            reply["prompt_truncation"] != {"dropped_tokens": lengths[0] - lengths[k],
                                           "dropped_messages": 2 * k},
            f"truncate_prompt_tokens 100: expected {k} turns dropped ({lengths[k]} tokens): "
            f"{status} {reply}")
    # Completions drop their oldest tokens and keep BOS.
    ids = [1] + [100 + i % 300 for i in range(299)]
    status, reply = plain.request("POST", "/v1/completions",
                                  {"prompt": ids, "max_tokens": 4, "truncate_prompt_tokens": 50})
    fail_if(status != 200 or reply["usage"]["prompt_tokens"] != 50 or
            reply["prompt_truncation"]["dropped_tokens"] != 250, f"completions: {reply}")
    # No max_tokens: the output runs to max_model_len.
    r = client_for(plain).completions.create(model="tiny", prompt="a", temperature=0,
                                             extra_body={"ignore_eos": True})
    fail_if(r.usage.prompt_tokens + r.usage.completion_tokens != SMALL or
            r.choices[0].finish_reason != "length", f"without max_tokens: {r.usage}")
    fail_if(plain.stop() != 0, "exit code")

with Server(COMMON + ["--truncate-history"]) as trunc:
    status, reply = trunc.request("POST", "/v1/chat/completions",
                                  {"messages": conversation(0), "max_tokens": 32})
    k = fewest_dropped(SMALL - 32)
    fail_if(status != 200 or reply["usage"]["prompt_tokens"] != lengths[k] or
            reply["prompt_truncation"] != {"dropped_tokens": lengths[0] - lengths[k],
                                           "dropped_messages": 2 * k} or
            trunc.last_headers.get("X-Headroom-Dropped-Prompt-Tokens") !=
            str(lengths[0] - lengths[k]),
            f"--truncate-history, max_tokens 32: expected {k} turns dropped: {status} {reply}")
    # Without max_tokens, room is left for a reply of max_model_len / 4 tokens.
    status, raw = trunc.request("POST", "/v1/chat/completions",
                                {"messages": conversation(0), "stream": True, "ignore_eos": True,
                                 "stream_options": {"include_usage": True}})
    events = sse_events(raw.encode() if isinstance(raw, str) else json.dumps(raw).encode())
    k = fewest_dropped(SMALL - SMALL // 4)
    fail_if(events[-1] != "[DONE]", f"stream did not end with [DONE]: {events[-3:]}")
    usage = events[-2]["usage"]
    fail_if(events[0].get("prompt_truncation") != {"dropped_tokens": lengths[0] - lengths[k],
                                                   "dropped_messages": 2 * k} or
            usage["prompt_tokens"] != lengths[k] or
            usage["prompt_tokens"] + usage["completion_tokens"] != SMALL,
            f"streamed truncation: expected {k} turns dropped: {events[0]} {usage}")
    # When even the last turn alone is too long, 400 says so.
    status, reply = trunc.request("POST", "/v1/chat/completions",
                                  {"messages": [system, {"role": "user",
                                                         "content": "word " * 300}]})
    fail_if(status != 400 or reply["error"]["code"] != "context_length_exceeded",
            f"last turn too long: {status} {reply}")
    fail_if(trunc.stop() != 0, "exit code")

THINKING = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
            "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
            "{% endif %}{% endif %}")
template_path = os.path.join(tmp, "thinking.jinja")
with open(template_path, "w") as f:
    f.write(THINKING)
with Server(COMMON + ["--chat-template", template_path]) as think:
    ask = [{"role": "user", "content": "2+2?"}]
    off = {"enable_thinking": False}
    n_on = think.request("POST", "/tokenize", {"messages": ask})[1]["count"]
    n_off = think.request("POST", "/tokenize", {"messages": ask,
                                                 "chat_template_kwargs": off})[1]["count"]
    fail_if(n_off <= n_on, f"enable_thinking false did not reach the template: {n_on} {n_off}")
    body = {"messages": ask, "chat_template_kwargs": off, "max_tokens": 40, "temperature": 0,
            "guided_regex": "<think>ab</think>12"}
    status, reply = think.request("POST", "/v1/chat/completions", body)
    msg = reply["choices"][0]["message"] if status == 200 else reply
    fail_if(status != 200 or msg.get("reasoning_content") != "ab" or msg["content"] != "12",
            f"reasoning split: {status} {msg}")
    status, raw = think.request("POST", "/v1/chat/completions", dict(body, stream=True))
    events = sse_events(raw.encode() if isinstance(raw, str) else json.dumps(raw).encode())
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    fail_if(reasoning != "ab" or content != "12", f"streamed reasoning split: {deltas}")
    fail_if(think.stop() != 0, "exit code")

print(f"ok: seeds, stop strings, logprobs, prompt spellings; truncation of a "
      f"{lengths[0]}-token chat to fit max_model_len {SMALL}")
