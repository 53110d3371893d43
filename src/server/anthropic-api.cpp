#include "server/anthropic-api.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <random>

#include "server/sse.h"
#include "server/tool-calls.h"

namespace headroom::server {

using json = nlohmann::json;
using Error = std::optional<ApiError>;

namespace {

// Text blocks (or a string) joined with newlines.
Error block_text(const json& content, const std::string& param, std::string& out) {
    if (content.is_string()) {
        out = content.get<std::string>();
        return std::nullopt;
    }
    if (!content.is_array()) return bad_request(param, "expected a string or an array of blocks");
    for (size_t j = 0; j < content.size(); ++j) {
        const json& b = content[j];
        const std::string bp = fmt::format("{}[{}]", param, j);
        const json* type = b.is_object() ? find_field(b, "type") : nullptr;
        if (!type || *type != "text")
            return unsupported(bp + ".type", fmt::format("block type {} here (only text)",
                                                         type ? type->dump() : "(missing)"));
        const json* text = find_field(b, "text");
        if (!text || !text->is_string()) return bad_request(bp + ".text", "required, a string");
        if (!out.empty()) out += '\n';
        out += text->get<std::string>();
    }
    return std::nullopt;
}

Error convert_message(const json& m, const std::string& param, json& messages) {
    if (!m.is_object()) return bad_request(param, "expected a message object");
    const json* role = find_field(m, "role");
    if (!role || (*role != "user" && *role != "assistant"))
        return bad_request(param + ".role", "must be 'user' or 'assistant'");
    const json* content = find_field(m, "content");
    if (!content) return bad_request(param + ".content", "required, but missing");
    if (content->is_string()) {
        messages.push_back({{"role", *role}, {"content", *content}});
        return std::nullopt;
    }
    if (!content->is_array()) return bad_request(param + ".content", "expected a string or blocks");
    std::string text;
    json calls = json::array();
    for (size_t j = 0; j < content->size(); ++j) {
        const json& b = (*content)[j];
        const std::string bp = fmt::format("{}.content[{}]", param, j);
        const json* type = b.is_object() ? find_field(b, "type") : nullptr;
        if (!type || !type->is_string()) return bad_request(bp + ".type", "required, a string");
        const std::string t = type->get<std::string>();
        if (t == "text") {
            const json* s = find_field(b, "text");
            if (!s || !s->is_string()) return bad_request(bp + ".text", "required, a string");
            if (!text.empty()) text += '\n';
            text += s->get<std::string>();
        } else if (t == "tool_use" && *role == "assistant") {
            const json* id = find_field(b, "id");
            const json* name = find_field(b, "name");
            const json* input = find_field(b, "input");
            if (!id || !id->is_string()) return bad_request(bp + ".id", "required, a string");
            if (!name || !name->is_string()) return bad_request(bp + ".name", "required, a string");
            if (input && !input->is_object())
                return bad_request(bp + ".input", "must be an object");
            calls.push_back(
                {{"id", *id},
                 {"type", "function"},
                 {"function",
                  {{"name", *name}, {"arguments", input ? input->dump() : std::string("{}")}}}});
        } else if (t == "tool_result" && *role == "user") {
            const json* id = find_field(b, "tool_use_id");
            if (!id || !id->is_string())
                return bad_request(bp + ".tool_use_id", "required, a string");
            std::string result;
            if (const json* c = find_field(b, "content"))
                if (auto e = block_text(*c, bp + ".content", result)) return e;
            if (const json* err = find_field(b, "is_error"); err && *err == true)
                result = "Error: " + result;
            messages.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
        } else if (t == "thinking" || t == "redacted_thinking") {
            continue;
        } else {
            return unsupported(bp + ".type", fmt::format("block type '{}' in a {} message", t,
                                                         role->get<std::string>()));
        }
    }
    if (*role == "assistant") {
        json msg = {{"role", "assistant"}, {"content", text.empty() ? json(nullptr) : json(text)}};
        if (!calls.empty()) msg["tool_calls"] = std::move(calls);
        if (!text.empty() || msg.contains("tool_calls")) messages.push_back(std::move(msg));
    } else if (!text.empty()) {
        messages.push_back({{"role", "user"}, {"content", text}});
    }
    return std::nullopt;
}

Error convert_tools(const json& body, json& chat) {
    if (const json* tools = find_field(body, "tools")) {
        if (!tools->is_array()) return bad_request("tools", "expected an array of tools");
        json out = json::array();
        for (size_t i = 0; i < tools->size(); ++i) {
            const json& t = (*tools)[i];
            const std::string param = fmt::format("tools[{}]", i);
            if (!t.is_object()) return bad_request(param, "expected a tool object");
            if (const json* type = find_field(t, "type"); type && *type != "custom")
                return unsupported(param + ".type",
                                   fmt::format("server tool {} (only client tools)", type->dump()));
            json fn = json::object();
            if (const json* v = find_field(t, "name")) fn["name"] = *v;
            if (const json* v = find_field(t, "description")) fn["description"] = *v;
            if (const json* v = find_field(t, "input_schema")) fn["parameters"] = *v;
            out.push_back({{"type", "function"}, {"function", fn}});
        }
        chat["tools"] = std::move(out);
    }
    if (const json* choice = find_field(body, "tool_choice")) {
        const json* type = choice->is_object() ? find_field(*choice, "type") : nullptr;
        if (!type || !type->is_string())
            return bad_request("tool_choice.type", "required, one of auto, any, tool, none");
        const std::string t = type->get<std::string>();
        if (t == "auto") {
            chat["tool_choice"] = "auto";
        } else if (t == "any") {
            chat["tool_choice"] = "required";
        } else if (t == "none") {
            chat["tool_choice"] = "none";
        } else if (t == "tool") {
            const json* name = find_field(*choice, "name");
            chat["tool_choice"] = {{"type", "function"},
                                   {"function", {{"name", name ? *name : json(nullptr)}}}};
        } else {
            return bad_request("tool_choice.type",
                               fmt::format("'{}' is not one of auto, any, tool, none", t));
        }
        if (const json* d = find_field(*choice, "disable_parallel_tool_use"); d && d->is_boolean())
            chat["parallel_tool_calls"] = !d->get<bool>();
    }
    return std::nullopt;
}

// The chat parser names chat's fields; say the Messages API's instead.
ApiError renamed(ApiError e) {
    auto rename = [&](std::string_view from, std::string_view to) {
        const auto at = e.param.find(from);
        if (at == std::string::npos) return;
        const std::string old = e.param;
        e.param.replace(at, from.size(), to);
        if (const auto m = e.message.find(old); m != std::string::npos)
            e.message.replace(m, old.size(), e.param);
    };
    if (e.param == "stop") rename("stop", "stop_sequences");
    if (e.param.starts_with("tools[")) {
        rename(".function.parameters", ".input_schema");
        rename(".function.", ".");
    }
    return e;
}

}  // namespace

std::optional<ApiError> parse_anthropic_request(std::string_view body, GenerationSpec& spec) {
    if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
        return bad_request(
            "", fmt::format("the request body nests deeper than {} levels", kMaxJsonDepth));
    const json j = json::parse(body, nullptr, false);
    if (j.is_discarded()) return bad_request("", "the request body is not valid JSON");
    if (!j.is_object()) return bad_request("", "the request body must be a JSON object");
    if (!find_field(j, "max_tokens")) return bad_request("max_tokens", "required, but missing");
    json chat = json::object();
    for (const char* key : {"model", "max_tokens", "temperature", "top_p", "top_k", "stream"})
        if (const json* v = find_field(j, key)) chat[key] = *v;
    if (const json* stop = find_field(j, "stop_sequences")) chat["stop"] = *stop;
    json messages = json::array();
    if (const json* system = find_field(j, "system")) {
        std::string text;
        if (auto e = block_text(*system, "system", text)) return e;
        messages.push_back({{"role", "system"}, {"content", text}});
    }
    const json* list = find_field(j, "messages");
    if (!list || !list->is_array() || list->empty())
        return bad_request("messages", "required, a non-empty array of messages");
    for (size_t i = 0; i < list->size(); ++i)
        if (auto e = convert_message((*list)[i], fmt::format("messages[{}]", i), messages))
            return e;
    chat["messages"] = std::move(messages);
    if (auto e = convert_tools(j, chat)) return e;
    if (const json* thinking = find_field(j, "thinking")) {
        const json* type = thinking->is_object() ? find_field(*thinking, "type") : nullptr;
        if (!type || (*type != "enabled" && *type != "disabled" && *type != "adaptive"))
            return bad_request("thinking.type", "must be 'enabled', 'adaptive' or 'disabled'");
        chat["chat_template_kwargs"] = {{"enable_thinking", *type != "disabled"}};
    }
    if (auto e = parse_generation_request(chat.dump(), Endpoint::Chat, spec)) return renamed(*e);
    return std::nullopt;
}

std::string anthropic_error_body(const ApiError& e) {
    std::string type = "invalid_request_error";
    switch (e.status) {
        case 401:
            type = "authentication_error";
            break;
        case 404:
            type = "not_found_error";
            break;
        case 413:
            type = "request_too_large";
            break;
        case 429:
        case 503:
            type = "overloaded_error";
            break;
        default:
            if (e.status >= 500) type = "api_error";
    }
    return dump({{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}});
}

namespace {

class AnthropicWire final : public Wire {
  public:
    AnthropicWire(const std::string& model, uint32_t n_prompt)
        : id_(random_id("msg")), model_(model), n_prompt_(n_prompt) {}

