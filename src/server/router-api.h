// What LLM routers ask a worker besides generation, answered in the shapes
// they parse (vllm-router, sglang-router; the README lists them):
//   GET  /server_info, /get_server_info  served_model_name, model_path, limits
//   GET  /model_info, /get_model_info    model_path, model_type, architectures
//   GET  /get_load                       {"load": requests in flight, ...}
//   POST /tokenize                       vLLM's: {"count", "max_model_len", "tokens"}
//   POST /detokenize                     vLLM's: {"prompt"}
// A cache-aware router tokenizes each chat on every worker to find the one
// whose past requests share the longest prefix, so /tokenize renders the
// chat template exactly as a generation request would.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "server/http-server.h"

namespace httplib {
struct Response;
}

namespace headroom::server {

nlohmann::json server_info_json(const ServedModel& model, const ServeConfig& config);
nlohmann::json model_info_json(const ServedModel& model);
// n_in_flight: requests holding a seat among --max-queued (waiting or running).
nlohmann::json load_json(const ServedModel& model, uint32_t n_in_flight);

// Fill `res` with the answer or an OpenAI error JSON. Never throw.
void handle_tokenize(const std::string& body, const ServedModel& model, httplib::Response& res);
void handle_detokenize(const std::string& body, const ServedModel& model, httplib::Response& res);

}  // namespace headroom::server
