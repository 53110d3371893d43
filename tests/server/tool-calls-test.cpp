// Tool-call parsing per template family, from model outputs written by hand
// in each family's documented format (plain text, one call, two calls, a call
// after text, malformed markup), and the reasoning split. Expected values are
// read off the formats, not produced by the parser.
#include "server/tool-calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "server/openai-json.h"
#include "test-util.h"

namespace headroom::server {
namespace {

using json = nlohmann::json;

struct Expected {
    std::string content;
    std::vector<std::pair<std::string, json>> calls;  // (name, arguments)
};

void expect_answer(ToolFormat format, const std::string& text, const Expected& want) {
    SCOPED_TRACE(std::string(tool_format_name(format)) + ": " + text);
    const ParsedAnswer got = parse_answer(format, text, true);
    EXPECT_EQ(got.content, want.content);
    ASSERT_EQ(got.calls.size(), want.calls.size());
    for (size_t i = 0; i < got.calls.size(); ++i) {
        EXPECT_EQ(got.calls[i].name, want.calls[i].first);
        EXPECT_EQ(json::parse(got.calls[i].arguments), want.calls[i].second);
        EXPECT_TRUE(got.calls[i].id.starts_with("call_")) << got.calls[i].id;
        EXPECT_EQ(got.calls[i].id.size(), 5u + 24u);
    }
    // Streamed in pieces of 3 bytes, the splitter gives the same answer.
    AnswerSplitter splitter(format, true, false);
    std::string content;
    std::vector<ToolCall> calls;
    for (size_t i = 0; i < text.size(); i += 3) {
        auto part = splitter.push(std::string_view(text).substr(i, 3));
        content += part.content;
        EXPECT_TRUE(part.calls.empty());
    }
    auto last = splitter.finish();
    content += last.content;
    calls = last.calls;
    if (want.calls.empty()) {
        EXPECT_EQ(content, want.content);
    } else {
        // Text before a call may end in the whitespace the whole parse trims.
        EXPECT_EQ(content.substr(0, want.content.size()), want.content);
    }
    ASSERT_EQ(calls.size(), want.calls.size());
    for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i].name, want.calls[i].first);
}

const json kParis = {{"city", "Paris"}};
const json kRome = {{"city", "Rome"}, {"unit", "celsius"}};

