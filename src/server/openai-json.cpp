#include "server/openai-json.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace headroom::server {

using json = nlohmann::json;
using Error = std::optional<ApiError>;

ApiError bad_request(std::string param, std::string message) {
    ApiError e;
    e.status = 400;
    e.message = param.empty() ? std::move(message) : fmt::format("{}: {}", param, message);
    e.param = std::move(param);
    return e;
}

ApiError unsupported(const std::string& param, const std::string& what) {
    ApiError e = bad_request(param, what + " is not supported by this server");
    e.code = "unsupported_parameter";
    return e;
}

ApiError model_not_found(const std::string& asked, const std::string& served) {
    ApiError e = bad_request(
        "model",
        fmt::format("the model '{}' does not exist; this server serves '{}'", asked, served));
    e.status = 404;
    e.code = "model_not_found";
    return e;
}

const json* find_field(const json& obj, const char* key) {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

json error_json(const ApiError& e) {
    return {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

std::string error_body(const ApiError& e) {
    return dump(error_json(e));
}

std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

// ---- Field readers -----------------------------------------------------------
// Each reads one optional field of a JSON object: absent or null leaves `out`
// alone; a value of the wrong type or out of range is an error naming the field.

const json* find(const json& obj, const char* key) {
    return find_field(obj, key);
}

std::string describe(const json& v) {
    if (v.is_number() || v.is_boolean()) return fmt::format("{} {}", v.type_name(), dump(v));
    return v.type_name();
}

ApiError wrong_type(const std::string& param, const char* expected, const json& v) {
    return bad_request(param, fmt::format("expected {}, got {}", expected, describe(v)));
}

// An integer (or a float with an integral value, as JSON encoders may write one) in [lo, hi].
Error read_int(const json& v, const std::string& param, int64_t lo, int64_t hi, int64_t& out) {
    if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(hi))
            return bad_request(param, fmt::format("must be at most {}, got {}", hi, u));
        out = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
        out = v.get<int64_t>();
    } else if (v.is_number_float()) {
        const double d = v.get<double>();
        if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15)
            return wrong_type(param, "an integer", v);
        out = static_cast<int64_t>(d);
    } else {
        return wrong_type(param, "an integer", v);
    }
    if (out < lo) return bad_request(param, fmt::format("must be at least {}, got {}", lo, out));
    if (out > hi) return bad_request(param, fmt::format("must be at most {}, got {}", hi, out));
    return std::nullopt;
}

Error read_int(const json& obj, const char* key, int64_t lo, int64_t hi,
               std::optional<int64_t>& out) {
    const json* v = find(obj, key);
    if (!v) return std::nullopt;
    int64_t x = 0;
    if (auto e = read_int(*v, key, lo, hi, x)) return e;
    out = x;
    return std::nullopt;
}

Error read_float(const json& obj, const char* key, float& out) {
    const json* v = find(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_number()) return wrong_type(key, "a number", *v);
    out = static_cast<float>(v->get<double>());
    return std::nullopt;
}

