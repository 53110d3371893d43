#include "server/responses-api.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

#include "server/sse.h"
#include "server/tool-calls.h"

namespace headroom::server {

using json = nlohmann::json;
using Error = std::optional<ApiError>;

namespace {

// The text of a content given as a string or as parts (input_text,
// output_text, text), joined with newlines.
Error content_text(const json& content, const std::string& param, std::string& out) {
    if (content.is_string()) {
        out = content.get<std::string>();
        return std::nullopt;
    }
    if (!content.is_array()) return bad_request(param, "expected a string or an array of parts");
    for (size_t j = 0; j < content.size(); ++j) {
        const json& part = content[j];
        const std::string pp = fmt::format("{}[{}]", param, j);
        const json* type = part.is_object() ? find_field(part, "type") : nullptr;
        if (!type || !type->is_string()) return bad_request(pp + ".type", "required, a string");
        const std::string t = type->get<std::string>();
        if (t != "input_text" && t != "output_text" && t != "text")
            return unsupported(pp + ".type", fmt::format("content part type '{}'", t));
        const json* text = find_field(part, "text");
        if (!text || !text->is_string()) return bad_request(pp + ".text", "required, a string");
        if (j > 0) out += '\n';
        out += text->get<std::string>();
    }
    return std::nullopt;
}

Error required_string(const json& item, const char* key, const std::string& param,
                      std::string& out) {
    const json* v = find_field(item, key);
    if (!v || !v->is_string())
        return bad_request(param + "." + key, "required, and must be a string");
    out = v->get<std::string>();
    return std::nullopt;
}

// input items -> chat messages.
Error convert_input(const json& input, json& messages) {
    if (input.is_string()) {
        messages.push_back({{"role", "user"}, {"content", input}});
        return std::nullopt;
    }
    if (!input.is_array()) return bad_request("input", "expected a string or an array of items");
    for (size_t i = 0; i < input.size(); ++i) {
        const json& item = input[i];
        const std::string param = fmt::format("input[{}]", i);
        if (!item.is_object()) return bad_request(param, "expected an item object");
        std::string type = "message";
        if (const json* t = find_field(item, "type")) {
            if (!t->is_string()) return bad_request(param + ".type", "must be a string");
            type = t->get<std::string>();
        }
        if (type == "message") {
            std::string role, text;
            if (auto e = required_string(item, "role", param, role)) return e;
            const json* content = find_field(item, "content");
            if (!content) return bad_request(param + ".content", "required, but missing");
            if (auto e = content_text(*content, param + ".content", text)) return e;
            messages.push_back({{"role", role}, {"content", text}});
        } else if (type == "function_call") {
            std::string call_id, name, arguments;
            if (auto e = required_string(item, "call_id", param, call_id)) return e;
            if (auto e = required_string(item, "name", param, name)) return e;
            if (auto e = required_string(item, "arguments", param, arguments)) return e;
            const json call = {{"id", call_id},
                               {"type", "function"},
                               {"function", {{"name", name}, {"arguments", arguments}}}};
            // Calls after an assistant message (or after each other) are one turn.
            if (!messages.empty() && messages.back()["role"] == "assistant") {
                json& last = messages.back();
                if (!last.contains("tool_calls")) last["tool_calls"] = json::array();
                last["tool_calls"].push_back(call);
            } else {
                messages.push_back({{"role", "assistant"},
                                    {"content", nullptr},
                                    {"tool_calls", json::array({call})}});
            }
        } else if (type == "function_call_output") {
            std::string call_id, text;
            if (auto e = required_string(item, "call_id", param, call_id)) return e;
            const json* output = find_field(item, "output");
            if (!output) return bad_request(param + ".output", "required, but missing");
            if (auto e = content_text(*output, param + ".output", text)) return e;
            messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", text}});
        } else if (type == "reasoning") {
            continue;  // the template decides what earlier reasoning it shows
        } else {
            return unsupported(param + ".type", fmt::format("input item type '{}'", type));
        }
    }
    return std::nullopt;
}

Error convert_tools(const json& tools, json& chat) {
    if (!tools.is_array()) return bad_request("tools", "expected an array of tools");
    json out = json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const json& t = tools[i];
        const std::string param = fmt::format("tools[{}]", i);
        if (!t.is_object()) return bad_request(param, "expected a tool object");
        const json* type = find_field(t, "type");
        if (!type || *type != "function")
            return unsupported(param + ".type",
                               fmt::format("tool type {} (only 'function')",
                                           type ? type->dump() : std::string("(missing)")));
        json fn = json::object();
        for (const char* key : {"name", "description", "parameters", "strict"})
            if (const json* v = find_field(t, key)) fn[key] = *v;
        out.push_back({{"type", "function"}, {"function", fn}});
    }
    chat["tools"] = std::move(out);
    if (const json* choice = find_field(chat, "tool_choice"); choice && choice->is_object()) {
        const json* type = find_field(*choice, "type");
        if (!type || *type != "function")
            return unsupported("tool_choice", fmt::format("tool_choice {}", choice->dump()));
        const json* name = find_field(*choice, "name");
        chat["tool_choice"] = {{"type", "function"},
                               {"function", {{"name", name ? *name : json(nullptr)}}}};
    }
    return std::nullopt;
}

Error convert_text_format(const json& text, json& chat) {
    if (!text.is_object()) return bad_request("text", "expected an object");
    const json* format = find_field(text, "format");
    if (!format) return std::nullopt;
    if (!format->is_object()) return bad_request("text.format", "expected an object");
    const json* type = find_field(*format, "type");
    if (!type || !type->is_string()) return bad_request("text.format.type", "required, a string");
    if (*type == "text") return std::nullopt;
    if (*type == "json_object") {
        chat["response_format"] = {{"type", "json_object"}};
        return std::nullopt;
    }
    if (*type != "json_schema")
        return bad_request("text.format.type",
                           fmt::format("'{}' is not one of text, json_object, json_schema",
                                       type->get<std::string>()));
    json js = json::object();
    for (const char* key : {"name", "schema", "strict", "description"})
        if (const json* v = find_field(*format, key)) js[key] = *v;
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
    return std::nullopt;
}

// The chat parser names chat's fields; say the Responses API's instead.
ApiError renamed(ApiError e) {
    auto rename = [&](std::string_view from, std::string_view to) {
        if (!e.param.starts_with(from)) return false;
        const std::string old = e.param;
        e.param = std::string(to) + old.substr(from.size());
        if (const auto at = e.message.find(old); at != std::string::npos)
            e.message.replace(at, old.size(), e.param);
        return true;
    };
    rename("max_tokens", "max_output_tokens") ||
        rename("response_format.json_schema.schema", "text.format.schema") ||
        rename("response_format", "text.format") || rename("messages", "input");
    if (e.param.starts_with("tools[")) {
        if (const auto at = e.param.find(".function."); at != std::string::npos) {
            const std::string old = e.param;
            e.param.erase(at, 9);
            if (const auto m = e.message.find(old); m != std::string::npos)
                e.message.replace(m, old.size(), e.param);
        }
    }
    return e;
}

}  // namespace

