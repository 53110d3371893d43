#include "server/openai-json.h"

#include <fmt/format.h>

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
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
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

ApiError unsupported(const std::string& param, const std::string& what) {
    ApiError e = bad_request(param, what + " is not supported by this server");
    e.code = "unsupported_parameter";
    return e;
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
        if (!bias->empty()) return unsupported("logit_bias", "logit_bias");
    }
    if (const json* format = find(body, "response_format")) {
        if (!format->is_object()) return wrong_type("response_format", "an object", *format);
        const json* type = find(*format, "type");
        if (type && (!type->is_string() || type->get<std::string>() != "text"))
            return unsupported("response_format.type",
                               fmt::format("response_format type {}", dump(*type)));
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
        if (meta.endpoint == Endpoint::Chat)
            choice["message"] = {{"role", "assistant"}, {"content", std::move(c.text)}};
        else
            choice["text"] = std::move(c.text);
        list.push_back(std::move(choice));
    }
    out["choices"] = std::move(list);
    out["usage"] = usage_json(usage);
    if (truncation.happened()) out["prompt_truncation"] = truncation_json(truncation);
    return out;
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
