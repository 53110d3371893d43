#!/usr/bin/env python3
"""Tool calling and structured outputs of `headroom serve` with SmolLM2-135M-Instruct,
driven by real clients: the openai package (chat completions and the
Responses API), the OpenAI Agents SDK, and the anthropic package (the
Messages API).

SmolLM2's chat template has no tool syntax, so the server describes the tools
in the system message and calls use Hermes' markup; with tool_choice
"required" or a named function, and inside any call it starts, a grammar
holds the output to a call whose arguments follow the tool's schema. Every
check validates against the schema with the jsonschema package (an
independent validator), and parses with the openai package's own parsers.
"""
import concurrent.futures
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from serverlib import Server, fail_if  # noqa: E402
from testlib import model_path  # noqa: E402

import anthropic  # noqa: E402
import jsonschema  # noqa: E402
import openai  # noqa: E402
import pydantic  # noqa: E402

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"timezone": {"type": "string"}},
    "required": ["timezone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER,
                                      "description": "The weather in a city."}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME,
                                      "description": "The time in a timezone."}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris and in Rome?"}]


def check_calls(what, calls, names=None, at_least=1, at_most=None):
    fail_if(calls is None or len(calls) < at_least, f"{what}: {calls!r}, expected tool calls")
    fail_if(at_most is not None and len(calls) > at_most,
            f"{what}: {len(calls)} calls, expected at most {at_most}")
    for c in calls:
        fail_if(not c.id.startswith("call_") or c.type != "function", f"{what}: call {c}")
        fail_if(c.function.name not in (names or SCHEMAS), f"{what}: called {c.function.name}")
        args = json.loads(c.function.arguments)
        jsonschema.validate(args, SCHEMAS[c.function.name])