Error read_bool(const json& obj, const char* key, bool& out) {
    const json* v = find(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
    out = v->get<bool>();
    return std::nullopt;
}

Error read_string(const json& obj, const char* key, std::string& out) {
    const json* v = find(obj, key);
    if (!v) return std::nullopt;
    if (!v->is_string()) return wrong_type(key, "a string", *v);
    out = v->get<std::string>();
    return std::nullopt;
}

// ---- Messages and prompts ------------------------------------------------------

Error read_content(const json& content, const std::string& param, std::string& out) {
    if (content.is_string()) {
        out = content.get<std::string>();
        return std::nullopt;
    }
    if (!content.is_array())
        return wrong_type(param, "a string or an array of content parts", content);
    // Text parts are joined with newlines, as vLLM does.
    for (size_t j = 0; j < content.size(); ++j) {
        const json& part = content[j];
        const std::string pp = fmt::format("{}[{}]", param, j);
        if (!part.is_object()) return wrong_type(pp, "a content part object", part);
        const json* type = find(part, "type");
        if (!type || !type->is_string())
            return bad_request(pp + ".type", "required, and must be a string");
        if (type->get<std::string>() != "text")
            return unsupported(pp + ".type", fmt::format("content part type '{}' (only 'text')",
                                                         type->get<std::string>()));
        const json* text = find(part, "text");
        if (!text || !text->is_string())
            return bad_request(pp + ".text", "required, and must be a string");
        if (j > 0) out += '\n';
        out += text->get<std::string>();
    }
    return std::nullopt;
}

// What a message says about tools: an assistant's tool_calls (arguments
// handed to the template as objects, as transformers does), a tool result's
// tool_call_id, a name.
Error read_tool_fields(const json& m, const std::string& param, bool has_content,
                       ChatMessage& msg) {
    if (const json* calls = find(m, "tool_calls")) {
        if (msg.role != "assistant")
            return bad_request(param + ".tool_calls", "only assistant messages have tool_calls");
        if (!calls->is_array()) return wrong_type(param + ".tool_calls", "an array", *calls);
        nlohmann::ordered_json list = nlohmann::ordered_json::array();
        for (size_t i = 0; i < calls->size(); ++i) {
            const json& c = (*calls)[i];
            const std::string cp = fmt::format("{}.tool_calls[{}]", param, i);
            if (!c.is_object()) return wrong_type(cp, "a tool call object", c);
            const json* fn = find(c, "function");
            if (!fn || !fn->is_object())
                return bad_request(cp + ".function", "required, and must be an object");
            const json* name = find(*fn, "name");
            if (!name || !name->is_string())
                return bad_request(cp + ".function.name", "required, and must be a string");
            nlohmann::ordered_json args = nlohmann::ordered_json::object();
            if (const json* a = find(*fn, "arguments")) {
                if (a->is_string()) {
                    args = nlohmann::ordered_json::parse(a->get<std::string>(), nullptr, false);
                    if (args.is_discarded() || !args.is_object())
                        return bad_request(cp + ".function.arguments",
                                           "must be the text of a JSON object");
                } else if (a->is_object()) {
                    args = nlohmann::ordered_json::parse(dump(*a));
                } else {
                    return wrong_type(cp + ".function.arguments", "a string", *a);
                }
            }
            nlohmann::ordered_json call = nlohmann::ordered_json::object();
            if (const json* id = find(c, "id"); id && id->is_string()) call["id"] = *id;
            call["type"] = "function";
            call["function"] = {{"name", name->get<std::string>()}, {"arguments", args}};
            list.push_back(std::move(call));
        }
        msg.fields["tool_calls"] = std::move(list);
        if (!has_content) msg.fields["content"] = nullptr;
    }
    if (msg.role == "tool") {
        const json* id = find(m, "tool_call_id");
        if (!id || !id->is_string())
            return bad_request(param + ".tool_call_id",
                               "required in a tool message, and must be a string");
        msg.fields["tool_call_id"] = id->get<std::string>();
    }
    if (const json* name = find(m, "name")) {
        if (!name->is_string()) return wrong_type(param + ".name", "a string", *name);
        msg.fields["name"] = name->get<std::string>();
    }
    return std::nullopt;
}

Error read_messages(const json& body, std::vector<ChatMessage>& out) {
    const json* messages = find(body, "messages");
    if (!messages) return bad_request("messages", "required, but missing");
    if (!messages->is_array()) return wrong_type("messages", "an array of messages", *messages);
    if (messages->empty()) return bad_request("messages", "must contain at least one message");
    out.reserve(messages->size());
    for (size_t i = 0; i < messages->size(); ++i) {
        const json& m = (*messages)[i];
        const std::string param = fmt::format("messages[{}]", i);
        if (!m.is_object()) return wrong_type(param, "a message object", m);
        const json* role = find(m, "role");
        if (!role) return bad_request(param + ".role", "required, but missing");
        if (!role->is_string()) return wrong_type(param + ".role", "a string", *role);
        ChatMessage msg;
        msg.role = role->get<std::string>();
        if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for system
        if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
            msg.role != "tool")
            return bad_request(param + ".role",
                               fmt::format("'{}' is not one of system, developer, user, "
                                           "assistant, tool",
                                           msg.role));
        const json* content = find(m, "content");
        if (content) {
            if (auto e = read_content(*content, param + ".content", msg.content)) return e;
        } else if (msg.role != "assistant") {
            // An assistant turn that only called tools has no content.
            return bad_request(param + ".content", "required, but missing");
        }
        if (auto e = read_tool_fields(m, param, content != nullptr, msg)) return e;
        out.push_back(std::move(msg));
    }
    return std::nullopt;
}

Error read_token_ids(const json& arr, const std::string& param, std::vector<int32_t>& out) {
    out.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) {
        int64_t t = 0;
        if (auto e = read_int(arr[i], fmt::format("{}[{}]", param, i), 0,
                              std::numeric_limits<int32_t>::max(), t))
            return e;
        out.push_back(static_cast<int32_t>(t));
    }
    return std::nullopt;
}

