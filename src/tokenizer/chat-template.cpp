#include "tokenizer/chat-template.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/error.h"
#include "core/strings.h"
#include "tokenizer/jinja/parser.h"

namespace headroom {

namespace {

// google/gemma-3-4b-it tokenizer_config.json.
constexpr const char* kGemmaTemplate = R"TPL({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)TPL";

// meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json (its string
// literals hold real newlines).
constexpr const char* kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}";

// ChatML, as in transformers' former default template.
constexpr const char* kChatmlTemplate =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

std::string token_text(const gguf::GgufFile& file, std::string_view id_key) {
    const auto id = file.get_uint(id_key);
    const gguf::Array* tokens = file.get_array("tokenizer.ggml.tokens");
    if (!id || !tokens || *id >= tokens->strings.size()) return "";
    return std::string(tokens->strings[*id]);
}

bool has_llama3_vocab(const gguf::GgufFile& file) {
    const auto pre = file.get_string("tokenizer.ggml.pre");
    if (pre && (*pre == "llama-bpe" || *pre == "llama3")) return true;
    const gguf::Array* tokens = file.get_array("tokenizer.ggml.tokens");
    if (!tokens) return false;
    return std::find(tokens->strings.begin(), tokens->strings.end(), "<|start_header_id|>") !=
           tokens->strings.end();
}

jinja::Value from_json(const nlohmann::ordered_json& j, int depth) {
    if (depth > jinja::kMaxDepth)
        fail("chat template context nested deeper than {} levels", jinja::kMaxDepth);
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null:
            return jinja::Value::none();
        case nlohmann::ordered_json::value_t::boolean:
            return jinja::Value::boolean(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer:
            return jinja::Value::integer(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
            const auto u = j.get<uint64_t>();
            if (u > static_cast<uint64_t>(INT64_MAX))
                return jinja::Value::floating(static_cast<double>(u));
            return jinja::Value::integer(static_cast<int64_t>(u));
        }
        case nlohmann::ordered_json::value_t::number_float:
            return jinja::Value::floating(j.get<double>());
        case nlohmann::ordered_json::value_t::string:
            return jinja::Value::string(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            std::vector<jinja::Value> items;
            for (const auto& item : j) items.push_back(from_json(item, depth + 1));
            return jinja::Value::list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            auto d = std::make_shared<jinja::DictObject>();
            for (const auto& [k, v] : j.items())
                d->set(jinja::Value::string(k), from_json(v, depth + 1));
            return jinja::Value::dict(std::move(d));
        }
        default:
            fail("chat template context holds an unsupported JSON value");
    }
}

jinja::Value message_value(const ChatMessage& m) {
    auto d = std::make_shared<jinja::DictObject>();
    d->set(jinja::Value::string("role"), jinja::Value::string(m.role));
    d->set(jinja::Value::string("content"), jinja::Value::string(m.content));
    if (m.fields.is_object())
        for (const auto& [k, v] : m.fields.items())
            d->set(jinja::Value::string(k), from_json(v, 1));
    return jinja::Value::dict(std::move(d));
}

}  // namespace

const char* builtin_chat_template(std::string_view name) {
    if (name == "gemma") return kGemmaTemplate;
    if (name == "llama3") return kLlama3Template;
    if (name == "chatml") return kChatmlTemplate;
    return nullptr;
}

ChatTemplate::ChatTemplate(std::string text, std::string bos_token, std::string eos_token,
                           std::string source)
    : text_(std::move(text)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      source_(std::move(source)) {
    try {
        tmpl_ = jinja::parse(text_);
    } catch (const Error& e) {
        fail("chat template ({}): {}", source_, e.what());
    }
}

ChatTemplate ChatTemplate::from_string(std::string source, std::string bos_token,
                                       std::string eos_token) {
    return ChatTemplate(std::move(source), std::move(bos_token), std::move(eos_token), "string");
}

ChatTemplate ChatTemplate::from_gguf(const gguf::GgufFile& file) {
    std::string bos = token_text(file, "tokenizer.ggml.bos_token_id");
    std::string eos = token_text(file, "tokenizer.ggml.eos_token_id");
    if (const auto text = file.get_string("tokenizer.chat_template"); text && !text->empty())
        return ChatTemplate(std::string(*text), std::move(bos), std::move(eos), "gguf");
    const auto arch = file.get_string("general.architecture").value_or("");
    std::string name = "chatml";
    if (arch.starts_with("gemma")) {
        name = "gemma";
    } else if (arch == "llama" && has_llama3_vocab(file)) {
        name = "llama3";
    } else {
        // stderr: stdout carries only generated text.
        fmt::print(stderr,
                   "warning: {} has no tokenizer.chat_template and architecture '{}' has no "
                   "built-in one; using ChatML\n",
                   file.path(), clipped(arch));
    }
    return ChatTemplate(builtin_chat_template(name), std::move(bos), std::move(eos),
                        "built-in " + name);
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
    ChatTemplateOptions options;
    options.add_generation_prompt = add_generation_prompt;
    return apply(messages, options);
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                const ChatTemplateOptions& options) const {
    std::vector<jinja::Value> message_values;
    message_values.reserve(messages.size());
    for (const auto& m : messages) message_values.push_back(message_value(m));
    std::vector<std::pair<std::string, jinja::Value>> vars = {
        {"messages", jinja::Value::list(std::move(message_values))},
        {"add_generation_prompt", jinja::Value::boolean(options.add_generation_prompt)},
        {"bos_token", jinja::Value::string(bos_token_)},
        {"eos_token", jinja::Value::string(eos_token_)},
        {"tools", jinja::Value::none()},
        {"documents", jinja::Value::none()},
    };
    if (!options.extra_context.is_null()) {
        if (!options.extra_context.is_object()) fail("chat template context must be a JSON object");
        for (const auto& [k, v] : options.extra_context.items())
            vars.emplace_back(k, from_json(v, 0));
    }
    std::tm now{};
    if (options.now) {
        gmtime_r(&*options.now, &now);
    } else {
        const std::time_t t = std::time(nullptr);
        localtime_r(&t, &now);
    }
    jinja::Interpreter interpreter(limits_, now);
    try {
        return interpreter.render(*tmpl_, vars);
    } catch (const Error& e) {
        fail("chat template ({}): {}", source_, e.what());
    }
}

}  // namespace headroom
