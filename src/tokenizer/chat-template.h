// Chat templates turn a conversation into the exact prompt text a model was
// trained on. A GGUF carries the model's own template as Jinja source
// (tokenizer.chat_template), written for Hugging Face transformers, so
// headroom runs it with a Jinja interpreter (tokenizer/jinja/) that reproduces
// transformers' rendering byte for byte: jinja2's sandbox with trim_blocks
// and lstrip_blocks, its tojson, raise_exception and strftime_now, and the
// variables apply_chat_template passes (messages, add_generation_prompt,
// bos_token, eos_token, tools=None, documents=None).
//
// A GGUF without a template gets a built-in one chosen by architecture:
// Gemma's for gemma*, Llama 3's for llama with a Llama 3 vocabulary, else
// ChatML with a warning. source() says which.
//
// Templates are untrusted input: parsing bounds nesting, rendering bounds
// steps, output size and recursion (jinja::RenderLimits); every failure is a
// one-line headroom::Error.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/gguf-reader.h"
#include "tokenizer/jinja/interpreter.h"

namespace headroom {

struct ChatMessage {
    std::string role;
    std::string content;
    // More keys of the message dict (tool_calls, tool_call_id, name); a
    // "content" here (null for an assistant turn that only called tools)
    // replaces the one above.
    nlohmann::ordered_json fields = nlohmann::ordered_json::object();
};

struct ChatTemplateOptions {
    // Append the tokens that open the assistant's turn, as in transformers.
    bool add_generation_prompt = true;
    // More template variables, a JSON object (e.g. {"enable_thinking": false,
    // "tools": [...]}); they override the standard ones. Ordered, because
    // templates print dicts (tool schemas) in their key order.
    nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
    // The instant strftime_now() formats, rendered in UTC, for reproducible
    // prompts; unset means the local time at the call.
    std::optional<std::time_t> now;
};

class ChatTemplate {
  public:
    // From tokenizer.chat_template with bos/eos texts looked up from
    // tokenizer.ggml.{bos,eos}_token_id in tokenizer.ggml.tokens; a built-in
    // template when the file has none. Throws headroom::Error for a template
    // that does not parse.
    static ChatTemplate from_gguf(const gguf::GgufFile& file);
    // Throws headroom::Error with line and column for a syntax error.
    static ChatTemplate from_string(std::string source, std::string bos_token,
                                    std::string eos_token);

    // Renders `messages`. Throws headroom::Error, one line, for a runtime
    // error: the template's raise_exception message, an undefined variable
    // used as an object, an unknown filter, a limit exceeded.
    std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
    std::string apply(const std::vector<ChatMessage>& messages,
                      const ChatTemplateOptions& options) const;

    // Where the template came from: "gguf", "string", or "built-in <name>"
    // (gemma, llama3, chatml).
    const std::string& source() const { return source_; }
    const std::string& text() const { return text_; }
    const std::string& bos_token() const { return bos_token_; }
    const std::string& eos_token() const { return eos_token_; }
    void set_limits(const jinja::RenderLimits& limits) { limits_ = limits; }

  private:
    ChatTemplate(std::string text, std::string bos_token, std::string eos_token,
                 std::string source);

    std::string text_;
    std::string bos_token_;
    std::string eos_token_;
    std::string source_;
    std::shared_ptr<const jinja::Template> tmpl_;
    jinja::RenderLimits limits_;
};

// The built-in templates, by name ("gemma", "llama3", "chatml"); nullptr for another name.
const char* builtin_chat_template(std::string_view name);

}  // namespace headroom
