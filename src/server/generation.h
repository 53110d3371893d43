// One generation request (/v1/chat/completions, /v1/completions,
// /v1/responses, /v1/messages) from its
// body to its last byte:
//   parse -> model check -> a seat among --max-queued -> prompt -> submit
//   -> a chunked content provider that drains the request's channel.
// The provider waits kPollInterval at a time for tokens; between waits it
// asks httplib whether the client is still there, so a client that leaves
// (before its first token or mid-stream) cancels its request. The seat is
// given back when httplib drops the provider, however the response ended.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "server/http-server.h"
#include "server/openai-json.h"
#include "server/wire.h"

namespace httplib {
struct Response;
}

namespace headroom::server {

struct GenerationContext {
    const ServedModel& model;
    const ServeConfig& config;
    std::atomic<uint32_t>& n_in_flight;  // seats taken among config.max_queued
    HttpCounters& counters;
    const std::atomic<bool>& draining;  // begin_draining() was called
};

// Fills `res` with an error, or with a content provider that streams (SSE)
// or collects (one JSON body) the output. Never throws.
void handle_generation(Api api, const std::string& body, const GenerationContext& ctx,
                       httplib::Response& res);

// 503 for a request beyond --max-queued waiting or running ones.
ApiError queue_full(const ServeConfig& config);

// Sets `res` to the error's status and the API's error JSON (OpenAI's, or
// Anthropic's for /v1/messages).
void set_error(httplib::Response& res, const ApiError& error, Api api = Api::ChatCompletions);

}  // namespace headroom::server
