// The OpenAI wire format: request parsing and response building for
// /v1/chat/completions and /v1/completions.
//
// Request bodies are untrusted. Parsing never throws: every problem becomes
// an ApiError that names the field and says why (OpenAI's error JSON with
// status 400). Fields are read the way OpenAI reads them: null means absent,
// unknown fields are ignored, a known field of the wrong type is an error.
// Ranges the sampler owns (temperature, top_p...) are checked by
// SamplingParams::validate() at submission; the ones that are the wire
// format's business (n, max_tokens, stop, logprobs) are checked here.
//
// Extensions accepted as vLLM does: top_k, min_p, repetition_penalty,
// ignore_eos, stop_token_ids, truncate_prompt_tokens, and beam search
// (use_beam_search, beam_width, length_penalty, early_stopping). n and
// best_of are accepted on both endpoints.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar.h"
#include "engine/metrics.h"
#include "engine/sampling.h"
#include "server/tool-calls.h"
#include "tokenizer/chat-template.h"

namespace headroom {

class Tokenizer;

namespace server {

// One error response: OpenAI's {"error": {message, type, param, code}}.
struct ApiError {
    int status = 400;
    std::string message;
    std::string param;  // the offending field ("messages[1].role"); "" if none
    std::string code;   // machine-readable code ("model_not_found"); "" if none
    std::string type = "invalid_request_error";
};

ApiError bad_request(std::string param, std::string message);
// 400 for a field or value this server does not implement.
ApiError unsupported(const std::string& param, const std::string& what);
// 404 for a request that names another model than the one served.
ApiError model_not_found(const std::string& asked, const std::string& served);
// A field of a JSON object; null when absent or JSON null (OpenAI reads null as absent).
const nlohmann::json* find_field(const nlohmann::json& obj, const char* key);
nlohmann::json error_json(const ApiError& error);
// The body to send: error_json(error) serialized.
std::string error_body(const ApiError& error);

enum class Endpoint { Chat, Completion };

// A validated generation request.
struct GenerationSpec {
    Endpoint endpoint = Endpoint::Chat;
    std::string model;                  // as given; "" if absent
    std::vector<ChatMessage> messages;  // Chat
    std::string prompt_text;            // Completion with a text prompt
    std::vector<int32_t> prompt_ids;    // Completion with a token-id prompt
    bool prompt_is_ids = false;
    SamplingParams sampling;             // max_tokens set once the prompt length is known
    std::optional<uint32_t> max_tokens;  // max_completion_tokens or max_tokens
    std::optional<uint32_t> truncate_prompt_tokens;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool logprobs = false;       // per-token logprobs in the response
    uint32_t top_logprobs = 0;   // alternatives per token
    ChoiceParams choices;        // n, best_of, use_beam_search, beam_width...
    // response_format json_object / json_schema, structured_outputs or guided_*.
    std::optional<GrammarSpec> grammar;
    std::string grammar_param;  // the field it came from, for compile errors
    std::vector<Tool> tools;
    ToolChoice tool_choice;  // "auto" by default; "none" without tools
    bool parallel_tool_calls = true;
    // chat_template_kwargs, and reasoning_effort: more template variables.
    nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
};

// Most tools one request may declare.
inline constexpr size_t kMaxTools = 128;

// Most choices (n, best_of, beam_width) one request may ask for.
inline constexpr int64_t kMaxChoices = 128;

// Largest JSON nesting a request may have; deeper bodies are refused before
// they are parsed (a chat request needs 4 levels).
inline constexpr size_t kMaxJsonDepth = 32;
// Deepest nesting of arrays and objects in `text`, stopping once past
// `limit`: checked before a body is parsed.
size_t json_depth(std::string_view text, size_t limit);

// Parses and validates a request body. On success fills `spec` and returns
// nullopt; otherwise returns the error to send.
std::optional<ApiError> parse_generation_request(std::string_view body, Endpoint endpoint,
                                                 GenerationSpec& spec);

// What every response object of one request shares.
struct ResponseMeta {
    Endpoint endpoint = Endpoint::Chat;
    std::string id;  // "chatcmpl-..." or "cmpl-..."
    int64_t created_s = 0;
    std::string model;
};

struct Usage {
    uint32_t n_prompt_tokens = 0;
    uint32_t n_completion_tokens = 0;
    uint32_t n_cached_tokens = 0;
    // headroom's own: KV blocks the request held at its peak, and the table
    // entries its samples or beams shared instead of copying.
    uint32_t n_kv_blocks = 0;
    uint32_t n_kv_blocks_shared = 0;
};

// How the prompt was shortened to fit (--truncate-history or truncate_prompt_tokens).
struct Truncation {
    uint32_t n_dropped_tokens = 0;
    uint32_t n_dropped_messages = 0;
    bool happened() const { return n_dropped_tokens > 0; }
};

// "stop", "length", "abort", "error"; null while unfinished.
nlohmann::json finish_reason_json(FinishReason reason);
nlohmann::json usage_json(const Usage& usage);
nlohmann::json truncation_json(const Truncation& truncation);
std::string new_response_id(Endpoint endpoint);

// Per-token logprobs, accumulated in the format of the endpoint:
//   chat:       {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}
//   completion: {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}
// Token texts are valid UTF-8 (a byte token alone shows as U+FFFD; chat's
// "bytes" keep the raw bytes). text_offset counts characters (code points)
// of the token texts before each token, continuing across take() calls.
class LogprobsBuilder {
  public:
    LogprobsBuilder(Endpoint endpoint, const Tokenizer& tokenizer, uint32_t n_top);
    void add(int32_t token, float logprob, const std::vector<TokenLogprob>& top);
    bool empty() const { return n_entries_ == 0; }
    // The entries added since the last take(), in the endpoint's format; resets.
    nlohmann::json take();

