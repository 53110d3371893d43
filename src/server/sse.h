// Server-sent events as OpenAI streams them: each JSON chunk is one event
// "data: <json>\n\n", and the stream ends with "data: [DONE]\n\n". The JSON
// is compact (one line), so an event never needs multi-line data fields.
// The Responses and Anthropic APIs name each event: "event: <type>\n" first.
#pragma once

#include <string>
#include <string_view>

namespace headroom::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

inline void append_sse_event(std::string& out, std::string_view json_line) {
    out += "data: ";
    out += json_line;
    out += "\n\n";
}

inline void append_sse_event(std::string& out, std::string_view type, std::string_view json_line) {
    out += "event: ";
    out += type;
    out += '\n';
    append_sse_event(out, json_line);
}

}  // namespace headroom::server
