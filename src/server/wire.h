// How one generation's output is written on the wire of the API it came
// through. The engine's events become, per choice, reasoning, content, tool
// calls and a finish; a Wire turns them into that API's stream events (SSE)
// or its whole response body:
//
//   OpenAI chat completions   chat.completion.chunk deltas, [DONE]
//   OpenAI completions        text_completion chunks, [DONE]
//   OpenAI responses          response.created ... response.output_text.delta
//                             ... response.completed (typed events)
//   Anthropic messages        message_start, content_block_start/delta/stop,
//                             message_delta, message_stop
//
// Only the chat and completions wires carry several choices (n, best_of).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/openai-json.h"

namespace headroom::server {

enum class Api { ChatCompletions, Completions, Responses, AnthropicMessages };

class Wire {
  public:
    virtual ~Wire() = default;
    // Streaming, in this order per choice: open() once before anything, then
    // any number of reasoning / content / call, then finish(); close() once
    // every choice finished.
    virtual void open(std::string& out) = 0;
    virtual void reasoning(uint32_t choice, const std::string& text, std::string& out) = 0;
    virtual void content(uint32_t choice, const std::string& text, nlohmann::json logprobs,
                         std::string& out) = 0;
    // `index`: the call's place among the choice's calls.
    virtual void call(uint32_t choice, const ToolCall& call, size_t index, std::string& out) = 0;
    virtual void finish(uint32_t choice, FinishReason reason, bool called, std::string& out) = 0;
    virtual void close(const Usage& usage, std::string& out) = 0;
    // Not streaming: the whole response body.
    virtual nlohmann::json whole(std::vector<ChoiceOutput> choices, const Usage& usage) = 0;
};

// The wire of OpenAI's chat completions and completions (meta.endpoint).
std::unique_ptr<Wire> openai_wire(const ResponseMeta& meta, const Truncation& truncation,
                                  bool include_usage, uint32_t n_choices);

}  // namespace headroom::server
