// Tool calling: the request's tools go into the prompt the way the model's
// chat template writes them, the model's answer is parsed back into OpenAI's
// tool_calls, and with tool_choice "required" or a named function a grammar
// makes sure a call comes out and parses.
//
// Each template family writes calls its own way (its documented format):
//
//   Hermes    Qwen2.5, Qwen3, Hermes 2/3, SmolLM3:
//             <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
//   Llama3    Llama 3.1-3.3: {"name": N, "parameters": {...}} to the end of
//             the answer, after <|python_tag|> or text or neither; several
//             separated by ";"
//   Mistral   [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]  (Nemo), or
//             [TOOL_CALLS]N[ARGS]{...}  (Small 3.2, Devstral)
//   Harmony   gpt-oss: <|start|>assistant<|channel|>commentary to=functions.N
//             <|constrain|>json<|message|>{...}<|call|>; the analysis channel is
//             the reasoning, the final channel the answer
//   DeepSeek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
//             \n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//             (V3), or ...<｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}... (V3.1)
//   Generic   a template with no tool syntax (SmolLM2, Gemma 3): the tools
//             are described in the system message and calls use Hermes'
//             markup; tool results come back as user turns.
//
// Parsing never throws; markup that does not parse stays in the content.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar.h"
#include "tokenizer/chat-template.h"

namespace headroom::server {

struct Tool {
    std::string name;
    std::string description;
    nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // a JSON schema
    bool strict = false;
};

enum class ToolChoiceMode { None, Auto, Required, Named };

struct ToolChoice {
    ToolChoiceMode mode = ToolChoiceMode::Auto;
    std::string name;  // Named
};

struct ToolCall {
    std::string id;  // "call_..."
    std::string name;
    std::string arguments;  // a JSON object, as text
};

enum class ToolFormat { Generic, Hermes, Llama3, Mistral, Harmony, DeepSeek };

const char* tool_format_name(ToolFormat format);
// The family of a chat template, from its source text.
ToolFormat detect_tool_format(std::string_view template_source);

// An answer split into what it says, what it reasoned and what it called.
struct ParsedAnswer {
    std::string content;
    std::string reasoning;
    std::vector<ToolCall> calls;
};
// Splits a whole answer. `parse_calls` false keeps calls' markup as content
// (tool_choice "none").
ParsedAnswer parse_answer(ToolFormat format, std::string_view text, bool parse_calls);

// How many leading bytes of a streamed answer so far are surely content
// (no tool call or reasoning markup starts in them); the rest is held back
// until the answer ends. `parse_calls` false: everything is content.
size_t content_prefix(ToolFormat format, std::string_view text, bool parse_calls);

// Splits an answer as it streams: reasoning once its block closes, content
// as soon as no markup can start in it, calls at the end.
class AnswerSplitter {
  public:
    // think_open: the prompt ended inside a <think> block (the template
    // opened it), so the answer starts with reasoning.
    AnswerSplitter(ToolFormat format, bool parse_calls, bool think_open)
        : format_(format), parse_calls_(parse_calls), think_open_(think_open) {}
    struct Out {
        std::string reasoning;
        std::string content;
        std::vector<ToolCall> calls;
    };
    // Adds text; returns what became final.
    Out push(std::string_view text);
    // The answer ended: everything held back.
    Out finish();

  private:
    void start_body(size_t at);
    ToolFormat format_;
    bool parse_calls_;
    bool think_open_;
    std::string raw_;
    size_t body_ = std::string::npos;  // where the answer after any reasoning starts
    size_t sent_ = 0;                  // raw_[body_, sent_) went out as content
    size_t scanned_ = 0;               // raw_[0, scanned_) searched for </think>
};

// The grammar that makes the answer a call of one of `tools`: tool_choice
// "required" (at least one call) or a named function (exactly that one);
// with "auto" the call's JSON is enforced once the model starts one. Null
// for "none" and for Harmony (its markers are control tokens the grammar
// cannot name; its calls are parsed, not enforced).
std::optional<GrammarSpec> tool_grammar(ToolFormat format, const std::vector<Tool>& tools,
                                        const ToolChoice& choice, bool parallel);

// The template's `tools` variable: OpenAI's [{"type": "function", "function": {...}}].
nlohmann::ordered_json tools_json(const std::vector<Tool>& tools);

// The conversation as a template of `format` reads it. Generic: the tools
// are described in the system message, assistant calls become Hermes markup
// and tool results user turns (merged with a neighbouring user turn, so
// strictly alternating templates accept them).
std::vector<ChatMessage> messages_for_template(ToolFormat format, std::vector<ChatMessage> messages,
                                               const std::vector<Tool>& tools);

// PREFIX_ and 24 random alphanumerics: the ids of calls, responses, items and messages.
std::string random_id(std::string_view prefix);
// A fresh "call_" id.
inline std::string new_tool_call_id() {
    return random_id("call");
}

}  // namespace headroom::server
