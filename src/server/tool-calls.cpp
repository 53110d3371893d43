#include "server/tool-calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <random>

namespace headroom::server {

using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

bool contains(std::string_view s, std::string_view what) {
    return s.find(what) != std::string_view::npos;
}

std::string_view trim(std::string_view s) {
    const auto first = s.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) return {};
    const auto last = s.find_last_not_of(" \t\r\n");
    return s.substr(first, last - first + 1);
}

// A JSON value parsed without exceptions; discarded on any error.
std::optional<ojson> parse_json(std::string_view text) {
    ojson j = ojson::parse(text.begin(), text.end(), nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    return j;
}

// The arguments of a call as OpenAI sends them: a JSON object's text. A
// string holding JSON (some models quote their arguments) is unwrapped.
std::optional<std::string> arguments_text(const ojson& args) {
    if (args.is_object()) return args.dump();
    if (args.is_string())
        if (auto inner = parse_json(args.get<std::string>()); inner && inner->is_object())
            return inner->dump();
    return std::nullopt;
}

// {"name": N, "arguments" | "parameters": {...}} -> a call. Outside any
// markup (Llama 3) the arguments must be there: {"name": "Bob"} is an answer.
std::optional<ToolCall> call_from_object(const ojson& j, bool require_args = false) {
    if (!j.is_object()) return std::nullopt;
    const auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
        return std::nullopt;
    auto args = j.find("arguments");
    if (args == j.end()) args = j.find("parameters");
    if (require_args && args == j.end()) return std::nullopt;
    std::optional<std::string> text = args == j.end() ? std::string("{}") : arguments_text(*args);
    if (!text) return std::nullopt;
    return ToolCall{new_tool_call_id(), name->get<std::string>(), std::move(*text)};
}

// The end of the JSON value that starts at text[0] ('{' or '['), or npos:
// brackets are counted outside strings.
size_t json_value_end(std::string_view text) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            ++depth;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
    }
    return std::string_view::npos;
}

void append_content(std::string& content, std::string_view piece) {
    content += piece;
}

// The length of s without its trailing whitespace.
size_t trim_end(std::string_view s) {
    const auto last = s.find_last_not_of(" \t\r\n");
    return last == std::string_view::npos ? 0 : last + 1;
}

// Splits <think>...</think> off the front (a template may have opened the
// block in the prompt, so a lone </think> also ends the reasoning).
void split_think(std::string_view& text, ParsedAnswer& out) {
    const std::string_view t = text;
    const size_t close = t.find(kThinkClose);
    if (close == std::string_view::npos) return;
    size_t open = t.find(kThinkOpen);
    size_t from = 0;
    if (open != std::string_view::npos && open < close) {
        if (!trim(t.substr(0, open)).empty()) return;  // <think> must lead the answer
        from = open + kThinkOpen.size();
    }
    out.reasoning = std::string(trim(t.substr(from, close - from)));
    text = t.substr(close + kThinkClose.size());
    while (!text.empty() && (text.front() == '\n' || text.front() == ' ')) text.remove_prefix(1);
}

void parse_hermes(std::string_view text, ParsedAnswer& out) {
    size_t at = 0;
    while (at < text.size()) {
        const size_t open = text.find(kHermesOpen, at);
        if (open == std::string_view::npos) break;
        const size_t body = open + kHermesOpen.size();
        const size_t close = text.find(kHermesClose, body);
        // An unclosed call at the very end (cut by max_tokens or a stop) still counts if it parses.
        const size_t body_end = close == std::string_view::npos ? text.size() : close;
        auto j = parse_json(trim(text.substr(body, body_end - body)));
        auto call = j ? call_from_object(*j) : std::nullopt;
        if (!call && close == std::string_view::npos) {
            // A call cut off by max_tokens: its markup is not content.
            append_content(out.content, text.substr(at, open - at));
            out.content.resize(trim_end(out.content));
            at = text.size();
            break;
        }
        if (!call) {  // closed but not a call: it stays text
            append_content(out.content, text.substr(at, body - at));
            at = body;
            continue;
        }
        append_content(out.content, text.substr(at, open - at));
        out.calls.push_back(std::move(*call));
        at = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
    }
    if (at < text.size()) append_content(out.content, text.substr(at));
}

