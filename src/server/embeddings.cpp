#include "server/embeddings.h"

#include <fmt/format.h>
#include <httplib.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace headroom::server {

using json = nlohmann::json;

namespace {

// Most inputs one request may embed.
constexpr size_t kMaxInputs = 256;

std::string base64(const std::vector<float>& v) {
    static constexpr char kAlphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string bytes(v.size() * sizeof(float), '\0');
    std::memcpy(bytes.data(), v.data(), bytes.size());  // x86: little-endian already
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const auto b0 = static_cast<uint8_t>(bytes[i]);
        const auto b1 = i + 1 < bytes.size() ? static_cast<uint8_t>(bytes[i + 1]) : 0;
        const auto b2 = i + 2 < bytes.size() ? static_cast<uint8_t>(bytes[i + 2]) : 0;
        out += kAlphabet[b0 >> 2];
        out += kAlphabet[((b0 & 3) << 4) | (b1 >> 4)];
        out += i + 1 < bytes.size() ? kAlphabet[((b1 & 15) << 2) | (b2 >> 6)] : '=';
        out += i + 2 < bytes.size() ? kAlphabet[b2 & 63] : '=';
    }
    return out;
}

struct EmbedRequest {
    std::vector<std::vector<int32_t>> inputs;
    bool base64 = false;
    bool normalize = true;
    uint32_t dimensions = 0;  // 0: all
    std::string model;
};

std::optional<ApiError> read_ids(const json& arr, const std::string& param,
                                 std::vector<int32_t>& out) {
    for (size_t i = 0; i < arr.size(); ++i) {
        if (!arr[i].is_number_integer() || arr[i].get<int64_t>() < 0 ||
            arr[i].get<int64_t>() > std::numeric_limits<int32_t>::max())
            return bad_request(fmt::format("{}[{}]", param, i), "expected a token id");
        out.push_back(arr[i].get<int32_t>());
    }
    return std::nullopt;
}

std::optional<ApiError> parse(const std::string& body, const Tokenizer& tokenizer,
                              EmbedRequest& r) {
    if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
        return bad_request("", "the request body nests too deep");
    const json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        return bad_request("", "the request body must be a JSON object");
    if (j.contains("model") && j["model"].is_string()) r.model = j["model"];
    const auto input = j.find("input");
    if (input == j.end() || input->is_null()) return bad_request("input", "required, but missing");
    auto text = [&](const json& v) { return tokenizer.encode(v.get<std::string>(), true, false); };
    if (input->is_string()) {
        r.inputs.push_back(text(*input));
    } else if (input->is_array() && !input->empty()) {
        if (input->size() > kMaxInputs)
            return bad_request("input",
                               fmt::format("at most {} inputs, got {}", kMaxInputs, input->size()));
        if ((*input)[0].is_number()) {
            r.inputs.emplace_back();
            if (auto e = read_ids(*input, "input", r.inputs.back())) return e;
        } else {
            for (size_t i = 0; i < input->size(); ++i) {
                const json& v = (*input)[i];
                const std::string p = fmt::format("input[{}]", i);
                if (v.is_string()) {
                    r.inputs.push_back(text(v));
                } else if (v.is_array()) {
                    r.inputs.emplace_back();
                    if (auto e = read_ids(v, p, r.inputs.back())) return e;
                } else {
                    return bad_request(p, "expected a string or an array of token ids");
                }
            }
        }
    } else {
        return bad_request("input", "expected a string, an array of strings or token ids");
    }
    for (size_t i = 0; i < r.inputs.size(); ++i)
        if (r.inputs[i].empty())
            return bad_request(fmt::format("input[{}]", i), "an input must not be empty");
    if (const auto f = j.find("encoding_format"); f != j.end() && !f->is_null()) {
        if (*f != "float" && *f != "base64")
            return bad_request("encoding_format", "must be 'float' or 'base64'");
        r.base64 = *f == "base64";
    }
    if (const auto n = j.find("normalize"); n != j.end() && !n->is_null()) {
        if (!n->is_boolean()) return bad_request("normalize", "must be a boolean");
        r.normalize = n->get<bool>();
    }
    if (const auto d = j.find("dimensions"); d != j.end() && !d->is_null()) {
        if (!d->is_number_integer() || d->get<int64_t>() < 1 || d->get<int64_t>() > 1 << 20)
            return bad_request("dimensions", "must be a positive integer");
        r.dimensions = d->get<uint32_t>();
    }
    return std::nullopt;
}

// A seat among --max-queued for the request's duration.
struct Seat {
    std::atomic<uint32_t>& n;
    ~Seat() { n.fetch_sub(1); }
};

}  // namespace

void handle_embeddings(const std::string& body, const GenerationContext& ctx,
                       httplib::Response& res) {
    try {
        EmbedRequest r;
        if (auto e = parse(body, *ctx.model.tokenizer, r)) return set_error(res, *e);
        if (!r.model.empty() && r.model != ctx.model.name)
            return set_error(res, model_not_found(r.model, ctx.model.name));
        if (ctx.n_in_flight.fetch_add(1) >= ctx.config.max_queued) {
            ctx.n_in_flight.fetch_sub(1);
            res.set_header("Retry-After", std::to_string(ctx.config.retry_after_s));
            return set_error(res, queue_full(ctx.config));
        }
        Seat seat{ctx.n_in_flight};
        std::vector<std::shared_ptr<Embedding>> jobs;
        uint64_t n_tokens = 0;
        for (size_t i = 0; i < r.inputs.size(); ++i) {
            n_tokens += r.inputs[i].size();
            std::string why;
            auto job = ctx.model.engine->embed(r.inputs[i], ctx.model.pooling, &why);
            if (!job) return set_error(res, bad_request(fmt::format("input[{}]", i), why));
            jobs.push_back(std::move(job));
        }
        json data = json::array();
        for (size_t i = 0; i < jobs.size(); ++i) {
            while (!jobs[i]->wait(kPollInterval))
                if (ctx.draining.load() && !ctx.model.engine->accepting()) break;
            if (!jobs[i]->wait(std::chrono::milliseconds(0)) || !jobs[i]->error().empty()) {
                ApiError e = bad_request(
                    fmt::format("input[{}]", i),
                    jobs[i]->error().empty() ? "the server is shutting down" : jobs[i]->error());
                e.status = jobs[i]->error().empty() ? 503 : 400;
                return set_error(res, e);
            }
            std::vector<float> v = jobs[i]->vector();
            if (r.dimensions) {
                if (r.dimensions > v.size())
                    return set_error(
                        res, bad_request("dimensions", fmt::format("the model's embeddings have {} "
                                                                   "dimensions",
                                                                   v.size())));
                v.resize(r.dimensions);
            }
            if (r.normalize) {
                double norm = 0;
                for (float x : v) norm += double{x} * x;
                norm = std::sqrt(norm);
                if (norm > 0)
                    for (float& x : v) x = static_cast<float>(x / norm);
            }
            data.push_back({{"object", "embedding"},
                            {"index", i},
                            {"embedding", r.base64 ? json(base64(v)) : json(v)}});
        }
        res.status = 200;
        res.set_content(
            dump({{"object", "list"},
                  {"data", std::move(data)},
                  {"model", ctx.model.name},
                  {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}}),
            "application/json");
    } catch (const std::exception& e) {
        ApiError err;
        err.status = 500;
        err.type = "server_error";
        err.message = fmt::format("internal error: {}", e.what());
        set_error(res, err);
    }
}

}  // namespace headroom::server
