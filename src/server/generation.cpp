#include "server/generation.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "server/anthropic-api.h"
#include "server/prompt.h"
#include "server/responses-api.h"
#include "server/sse.h"

namespace headroom::server {

using json = nlohmann::json;

ApiError queue_full(const ServeConfig& config) {
    ApiError e;
    e.status = 503;
    e.type = "server_error";
    e.code = "queue_full";
    e.message = fmt::format(
        "the server has {} requests waiting or running, the most --max-queued allows: retry "
        "later",
        config.max_queued);
    return e;
}

void set_error(httplib::Response& res, const ApiError& error, Api api) {
    res.status = error.status;
    res.set_content(api == Api::AnthropicMessages ? anthropic_error_body(error) : error_body(error),
                    "application/json");
}

namespace {

struct AnswerShape {
    ToolFormat format = ToolFormat::Generic;
    bool parse_calls = false;
    bool think_open = false;  // the prompt opened a <think> block
    bool may_think = false;   // the answer may start with reasoning (<think> models)
};

// A seat among --max-queued, given back when the last holder lets go.
class Seat {
  public:
    explicit Seat(std::atomic<uint32_t>& n_taken) : n_taken_(n_taken) {}
    ~Seat() { n_taken_.fetch_sub(1); }
    Seat(const Seat&) = delete;
    Seat& operator=(const Seat&) = delete;

  private:
    std::atomic<uint32_t>& n_taken_;
};

// The output side of one submitted request, driven by httplib's content
// provider on the connection's thread. A request of n choices streams them
// interleaved as the engine makes them, each chunk naming its index; the
// response ends when every choice has finished.
class Generation {
  public:
    Generation(const GenerationContext& ctx, const GenerationSpec& spec,
               std::shared_ptr<Request> request, std::unique_ptr<Seat> seat,
               const std::optional<AnswerShape>& shape, std::unique_ptr<Wire> wire)
        : ctx_(ctx),
          stream_(spec.stream),
          ignore_eos_(spec.sampling.ignore_eos),
          stop_token_ids_(spec.sampling.stop_token_ids),
          request_(std::move(request)),
          seat_(std::move(seat)),
          wire_(std::move(wire)) {
        choices_.resize(request_->n_choices());
        if (spec.logprobs)
            for (auto& c : choices_)
                c.logprobs.emplace(spec.endpoint, *ctx.model.tokenizer, spec.top_logprobs);
        if (shape)
            for (auto& c : choices_)
                c.answer.emplace(shape->format, shape->parse_calls, shape->think_open);
    }

    // One call of the content provider. Returns false to end the response
    // without completing it (the client is gone).
    bool provide(httplib::DataSink& sink) {
        try {
            std::string out;
            if (stream_ && !started_) wire_->open(out);
            started_ = true;
            TokenEvent ev;
            if (!request_->next(ev, kPollInterval)) {
                if (!out.empty() && !sink.write(out.data(), out.size())) return client_gone();
                return sink.is_writable() ? true : client_gone();
            }
            do {
                consume(ev, out);
            } while (!all_finished() && request_->next(ev, std::chrono::milliseconds(0)));
            if (stream_) {
                flush_pending(out);
                if (all_finished()) wire_->close(usage(), out);
            } else if (all_finished()) {
                out = dump(final_response());
            }
            if (out.empty()) {
                // Nothing to send yet (not streaming, or text held back for a
                // stop string): make sure someone still waits for it.
                if (!sink.is_writable()) return client_gone();
            } else if (!sink.write(out.data(), out.size())) {
                return client_gone();
            }
            if (all_finished()) sink.done();
            return true;
        } catch (const std::exception&) {
            // Out of memory building JSON: end this response, keep the server.
            return client_gone();
        }
    }

    // httplib dropped the provider: if the output did not reach its end,
    // nobody will read the rest, so stop generating it.
    void release() {
        if (!all_finished()) client_gone();
    }