// Where a Llama 3 call may start: <|python_tag|> or {"name".
constexpr std::string_view kLlamaCall = "{\"name\"";

void parse_llama3(std::string_view text, ParsedAnswer& out) {
    const size_t at = std::min(text.find(kPythonTag), text.find(kLlamaCall));
    if (at == std::string_view::npos) {
        out.content = std::string(text);
        return;
    }
    std::string_view rest = text.substr(at);
    if (rest.starts_with(kPythonTag)) rest = trim(rest.substr(kPythonTag.size()));
    // One or more objects, separated by ';' or whitespace.
    std::vector<ToolCall> calls;
    while (!rest.empty() && rest.front() == '{') {
        const size_t end = json_value_end(rest);
        if (end == std::string_view::npos) break;
        auto j = parse_json(rest.substr(0, end));
        auto call = j ? call_from_object(*j, true) : std::nullopt;
        if (!call) break;
        calls.push_back(std::move(*call));
        rest = trim(rest.substr(end));
        if (!rest.empty() && rest.front() == ';') rest = trim(rest.substr(1));
    }
    if (calls.empty() || !rest.empty()) {
        out.content = std::string(text);
        return;
    }
    out.content = std::string(trim(text.substr(0, at)));
    out.calls = std::move(calls);
}

void parse_mistral(std::string_view text, ParsedAnswer& out) {
    const size_t tag = text.find(kMistralCalls);
    if (tag == std::string_view::npos) {
        out.content = std::string(text);
        return;
    }
    std::string_view rest = text.substr(tag);
    std::vector<ToolCall> calls;
    while (rest.starts_with(kMistralCalls)) {
        rest = trim(rest.substr(kMistralCalls.size()));
        if (!rest.empty() && rest.front() == '[') {  // [TOOL_CALLS][{...}, {...}]
            const size_t end = json_value_end(rest);
            auto j = end == std::string_view::npos ? std::nullopt : parse_json(rest.substr(0, end));
            if (!j || !j->is_array()) break;
            bool ok = true;
            for (const auto& item : *j) {
                auto call = call_from_object(item);
                if (!call)
                    ok = false;
                else
                    calls.push_back(std::move(*call));
            }
            if (!ok) break;
            rest = trim(rest.substr(end));
        } else {  // [TOOL_CALLS]name[ARGS]{...}
            const size_t args = rest.find(kMistralArgs);
            if (args == std::string_view::npos) break;
            const std::string name(trim(rest.substr(0, args)));
            std::string_view body = trim(rest.substr(args + kMistralArgs.size()));
            const size_t end =
                body.empty() || body.front() != '{' ? std::string_view::npos : json_value_end(body);
            auto j = end == std::string_view::npos ? std::nullopt : parse_json(body.substr(0, end));
            auto text_args = j ? arguments_text(*j) : std::nullopt;
            if (name.empty() || !text_args) break;
            calls.push_back(ToolCall{new_tool_call_id(), name, std::move(*text_args)});
            rest = trim(body.substr(end));
        }
    }
    if (calls.empty() || !rest.empty()) {
        out.content = std::string(text);
        return;
    }
    out.content = std::string(trim(text.substr(0, tag)));
    out.calls = std::move(calls);
}