    void open(std::string& out) override {
        json message = skeleton();
        message["usage"] = {{"input_tokens", n_prompt_}, {"output_tokens", 0}};
        event("message_start", {{"message", message}}, out);
    }

    void reasoning(uint32_t, const std::string& text, std::string& out) override {
        close_text(out);
        const size_t index = blocks_.size();
        event("content_block_start",
              {{"index", index},
               {"content_block", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}}},
              out);
        event("content_block_delta",
              {{"index", index}, {"delta", {{"type", "thinking_delta"}, {"thinking", text}}}}, out);
        event("content_block_stop", {{"index", index}}, out);
        blocks_.push_back({{"type", "thinking"}, {"thinking", text}, {"signature", ""}});
    }

    void content(uint32_t, const std::string& text, json, std::string& out) override {
        if (text.empty()) return;
        if (text_block_ < 0) {
            text_block_ = static_cast<int>(blocks_.size());
            blocks_.push_back({{"type", "text"}, {"text", ""}});
            event("content_block_start",
                  {{"index", text_block_}, {"content_block", {{"type", "text"}, {"text", ""}}}},
                  out);
        }
        blocks_[text_block_]["text"] = blocks_[text_block_]["text"].get<std::string>() + text;
        event("content_block_delta",
              {{"index", text_block_}, {"delta", {{"type", "text_delta"}, {"text", text}}}}, out);
    }

