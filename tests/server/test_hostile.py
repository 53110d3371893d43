#!/usr/bin/env python3
"""Malformed and hostile requests against `headroom serve` (a tiny random model,
an API key, a 64 KiB body limit): each gets the right 4xx with OpenAI's error
JSON naming the field, or is dropped cleanly; stalled and vanished clients
neither block others nor keep their KV blocks; a full queue answers 503 with
Retry-After; and afterwards normal requests still succeed."""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Server, fail_if, sse_events, synth_tiny, scratch_dir  # noqa: E402

import openai  # noqa: E402

KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_MODEL_LEN = 2048
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"

tmp = scratch_dir("headroom-serve-")
model = synth_tiny(tmp)
cases = []


def user(text="hi"):
    return [{"role": "user", "content": text}]


def chat(**fields):
    body = {"model": "tiny", "messages": user(), "max_tokens": 2}
    body.update(fields)
    return body


def check(server, name, status, method, path, body=None, headers=AUTH, param=None, code=None,
          contains=None):
    got, reply = server.request(method, path, body, headers)
    fail_if(got != status, f"{name}: status {got}, expected {status}: {reply}")
    if status >= 400:
        fail_if(not isinstance(reply, dict) or not isinstance(reply.get("error"), dict),
                f"{name}: not OpenAI's error JSON: {reply}")
        err = reply["error"]
        fail_if(not isinstance(err.get("message"), str) or not err["message"] or
                not isinstance(err.get("type"), str) or "param" not in err or "code" not in err,
                f"{name}: error fields {err}")
        if param is not None:
            fail_if(err["param"] != param, f"{name}: param {err['param']!r}, expected {param!r}")
        if code is not None:
            fail_if(err["code"] != code, f"{name}: code {err['code']!r}, expected {code!r}")
        if contains is not None:
            for c in contains:
                fail_if(c not in err["message"], f"{name}: {c!r} not in {err['message']!r}")
    cases.append((name, got))
    return reply