  private:
    struct Choice {
        std::string text;                      // streaming: not yet sent; else the whole output
        std::optional<AnswerSplitter> answer;  // reasoning and tool calls split off
        std::string reasoning;                 // as text
        std::vector<ToolCall> calls;           // streaming: not yet sent
        size_t n_calls = 0;                    // calls made, sent or not
        std::optional<LogprobsBuilder> logprobs;
        FinishReason finish = FinishReason::None;
        bool finish_sent = false;
    };

    bool all_finished() const { return n_finished_ == choices_.size(); }

    // Streaming merges consecutive events of one choice into one chunk.
    void consume(const TokenEvent& ev, std::string& out) {
        if (ev.index >= choices_.size()) return;
        if (stream_ && pending_ != ev.index) flush_pending(out);
        Choice& c = choices_[ev.index];
        if (ev.token >= 0 && c.logprobs && !ends_generation(ev.token))
            c.logprobs->add(ev.token, ev.logprob, ev.top_logprobs);
        if (c.answer) {
            take(c, c.answer->push(ev.text));
            if (ev.finish != FinishReason::None) take(c, c.answer->finish());
        } else {
            c.text += ev.text;
        }
        pending_ = ev.index;
        if (ev.finish != FinishReason::None && c.finish == FinishReason::None) {
            c.finish = ev.finish;
            ++n_finished_;
            if (stream_) flush_pending(out);
        }
    }

    static void take(Choice& c, AnswerSplitter::Out part) {
        c.reasoning += part.reasoning;
        c.text += part.content;
        c.n_calls += part.calls.size();
        for (auto& call : part.calls) c.calls.push_back(std::move(call));
    }

    void flush_pending(std::string& out) {
        if (pending_ >= choices_.size()) return;
        const uint32_t i = pending_;
        pending_ = kNone;
        Choice& c = choices_[i];
        if (!c.reasoning.empty()) {
            wire_->reasoning(i, c.reasoning, out);
            c.reasoning.clear();
        }
        const bool has_logprobs = c.logprobs && !c.logprobs->empty();
        if (!c.text.empty() || has_logprobs) {
            wire_->content(i, c.text, has_logprobs ? c.logprobs->take() : json(nullptr), out);
            c.text.clear();
        }
        for (size_t k = 0; k < c.calls.size(); ++k)
            wire_->call(i, c.calls[k], c.n_calls - c.calls.size() + k, out);
        c.calls.clear();
        if (c.finish != FinishReason::None && !c.finish_sent) {
            c.finish_sent = true;
            wire_->finish(i, c.finish, c.n_calls > 0, out);
        }
    }

    // The token that ended the output is not part of it: no logprob entry.
    bool ends_generation(int32_t token) const {
        if (!ignore_eos_ && ctx_.model.tokenizer->is_end_of_generation(token)) return true;
        return std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token) !=
               stop_token_ids_.end();
    }

    json final_response() {
        std::vector<ChoiceOutput> out(choices_.size());
        for (size_t i = 0; i < choices_.size(); ++i) {
            out[i].text = std::move(choices_[i].text);
            out[i].reasoning = std::move(choices_[i].reasoning);
            out[i].calls = std::move(choices_[i].calls);
            out[i].finish = choices_[i].finish;
            out[i].logprobs = choices_[i].logprobs ? choices_[i].logprobs->take() : json(nullptr);
        }
        return wire_->whole(std::move(out), usage());
    }

    Usage usage() const {
        return {request_->n_prompt_tokens(), request_->n_output_tokens(),
                request_->n_cached_tokens(), request_->n_kv_blocks_peak(),
                request_->n_kv_blocks_shared_peak()};
    }

    bool client_gone() {
        if (!cancelled_) {
            cancelled_ = true;
            ctx_.model.engine->cancel(request_->id());
            ctx_.counters.n_disconnects.fetch_add(1, std::memory_order_relaxed);
        }
        return false;
    }