TEST(ToolCalls, Hermes) {
    const auto f = ToolFormat::Hermes;
    expect_answer(f, "It is sunny.", {"It is sunny.", {}});
    expect_answer(f,
                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                  "\"Paris\"}}\n</tool_call>",
                  {"", {{"get_weather", kParis}}});
    expect_answer(f,
                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                  "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
                  "\"arguments\": {\"city\": \"Rome\", \"unit\": \"celsius\"}}\n</tool_call>",
                  {"", {{"get_weather", kParis}, {"get_weather", kRome}}});
    expect_answer(f,
                  "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                  "{\"city\": \"Paris\"}}\n</tool_call>",
                  {"Let me check.", {{"get_weather", kParis}}});
    // Malformed: not JSON inside a closed block stays text.
    expect_answer(f, "<tool_call>\nget_weather(Paris)\n</tool_call>",
                  {"<tool_call>\nget_weather(Paris)\n</tool_call>", {}});
}

TEST(ToolCalls, HermesCallCutOffIsNotContent) {
    const ParsedAnswer got = parse_answer(
        ToolFormat::Hermes, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"argu", true);
    EXPECT_EQ(got.content, "Sure.");
    EXPECT_TRUE(got.calls.empty());
}

TEST(ToolCalls, Llama3) {
    const auto f = ToolFormat::Llama3;
    expect_answer(f, "It is sunny.", {"It is sunny.", {}});
    expect_answer(f, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                  {"", {{"get_weather", kParis}}});
    expect_answer(f,
                  "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": "
                  "\"Paris\"}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", "
                  "\"unit\": \"celsius\"}}",
                  {"", {{"get_weather", kParis}, {"get_weather", kRome}}});
    // A call after text (auto lets the model write some first).
    expect_answer(f,
                  "Let me check. {\"name\": \"get_weather\", \"parameters\": {\"city\": "
                  "\"Paris\"}}",
                  {"Let me check.", {{"get_weather", kParis}}});
    // A JSON answer that is not a call is content, also one with a "name".
    expect_answer(f, "{\"city\": \"Paris\"}", {"{\"city\": \"Paris\"}", {}});
    expect_answer(f, "{\"name\": \"Bob\", \"age\": 3}", {"{\"name\": \"Bob\", \"age\": 3}", {}});
    expect_answer(f, "{\"name\": \"get_weather\", \"parameters\": {\"city\": ",
                  {"{\"name\": \"get_weather\", \"parameters\": {\"city\": ", {}});
}

TEST(ToolCalls, Mistral) {
    const auto f = ToolFormat::Mistral;
    expect_answer(f, "It is sunny.", {"It is sunny.", {}});
    expect_answer(f,
                  "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
                  {"", {{"get_weather", kParis}}});
    expect_answer(f,
                  "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                  "\"Paris\"}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", "
                  "\"unit\": \"celsius\"}}]",
                  {"", {{"get_weather", kParis}, {"get_weather", kRome}}});
    // Small 3.2 / Devstral: name[ARGS]{...}, one marker per call.
    expect_answer(f,
                  "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]"
                  "get_weather[ARGS]{\"city\": \"Rome\", \"unit\": \"celsius\"}",
                  {"Checking.", {{"get_weather", kParis}, {"get_weather", kRome}}});
    expect_answer(f, "[TOOL_CALLS][{\"name\": \"get_weather\"",
                  {"[TOOL_CALLS][{\"name\": \"get_weather\"", {}});
}

TEST(ToolCalls, DeepSeek) {
    const auto f = ToolFormat::DeepSeek;
    expect_answer(f, "It is sunny.", {"It is sunny.", {}});
    // V3: function<sep>NAME, the arguments in a json code block.
    expect_answer(f,
                  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                  "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>"
                  "function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Rome\", \"unit\": "
                  "\"celsius\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                  {"", {{"get_weather", kParis}, {"get_weather", kRome}}});
    // V3.1: NAME<sep>{...}, after text.
    expect_answer(f,
                  "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                  "{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                  {"Let me look.", {{"get_weather", kParis}}});
    expect_answer(f, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather",
                  {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather", {}});
}

TEST(ToolCalls, Generic) {
    // The generic convention is Hermes' markup.
    expect_answer(ToolFormat::Generic,
                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
                  "\\\"Paris\\\"}\"}\n</tool_call>",
                  {"", {{"get_weather", kParis}}});
}

TEST(ToolCalls, Harmony) {
    // gpt-oss: reasoning on the analysis channel, a call on commentary.
    const std::string text =
        "<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant"
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        "{\"city\": \"Paris\"}";
    const ParsedAnswer got = parse_answer(ToolFormat::Harmony, text, true);
    EXPECT_EQ(got.reasoning, "The user wants the weather.");
    EXPECT_EQ(got.content, "");
    ASSERT_EQ(got.calls.size(), 1u);
    EXPECT_EQ(got.calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(got.calls[0].arguments), kParis);
    // An answer on the final channel.
    const ParsedAnswer answer = parse_answer(
        ToolFormat::Harmony,
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>"
        "Four.",
        false);
    EXPECT_EQ(answer.reasoning, "Easy.");
    EXPECT_EQ(answer.content, "Four.");
    EXPECT_TRUE(answer.calls.empty());
    // The recipient may come before the channel.
    const ParsedAnswer early = parse_answer(
        ToolFormat::Harmony,
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        "{\"city\": \"Paris\"}<|call|>",
        true);
    ASSERT_EQ(early.calls.size(), 1u);
    EXPECT_EQ(early.calls[0].name, "get_weather");
}

TEST(ToolCalls, ThinkBlockIsReasoning) {
    const ParsedAnswer got =
        parse_answer(ToolFormat::Hermes, "<think>\nThe user asks 2+2.\n</think>\n\nFour.", false);
    EXPECT_EQ(got.reasoning, "The user asks 2+2.");
    EXPECT_EQ(got.content, "Four.");
    // The template opened the block in the prompt: the answer starts inside it.
    AnswerSplitter s(ToolFormat::Hermes, true, true);
    auto a = s.push("Two and two");
    EXPECT_EQ(a.reasoning, "");
    EXPECT_EQ(a.content, "");
    auto b = s.push(" make four.</think>\n\nFour");
    EXPECT_EQ(b.reasoning, "Two and two make four.");
    EXPECT_EQ(b.content, "Four");
    auto c = s.push(".");
    EXPECT_EQ(c.content, ".");
    EXPECT_TRUE(s.finish().content.empty());
}

TEST(ToolCalls, ToolChoiceNoneKeepsMarkup) {
    const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    const ParsedAnswer got = parse_answer(ToolFormat::Hermes, text, false);
    EXPECT_EQ(got.content, text);
    EXPECT_TRUE(got.calls.empty());
}

TEST(ToolCalls, DetectsFamilies) {
    EXPECT_EQ(detect_tool_format("{{ '<tool_call>' }}"), ToolFormat::Hermes);
    EXPECT_EQ(detect_tool_format("[TOOL_CALLS]"), ToolFormat::Mistral);
    EXPECT_EQ(detect_tool_format("<|channel|>"), ToolFormat::Harmony);
    EXPECT_EQ(detect_tool_format("<｜tool▁calls▁begin｜>"), ToolFormat::DeepSeek);
    EXPECT_EQ(detect_tool_format("<|start_header_id|>{% if tools %}"), ToolFormat::Llama3);
    EXPECT_EQ(detect_tool_format("<|im_start|>"), ToolFormat::Generic);
}

TEST(ToolCalls, GenericPromptDescribesToolsAndFoldsResults) {
    Tool t;
    t.name = "get_weather";
    t.parameters = {{"type", "object"}};
    std::vector<ChatMessage> m = {
        {"user", "Weather in Paris?", {}},
        {"assistant",
         "",
         {{"tool_calls",
           {{{"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}}},
        {"tool", "21 C", {{"tool_call_id", "call_1"}}},
        {"user", "Thanks", {}},
    };
    const auto out = messages_for_template(ToolFormat::Generic, m, {t});
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(out[0].role, "system");
    EXPECT_NE(out[0].content.find("\"name\":\"get_weather\""), std::string::npos);
    EXPECT_EQ(out[2].role, "assistant");
    EXPECT_EQ(out[2].content,
              "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n"
              "</tool_call>");
    // The tool result became a user turn, merged with the next user message.
    EXPECT_EQ(out[3].role, "user");
    EXPECT_EQ(out[3].content, "<tool_response>\n21 C\n</tool_response>\nThanks");
}

TEST(ToolCalls, GrammarPerChoice) {
    Tool a, b;
    a.name = "a";
    b.name = "b";
    b.parameters = {{"type", "object"}, {"properties", {{"x", {{"type", "integer"}}}}}};
    EXPECT_FALSE(tool_grammar(ToolFormat::Hermes, {a, b}, {ToolChoiceMode::None, ""}, true));
    EXPECT_FALSE(tool_grammar(ToolFormat::Harmony, {a, b}, {ToolChoiceMode::Required, ""}, true));
    const auto named = tool_grammar(ToolFormat::Hermes, {a, b}, {ToolChoiceMode::Named, "b"}, true);
    ASSERT_TRUE(named);
    const json j = json::parse(named->text);
    EXPECT_EQ(j["format"]["type"], "tags_with_separator");
    ASSERT_EQ(j["format"]["tags"].size(), 1u);
    EXPECT_EQ(j["format"]["tags"][0]["begin"], "<tool_call>\n{\"name\": \"b\", \"arguments\": ");
    EXPECT_EQ(j["format"]["tags"][0]["content"]["json_schema"], json::parse(b.parameters.dump()));
    EXPECT_EQ(j["format"]["stop_after_first"], true);
    const auto any = tool_grammar(ToolFormat::Hermes, {a, b}, {ToolChoiceMode::Auto, ""}, true);
    ASSERT_TRUE(any);
    const json k = json::parse(any->text);
    EXPECT_EQ(k["format"]["type"], "triggered_tags");
    EXPECT_EQ(k["format"]["triggers"][0], "<tool_call>");
    EXPECT_EQ(k["format"]["tags"].size(), 2u);
    EXPECT_EQ(k["format"]["at_least_one"], false);
}

// A conversation on the wire (arguments as JSON text, as OpenAI sends them)
// reaches the template as tests/data/chat/tool-conversations.json holds it,
// the form the golden renderings (jinja2) were made from.
TEST(ToolCalls, WireMessagesBecomeTheTemplatesDicts) {
    std::ifstream f(test::data_path("chat/tool-conversations.json"));
    const auto convs = nlohmann::ordered_json::parse(f);
    for (const auto& [name, messages] : convs.items()) {
        SCOPED_TRACE(name);
        nlohmann::ordered_json wire = messages;
        for (auto& m : wire)
            if (m.contains("tool_calls"))
                for (auto& c : m["tool_calls"])
                    c["function"]["arguments"] = c["function"]["arguments"].dump();
        const nlohmann::ordered_json body = {{"messages", wire}};
        GenerationSpec spec;
        const auto error = parse_generation_request(body.dump(), Endpoint::Chat, spec);
        ASSERT_FALSE(error) << error->message;
        ASSERT_EQ(spec.messages.size(), messages.size());
        for (size_t i = 0; i < messages.size(); ++i) {
            nlohmann::ordered_json want = messages[i];
            want.erase("role");
            if (want["content"].is_string()) want.erase("content");
            // Key order aside (content keeps its place in the template's dict).
            EXPECT_EQ(json::parse(spec.messages[i].fields.dump()), json::parse(want.dump())) << i;
            EXPECT_EQ(spec.messages[i].content, messages[i]["content"].is_string()
                                                    ? messages[i]["content"].get<std::string>()
                                                    : "");
        }
    }
}

}  // namespace
}  // namespace headroom::server