def complete_response(raw):
    """True once `raw` holds a whole response with a Content-Length body."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def raw_exchange(server, data, wait_s=10):
    """Sends raw bytes; returns the response that came back (or b"" if the
    server closed without one) and how long the status line took."""
    t0 = time.time()
    s = server.connect()
    s.sendall(data)
    s.settimeout(wait_s)
    out, t_status = b"", None
    try:
        while not complete_response(out):
            b = s.recv(65536)
            if not b:
                break
            out += b
            if t_status is None and b"\r\n" in out:
                t_status = time.time() - t0
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return out, t_status


def status_of(raw):
    line = raw.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 and line[0].startswith(b"HTTP/") else None


def start_stream(server, body, path=COMPLETIONS):
    """A streaming request on a raw socket; returns the socket after the first
    content event arrived, with everything read so far."""
    data = json.dumps(body).encode()
    s = server.connect()
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
              + data)
    got = b""
    while got.count(b"data: ") < 3:
        b = s.recv(65536)
        fail_if(not b, f"stream closed early: {got[:500]}")
        got += b
    return s, got


def wait_until(pred, timeout_s, what):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if pred():
            return time.time()
        time.sleep(0.02)
    fail_if(True, f"timed out waiting for {what}")


with Server(["-m", model, "--api-key", KEY, "--max-body", "64KiB", "--max-model-len",
             str(MAX_MODEL_LEN), "--kv-cache-memory", "16MiB", "-t", "1", "-q"]) as server:
    # ---- Bodies that are not a valid request -------------------------------------
    check(server, "invalid JSON", 400, "POST", CHAT, b"{bad json", contains=["not valid JSON"])
    check(server, "truncated JSON", 400, "POST", CHAT, b'{"messages": [')
    check(server, "JSON array", 400, "POST", CHAT, b"[1, 2]", contains=["JSON object"])
    check(server, "JSON string", 400, "POST", CHAT, b'"hello"')
    check(server, "empty body", 400, "POST", CHAT, b"")
    check(server, "invalid UTF-8", 400, "POST", CHAT,
          b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}')
    check(server, "NaN literal", 400, "POST", CHAT, b'{"messages": [], "temperature": NaN}')
    check(server, "nested 30000 deep", 400, "POST", CHAT, b"[" * 30000 + b"]" * 30000,
          contains=["nests deeper"])
    # ---- Wrong types and values, each naming its field ---------------------------
    check(server, "no messages", 400, "POST", CHAT, {"model": "tiny"}, param="messages")
    check(server, "messages a string", 400, "POST", CHAT, {"messages": "hi"}, param="messages")
    check(server, "messages empty", 400, "POST", CHAT, {"messages": []}, param="messages")
    check(server, "message a number", 400, "POST", CHAT, {"messages": [5]}, param="messages[0]")
    check(server, "unknown role", 400, "POST", CHAT,
          {"messages": [{"role": "wizard", "content": "x"}]}, param="messages[0].role")
    check(server, "content a number", 400, "POST", CHAT,
          {"messages": [{"role": "user", "content": 7}]}, param="messages[0].content")
    check(server, "image content part", 400, "POST", CHAT,
          {"messages": [{"role": "user", "content": [{"type": "image_url",
                                                      "image_url": {"url": "x"}}]}]},
          param="messages[0].content[0].type")
    check(server, "negative max_tokens", 400, "POST", CHAT, chat(max_tokens=-5),
          param="max_tokens")
    check(server, "zero max_tokens", 400, "POST", CHAT, chat(max_tokens=0), param="max_tokens")
    check(server, "huge max_tokens", 400, "POST", CHAT, chat(max_tokens=10**15),
          param="max_tokens")
    check(server, "max_tokens over context", 400, "POST", CHAT, chat(max_tokens=5000),
          param="max_tokens", contains=["5000", str(MAX_MODEL_LEN)])
    check(server, "max_tokens a string", 400, "POST", CHAT, chat(max_tokens="10"),
          param="max_tokens")
    check(server, "max_tokens 1.5", 400, "POST", CHAT, chat(max_tokens=1.5), param="max_tokens")
    check(server, "max_completion_tokens negative", 400, "POST", CHAT,
          chat(max_completion_tokens=-1), param="max_completion_tokens")
    check(server, "temperature a string", 400, "POST", CHAT, chat(temperature="hot"),
          param="temperature")
    check(server, "negative temperature", 400, "POST", CHAT, chat(temperature=-1),
          param="temperature")
    check(server, "top_p 0", 400, "POST", CHAT, chat(top_p=0), param="top_p")
    check(server, "presence_penalty 5", 400, "POST", CHAT, chat(presence_penalty=5),
          param="presence_penalty")
    check(server, "n = 0", 400, "POST", CHAT, chat(n=0), param="n")
    check(server, "best_of below n", 400, "POST", CHAT, chat(n=3, best_of=2), param="best_of",
          contains=["best_of (2) must be at least n (3)"])
    check(server, "best_of over n streamed", 400, "POST", COMPLETIONS,
          {"prompt": "a", "best_of": 3, "stream": True}, param="best_of",
          contains=["cannot be streamed"])
    check(server, "use_beam_search a string", 400, "POST", CHAT, chat(use_beam_search="yes"),
          param="use_beam_search")
    check(server, "beam_width 0", 400, "POST", CHAT, chat(use_beam_search=True, beam_width=0),
          param="beam_width")
    check(server, "beam_width below n", 400, "POST", CHAT,
          chat(use_beam_search=True, beam_width=2, n=3), param="beam_width")
    check(server, "length_penalty a string", 400, "POST", CHAT,
          chat(use_beam_search=True, length_penalty="long"), param="length_penalty")
    check(server, "beam search with stop strings", 400, "POST", CHAT,
          chat(use_beam_search=True, beam_width=2, stop=["x"]), contains=["beam search"])
    check(server, "n beyond the sequence seats", 400, "POST", CHAT, chat(n=100),
          contains=["--max-num-seqs"])
    check(server, "huge n", 400, "POST", CHAT, chat(n=10**9), param="n")
    check(server, "stop a number", 400, "POST", CHAT, chat(stop=5), param="stop")
    check(server, "five stop strings", 400, "POST", CHAT, chat(stop=list("abcde")), param="stop")
    check(server, "logprobs a string", 400, "POST", CHAT, chat(logprobs="yes"), param="logprobs")
    check(server, "top_logprobs 50", 400, "POST", CHAT, chat(logprobs=True, top_logprobs=50),
          param="top_logprobs")
    check(server, "seed a string", 400, "POST", CHAT, chat(seed="abc"), param="seed")
    check(server, "stream a string", 400, "POST", CHAT, chat(stream="yes"), param="stream")
    check(server, "stream_options a list", 400, "POST", CHAT,
          chat(stream=True, stream_options=[1]), param="stream_options")
    check(server, "logit_bias over 100", 400, "POST", CHAT, chat(logit_bias={"5": 500}),
          param="logit_bias", contains=["[-100, 100]"])
    check(server, "logit_bias key not a token id", 400, "POST", CHAT,
          chat(logit_bias={"abc": 1}), param="logit_bias.abc")
    check(server, "logit_bias value a string", 400, "POST", CHAT, chat(logit_bias={"5": "x"}),
          param="logit_bias.5")
    # ---- Structured outputs and tools: the field and why -------------------------
    def schema_format(schema):
        return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}

    weather = {"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object",
                                              "properties": {"city": {"type": "string"}}}}}
    check(server, "response_format type xml", 400, "POST", CHAT,
          chat(response_format={"type": "xml"}), param="response_format.type")
    check(server, "json_schema without schema", 400, "POST", CHAT,
          chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
          param="response_format.json_schema.schema")
    check(server, "schema with an unknown type", 400, "POST", CHAT,
          chat(response_format=schema_format(
              {"type": "object", "properties": {"a": {"type": "strnig"}}})),
          param="response_format.json_schema.schema", contains=["strnig"])
    check(server, "schema with an unsupported keyword", 400, "POST", CHAT,
          chat(response_format=schema_format(
              {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}})),
          param="response_format.json_schema.schema",
          contains=["uniqueItems", "#/properties/tags"])
    check(server, "schema with a dangling $ref", 400, "POST", CHAT,
          chat(response_format=schema_format({"$ref": "#/$defs/missing"})),
          param="response_format.json_schema.schema", contains=["missing"])
    check(server, "EBNF syntax error", 400, "POST", CHAT,
          chat(guided_grammar='root ::= "a" |\nfoo ::= '), param="guided_grammar",
          contains=["line 2"])
    check(server, "regex syntax error", 400, "POST", CHAT, chat(guided_regex="[a-"),
          param="guided_regex")
    check(server, "two constraints", 400, "POST", CHAT,
          chat(response_format={"type": "json_object"}, guided_regex="a+"),
          param="guided_regex", contains=["only one"])
    check(server, "guided_choice empty", 400, "POST", CHAT, chat(guided_choice=[]),
          param="guided_choice")
    check(server, "beam search with a schema", 400, "POST", CHAT,
          chat(use_beam_search=True, beam_width=2, response_format={"type": "json_object"}),
          contains=["beam search"])
    check(server, "tools not a list", 400, "POST", CHAT, chat(tools={"a": 1}), param="tools")
    check(server, "tool without a name", 400, "POST", CHAT,
          chat(tools=[{"type": "function", "function": {}}]), param="tools[0].function.name")
    check(server, "invalid tool name", 400, "POST", CHAT,
          chat(tools=[{"type": "function", "function": {"name": "get weather!"}}]),
          param="tools[0].function.name")
    check(server, "duplicate tool names", 400, "POST", CHAT, chat(tools=[weather, weather]),
          param="tools[1].function.name", contains=["twice"])
    check(server, "tool parameters not an object", 400, "POST", CHAT,
          chat(tools=[{"type": "function", "function": {"name": "f", "parameters": [1]}}]),
          param="tools[0].function.parameters")
    check(server, "tool_choice naming an unknown tool", 400, "POST", CHAT,
          chat(tools=[weather], tool_choice={"type": "function", "function": {"name": "nope"}}),
          param="tool_choice.function.name", contains=["nope"])
    check(server, "tool_choice required without tools", 400, "POST", CHAT,
          chat(tool_choice="required"), param="tool_choice")
    check(server, "tool_choice a number", 400, "POST", CHAT, chat(tools=[weather], tool_choice=3),
          param="tool_choice")
    check(server, "schema with tools", 400, "POST", CHAT,
          chat(tools=[weather], response_format={"type": "json_object"}),
          param="response_format")
    check(server, "tool message without tool_call_id", 400, "POST", CHAT,
          chat(messages=[{"role": "user", "content": "hi"}, {"role": "tool", "content": "21"}]),
          param="messages[1].tool_call_id")
    check(server, "tool call arguments not JSON", 400, "POST", CHAT,
          chat(messages=[{"role": "user", "content": "hi"},
                         {"role": "assistant", "tool_calls": [
                             {"id": "c1", "type": "function",
                              "function": {"name": "f", "arguments": "{city: Paris"}}]}]),
          param="messages[1].tool_calls[0].function.arguments")
    check(server, "tool_calls on a user message", 400, "POST", CHAT,
          chat(messages=[{"role": "user", "content": "hi", "tool_calls": []}]),
          param="messages[0].tool_calls")
    check(server, "no prompt", 400, "POST", COMPLETIONS, {"model": "tiny"}, param="prompt")
    check(server, "token id outside vocabulary", 400, "POST", COMPLETIONS,
          {"prompt": [1, 999999], "max_tokens": 2}, param="prompt", contains=["vocabulary"])
    check(server, "negative token id", 400, "POST", COMPLETIONS, {"prompt": [-3]},
          param="prompt[0]")
    check(server, "batch of prompts", 400, "POST", COMPLETIONS, {"prompt": ["a", "b", "c"]},
          param="prompt")
    check(server, "echo", 400, "POST", COMPLETIONS, {"prompt": "a", "echo": True}, param="echo")
    check(server, "completions logprobs 50", 400, "POST", COMPLETIONS,
          {"prompt": "a", "logprobs": 50}, param="logprobs")
    check(server, "prompt too long", 400, "POST", CHAT,
          chat(messages=user("the cat sat on the mat " * 400), max_tokens=None),
          param="messages", code="context_length_exceeded", contains=[str(MAX_MODEL_LEN)])
    check(server, "unknown model", 404, "POST", CHAT, chat(model="gpt-5"), param="model",
          code="model_not_found")
    check(server, "unknown model id", 404, "GET", "/v1/models/gpt-5", code="model_not_found")
    check(server, "unknown route GET", 404, "GET", "/v1/engines")
    check(server, "unknown route POST", 404, "POST", "/v1/images/generations", {"prompt": "x"})
    check(server, "embeddings without input", 400, "POST", "/v1/embeddings", {"model": "tiny"},
          param="input")
    check(server, "embeddings of an empty string list", 400, "POST", "/v1/embeddings",
          {"input": [[]]}, param="input[0]")
    check(server, "embeddings encoding_format hex", 400, "POST", "/v1/embeddings",
          {"input": "x", "encoding_format": "hex"}, param="encoding_format")
    check(server, "embeddings of too many inputs", 400, "POST", "/v1/embeddings",
          {"input": ["x"] * 300}, param="input")
    check(server, "embeddings longer than max_model_len", 400, "POST", "/v1/embeddings",
          {"input": [[5] * (MAX_MODEL_LEN + 1)]}, param="input[0]", contains=["max_model_len"])
    check(server, "embeddings of a known model", 200, "POST", "/v1/embeddings",
          {"model": "tiny", "input": ["a", "b"]})
    # ---- The Responses and Messages APIs -------------------------------------------
    check(server, "responses without input", 400, "POST", "/v1/responses",
          {"model": "tiny", "max_output_tokens": 2}, param="input")
    check(server, "responses with previous_response_id", 400, "POST", "/v1/responses",
          {"input": "hi", "previous_response_id": "resp_1"}, param="previous_response_id",
          contains=["whole conversation"])
    check(server, "responses with a web search tool", 400, "POST", "/v1/responses",
          {"input": "hi", "tools": [{"type": "web_search"}]}, param="tools[0].type")
    check(server, "responses max_output_tokens 0", 400, "POST", "/v1/responses",
          {"input": "hi", "max_output_tokens": 0}, param="max_output_tokens")
    check(server, "responses input item without call_id", 400, "POST", "/v1/responses",
          {"input": [{"type": "function_call_output", "output": "x"}]},
          param="input[0].call_id")
    check(server, "responses text.format xml", 400, "POST", "/v1/responses",
          {"input": "hi", "text": {"format": {"type": "xml"}}}, param="text.format.type")
    for name, body, want in [
            ("messages without max_tokens", {"messages": user()}, "max_tokens"),
            ("messages with an image", {"max_tokens": 2, "messages": [
                {"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image"),
            ("messages with a bad role", {"max_tokens": 2,
                                          "messages": [{"role": "system", "content": "x"}]},
             "role"),
            ("messages tool_choice any without tools", {
                "max_tokens": 2, "messages": user(), "tool_choice": {"type": "any"}}, "tools")]:
        got, reply = server.request("POST", "/v1/messages", body, {"x-api-key": KEY})
        fail_if(got != 400 or reply.get("type") != "error" or
                reply["error"].get("type") != "invalid_request_error" or
                want not in reply["error"]["message"], f"{name}: {got} {reply}")
        cases.append((name, got))
    got, reply = server.request("POST", "/v1/messages",
                                {"model": "tiny", "max_tokens": 2, "messages": user()},
                                {"x-api-key": KEY})
    fail_if(got != 200 or reply.get("type") != "message", f"messages with x-api-key: {reply}")
    cases.append(("messages with x-api-key", got))
    got, reply = server.request("POST", "/v1/messages",
                                {"model": "tiny", "max_tokens": 2, "messages": user()},
                                {"x-api-key": "nope"})
    fail_if(got != 401, f"messages with a wrong x-api-key: {got} {reply}")
    cases.append(("messages with a wrong x-api-key", got))
    # ---- Keys --------------------------------------------------------------------
    check(server, "missing key", 401, "POST", CHAT, chat(), headers={}, code="invalid_api_key")
    check(server, "wrong key", 401, "POST", CHAT, chat(),
          headers={"Authorization": "Bearer nope"}, code="invalid_api_key")
    check(server, "key in the wrong scheme", 401, "GET", "/v1/models",
          headers={"Authorization": f"Basic {KEY}"})
    check(server, "key as a prefix", 401, "GET", "/v1/models",
          headers={"Authorization": f"Bearer {KEY}x"})
    # ---- Sizes -------------------------------------------------------------------
    check(server, "oversized body", 413, "POST", CHAT,
          chat(messages=user("x" * 100_000)), code="request_too_large")
    raw, t_status = raw_exchange(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                 b"Authorization: Bearer " + KEY.encode() +
                                 b"\r\nContent-Length: 1000000000000\r\n\r\n{", wait_s=10)
    fail_if(status_of(raw) != 413 or t_status > 3,
            f"huge Content-Length: {raw[:200]} after {t_status:.1f}s")
    cases.append(("declared 1 TB body", 413))
    body = json.dumps(chat(messages=user("y" * 80_000))).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 4096]), body[i:i + 4096])
                       for i in range(0, len(body), 4096)) + b"0\r\n\r\n"
    raw, _ = raw_exchange(server, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Authorization: Bearer " + KEY.encode() +
                       b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    fail_if(status_of(raw) != 413, f"chunked oversized body: {raw[:300]}")
    cases.append(("chunked oversized body", 413))
    # ---- Broken HTTP -------------------------------------------------------------
    raw, _ = raw_exchange(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: twelve\r\n\r\n{}")
    fail_if(status_of(raw) != 400, f"invalid Content-Length: {raw[:200]}")
    cases.append(("invalid Content-Length", 400))
    raw, _ = raw_exchange(server, b"HELLO THERE\r\n\r\n")
    fail_if(status_of(raw) not in (None, 400), f"garbage request line: {raw[:200]}")
    cases.append(("garbage request line", status_of(raw) or "closed"))
    raw, _ = raw_exchange(server, b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    fail_if(status_of(raw) not in (None, 400, 431), f"20 KB header: {raw[:200]}")
    cases.append(("20 KB header", status_of(raw) or "closed"))
    raw, _ = raw_exchange(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Authorization: Bearer " + KEY.encode() + b"\r\n\r\n{\"prompt\": \"a\"}")
    fail_if(status_of(raw) not in (None, 400, 411), f"POST without length: {raw[:200]}")
    cases.append(("POST without Content-Length", status_of(raw) or "closed"))

    # ---- Accepted despite oddities: unknown fields are ignored, as OpenAI does ---
    reply = check(server, "unknown fields", 200, "POST", CHAT,
                  chat(frobnicate={"a": [1]}, user="u1", tools=[], metadata={"k": "v"},
                       developer_note=None))
    fail_if(reply["choices"][0]["finish_reason"] not in ("stop", "length"), f"{reply}")

    # ---- A stalled client holds one connection, nobody else ----------------------
    stalled_head = server.connect()
    stalled_head.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # headers never end
    stalled_body = server.connect()
    stalled_body.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
                         b"Bearer " + KEY.encode() + b"\r\nContent-Length: 500\r\n\r\n{\"mess")
    t0 = time.time()
    check(server, "request beside two stalled ones", 200, "POST", CHAT, chat())
    fail_if(time.time() - t0 > 5, f"a stalled client slowed others: {time.time() - t0:.1f}s")
    for s, name in ((stalled_head, "partial headers"), (stalled_body, "partial body")):
        s.settimeout(20)
        t0 = time.time()
        leftover = b""
        try:
            while True:
                b = s.recv(4096)
                if not b:
                    break
                leftover += b
        except ConnectionResetError:
            pass
        fail_if(time.time() - t0 > 15, f"{name}: not dropped after {time.time() - t0:.1f}s")
        fail_if(status_of(leftover) not in (None, 400), f"{name}: {leftover[:200]}")
        s.close()
        cases.append((f"{name} left hanging", "dropped"))

    # ---- Clients that leave: their requests are cancelled, their blocks freed ----
    def blocks_used():
        return server.request("GET", "/v1/memory", headers=AUTH)[1]["kv_blocks_used"]

    before, _ = server.metrics()
    long_body = {"prompt": "once upon a time", "max_tokens": MAX_MODEL_LEN - 100,
                 "ignore_eos": True, "stream": True}
    sock, got = start_stream(server, long_body)
    fail_if(blocks_used() == 0, "a running stream holds no KV blocks")
    t_close = time.time()
    sock.close()
    t_free = wait_until(lambda: blocks_used() == 0, 5, "blocks freed after a disconnect")
    after, _ = server.metrics()
    gen_then = after["headroom_generation_tokens_total"]
    time.sleep(0.3)
    gen_later = server.metrics()[0]["headroom_generation_tokens_total"]
    fail_if(gen_later != gen_then, "generation went on after the client left")
    fail_if(gen_then - before["headroom_generation_tokens_total"] >= MAX_MODEL_LEN - 100,
            "the abandoned request ran to its end")
    for key, n in (('headroom_requests_finished_total{finish_reason="abort"}', 1),
                   ("headroom_client_disconnects_total", 1)):
        fail_if(after[key] - before.get(key, 0) != n, f"{key} moved by {after[key] - before[key]}")
    cases.append(("disconnect mid-stream", f"cancelled, blocks free in {t_free - t_close:.2f}s"))

    # The same for a non-streaming request whose client gives up waiting.
    data = json.dumps(dict(long_body, stream=False)).encode()
    s = server.connect()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
              KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    wait_until(lambda: blocks_used() > 0, 5, "the non-streaming request to start")
    t_close = time.time()
    s.close()
    t_free = wait_until(lambda: blocks_used() == 0, 5, "blocks freed after a waiting client left")
    cases.append(("disconnect while waiting", f"cancelled, blocks free in {t_free - t_close:.2f}s"))

    # ---- Afterwards everything still works ---------------------------------------
    client = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=60)
    r = client.chat.completions.create(model="tiny", messages=user("still there?"), max_tokens=4,
                                       extra_body={"ignore_eos": True})
    fail_if(r.usage.completion_tokens != 4 or r.choices[0].finish_reason != "length", f"{r}")
    try:
        openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0).models.list()
        fail_if(True, "a wrong key was accepted by the openai client")
    except openai.AuthenticationError:
        pass
    code = server.stop()
    fail_if(code != 0, f"exit code {code}")

# ---- A full queue: 503 with Retry-After, and service once there is room ---------
with Server(["-m", model, "--max-queued", "2", "--max-model-len", "4096", "--kv-cache-memory",
             "16MiB", "-t", "1", "-q"]) as server:
    busy = [start_stream(server, {"prompt": f"story {i}", "max_tokens": 4000, "ignore_eos": True,
                                  "stream": True})[0] for i in range(2)]
    got, reply = server.request("POST", COMPLETIONS, {"prompt": "one more", "max_tokens": 2})
    fail_if(got != 503 or reply["error"]["code"] != "queue_full", f"full queue: {got} {reply}")
    fail_if(server.last_headers.get("Retry-After") != "1",
            f"no Retry-After: {server.last_headers}")
    status, health = server.request("GET", "/health")
    fail_if(status != 200, f"/health with a full queue: {status}")
    cases.append(("queue over --max-queued", 503))
    for s in busy:
        s.close()
    wait_until(lambda: server.request("POST", COMPLETIONS, {"prompt": "room now?",
                                                            "max_tokens": 2})[0] == 200,
               10, "a seat after the busy clients left")
    code = server.stop()
    fail_if(code != 0, f"exit code {code}")

fail_if(len(cases) < 30, f"only {len(cases)} cases")
print(f"ok: {len(cases)} hostile or malformed requests, each refused or dropped cleanly; "
      "normal requests succeed afterwards")
for name, outcome in cases:
    print(f"  {outcome}  {name}")