Error read_prompt(const json& body, GenerationSpec& spec) {
    const json* prompt = find(body, "prompt");
    if (!prompt) return bad_request("prompt", "required, but missing");
    if (prompt->is_string()) {
        spec.prompt_text = prompt->get<std::string>();
        return std::nullopt;
    }
    if (!prompt->is_array() || prompt->empty())
        return wrong_type("prompt", "a string, an array of token ids or a one-element batch",
                          *prompt);
    const json& first = (*prompt)[0];
    if (first.is_number()) {
        spec.prompt_is_ids = true;
        return read_token_ids(*prompt, "prompt", spec.prompt_ids);
    }
    // A batch of prompts: one is accepted, as n=1 is.
    if (prompt->size() > 1)
        return unsupported(
            "prompt", fmt::format("a batch of {} prompts (send one per request)", prompt->size()));
    if (first.is_string()) {
        spec.prompt_text = first.get<std::string>();
        return std::nullopt;
    }
    if (first.is_array() && !first.empty()) {
        spec.prompt_is_ids = true;
        return read_token_ids(first, "prompt[0]", spec.prompt_ids);
    }
    return wrong_type("prompt[0]", "a string or an array of token ids", first);
}

Error read_stop(const json& body, std::vector<std::string>& out) {
    const json* stop = find(body, "stop");
    if (!stop) return std::nullopt;
    if (stop->is_string()) {
        if (!stop->get<std::string>().empty()) out.push_back(stop->get<std::string>());
        return std::nullopt;
    }
    if (!stop->is_array()) return wrong_type("stop", "a string or an array of strings", *stop);
    if (stop->size() > 4)
        return bad_request("stop", fmt::format("at most 4 stop strings, got {}", stop->size()));
    for (size_t i = 0; i < stop->size(); ++i) {
        const json& s = (*stop)[i];
        if (!s.is_string()) return wrong_type(fmt::format("stop[{}]", i), "a string", s);
        // An empty stop string would end every output before it starts.
        if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
    }
    return std::nullopt;
}

Error read_sampling(const json& body, GenerationSpec& spec) {
    SamplingParams& p = spec.sampling;
    if (auto e = read_float(body, "temperature", p.temperature)) return e;
    if (auto e = read_float(body, "top_p", p.top_p)) return e;
    if (auto e = read_float(body, "min_p", p.min_p)) return e;
    if (auto e = read_float(body, "presence_penalty", p.presence_penalty)) return e;
    if (auto e = read_float(body, "frequency_penalty", p.frequency_penalty)) return e;
    if (auto e = read_float(body, "repetition_penalty", p.repetition_penalty)) return e;
    std::optional<int64_t> top_k, seed, n, max_tokens, max_completion_tokens, truncate;
    if (auto e = read_int(body, "top_k", -1, std::numeric_limits<int32_t>::max(), top_k)) return e;
    if (top_k) p.top_k = *top_k < 0 ? 0 : static_cast<int32_t>(*top_k);  // -1: off, as in vLLM
    if (auto e = read_int(body, "seed", std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max(), seed))
        return e;
    if (seed) p.seed = static_cast<uint64_t>(*seed);
    if (auto e = read_int(body, "n", 1, kMaxChoices, n)) return e;
    if (n) spec.choices.n = static_cast<uint32_t>(*n);
    std::optional<int64_t> best_of, beam_width;
    if (auto e = read_int(body, "best_of", 1, kMaxChoices, best_of)) return e;
    if (best_of) spec.choices.best_of = static_cast<uint32_t>(*best_of);
    if (auto e = read_bool(body, "use_beam_search", spec.choices.beam_search)) return e;
    if (auto e = read_int(body, "beam_width", 1, kMaxChoices, beam_width)) return e;
    if (beam_width) spec.choices.beam_width = static_cast<uint32_t>(*beam_width);
    if (auto e = read_float(body, "length_penalty", spec.choices.length_penalty)) return e;
    if (auto e = read_bool(body, "early_stopping", spec.choices.early_stopping)) return e;
    if (spec.choices.best_of && spec.choices.best_of < spec.choices.n)
        return bad_request("best_of", fmt::format("best_of ({}) must be at least n ({})",
                                                  spec.choices.best_of, spec.choices.n));
    if (spec.choices.beam_search && !spec.choices.beam_width)
        spec.choices.beam_width = std::max(spec.choices.best_of, spec.choices.n);
    if (spec.choices.beam_search && spec.choices.beam_width < spec.choices.n)
        return bad_request("beam_width", fmt::format("beam_width ({}) must be at least n ({})",
                                                     spec.choices.beam_width, spec.choices.n));
    constexpr int64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
    if (auto e = read_int(body, "max_tokens", 1, kMaxU32, max_tokens)) return e;
    if (auto e = read_int(body, "max_completion_tokens", 1, kMaxU32, max_completion_tokens))
        return e;
    if (max_completion_tokens) max_tokens = max_completion_tokens;  // the newer name wins
    if (max_tokens) spec.max_tokens = static_cast<uint32_t>(*max_tokens);
    if (auto e = read_int(body, "truncate_prompt_tokens", 1, kMaxU32, truncate)) return e;
    if (truncate) spec.truncate_prompt_tokens = static_cast<uint32_t>(*truncate);
    if (auto e = read_stop(body, p.stop)) return e;
    if (auto e = read_bool(body, "ignore_eos", p.ignore_eos)) return e;
    if (const json* ids = find(body, "stop_token_ids")) {
        if (!ids->is_array()) return wrong_type("stop_token_ids", "an array of token ids", *ids);
        if (auto e = read_token_ids(*ids, "stop_token_ids", p.stop_token_ids)) return e;
    }
    if (const json* bias = find(body, "logit_bias")) {
        if (!bias->is_object()) return wrong_type("logit_bias", "an object", *bias);
        if (bias->size() > 1024)
            return bad_request("logit_bias",
                               fmt::format("at most 1024 tokens, got {}", bias->size()));
        for (const auto& [key, value] : bias->items()) {
            const std::string param = fmt::format("logit_bias.{}", key);
            int64_t token = -1;
            const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), token);
            if (ec != std::errc() || end != key.data() + key.size() || token < 0 ||
                token > std::numeric_limits<int32_t>::max())
                return bad_request(param, "keys must be token ids (decimal integers)");
            if (!value.is_number()) return wrong_type(param, "a number", value);
            p.logit_bias.emplace_back(static_cast<int32_t>(token),
                                      static_cast<float>(value.get<double>()));
        }
    }
    if (const json* format = find(body, "response_format")) {
        if (!format->is_object()) return wrong_type("response_format", "an object", *format);
        const json* type = find(*format, "type");
        (void)type;
    }
    if (auto e = read_bool(body, "stream", spec.stream)) return e;
    if (spec.stream && !spec.choices.beam_search && spec.choices.best_of > spec.choices.n)
        return bad_request("best_of",
                           fmt::format("best_of ({}) greater than n ({}) cannot be streamed: the "
                                       "best are known only when every sample is finished",
                                       spec.choices.best_of, spec.choices.n));
    if (const json* options = find(body, "stream_options")) {
        if (!options->is_object()) return wrong_type("stream_options", "an object", *options);
        if (const json* usage = find(*options, "include_usage")) {
            if (!usage->is_boolean())
                return wrong_type("stream_options.include_usage", "a boolean", *usage);
            spec.include_usage = usage->get<bool>();
        }
    }
    return std::nullopt;
}

