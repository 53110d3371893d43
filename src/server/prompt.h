// From a request to prompt tokens, and what to do when they do not fit.
//
//   chat:       template.apply(messages, add_generation_prompt) then
//               encode(text, add_special = false, parse_special = true):
//               the template writes BOS itself where the model wants it.
//   completion: encode(prompt, add_special = true, parse_special = true),
//               as `headroom run -p` does; or the token ids as given.
//
// A prompt fits when prompt + max_tokens <= max_model_len (with max_tokens
// absent, when at least one token of room is left). One that does not fit is
// refused with 400 naming the numbers, unless truncation is on
// (--truncate-history, or the request's truncate_prompt_tokens): then a chat
// loses its oldest non-system turns (a turn is a user message and the
// replies after it, so the roles still alternate), whole turns at a time,
// until it fits; the last turn always stays. A completion loses its oldest
// tokens (BOS stays). When max_tokens is absent, truncation leaves room for
// a reply of min(256, max_model_len / 4) tokens rather than a single token.
// truncate_prompt_tokens = k also caps the prompt at k tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "server/openai-json.h"
#include "tokenizer/chat-template.h"
#include "tokenizer/tokenizer.h"

namespace headroom::server {

struct PromptLimits {
    uint32_t max_model_len = 0;
    std::optional<uint32_t> max_tokens;
    std::optional<uint32_t> truncate_prompt_tokens;
    bool truncate_history = false;  // --truncate-history
};

struct Prompt {
    std::vector<int32_t> tokens;
    Truncation truncation;
};

// Builds the prompt of `spec`. Returns the error to send for a template
// error, an empty prompt, or a prompt that does not fit. Never throws.
std::optional<ApiError> build_prompt(const GenerationSpec& spec, const ChatTemplate& tmpl,
                                     const Tokenizer& tokenizer, const PromptLimits& limits,
                                     Prompt& out);

}  // namespace headroom::server