// gpt-oss's harmony messages: [<|start|>assistant]<|channel|>C[ to=R][ <|constrain|>json]
// <|message|>BODY(<|end|>|<|call|>|<|return|>|end of text).
void parse_harmony(std::string_view text, ParsedAnswer& out, bool parse_calls) {
    constexpr std::string_view kChannel = "<|channel|>", kMessage = "<|message|>";
    constexpr std::string_view kStart = "<|start|>";
    constexpr std::array<std::string_view, 3> kEnds = {"<|end|>", "<|call|>", "<|return|>"};
    size_t at = 0;
    bool any = false;
    while (at < text.size()) {
        const size_t ch = text.find(kChannel, at);
        if (ch == std::string_view::npos) break;
        const size_t msg = text.find(kMessage, ch);
        if (msg == std::string_view::npos) break;
        // The header: from the message's <|start|> (or the channel) to <|message|>.
        const size_t start = text.rfind(kStart, ch);
        const size_t head_from = start != std::string_view::npos && start >= at ? start : ch;
        const std::string_view header = text.substr(head_from, msg - head_from);
        const size_t body_from = msg + kMessage.size();
        size_t body_end = text.size(), next = text.size();
        for (const auto end : kEnds)
            if (const size_t e = text.find(end, body_from); e < body_end) {
                body_end = e;
                next = e + end.size();
            }
        const std::string_view body = text.substr(body_from, body_end - body_from);
        std::string_view channel = header.substr(header.find(kChannel) + kChannel.size());
        channel = channel.substr(0, std::min(channel.find(' '), channel.find('<')));
        const size_t to = header.find("to=functions.");
        any = true;
        if (to != std::string_view::npos && parse_calls) {
            std::string_view name = header.substr(to + 13);
            name = name.substr(0, std::min({name.find(' '), name.find('<'), name.size()}));
            auto j = parse_json(trim(body));
            auto args = j ? arguments_text(*j) : std::nullopt;
            if (!name.empty() && args)
                out.calls.push_back(ToolCall{new_tool_call_id(), std::string(name), *args});
            else
                out.content += body;
        } else if (channel == "analysis") {
            out.reasoning += body;
        } else {
            out.content += body;
        }
        at = next;
    }
    if (!any) out.content = std::string(text);
}

void parse_deepseek(std::string_view text, ParsedAnswer& out) {
    const size_t begin = text.find(kDsCallsBegin);
    if (begin == std::string_view::npos) {
        out.content = std::string(text);
        return;
    }
    std::vector<ToolCall> calls;
    size_t at = begin + kDsCallsBegin.size();
    bool ok = true;
    while (true) {
        const size_t call = text.find(kDsCallBegin, at);
        if (call == std::string_view::npos) break;
        const size_t sep = text.find(kDsSep, call);
        const size_t end = text.find(kDsCallEnd, call);
        if (sep == std::string_view::npos || sep > end) {
            ok = false;
            break;
        }
        const size_t body_end = end == std::string_view::npos ? text.size() : end;
        std::string_view head =
            text.substr(call + kDsCallBegin.size(), sep - call - kDsCallBegin.size());
        std::string_view body = text.substr(sep + kDsSep.size(), body_end - sep - kDsSep.size());
        std::string name;
        if (head == "function") {  // V3: function<sep>NAME\n```json\n{...}\n```
            const size_t nl = body.find('\n');
            name = std::string(trim(body.substr(0, nl)));
            body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
            body = trim(body);
            if (body.starts_with("```json"))
                body.remove_prefix(7);
            else if (body.starts_with("```"))
                body.remove_prefix(3);
            if (body.ends_with("```")) body.remove_suffix(3);
        } else {  // V3.1: NAME<sep>{...}
            name = std::string(trim(head));
        }
        auto j = parse_json(trim(body));
        auto args = j ? arguments_text(*j) : std::nullopt;
        if (name.empty() || !args) {
            ok = false;
            break;
        }
        calls.push_back(ToolCall{new_tool_call_id(), std::move(name), std::move(*args)});
        if (end == std::string_view::npos) break;
        at = end + kDsCallEnd.size();
    }
    if (!ok || calls.empty()) {
        out.content = std::string(text);
        return;
    }
    out.content = std::string(trim(text.substr(0, begin)));
    const size_t tail = text.find(kDsCallsEnd, at);
    if (tail != std::string_view::npos) out.content += trim(text.substr(tail + kDsCallsEnd.size()));
    out.calls = std::move(calls);
}

// Where a marker may begin in `text`: the first full occurrence, or a
// suffix of text that is a prefix of the marker.
size_t marker_start(std::string_view text, std::string_view marker) {
    if (const size_t at = text.find(marker); at != std::string_view::npos) return at;
    for (size_t n = std::min(marker.size() - 1, text.size()); n > 0; --n)
        if (text.substr(text.size() - n) == marker.substr(0, n)) return text.size() - n;
    return text.size();
}