// ---- Structured outputs and tools ----------------------------------------------

// A JSON schema given as an object (or as its text, as guided_json allows).
Error read_schema(const json& v, const std::string& param, std::string& out) {
    if (v.is_object() || v.is_boolean()) {
        out = dump(v);
        return std::nullopt;
    }
    if (v.is_string()) {
        const json parsed = json::parse(v.get<std::string>(), nullptr, false);
        if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean()))
            return bad_request(param, "a schema given as a string must hold a JSON object");
        out = v.get<std::string>();
        return std::nullopt;
    }
    return wrong_type(param, "a JSON schema object", v);
}

Error read_choices(const json& v, const std::string& param, std::vector<std::string>& out) {
    if (!v.is_array() || v.empty()) return wrong_type(param, "a non-empty array of strings", v);
    for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string()) return wrong_type(fmt::format("{}[{}]", param, i), "a string", v[i]);
        out.push_back(v[i].get<std::string>());
    }
    return std::nullopt;
}

// One constraint of vLLM's structured_outputs or its older guided_* fields.
Error read_vllm_constraint(const json& v, const std::string& param, const std::string& kind,
                           GrammarSpec& spec) {
    if (kind == "json") {
        spec.kind = GrammarSpec::Kind::JsonSchema;
        spec.strict = false;
        return read_schema(v, param, spec.text);
    }
    if (kind == "choice") {
        spec.kind = GrammarSpec::Kind::Choice;
        return read_choices(v, param, spec.choices);
    }
    if (!v.is_string()) return wrong_type(param, "a string", v);
    spec.text = v.get<std::string>();
    spec.kind = kind == "regex" ? GrammarSpec::Kind::Regex : GrammarSpec::Kind::Ebnf;
    return std::nullopt;
}