std::optional<ApiError> parse_responses_request(std::string_view body, GenerationSpec& spec,
                                                json& echo) {
    if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
        return bad_request(
            "", fmt::format("the request body nests deeper than {} levels", kMaxJsonDepth));
    const json j = json::parse(body, nullptr, false);
    if (j.is_discarded()) return bad_request("", "the request body is not valid JSON");
    if (!j.is_object()) return bad_request("", "the request body must be a JSON object");
    if (find_field(j, "previous_response_id"))
        return unsupported("previous_response_id",
                           "previous_response_id (this server stores no responses: send the "
                           "whole conversation in input)");
    if (find_field(j, "conversation"))
        return unsupported("conversation", "conversation (this server stores no conversations)");
    json chat = json::object();
    for (const char* key :
         {"model", "temperature", "top_p", "stream", "seed", "parallel_tool_calls", "tool_choice",
          "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"})
        if (const json* v = find_field(j, key)) chat[key] = *v;
    if (const json* v = find_field(j, "max_output_tokens")) chat["max_tokens"] = *v;
    json messages = json::array();
    if (const json* instructions = find_field(j, "instructions")) {
        if (!instructions->is_string()) return bad_request("instructions", "must be a string");
        messages.push_back({{"role", "system"}, {"content", *instructions}});
    }
    const json* input = find_field(j, "input");
    if (!input) return bad_request("input", "required, but missing");
    if (auto e = convert_input(*input, messages)) return e;
    chat["messages"] = std::move(messages);
    if (const json* tools = find_field(j, "tools"))
        if (auto e = convert_tools(*tools, chat)) return e;
    if (const json* text = find_field(j, "text"))
        if (auto e = convert_text_format(*text, chat)) return e;
    if (const json* reasoning = find_field(j, "reasoning")) {
        if (!reasoning->is_object()) return bad_request("reasoning", "expected an object");
        if (const json* effort = find_field(*reasoning, "effort"))
            chat["reasoning_effort"] = *effort;
    }
    if (const json* top = find_field(j, "top_logprobs")) {
        chat["logprobs"] = true;
        chat["top_logprobs"] = *top;
    }
    if (auto e = parse_generation_request(chat.dump(), Endpoint::Chat, spec)) return renamed(*e);
    if (spec.choices.n != 1 || spec.choices.best_of > 1 || spec.choices.beam_search)
        return unsupported("n", "more than one answer per response");

    echo = json::object();
    echo["instructions"] = j.contains("instructions") ? j["instructions"] : json(nullptr);
    echo["max_output_tokens"] = j.value("max_output_tokens", json(nullptr));
    echo["parallel_tool_calls"] = spec.parallel_tool_calls;
    echo["temperature"] = spec.sampling.temperature;
    echo["top_p"] = spec.sampling.top_p;
    echo["tools"] = j.contains("tools") && j["tools"].is_array() ? j["tools"] : json::array();
    echo["tool_choice"] =
        j.contains("tool_choice") && !j["tool_choice"].is_null() ? j["tool_choice"] : json("auto");
    echo["text"] = j.contains("text") && j["text"].is_object()
                       ? j["text"]
                       : json{{"format", {{"type", "text"}}}};
    echo["reasoning"] = j.contains("reasoning") && j["reasoning"].is_object()
                            ? j["reasoning"]
                            : json{{"effort", nullptr}, {"summary", nullptr}};
    echo["metadata"] =
        j.contains("metadata") && j["metadata"].is_object() ? j["metadata"] : json::object();
    return std::nullopt;
}

