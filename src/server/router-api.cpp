#include "server/router-api.h"

#include <fmt/format.h>
#include <httplib.h>

#include "engine/engine.h"
#include "server/generation.h"
#include "server/prompt.h"

namespace headroom::server {

using json = nlohmann::json;

json server_info_json(const ServedModel& m, const ServeConfig& config) {
    return {{"served_model_name", m.name},
            {"model_id", m.name},
            {"model_path", m.model_path},
            {"tokenizer_path", m.model_path},
            {"max_model_len", m.max_model_len},
            {"context_length", m.max_model_len},
            {"max_running_requests", m.max_num_seqs},
            {"max_queued_requests", config.max_queued},
            {"max_total_tokens", m.kv_capacity_tokens},
            {"dp_size", 1},
            {"is_generation", true},
            {"version", "headroom"}};
}

json model_info_json(const ServedModel& m) {
    return {{"model_path", m.model_path},   {"tokenizer_path", m.model_path},
            {"served_model_name", m.name},  {"is_generation", true},
            {"model_type", m.architecture}, {"architectures", json::array({m.architecture})}};
}

json load_json(const ServedModel& m, uint32_t n_in_flight) {
    const EngineMetrics& e = *m.metrics;
    const uint64_t running = e.n_running.load(std::memory_order_relaxed);
    const uint64_t waiting = e.n_waiting.load(std::memory_order_relaxed);
    return {{"load", n_in_flight},
            {"num_reqs", running + waiting},
            {"num_running_reqs", running},
            {"num_waiting_reqs", waiting},
            {"num_running_seqs", e.n_running_seqs.load(std::memory_order_relaxed)},
            {"kv_blocks_used", e.kv_blocks_used.load(std::memory_order_relaxed)},
            {"kv_blocks_total", e.kv_blocks_total.load(std::memory_order_relaxed)}};
}

void handle_tokenize(const std::string& body, const ServedModel& m, httplib::Response& res) {
    try {
        // A chat (messages) renders the model's template as generation
        // does; a prompt is text or token ids, as /v1/completions takes it.
        if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
            return set_error(res, bad_request("", "the request body nests too deep"));
        const json j = json::parse(body, nullptr, false);
        const bool is_chat = j.is_object() && j.contains("messages");
        const Endpoint endpoint = is_chat ? Endpoint::Chat : Endpoint::Completion;
        GenerationSpec spec;
        if (auto e = parse_generation_request(body, endpoint, spec)) return set_error(res, *e);
        PromptLimits limits;
        limits.max_model_len = m.max_model_len;
        Prompt prompt;
        if (auto e = build_prompt(spec, *m.chat_template, *m.tokenizer, limits, prompt))
            return set_error(res, *e);
        res.set_content(dump({{"count", prompt.tokens.size()},
                              {"max_model_len", m.max_model_len},
                              {"tokens", prompt.tokens}}),
                        "application/json");
    } catch (const std::exception& e) {
        set_error(res, bad_request("", fmt::format("cannot tokenize: {}", e.what())));
    }
}

void handle_detokenize(const std::string& body, const ServedModel& m, httplib::Response& res) {
    try {
        if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
            return set_error(res, bad_request("", "the request body nests too deep"));
        const json j = json::parse(body, nullptr, false);
        if (j.is_discarded() || !j.is_object())
            return set_error(res, bad_request("", "the request body must be a JSON object"));
        const auto it = j.find("tokens");
        if (it == j.end() || !it->is_array())
            return set_error(res, bad_request("tokens", "tokens must be an array of token ids"));
        std::vector<int32_t> ids;
        for (const auto& t : *it) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
                t.get<int64_t>() >= m.tokenizer->n_vocab())
                return set_error(
                    res, bad_request("tokens", fmt::format("token ids must be integers in 0..{}",
                                                           m.tokenizer->n_vocab() - 1)));
            ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
        res.set_content(dump({{"prompt", m.tokenizer->decode(ids)}}), "application/json");
    } catch (const std::exception& e) {
        set_error(res, bad_request("", fmt::format("cannot detokenize: {}", e.what())));
    }
}

}  // namespace headroom::server