Error read_structured_output(const json& body, GenerationSpec& spec) {
    std::vector<std::pair<std::string, GrammarSpec>> found;  // (field, grammar)
    if (const json* format = find(body, "response_format")) {
        const json* type = find(*format, "type");
        if (!type) return bad_request("response_format.type", "required, but missing");
        if (!type->is_string()) return wrong_type("response_format.type", "a string", *type);
        const std::string t = type->get<std::string>();
        if (t == "json_object") {
            found.emplace_back("response_format", GrammarSpec{});
        } else if (t == "json_schema") {
            const json* js = find(*format, "json_schema");
            if (!js || !js->is_object())
                return bad_request("response_format.json_schema",
                                   "required for type json_schema, and must be an object");
            GrammarSpec g;
            g.kind = GrammarSpec::Kind::JsonSchema;
            g.strict = false;
            if (auto e = read_bool(*js, "strict", g.strict)) {
                e->param = "response_format.json_schema.strict";
                return e;
            }
            const json* schema = find(*js, "schema");
            if (!schema)
                return bad_request("response_format.json_schema.schema", "required, but missing");
            if (auto e = read_schema(*schema, "response_format.json_schema.schema", g.text))
                return e;
            found.emplace_back("response_format.json_schema.schema", std::move(g));
        } else if (t != "text") {
            return bad_request("response_format.type",
                               fmt::format("'{}' is not one of text, json_object, json_schema", t));
        }
    }
    static constexpr std::array<const char*, 4> kKinds = {"json", "regex", "choice", "grammar"};
    if (const json* so = find(body, "structured_outputs")) {
        if (!so->is_object()) return wrong_type("structured_outputs", "an object", *so);
        for (const char* kind : kKinds) {
            if (const json* v = find(*so, kind)) {
                GrammarSpec g;
                const std::string param = fmt::format("structured_outputs.{}", kind);
                if (auto e = read_vllm_constraint(*v, param, kind, g)) return e;
                found.emplace_back(param, std::move(g));
            }
        }
    }
    for (const char* kind : kKinds) {
        const std::string field = fmt::format("guided_{}", kind);
        if (const json* v = find(body, field.c_str())) {
            GrammarSpec g;
            if (auto e = read_vllm_constraint(*v, field, kind, g)) return e;
            found.emplace_back(field, std::move(g));
        }
    }
    if (found.size() > 1)
        return bad_request(found[1].first, fmt::format("only one output constraint per request; "
                                                       "{} is already one",
                                                       found[0].first));
    if (!found.empty()) {
        spec.grammar_param = found[0].first;
        spec.grammar = std::move(found[0].second);
    }
    return std::nullopt;
}

// OpenAI's rule for function names: letters, digits, '_' and '-' (and '.',
// which some clients use for namespaces), 1 to 64 of them.
bool valid_tool_name(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
}

Error read_tools(const json& body, GenerationSpec& spec) {
    if (const json* tools = find(body, "tools")) {
        if (!tools->is_array()) return wrong_type("tools", "an array of tools", *tools);
        if (tools->size() > kMaxTools)
            return bad_request("tools",
                               fmt::format("at most {} tools, got {}", kMaxTools, tools->size()));
        for (size_t i = 0; i < tools->size(); ++i) {
            const json& t = (*tools)[i];
            const std::string param = fmt::format("tools[{}]", i);
            if (!t.is_object()) return wrong_type(param, "a tool object", t);
            const json* type = find(t, "type");
            if (type && (!type->is_string() || type->get<std::string>() != "function"))
                return unsupported(param + ".type",
                                   fmt::format("tool type {} (only 'function')", dump(*type)));
            const json* fn = find(t, "function");
            if (!fn || !fn->is_object())
                return bad_request(param + ".function", "required, and must be an object");
            Tool tool;
            const json* name = find(*fn, "name");
            if (!name || !name->is_string())
                return bad_request(param + ".function.name", "required, and must be a string");
            tool.name = name->get<std::string>();
            if (!valid_tool_name(tool.name))
                return bad_request(param + ".function.name",
                                   fmt::format("'{}' is not a valid function name (1 to 64 "
                                               "letters, digits, '_', '-' or '.')",
                                               tool.name));
            for (const Tool& other : spec.tools)
                if (other.name == tool.name)
                    return bad_request(param + ".function.name",
                                       fmt::format("'{}' is declared twice", tool.name));
            if (auto e = read_string(*fn, "description", tool.description)) {
                e->param = param + ".function.description";
                return e;
            }
            if (const json* params = find(*fn, "parameters")) {
                if (!params->is_object())
                    return wrong_type(param + ".function.parameters", "a JSON schema object",
                                      *params);
                if (auto why = unsupported_schema_keyword(*params); !why.empty())
                    return bad_request(param + ".function.parameters", why);
                tool.parameters = nlohmann::ordered_json::parse(dump(*params));
            }
            if (auto e = read_bool(*fn, "strict", tool.strict)) {
                e->param = param + ".function.strict";
                return e;
            }
            spec.tools.push_back(std::move(tool));
        }
    }
    if (spec.tools.empty()) spec.tool_choice.mode = ToolChoiceMode::None;
    if (const json* choice = find(body, "tool_choice")) {
        if (choice->is_string()) {
            const std::string c = choice->get<std::string>();
            if (c == "none")
                spec.tool_choice.mode = ToolChoiceMode::None;
            else if (c == "auto")
                spec.tool_choice.mode =
                    spec.tools.empty() ? ToolChoiceMode::None : ToolChoiceMode::Auto;
            else if (c == "required")
                spec.tool_choice.mode = ToolChoiceMode::Required;
            else
                return bad_request("tool_choice",
                                   fmt::format("'{}' is not one of none, auto, required, or a "
                                               "function object",
                                               c));
        } else if (choice->is_object()) {
            const json* fn = find(*choice, "function");
            const json* name = fn && fn->is_object() ? find(*fn, "name") : nullptr;
            if (!name || !name->is_string())
                return bad_request("tool_choice.function.name", "required, and must be a string");
            spec.tool_choice.mode = ToolChoiceMode::Named;
            spec.tool_choice.name = name->get<std::string>();
            const bool known =
                std::any_of(spec.tools.begin(), spec.tools.end(),
                            [&](const Tool& t) { return t.name == spec.tool_choice.name; });
            if (!known)
                return bad_request(
                    "tool_choice.function.name",
                    fmt::format("'{}' is not one of the request's tools", spec.tool_choice.name));
        } else {
            return wrong_type("tool_choice", "a string or a function object", *choice);
        }
        if (spec.tools.empty() && spec.tool_choice.mode == ToolChoiceMode::Required)
            return bad_request("tool_choice", "'required' needs tools, and the request has none");
    }
    if (auto e = read_bool(body, "parallel_tool_calls", spec.parallel_tool_calls)) return e;
    if (spec.grammar && spec.tool_choice.mode != ToolChoiceMode::None)
        return bad_request(spec.grammar_param,
                           "an output constraint cannot be combined with tools unless "
                           "tool_choice is 'none'");
    return std::nullopt;
}