    void call(uint32_t, const ToolCall& call, size_t, std::string& out) override {
        close_text(out);
        const size_t index = blocks_.size();
        const std::string id = "toolu_" + call.id.substr(call.id.find('_') + 1);
        event(
            "content_block_start",
            {{"index", index},
             {"content_block",
              {{"type", "tool_use"}, {"id", id}, {"name", call.name}, {"input", json::object()}}}},
            out);
        event("content_block_delta",
              {{"index", index},
               {"delta", {{"type", "input_json_delta"}, {"partial_json", call.arguments}}}},
              out);
        event("content_block_stop", {{"index", index}}, out);
        json input = json::parse(call.arguments, nullptr, false);
        if (input.is_discarded()) input = json::object();
        blocks_.push_back(
            {{"type", "tool_use"}, {"id", id}, {"name", call.name}, {"input", input}});
    }

    void finish(uint32_t, FinishReason reason, bool called, std::string& out) override {
        close_text(out);
        stop_reason_ = reason == FinishReason::Length ? "max_tokens"
                       : called                       ? "tool_use"
                                                      : "end_turn";
    }

    void close(const Usage& usage, std::string& out) override {
        event("message_delta",
              {{"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", nullptr}}},
               {"usage", {{"output_tokens", usage.n_completion_tokens}}}},
              out);
        event("message_stop", json::object(), out);
    }

    json whole(std::vector<ChoiceOutput> choices, const Usage& usage) override {
        ChoiceOutput& c = choices.at(0);
        std::string ignored;
        if (!c.reasoning.empty()) reasoning(0, c.reasoning, ignored);
        content(0, c.text, nullptr, ignored);
        for (size_t i = 0; i < c.calls.size(); ++i) call(0, c.calls[i], i, ignored);
        finish(0, c.finish, !c.calls.empty(), ignored);
        json message = skeleton();
        message["content"] = blocks_;
        message["stop_reason"] = stop_reason_;
        message["usage"] = {{"input_tokens", usage.n_prompt_tokens},
                            {"output_tokens", usage.n_completion_tokens},
                            {"cache_read_input_tokens", usage.n_cached_tokens}};
        return message;
    }

  private:
    json skeleton() const {
        return {{"id", id_},
                {"type", "message"},
                {"role", "assistant"},
                {"model", model_},
                {"content", json::array()},
                {"stop_reason", nullptr},
                {"stop_sequence", nullptr}};
    }

    void close_text(std::string& out) {
        if (text_block_ < 0) return;
        event("content_block_stop", {{"index", text_block_}}, out);
        text_block_ = -1;
    }

    static void event(const char* type, json data, std::string& out) {
        data["type"] = type;
        append_sse_event(out, type, dump(data));
    }

    std::string id_;
    std::string model_;
    uint32_t n_prompt_;
    json blocks_ = json::array();
    int text_block_ = -1;  // the open text block, or -1
    std::string stop_reason_ = "end_turn";
};

}  // namespace

std::unique_ptr<Wire> anthropic_wire(const std::string& model, uint32_t n_prompt) {
    return std::make_unique<AnthropicWire>(model, n_prompt);
}

}  // namespace headroom::server