def main():
    model = model_path("smollm2-135m")
    with Server(["-m", model, "--max-model-len", "2048", "--kv-cache-memory", "64MiB",
                 "--max-num-seqs", "16"]) as server:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="none")
        name = client.models.list().data[0].id

        def chat(**kw):
            kw.setdefault("messages", ASK)
            kw.setdefault("max_tokens", 96)
            return client.chat.completions.create(model=name, **kw)

        # ---- tool_choice required, a named function, auto --------------------
        r = chat(tools=TOOLS, tool_choice="required", temperature=0)
        m = r.choices[0].message
        check_calls("required", m.tool_calls)
        # A small model may go on calling until max_tokens cuts a call off:
        # the complete calls are returned, the cut one is not content.
        fail_if(r.choices[0].finish_reason not in ("tool_calls", "length"),
                f"required: {r.choices[0]}")
        fail_if(m.content not in (None, ""), f"required: content {m.content!r}")

        r = chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}},
                 temperature=0)
        check_calls("named", r.choices[0].message.tool_calls, names=["get_time"], at_most=1)
        fail_if(r.choices[0].finish_reason != "tool_calls", f"named: {r.choices[0]}")

        r = chat(tools=TOOLS, tool_choice="required", parallel_tool_calls=False, temperature=0)
        check_calls("parallel_tool_calls false", r.choices[0].message.tool_calls, at_most=1)

        # Parallel calls: sampled until an answer holds two (each validated).
        two = None
        for seed in range(12):
            r = chat(tools=TOOLS, tool_choice="required", temperature=1.0, seed=seed,
                     max_tokens=160)
            calls = r.choices[0].message.tool_calls
            check_calls(f"parallel seed {seed}", calls)
            if len(calls) >= 2:
                two = calls
                break
        fail_if(two is None, "no answer with two parallel calls in 12 samples")

        # auto: the model may answer or call; whatever it calls parses and validates.
        for seed in range(4):
            r = chat(tools=TOOLS, tool_choice="auto", temperature=0.7, seed=seed)
            m = r.choices[0].message
            if m.tool_calls:
                check_calls(f"auto seed {seed}", m.tool_calls)
                fail_if(r.choices[0].finish_reason != "tool_calls", f"auto: {r.choices[0]}")
            fail_if(m.content and "<tool_call>" in m.content, f"auto: markup in {m.content!r}")

        # ---- streamed tool calls: id and name first, then the arguments ------
        stream = chat(tools=TOOLS, tool_choice="required", temperature=0, stream=True)
        acc, finish, content = {}, None, ""
        for chunk in stream:
            for ch in chunk.choices:
                d = ch.delta
                content += d.content or ""
                for tc in d.tool_calls or []:
                    slot = acc.setdefault(tc.index, {"id": None, "name": None, "args": ""})
                    if tc.id:
                        fail_if(slot["id"] is not None, f"stream: second id for {tc.index}")
                        slot["id"] = tc.id
                    if tc.function and tc.function.name:
                        slot["name"] = tc.function.name
                    if tc.function and tc.function.arguments:
                        fail_if(slot["name"] is None, "stream: arguments before the name")
                        slot["args"] += tc.function.arguments
                finish = ch.finish_reason or finish
        fail_if(not acc, "stream: no tool calls")
        fail_if("<tool_call>" in content, f"stream: markup in content {content!r}")
        fail_if(finish not in ("tool_calls", "length"), f"stream: finish_reason {finish}")
        for slot in acc.values():
            fail_if(not slot["id"] or slot["name"] not in SCHEMAS, f"stream: {slot}")
            jsonschema.validate(json.loads(slot["args"]), SCHEMAS[slot["name"]])

        # ---- a tool round trip: the call and its result in the history -------
        call = r.choices[0].message.tool_calls
        r = chat(tools=TOOLS, temperature=0, tool_choice={"type": "function",
                                                          "function": {"name": "get_weather"}})
        call = r.choices[0].message.tool_calls[0]
        history = ASK + [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": call.id, "type": "function",
                             "function": {"name": call.function.name,
                                          "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'},
        ]
        r = chat(messages=history, tools=TOOLS, tool_choice="none", temperature=0)
        fail_if(not r.choices[0].message.content or r.choices[0].message.tool_calls,
                f"round trip: {r.choices[0].message}")

        # ---- structured outputs ----------------------------------------------
        class Person(pydantic.BaseModel):
            name: str = pydantic.Field(max_length=30)
            age: int
            city: str = pydantic.Field(max_length=30)

        parsed = client.chat.completions.parse(
            model=name, messages=[{"role": "user", "content": "Invent a person."}],
            response_format=Person, max_tokens=96, temperature=0)
        p = parsed.choices[0].message.parsed
        fail_if(not isinstance(p, Person), f"parse: {parsed.choices[0].message}")

        schema = {"type": "object", "additionalProperties": False,
                  "required": ["title", "year", "tags"],
                  "properties": {"title": {"type": "string", "maxLength": 40},
                                 "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
                                 "tags": {"type": "array", "items": {"type": "string",
                                                                     "maxLength": 20},
                                          "maxItems": 3}}}

        def one(seed):
            r = chat(messages=[{"role": "user", "content": "Describe a film as JSON."}],
                     response_format={"type": "json_schema",
                                      "json_schema": {"name": "film", "schema": schema,
                                                      "strict": True}},
                     temperature=0.8, seed=seed, max_tokens=160)
            return r.choices[0]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            outs = list(pool.map(one, range(20)))
        valid = 0
        for c in outs:
            try:
                jsonschema.validate(json.loads(c.message.content), schema)
                valid += 1
            except (ValueError, jsonschema.ValidationError) as e:
                print(f"invalid ({c.finish_reason}): {c.message.content!r}: {e}")
        print(f"json_schema: {valid} of 20 outputs valid")
        fail_if(valid != 20, f"json_schema: {valid} of 20 valid")

        r = chat(messages=[{"role": "user", "content": "A JSON object, please."}],
                 response_format={"type": "json_object"}, n=3, temperature=1.0, seed=5)
        for c in r.choices:
            fail_if(not isinstance(json.loads(c.message.content), dict), f"n=3: {c.message}")

        r = chat(messages=[{"role": "user", "content": "Is the sky blue?"}],
                 extra_body={"guided_choice": ["yes", "no", "it depends"]}, temperature=0)
        fail_if(r.choices[0].message.content not in ("yes", "no", "it depends"), f"choice: {r}")
        r = chat(messages=[{"role": "user", "content": "A date?"}],
                 extra_body={"structured_outputs": {"regex": "[0-9]{4}-[0-9]{2}-[0-9]{2}"}},
                 temperature=0)
        fail_if(len(r.choices[0].message.content) != 10 or r.choices[0].message.content[4] != "-",
                f"regex: {r.choices[0].message.content!r}")

        # ---- logit_bias: -100 bans the greedy first token --------------------
        first = chat(messages=[{"role": "user", "content": "Say hello."}], max_tokens=1,
                     temperature=0, logprobs=True)
        tok = first.choices[0].logprobs.content[0].token
        ids = server.request("POST", "/tokenize", {"prompt": tok, "add_special_tokens": False})[1]
        tid = ids["tokens"][0]
        banned = chat(messages=[{"role": "user", "content": "Say hello."}], max_tokens=1,
                      temperature=0, logprobs=True, logit_bias={str(tid): -100})
        fail_if(banned.choices[0].logprobs.content[0].token == tok,
                f"logit_bias -100 did not ban {tok!r} (id {tid})")

        # ---- the OpenAI Agents SDK runs a two-tool loop to its final answer --
        run_agent(server.base + "/v1", name)
        responses_api(client, name)
        messages_api(server.base, name)
    print("tool calling, structured outputs, responses and messages: ok")


def responses_api(client, name):
    tools = [{"type": "function", "name": t["function"]["name"],
              "description": t["function"]["description"],
              "parameters": t["function"]["parameters"]} for t in TOOLS]
    r = client.responses.create(model=name, input="What is the weather in Paris?", tools=tools,
                                tool_choice={"type": "function", "name": "get_weather"},
                                max_output_tokens=64, temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    fail_if(len(calls) != 1 or calls[0].name != "get_weather", f"responses: {r.output}")
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    fail_if(r.status != "completed" or not r.id.startswith("resp_"), f"responses: {r}")
    call = calls[0]
    r = client.responses.create(
        model=name, instructions="Answer in one sentence.", max_output_tokens=48, temperature=0,
        tools=tools, tool_choice="none",
        input=[{"role": "user", "content": "What is the weather in Paris?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id,
                "output": "21 degrees and sunny"}])
    fail_if(r.status not in ("completed", "incomplete") or not r.output_text,
            f"responses round trip: {r}")
    fail_if(r.usage.input_tokens <= 0 or r.usage.output_tokens <= 0, f"usage: {r.usage}")
    r = client.responses.create(
        model=name, input="Describe a city as JSON.", max_output_tokens=96, temperature=0,
        text={"format": {"type": "json_schema", "name": "city", "strict": True, "schema": {
            "type": "object", "additionalProperties": False, "required": ["name", "country"],
            "properties": {"name": {"type": "string", "maxLength": 30},
                           "country": {"type": "string", "maxLength": 30}}}}})
    fail_if(set(json.loads(r.output_text)) != {"name", "country"}, f"text.format: {r.output_text}")
    # Streamed: typed events in order, numbered, the deltas adding up to the text.
    events = list(client.responses.create(model=name, input="Say hello.", max_output_tokens=16,
                                          temperature=0, stream=True))
    types = [e.type for e in events]
    fail_if(types[0] != "response.created" or types[-1] not in ("response.completed",
                                                               "response.incomplete"),
            f"responses stream: {types}")
    seq = [e.sequence_number for e in events]
    fail_if(seq != list(range(len(seq))), f"sequence numbers {seq}")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    fail_if(deltas != events[-1].response.output_text, f"{deltas!r} vs {events[-1].response}")
    events = list(client.responses.create(model=name, input="Weather in Rome?", tools=tools,
                                          tool_choice="required", max_output_tokens=64,
                                          temperature=0, stream=True))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    fail_if(not done, f"no streamed call: {[e.type for e in events]}")
    jsonschema.validate(json.loads(done[0].arguments), WEATHER)
    print(f"responses: {len(events)} streamed events; round trip {r.status}")


def messages_api(base, name):
    client = anthropic.Anthropic(base_url=base, api_key="none")
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = client.messages.create(model=name, max_tokens=64, messages=ask, tools=tools,
                               tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0})
    uses = [b for b in m.content if b.type == "tool_use"]
    fail_if(m.stop_reason != "tool_use" or len(uses) != 1, f"messages: {m}")
    fail_if(not uses[0].id.startswith("toolu_") or uses[0].name != "get_weather", f"{uses}")
    jsonschema.validate(uses[0].input, WEATHER)
    m2 = client.messages.create(
        model=name, max_tokens=48, system="Answer in one sentence.", tools=tools, extra_body={"temperature": 0},
        tool_choice={"type": "none"},
        messages=ask + [{"role": "assistant", "content": m.content},
                        {"role": "user", "content": [{"type": "tool_result",
                                                      "tool_use_id": uses[0].id,
                                                      "content": "21 degrees and sunny"}]}])
    texts = [b.text for b in m2.content if b.type == "text"]
    fail_if(m2.stop_reason not in ("end_turn", "max_tokens") or not texts or not texts[0],
            f"messages round trip: {m2}")
    fail_if(m2.usage.input_tokens <= 0 or m2.usage.output_tokens <= 0, f"usage: {m2.usage}")
    with client.messages.stream(model=name, max_tokens=64, messages=ask, tools=tools,
                                tool_choice={"type": "any"}, extra_body={"temperature": 0}) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    fail_if(kinds[0] != "message_start" or "message_stop" not in kinds, f"stream: {kinds}")
    uses = [b for b in final.content if b.type == "tool_use"]
    fail_if(not uses or final.stop_reason not in ("tool_use", "max_tokens"), f"stream: {final}")
    jsonschema.validate(uses[0].input, WEATHER)
    try:
        client.messages.create(model=name, max_tokens=8, messages=[])
        fail_if(True, "an empty conversation was accepted")
    except anthropic.BadRequestError as e:
        fail_if(e.body.get("type") != "error" or e.body["error"]["type"] != "invalid_request_error",
                f"error shape: {e.body}")
    print(f"messages: tool_use {uses[0].input}; round trip {m2.stop_reason}")


def run_agent(base_url, model_name):
    import agents
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool

    agents.set_tracing_disabled(True)
    seen = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(("get_weather", city))
        return f"21 degrees and sunny in {city}"

    @function_tool
    def get_time(timezone: str) -> str:
        """The time in a timezone."""
        seen.append(("get_time", timezone))
        return f"It is 14:05 in {timezone}"

    model = OpenAIChatCompletionsModel(
        model=model_name, openai_client=openai.AsyncOpenAI(base_url=base_url, api_key="none"))
    # The first turn must call a tool (both may be called at once); then the
    # SDK resets tool_choice to auto and the model answers.
    agent = Agent(name="assistant", instructions="Use the tools, then answer briefly.",
                  tools=[get_weather, get_time], model=model,
                  model_settings=ModelSettings(tool_choice="required", temperature=0,
                                               max_tokens=96))
    result = Runner.run_sync(agent, "What is the weather in Paris, and the time in Europe/Paris?",
                             max_turns=6)
    fail_if(not seen, "agent: no tool was called")
    fail_if(not isinstance(result.final_output, str) or not result.final_output.strip(),
            f"agent: final output {result.final_output!r}")
    print(f"agent: tools called {seen}; final answer {result.final_output[:80]!r}")


if __name__ == "__main__":
    main()