Error read_template_kwargs(const json& body, GenerationSpec& spec) {
    if (const json* kwargs = find(body, "chat_template_kwargs")) {
        if (!kwargs->is_object()) return wrong_type("chat_template_kwargs", "an object", *kwargs);
        spec.template_kwargs = nlohmann::ordered_json::parse(dump(*kwargs));
    }
    if (const json* effort = find(body, "reasoning_effort")) {
        if (!effort->is_string()) return wrong_type("reasoning_effort", "a string", *effort);
        const std::string e = effort->get<std::string>();
        if (e != "minimal" && e != "low" && e != "medium" && e != "high")
            return bad_request("reasoning_effort",
                               fmt::format("'{}' is not one of minimal, low, medium, high", e));
        spec.template_kwargs["reasoning_effort"] = e;
    }
    return std::nullopt;
}

Error read_chat_logprobs(const json& body, GenerationSpec& spec) {
    if (auto e = read_bool(body, "logprobs", spec.logprobs)) return e;
    std::optional<int64_t> top;
    if (auto e = read_int(body, "top_logprobs", 0, 20, top)) return e;
    if (top && *top > 0 && !spec.logprobs)
        return bad_request("top_logprobs", "needs logprobs set to true");
    spec.top_logprobs = static_cast<uint32_t>(top.value_or(0));
    return std::nullopt;
}

Error read_completion_options(const json& body, GenerationSpec& spec) {
    // Legacy completions: logprobs is the number of alternatives (0 still
    // reports the chosen token's logprob).
    std::optional<int64_t> logprobs;
    if (const json* v = find(body, "logprobs"); v && v->is_boolean())
        return wrong_type("logprobs", "an integer (alternatives per token, 0 to 20)", *v);
    if (auto e = read_int(body, "logprobs", 0, 20, logprobs)) return e;
    spec.logprobs = logprobs.has_value();
    spec.top_logprobs = static_cast<uint32_t>(logprobs.value_or(0));
    bool echo = false;
    if (auto e = read_bool(body, "echo", echo)) return e;
    if (echo) return unsupported("echo", "echo");
    std::string suffix;
    if (auto e = read_string(body, "suffix", suffix)) return e;
    if (!suffix.empty()) return unsupported("suffix", "suffix");
    return std::nullopt;
}

}  // namespace

// Deepest nesting of arrays and objects in `text`, stopping once past `limit`.
// Runs before parsing so that a hostile body cannot make the parser build a
// million-level tree.
size_t json_depth(std::string_view text, size_t limit) {
    size_t depth = 0, max_depth = 0;
    bool in_string = false, escaped = false;
    for (const char c : text) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            max_depth = std::max(max_depth, ++depth);
            if (max_depth > limit) break;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return max_depth;
}