namespace {

class ResponsesWire final : public Wire {
  public:
    ResponsesWire(const std::string& model, json echo) : echo_(std::move(echo)) {
        id_ = random_id("resp");
        created_ = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
        model_ = model;
    }

    void open(std::string& out) override {
        json r = response("in_progress", Usage{}, false);
        event("response.created", {{"response", r}}, out);
        event("response.in_progress", {{"response", r}}, out);
    }

    void reasoning(uint32_t, const std::string& text, std::string& out) override {
        close_message(out);
        const size_t index = items_.size();
        json item = {{"type", "reasoning"},
                     {"id", random_id("rs")},
                     {"summary", json::array()},
                     {"content", json::array()},
                     {"status", "in_progress"}};
        event("response.output_item.added", {{"output_index", index}, {"item", item}}, out);
        event("response.reasoning_text.delta",
              {{"item_id", item["id"]},
               {"output_index", index},
               {"content_index", 0},
               {"delta", text}},
              out);
        event("response.reasoning_text.done",
              {{"item_id", item["id"]},
               {"output_index", index},
               {"content_index", 0},
               {"text", text}},
              out);
        item["content"] = json::array({{{"type", "reasoning_text"}, {"text", text}}});
        item["status"] = "completed";
        event("response.output_item.done", {{"output_index", index}, {"item", item}}, out);
        items_.push_back(std::move(item));
    }

    void content(uint32_t, const std::string& text, json, std::string& out) override {
        if (text.empty()) return;
        if (message_ < 0) open_message(out);
        text_ += text;
        event("response.output_text.delta",
              {{"item_id", items_[message_]["id"]},
               {"output_index", message_},
               {"content_index", 0},
               {"delta", text},
               {"logprobs", json::array()}},
              out);
    }

    void call(uint32_t, const ToolCall& call, size_t, std::string& out) override {
        close_message(out);
        const size_t index = items_.size();
        json item = call_item(call);
        item["arguments"] = "";
        item["status"] = "in_progress";
        event("response.output_item.added", {{"output_index", index}, {"item", item}}, out);
        event("response.function_call_arguments.delta",
              {{"item_id", item["id"]}, {"output_index", index}, {"delta", call.arguments}}, out);
        event("response.function_call_arguments.done",
              {{"item_id", item["id"]},
               {"output_index", index},
               {"name", call.name},
               {"arguments", call.arguments}},
              out);
        item["arguments"] = call.arguments;
        item["status"] = "completed";
        event("response.output_item.done", {{"output_index", index}, {"item", item}}, out);
        items_.push_back(std::move(item));
    }

    void finish(uint32_t, FinishReason reason, bool, std::string& out) override {
        close_message(out);
        reason_ = reason;
    }