  private:
    std::string raw_piece(int32_t token) const;
    std::string piece(int32_t token) const;

    Endpoint endpoint_;
    const Tokenizer& tokenizer_;
    uint32_t n_top_;
    size_t n_entries_ = 0;
    size_t text_offset_ = 0;
    nlohmann::json entries_;  // chat: array of entries; completion: object of arrays
};

// One choice of a whole response.
struct ChoiceOutput {
    std::string text;
    std::string reasoning;        // chat: reasoning_content ("" : none)
    std::vector<ToolCall> calls;  // chat: tool_calls (content is null when text is empty)
    FinishReason finish = FinishReason::None;
    nlohmann::json logprobs;  // null if none
};

// Whole responses (stream: false): choices in index order.
nlohmann::json completion_response(const ResponseMeta& meta, std::vector<ChoiceOutput> choices,
                                   const Usage& usage, const Truncation& truncation);
// One streamed chunk of choice `index`. Chat: `text` goes into
// delta.content; `first` adds delta.role. `logprobs` may be null.
nlohmann::json chunk_response(const ResponseMeta& meta, uint32_t index, const std::string& text,
                              bool first, FinishReason finish, nlohmann::json logprobs);
// OpenAI's tool_calls list; streamed (whole false) entries carry their
// index among the choice's calls, counting from first_index.
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index, bool whole);
// A streamed chat chunk of choice `index` with delta.tool_calls (each
// call's id, type and name, and its arguments) or delta.reasoning_content.
nlohmann::json tool_calls_chunk(const ResponseMeta& meta, uint32_t index,
                                const std::vector<ToolCall>& calls, size_t first_index);
nlohmann::json reasoning_chunk(const ResponseMeta& meta, uint32_t index,
                               const std::string& reasoning);
// The closing chunk of stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk(const ResponseMeta& meta, const Usage& usage);

// Serializes for the wire: compact, invalid UTF-8 replaced by U+FFFD (token
// pieces can split a character), never throws.
std::string dump(const nlohmann::json& j);

}  // namespace server
}  // namespace headroom