std::optional<ApiError> parse_generation_request(std::string_view body, Endpoint endpoint,
                                                 GenerationSpec& spec) {
    if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
        return bad_request(
            "", fmt::format("the request body nests deeper than {} levels", kMaxJsonDepth));
    json j;
    try {
        j = json::parse(body);
    } catch (const json::exception& e) {
        // nlohmann's message names the byte where parsing stopped.
        std::string what = e.what();
        if (const size_t at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
        return bad_request("", "the request body is not valid JSON: " + what);
    }
    if (!j.is_object())
        return bad_request(
            "", fmt::format("the request body must be a JSON object, got {}", j.type_name()));
    spec.endpoint = endpoint;
    if (auto e = read_string(j, "model", spec.model)) return e;
    if (endpoint == Endpoint::Chat) {
        if (auto e = read_messages(j, spec.messages)) return e;
        if (auto e = read_chat_logprobs(j, spec)) return e;
    } else {
        if (auto e = read_prompt(j, spec)) return e;
        if (auto e = read_completion_options(j, spec)) return e;
    }
    if (auto e = read_sampling(j, spec)) return e;
    if (auto e = read_structured_output(j, spec)) return e;
    if (endpoint == Endpoint::Chat) {
        if (auto e = read_tools(j, spec)) return e;
        if (auto e = read_template_kwargs(j, spec)) return e;
    }
    spec.sampling.logprobs = spec.logprobs;
    spec.sampling.n_logprobs = spec.top_logprobs;
    if (auto why = spec.sampling.validate(); !why.empty()) {
        // validate() names the parameter first ("temperature 5 must be in [0, 100]").
        ApiError e;
        e.param = why.substr(0, why.find(' '));
        e.message = std::move(why);
        return e;
    }
    return std::nullopt;
}

// ---- Responses -----------------------------------------------------------------

json finish_reason_json(FinishReason reason) {
    if (reason == FinishReason::None) return nullptr;
    return name(reason);
}

json usage_json(const Usage& u) {
    return {{"prompt_tokens", u.n_prompt_tokens},
            {"completion_tokens", u.n_completion_tokens},
            {"total_tokens", u.n_prompt_tokens + u.n_completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.n_cached_tokens}}},
            {"kv_blocks", u.n_kv_blocks},
            {"kv_blocks_shared", u.n_kv_blocks_shared}};
}

json truncation_json(const Truncation& t) {
    return {{"dropped_tokens", t.n_dropped_tokens}, {"dropped_messages", t.n_dropped_messages}};
}

std::string new_response_id(Endpoint endpoint) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return fmt::format("{}-{:016x}{:08x}", endpoint == Endpoint::Chat ? "chatcmpl" : "cmpl", rng(),
                       static_cast<uint32_t>(rng()));
}

LogprobsBuilder::LogprobsBuilder(Endpoint endpoint, const Tokenizer& tokenizer, uint32_t n_top)
    : endpoint_(endpoint), tokenizer_(tokenizer), n_top_(n_top) {
    take();
}

std::string LogprobsBuilder::raw_piece(int32_t token) const {
    std::string s;
    tokenizer_.append_piece(token, true, s);
    return s;
}

std::string LogprobsBuilder::piece(int32_t token) const {
    // A byte token alone is not UTF-8: shown as U+FFFD, as the text would
    // show it; the chat format's "bytes" keep the raw bytes.
    std::string s;
    unicode::append_sanitized_utf8(raw_piece(token), s);
    return s;
}

namespace {

// OpenAI reports -9999 where the probability underflows; JSON has no -inf.
double finite_logprob(float lp) {
    return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0;
}

size_t n_codepoints(std::string_view utf8) {
    size_t n = 0;
    for (const char c : utf8) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    return n;
}

json bytes_json(const std::string& s) {
    json b = json::array();
    for (const char c : s) b.push_back(static_cast<uint8_t>(c));
    return b;
}

}  // namespace