    void close(const Usage& usage, std::string& out) override {
        const json r = response(status(), usage, true);
        event(reason_ == FinishReason::Length ? "response.incomplete" : "response.completed",
              {{"response", r}}, out);
    }

    json whole(std::vector<ChoiceOutput> choices, const Usage& usage) override {
        ChoiceOutput& c = choices.at(0);
        std::string ignored;
        if (!c.reasoning.empty()) reasoning(0, c.reasoning, ignored);
        // An empty answer without calls is still a message.
        if (c.text.empty() && c.calls.empty()) open_message(ignored);
        content(0, c.text, nullptr, ignored);
        for (size_t i = 0; i < c.calls.size(); ++i) call(0, c.calls[i], i, ignored);
        finish(0, c.finish, !c.calls.empty(), ignored);
        return response(status(), usage, true);
    }

  private:
    static json text_part(const std::string& text) {
        return {{"type", "output_text"},
                {"text", text},
                {"annotations", json::array()},
                {"logprobs", json::array()}};
    }

    static json call_item(const ToolCall& call) {
        return {
            {"type", "function_call"},     {"id", "fc_" + call.id.substr(call.id.find('_') + 1)},
            {"call_id", call.id},          {"name", call.name},
            {"arguments", call.arguments}, {"status", "completed"}};
    }

    void open_message(std::string& out) {
        message_ = static_cast<int>(items_.size());
        items_.push_back({{"type", "message"},
                          {"id", random_id("msg")},
                          {"status", "in_progress"},
                          {"role", "assistant"},
                          {"content", json::array()}});
        event("response.output_item.added", {{"output_index", message_}, {"item", items_.back()}},
              out);
        event("response.content_part.added",
              {{"item_id", items_.back()["id"]},
               {"output_index", message_},
               {"content_index", 0},
               {"part", text_part("")}},
              out);
    }

    void close_message(std::string& out) {
        if (message_ < 0) return;
        json& item = items_[message_];
        const json part = text_part(text_);
        event("response.output_text.done",
              {{"item_id", item["id"]},
               {"output_index", message_},
               {"content_index", 0},
               {"text", text_},
               {"logprobs", json::array()}},
              out);
        event("response.content_part.done",
              {{"item_id", item["id"]},
               {"output_index", message_},
               {"content_index", 0},
               {"part", part}},
              out);
        item["content"] = json::array({part});
        item["status"] = "completed";
        event("response.output_item.done", {{"output_index", message_}, {"item", item}}, out);
        message_ = -1;
        text_.clear();
    }

    std::string status() const {
        switch (reason_) {
            case FinishReason::Length:
                return "incomplete";
            case FinishReason::Abort:
            case FinishReason::Error:
                return "failed";
            default:
                return "completed";
        }
    }

    json response(const std::string& status, const Usage& u, bool done) const {
        json r = {{"id", id_},
                  {"object", "response"},
                  {"created_at", created_},
                  {"status", status},
                  {"model", model_},
                  {"output", done ? items_ : json::array()},
                  {"error", nullptr},
                  {"incomplete_details", nullptr},
                  {"previous_response_id", nullptr},
                  {"store", false},
                  {"truncation", "disabled"}};
        for (const auto& [k, v] : echo_.items()) r[k] = v;
        if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
        if (status == "failed")
            r["error"] = {{"code", "server_error"}, {"message", "the request was aborted"}};
        if (done)
            r["usage"] = {{"input_tokens", u.n_prompt_tokens},
                          {"input_tokens_details", {{"cached_tokens", u.n_cached_tokens}}},
                          {"output_tokens", u.n_completion_tokens},
                          {"output_tokens_details", {{"reasoning_tokens", 0}}},
                          {"total_tokens", u.n_prompt_tokens + u.n_completion_tokens}};
        else
            r["usage"] = nullptr;
        return r;
    }

    void event(const char* type, json data, std::string& out) {
        data["type"] = type;
        data["sequence_number"] = sequence_++;
        append_sse_event(out, type, dump(data));
    }

    json echo_;
    std::string id_;
    std::string model_;
    int64_t created_ = 0;
    json items_ = json::array();
    int message_ = -1;  // the open message item, or -1
    std::string text_;  // its text so far
    FinishReason reason_ = FinishReason::None;
    uint64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<Wire> responses_wire(const std::string& model, json echo) {
    return std::make_unique<ResponsesWire>(model, std::move(echo));
}

}  // namespace headroom::server
