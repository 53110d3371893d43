// OpenAI's Responses API (POST /v1/responses), stateless: the request
// carries the whole conversation (input items and instructions), nothing is
// stored, previous_response_id is refused. The request becomes a chat
// request (the same template, tools, grammar and sampling):
//
//   instructions                       a system message first
//   input "text"                       one user message
//   {role, content}                    a message (input_text / output_text parts)
//   {type: function_call, call_id...}  the assistant's tool call
//   {type: function_call_output}       a tool message with its tool_call_id
//   {type: reasoning}                  skipped (the template decides)
//   tools [{type: function, name...}]  chat tools
//   text.format                        response_format
//   max_output_tokens, reasoning.effort, temperature, top_p, tool_choice,
//   parallel_tool_calls, stream         as in chat
//
// The output is a list of items: a reasoning item (if the model reasoned), a
// message with its output_text, and a function_call per call; streaming sends
// the typed events the openai package reads (response.created,
// response.output_item.added, response.output_text.delta, ...,
// response.completed), each with its sequence_number.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/openai-json.h"
#include "server/wire.h"

namespace headroom::server {

// Parses a Responses request into `spec`; `echo` gets the request's fields the
// response object repeats (instructions, tools, tool_choice, ...).
std::optional<ApiError> parse_responses_request(std::string_view body, GenerationSpec& spec,
                                                nlohmann::json& echo);

std::unique_ptr<Wire> responses_wire(const std::string& model, nlohmann::json echo);

}  // namespace headroom::server