void LogprobsBuilder::add(int32_t token, float logprob, const std::vector<TokenLogprob>& top) {
    const std::string text = piece(token);
    ++n_entries_;
    if (endpoint_ == Endpoint::Chat) {
        json alternatives = json::array();
        for (size_t i = 0; i < top.size() && i < n_top_; ++i) {
            alternatives.push_back({{"token", piece(top[i].token)},
                                    {"logprob", finite_logprob(top[i].logprob)},
                                    {"bytes", bytes_json(raw_piece(top[i].token))}});
        }
        entries_.push_back({{"token", text},
                            {"logprob", finite_logprob(logprob)},
                            {"bytes", bytes_json(raw_piece(token))},
                            {"top_logprobs", std::move(alternatives)}});
        return;
    }
    // Tokens that render alike (byte tokens as U+FFFD) share a key: the
    // likelier one, listed first, keeps it.
    json alternatives = json::object();
    for (size_t i = 0; i < top.size() && i < n_top_; ++i)
        alternatives.emplace(piece(top[i].token), finite_logprob(top[i].logprob));
    entries_["tokens"].push_back(text);
    entries_["token_logprobs"].push_back(finite_logprob(logprob));
    entries_["top_logprobs"].push_back(std::move(alternatives));
    entries_["text_offset"].push_back(text_offset_);
    text_offset_ += n_codepoints(text);
}

json LogprobsBuilder::take() {
    json out = std::move(entries_);
    n_entries_ = 0;
    if (endpoint_ == Endpoint::Chat) {
        entries_ = json::array();
        return {{"content", std::move(out)}};
    }
    entries_ = {{"tokens", json::array()},
                {"token_logprobs", json::array()},
                {"top_logprobs", json::array()},
                {"text_offset", json::array()}};
    return out;
}

json completion_response(const ResponseMeta& meta, std::vector<ChoiceOutput> choices,
                         const Usage& usage, const Truncation& truncation) {
    json out = {{"id", meta.id}, {"created", meta.created_s}, {"model", meta.model}};
    out["object"] = meta.endpoint == Endpoint::Chat ? "chat.completion" : "text_completion";
    json list = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
        ChoiceOutput& c = choices[i];
        json choice = {{"index", i},
                       {"logprobs", std::move(c.logprobs)},
                       {"finish_reason", finish_reason_json(c.finish)}};
        if (meta.endpoint == Endpoint::Chat) {
            json message = {{"role", "assistant"}, {"content", std::move(c.text)}};
            if (!c.reasoning.empty()) message["reasoning_content"] = std::move(c.reasoning);
            if (!c.calls.empty()) {
                if (message["content"] == "") message["content"] = nullptr;
                message["tool_calls"] = tool_calls_json(c.calls, 0, true);
                if (c.finish == FinishReason::Stop) choice["finish_reason"] = "tool_calls";
            }
            choice["message"] = std::move(message);
        } else
            choice["text"] = std::move(c.text);
        list.push_back(std::move(choice));
    }
    out["choices"] = std::move(list);
    out["usage"] = usage_json(usage);
    if (truncation.happened()) out["prompt_truncation"] = truncation_json(truncation);
    return out;
}

json tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index, bool whole) {
    json list = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        json call = {{"id", calls[i].id},
                     {"type", "function"},
                     {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
        if (!whole) call["index"] = first_index + i;
        list.push_back(std::move(call));
    }
    return list;
}

namespace {
json chat_chunk(const ResponseMeta& meta, uint32_t index, json delta) {
    return {{"id", meta.id},
            {"object", "chat.completion.chunk"},
            {"created", meta.created_s},
            {"model", meta.model},
            {"choices", json::array({{{"index", index},
                                      {"delta", std::move(delta)},
                                      {"logprobs", nullptr},
                                      {"finish_reason", nullptr}}})}};
}
}  // namespace

json tool_calls_chunk(const ResponseMeta& meta, uint32_t index, const std::vector<ToolCall>& calls,
                      size_t first_index) {
    return chat_chunk(meta, index, {{"tool_calls", tool_calls_json(calls, first_index, false)}});
}

json reasoning_chunk(const ResponseMeta& meta, uint32_t index, const std::string& reasoning) {
    return chat_chunk(meta, index, {{"reasoning_content", reasoning}});
}

json chunk_response(const ResponseMeta& meta, uint32_t index, const std::string& text, bool first,
                    FinishReason finish, json logprobs) {
    json choice = {{"index", index},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", finish_reason_json(finish)}};
    json out = {{"id", meta.id}, {"created", meta.created_s}, {"model", meta.model}};
    if (meta.endpoint == Endpoint::Chat) {
        out["object"] = "chat.completion.chunk";
        json delta = json::object();
        if (first) delta["role"] = "assistant";
        if (first || !text.empty()) delta["content"] = text;
        choice["delta"] = std::move(delta);
    } else {
        out["object"] = "text_completion";
        choice["text"] = text;
    }
    out["choices"] = json::array({std::move(choice)});
    return out;
}

json usage_chunk(const ResponseMeta& meta, const Usage& usage) {
    return {
        {"id", meta.id},
        {"object", meta.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion"},
        {"created", meta.created_s},
        {"model", meta.model},
        {"choices", json::array()},
        {"usage", usage_json(usage)}};
}

}  // namespace headroom::server