// A JSON string literal of s.
std::string quoted(const std::string& s) {
    return ojson(s).dump();
}

// The text around one call's arguments in each family's markup.
std::pair<std::string, std::string> call_markup(ToolFormat format, const std::string& name) {
    switch (format) {
        case ToolFormat::Generic:
        case ToolFormat::Hermes:
            return {fmt::format("{}\n{{\"name\": {}, \"arguments\": ", kHermesOpen, quoted(name)),
                    fmt::format("}}\n{}", kHermesClose)};
        case ToolFormat::Llama3:
            return {fmt::format("{{\"name\": {}, \"parameters\": ", quoted(name)),
                    std::string(1, '}')};
        case ToolFormat::Mistral:
            return {fmt::format("{}[{{\"name\": {}, \"arguments\": ", kMistralCalls, quoted(name)),
                    std::string("}]")};
        case ToolFormat::DeepSeek:
            return {fmt::format("{}{}function{}{}\n```json\n", kDsCallsBegin, kDsCallBegin, kDsSep,
                                name),
                    fmt::format("\n```{}{}", kDsCallEnd, kDsCallsEnd)};
        case ToolFormat::Harmony:
            break;
    }
    return {};
}

ojson tag_for(ToolFormat format, const Tool& tool) {
    auto [begin, end] = call_markup(format, tool.name);
    ojson schema = tool.parameters.is_object() && !tool.parameters.empty()
                       ? tool.parameters
                       : ojson{{"type", "object"}};
    return {{"type", "tag"},
            {"begin", begin},
            {"content", {{"type", "json_schema"}, {"json_schema", schema}}},
            {"end", end}};
}

std::string_view trigger_for(ToolFormat format) {
    switch (format) {
        case ToolFormat::Generic:
        case ToolFormat::Hermes:
            return kHermesOpen;
        case ToolFormat::Llama3:
            return "{\"name\": ";
        case ToolFormat::Mistral:
            return kMistralCalls;
        case ToolFormat::DeepSeek:
            return kDsCallsBegin;
        case ToolFormat::Harmony:
            break;
    }
    return {};
}

// A call as Hermes markup (the generic convention's history).
std::string hermes_call(const ojson& call) {
    const ojson* fn = call.contains("function") ? &call["function"] : &call;
    ojson out = ojson::object();
    out["name"] = fn->value("name", "");
    out["arguments"] = fn->contains("arguments") ? (*fn)["arguments"] : ojson::object();
    return fmt::format("{}\n{}\n{}", kHermesOpen, out.dump(), kHermesClose);
}

}  // namespace

const char* tool_format_name(ToolFormat format) {
    switch (format) {
        case ToolFormat::Generic:
            return "generic";
        case ToolFormat::Hermes:
            return "hermes";
        case ToolFormat::Llama3:
            return "llama3";
        case ToolFormat::Mistral:
            return "mistral";
        case ToolFormat::Harmony:
            return "harmony";
        case ToolFormat::DeepSeek:
            return "deepseek";
    }
    return "?";
}

ToolFormat detect_tool_format(std::string_view src) {
    if (contains(src, "<|channel|>")) return ToolFormat::Harmony;
    if (contains(src, "tool▁calls▁begin")) return ToolFormat::DeepSeek;
    if (contains(src, kMistralCalls)) return ToolFormat::Mistral;
    if (contains(src, kHermesOpen)) return ToolFormat::Hermes;
    if (contains(src, "<|start_header_id|>") && contains(src, "tools")) return ToolFormat::Llama3;
    return ToolFormat::Generic;
}