    static constexpr uint32_t kNone = ~0u;
    const GenerationContext& ctx_;
    bool stream_;
    bool ignore_eos_;
    std::vector<int32_t> stop_token_ids_;
    std::shared_ptr<Request> request_;
    std::unique_ptr<Seat> seat_;
    std::unique_ptr<Wire> wire_;
    std::vector<Choice> choices_;
    size_t n_finished_ = 0;
    uint32_t pending_ = kNone;  // streaming: the choice with text not yet sent
    bool started_ = false;
    bool cancelled_ = false;
};

// The grammar of a request: its response_format or structured output, or
// the tool grammar of its tool_choice. Compile errors are the client's: 400.
// A model that reasons first gets the grammar after its reasoning.
std::optional<ApiError> compile_grammar(const GenerationSpec& spec, ToolFormat format,
                                        const std::optional<AnswerShape>& shape,
                                        const GenerationContext& ctx,
                                        std::shared_ptr<const CompiledGrammar>& out) {
    std::optional<GrammarSpec> g = spec.grammar;
    std::string param = spec.grammar_param;
    if (!g) {
        g = tool_grammar(format, spec.tools, spec.tool_choice, spec.parallel_tool_calls);
        param = "tools";
    }
    if (!g) return std::nullopt;
    if (shape && shape->may_think && format != ToolFormat::Harmony) {
        // The schema's own checks first: wrapped, it is a structural tag.
        if (g->kind == GrammarSpec::Kind::JsonSchema) {
            const auto schema = nlohmann::json::parse(g->text, nullptr, false);
            if (schema.is_discarded()) return bad_request(param, "the schema is not valid JSON");
            if (auto why = unsupported_schema_keyword(schema); !why.empty())
                return bad_request(param, why);
        }
        g = after_reasoning(*g, shape->think_open);
    }
    if (!ctx.model.grammars)
        return bad_request(param,
                           "constrained decoding is off on this server (serve --grammar-cache 0)");
    std::string why;
    out = ctx.model.grammars->compile(*g, &why);
    if (!out) return bad_request(param, why);
    return std::nullopt;
}

// Whether and how a chat answer is split into reasoning, content and calls.
std::optional<AnswerShape> answer_shape(const GenerationSpec& spec, ToolFormat format,
                                        const ChatTemplate& tmpl, const Tokenizer& tokenizer,
                                        const std::vector<int32_t>& prompt) {
    if (spec.endpoint != Endpoint::Chat) return std::nullopt;
    const bool calls = spec.tool_choice.mode != ToolChoiceMode::None;
    const bool think = tmpl.text().find("<think>") != std::string::npos ||
                       tmpl.text().find("</think>") != std::string::npos;
    if (!calls && !think && format != ToolFormat::Harmony) return std::nullopt;
    // Did the template open a <think> block at the end of the prompt?
    const size_t tail = std::min<size_t>(prompt.size(), 32);
    const std::string end = tokenizer.decode(
        std::span<const int32_t>(prompt.data() + prompt.size() - tail, tail), true);
    const size_t last = end.find_last_not_of(" \n");
    const std::string trimmed = last == std::string::npos ? "" : end.substr(0, last + 1);
    const bool think_open = trimmed.ends_with("<think>");
    // A prompt that closed the block (enable_thinking false) asks for no reasoning.
    const bool may_think = think && !trimmed.ends_with("</think>");
    return AnswerShape{format, calls, think_open, may_think};
}

ApiError shutting_down() {
    ApiError e;
    e.status = 503;
    e.type = "server_error";
    e.code = "shutting_down";
    e.message = "the server is shutting down";
    return e;
}

// The request in the form every API shares, and what its wire needs.
std::optional<ApiError> parse_request(Api api, const std::string& body, GenerationSpec& spec,
                                      json& echo) {
    switch (api) {
        case Api::ChatCompletions:
            return parse_generation_request(body, Endpoint::Chat, spec);
        case Api::Completions:
            return parse_generation_request(body, Endpoint::Completion, spec);
        case Api::Responses:
            return parse_responses_request(body, spec, echo);
        case Api::AnthropicMessages:
            return parse_anthropic_request(body, spec);
    }
    return std::nullopt;
}

std::unique_ptr<Wire> make_wire(Api api, const GenerationSpec& spec, const Truncation& truncation,
                                const std::string& model, json echo, uint32_t n_prompt) {
    if (api == Api::Responses) return responses_wire(model, std::move(echo));
    if (api == Api::AnthropicMessages) return anthropic_wire(model, n_prompt);
    ResponseMeta meta;
    meta.endpoint = spec.endpoint;
    meta.id = new_response_id(spec.endpoint);
    meta.created_s = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    meta.model = model;
    return openai_wire(meta, truncation, spec.include_usage, spec.choices.n);
}

void handle(Api api, const std::string& body, const GenerationContext& ctx,
            httplib::Response& res) {
    auto fail = [&](const ApiError& e) { set_error(res, e, api); };
    GenerationSpec spec;
    json echo;
    if (auto e = parse_request(api, body, spec, echo)) return fail(*e);
    if (!spec.model.empty() && spec.model != ctx.model.name)
        return fail(model_not_found(spec.model, ctx.model.name));
    // A draining server still takes what arrives until it closes its socket:
    // routers see /health fail and stop sending; what they sent meanwhile
    // finishes instead of failing.

    // Take a seat before the costly part (template, tokenizer) so an
    // overloaded server refuses cheaply.
    if (ctx.n_in_flight.fetch_add(1) >= ctx.config.max_queued) {
        ctx.n_in_flight.fetch_sub(1);
        res.set_header("Retry-After", std::to_string(ctx.config.retry_after_s));
        return fail(queue_full(ctx.config));
    }
    auto seat = std::make_unique<Seat>(ctx.n_in_flight);

    PromptLimits limits;
    limits.max_model_len = ctx.model.max_model_len;
    limits.max_tokens = spec.max_tokens;
    limits.truncate_prompt_tokens = spec.truncate_prompt_tokens;
    limits.truncate_history = ctx.config.truncate_history;
    Prompt prompt;
    if (auto e = build_prompt(spec, *ctx.model.chat_template, *ctx.model.tokenizer, limits, prompt))
        return fail(*e);

    const ToolFormat format = detect_tool_format(ctx.model.chat_template->text());
    const std::optional<AnswerShape> shape =
        answer_shape(spec, format, *ctx.model.chat_template, *ctx.model.tokenizer, prompt.tokens);
    std::shared_ptr<const CompiledGrammar> grammar;
    if (auto e = compile_grammar(spec, format, shape, ctx, grammar)) return fail(*e);

    const auto n_prompt = static_cast<uint32_t>(prompt.tokens.size());
    spec.sampling.max_tokens = spec.max_tokens.value_or(ctx.model.max_model_len - n_prompt);
    GenerateRequest request;
    request.prompt = std::move(prompt.tokens);
    request.params = spec.sampling;
    request.choices = spec.choices;
    request.grammar = std::move(grammar);
    // Harmony's channels are control tokens: the splitter reads them.
    request.render_special = shape && format == ToolFormat::Harmony;
    std::string why;
    auto submitted = ctx.model.engine->submit(std::move(request), &why);
    if (!submitted) {
        if (!ctx.model.engine->accepting()) return fail(shutting_down());
        return fail(bad_request(spec.endpoint == Endpoint::Chat ? "messages" : "prompt", why));
    }

    if (prompt.truncation.happened())
        res.set_header("X-Headroom-Dropped-Prompt-Tokens",
                       std::to_string(prompt.truncation.n_dropped_tokens));
    auto wire = make_wire(api, spec, prompt.truncation, ctx.model.name, std::move(echo), n_prompt);
    auto gen = std::make_shared<Generation>(ctx, spec, std::move(submitted), std::move(seat), shape,
                                            std::move(wire));
    if (spec.stream) res.set_header("Cache-Control", "no-cache");
    res.status = 200;
    res.set_chunked_content_provider(
        spec.stream ? "text/event-stream" : "application/json",
        [gen](size_t, httplib::DataSink& sink) { return gen->provide(sink); },
        [gen](bool) { gen->release(); });
}

}  // namespace

void handle_generation(Api api, const std::string& body, const GenerationContext& ctx,
                       httplib::Response& res) {
    try {
        handle(api, body, ctx, res);
    } catch (const std::exception& e) {
        ApiError err;
        err.status = 500;
        err.type = api == Api::AnthropicMessages ? "api_error" : "server_error";
        err.message = fmt::format("internal error: {}", e.what());
        set_error(res, err, api);
    }
}

}  // namespace headroom::server
