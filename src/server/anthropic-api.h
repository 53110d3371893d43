// Anthropic's Messages API (POST /v1/messages), so Claude clients (the
// anthropic package, Claude Code) can use a local model. The request becomes
// a chat request (the model's own template, tools, grammar and sampling):
//
//   system (text or text blocks)       a system message first
//   user text blocks                   a user message
//   user tool_result blocks            tool messages (tool_use_id -> tool_call_id)
//   assistant text / tool_use blocks   an assistant message with its tool_calls
//   thinking blocks                    skipped (the template decides)
//   tools [{name, input_schema}]       chat tools
//   tool_choice auto / any / tool / none, disable_parallel_tool_use
//   thinking {type: enabled|disabled}  the template's enable_thinking
//   max_tokens (required), stop_sequences, temperature, top_p, top_k, stream
//
// The answer is content blocks (thinking, text, tool_use) with stop_reason
// end_turn, max_tokens or tool_use; streaming sends message_start,
// content_block_start / _delta / _stop, message_delta and message_stop.
// Errors have Anthropic's shape: {"type": "error", "error": {type, message}}.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/openai-json.h"
#include "server/wire.h"

namespace headroom::server {

std::optional<ApiError> parse_anthropic_request(std::string_view body, GenerationSpec& spec);

// n_prompt: the input tokens message_start reports.
std::unique_ptr<Wire> anthropic_wire(const std::string& model, uint32_t n_prompt);

// The error as Anthropic's API writes it.
std::string anthropic_error_body(const ApiError& error);

}  // namespace headroom::server