ParsedAnswer parse_answer(ToolFormat format, std::string_view text, bool parse_calls) {
    ParsedAnswer out;
    if (format == ToolFormat::Harmony) {
        parse_harmony(text, out, parse_calls);
        return out;
    }
    split_think(text, out);
    if (!parse_calls) {
        out.content = std::string(text);
        return out;
    }
    switch (format) {
        case ToolFormat::Generic:
        case ToolFormat::Hermes:
            parse_hermes(text, out);
            break;
        case ToolFormat::Llama3:
            parse_llama3(text, out);
            break;
        case ToolFormat::Mistral:
            parse_mistral(text, out);
            break;
        case ToolFormat::DeepSeek:
            parse_deepseek(text, out);
            break;
        case ToolFormat::Harmony:
            break;
    }
    if (!out.calls.empty()) out.content = std::string(trim(out.content));
    return out;
}

size_t content_prefix(ToolFormat format, std::string_view text, bool parse_calls) {
    if (format == ToolFormat::Harmony) return 0;  // channels are known at the end
    if (!parse_calls) return text.size();
    switch (format) {
        case ToolFormat::Generic:
        case ToolFormat::Hermes:
            return marker_start(text, kHermesOpen);
        case ToolFormat::Llama3:
            return std::min(marker_start(text, kPythonTag), marker_start(text, kLlamaCall));
        case ToolFormat::Mistral:
            return marker_start(text, kMistralCalls);
        case ToolFormat::DeepSeek:
            return marker_start(text, kDsCallsBegin);
        case ToolFormat::Harmony:
            break;
    }
    return text.size();
}

std::optional<GrammarSpec> tool_grammar(ToolFormat format, const std::vector<Tool>& tools,
                                        const ToolChoice& choice, bool parallel) {
    if (choice.mode == ToolChoiceMode::None || tools.empty() || format == ToolFormat::Harmony)
        return std::nullopt;
    ojson tags = ojson::array();
    for (const Tool& t : tools)
        if (choice.mode != ToolChoiceMode::Named || t.name == choice.name)
            tags.push_back(tag_for(format, t));
    const bool one = !parallel || choice.mode == ToolChoiceMode::Named;
    // Forced: the answer is calls and nothing else. Auto: free text, and a
    // call's markup, once the model starts one, must be complete and valid.
    ojson fmt_json = choice.mode == ToolChoiceMode::Auto
                         ? ojson{{"type", "triggered_tags"},
                                 {"triggers", ojson::array({std::string(trigger_for(format))})},
                                 {"tags", tags},
                                 {"at_least_one", false},
                                 {"stop_after_first", one}}
                         : ojson{{"type", "tags_with_separator"},
                                 {"tags", tags},
                                 {"separator", "\n"},
                                 {"at_least_one", true},
                                 {"stop_after_first", one}};
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::StructuralTag;
    spec.text = ojson{{"type", "structural_tag"}, {"format", fmt_json}}.dump();
    return spec;
}

nlohmann::ordered_json tools_json(const std::vector<Tool>& tools) {
    ojson out = ojson::array();
    for (const Tool& t : tools) {
        ojson fn = {{"name", t.name}};
        if (!t.description.empty()) fn["description"] = t.description;
        fn["parameters"] = t.parameters;
        out.push_back({{"type", "function"}, {"function", fn}});
    }
    return out;
}

std::vector<ChatMessage> messages_for_template(ToolFormat format, std::vector<ChatMessage> messages,
                                               const std::vector<Tool>& tools) {
    if (format != ToolFormat::Generic) return messages;
    std::vector<ChatMessage> out;
    out.reserve(messages.size() + 1);
    if (!tools.empty()) {
        std::string text = "You can call these tools, described as JSON schemas:\n<tools>\n";
        for (const auto& t : tools_json(tools)) text += t["function"].dump() + "\n";
        text += fmt::format(
            "</tools>\nTo call a tool, answer with one block per call and nothing else:\n{}\n"
            "{{\"name\": <tool name>, \"arguments\": <the arguments as a JSON object>}}\n{}\n"
            "The results come back in <tool_response> blocks.",
            kHermesOpen, kHermesClose);
        if (!messages.empty() && messages.front().role == "system") {
            messages.front().content += "\n\n" + text;
        } else {
            out.push_back(ChatMessage{"system", std::move(text), ojson::object()});
        }
    }
    for (ChatMessage& m : messages) {
        ChatMessage plain{m.role, std::move(m.content), ojson::object()};
        if (m.role == "assistant" && m.fields.contains("tool_calls") &&
            m.fields["tool_calls"].is_array()) {
            for (const auto& call : m.fields["tool_calls"]) {
                if (!plain.content.empty()) plain.content += '\n';
                plain.content += hermes_call(call);
            }
        } else if (m.role == "tool") {
            plain.role = "user";
            plain.content = fmt::format("<tool_response>\n{}\n</tool_response>", plain.content);
        }
        if (!out.empty() && out.back().role == plain.role && plain.role != "system") {
            out.back().content += "\n" + plain.content;
        } else {
            out.push_back(std::move(plain));
        }
    }
    return out;
}

void AnswerSplitter::start_body(size_t at) {
    while (at < raw_.size() && (raw_[at] == '\n' || raw_[at] == ' ')) ++at;
    body_ = sent_ = at;
}

AnswerSplitter::Out AnswerSplitter::push(std::string_view text) {
    raw_ += text;
    Out out;
    if (body_ == std::string::npos) {
        if (format_ == ToolFormat::Harmony) {
            body_ = sent_ = 0;
        } else {
            const std::string_view t = trim(raw_);
            const bool opened = think_open_ || t.starts_with(kThinkOpen);
            if (!opened && !t.empty() && !kThinkOpen.starts_with(t)) {
                body_ = sent_ = 0;
            } else if (opened) {
                // Only the new text (and a marker it may complete) is searched.
                const size_t close = raw_.find(
                    kThinkClose, scanned_ > kThinkClose.size() ? scanned_ - kThinkClose.size() : 0);
                scanned_ = raw_.size();
                if (close == std::string::npos) return out;
                size_t from = 0;
                if (const size_t open = raw_.find(kThinkOpen); open < close)
                    from = open + kThinkOpen.size();
                out.reasoning =
                    std::string(trim(std::string_view(raw_).substr(from, close - from)));
                start_body(close + kThinkClose.size());
                // Whitespace after </think> may continue in the next piece.
                if (body_ == raw_.size()) body_ = sent_ = raw_.size();
            } else {
                return out;  // "<th..." : not yet known
            }
        }
    }
    if (body_ == sent_ && sent_ == raw_.size()) return out;
    const std::string_view body = std::string_view(raw_).substr(body_);
    // Leading whitespace of the body waits for text that is not whitespace.
    if (sent_ == body_ && trim(body).empty()) return out;
    if (sent_ == body_) {
        size_t at = body_;
        while (at < raw_.size() && (raw_[at] == '\n' || raw_[at] == ' ')) ++at;
        body_ = sent_ = at;
    }
    // What was sent holds no markup's start: only the rest is scanned.
    const size_t safe =
        sent_ + content_prefix(format_, std::string_view(raw_).substr(sent_), parse_calls_);
    if (safe > sent_) {
        out.content = raw_.substr(sent_, safe - sent_);
        sent_ = safe;
    }
    return out;
}

AnswerSplitter::Out AnswerSplitter::finish() {
    Out out;
    if (body_ == std::string::npos) {
        const std::string_view t = trim(raw_);
        if (format_ != ToolFormat::Harmony && (think_open_ || t.starts_with(kThinkOpen))) {
            // Cut off while reasoning: all of it is reasoning.
            std::string_view r = t;
            if (r.starts_with(kThinkOpen)) r.remove_prefix(kThinkOpen.size());
            out.reasoning = std::string(trim(r));
            return out;
        }
        body_ = sent_ = 0;
    }
    ParsedAnswer p = parse_answer(format_, std::string_view(raw_).substr(sent_), parse_calls_);
    sent_ = raw_.size();
    out.reasoning = std::move(p.reasoning);
    out.content = std::move(p.content);
    out.calls = std::move(p.calls);
    return out;
}

std::string random_id(std::string_view prefix) {
    static constexpr std::string_view kChars =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::string id = std::string(prefix) + "_";
    std::uniform_int_distribution<size_t> pick(0, kChars.size() - 1);
    for (int i = 0; i < 24; ++i) id += kChars[pick(rng)];
    return id;
}

}  // namespace headroom::server
