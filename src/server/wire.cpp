#include "server/wire.h"

#include "server/sse.h"

namespace headroom::server {

using json = nlohmann::json;

namespace {

class OpenAiWire final : public Wire {
  public:
    OpenAiWire(const ResponseMeta& meta, const Truncation& truncation, bool include_usage,
               uint32_t n_choices)
        : meta_(meta),
          truncation_(truncation),
          include_usage_(include_usage),
          n_choices_(n_choices) {}

    // A chat stream opens with the assistant's role at once, as OpenAI's does.
    void open(std::string& out) override {
        if (meta_.endpoint != Endpoint::Chat) return;
        for (uint32_t i = 0; i < n_choices_; ++i)
            append(chunk_response(meta_, i, "", true, FinishReason::None, nullptr), out);
    }

    void reasoning(uint32_t choice, const std::string& text, std::string& out) override {
        append(reasoning_chunk(meta_, choice, text), out);
    }

    void content(uint32_t choice, const std::string& text, json logprobs,
                 std::string& out) override {
        append(chunk_response(meta_, choice, text, false, FinishReason::None, std::move(logprobs)),
               out);
    }

    // As OpenAI streams a call: its id, type and name, then its arguments.
    void call(uint32_t choice, const ToolCall& call, size_t index, std::string& out) override {
        ToolCall head = call;
        head.arguments.clear();
        append(tool_calls_chunk(meta_, choice, {head}, index), out);
        json args = tool_calls_chunk(meta_, choice, {call}, index);
        json& delta = args["choices"][0]["delta"]["tool_calls"][0];
        delta.erase("id");
        delta.erase("type");
        delta["function"].erase("name");
        append(std::move(args), out);
    }

    void finish(uint32_t choice, FinishReason reason, bool called, std::string& out) override {
        json chunk = chunk_response(meta_, choice, "", false, reason, nullptr);
        if (called && reason == FinishReason::Stop)
            chunk["choices"][0]["finish_reason"] = "tool_calls";
        append(std::move(chunk), out);
    }

    void close(const Usage& usage, std::string& out) override {
        if (include_usage_) append_sse_event(out, dump(usage_chunk(meta_, usage)));
        out += kSseDone;
    }

    json whole(std::vector<ChoiceOutput> choices, const Usage& usage) override {
        return completion_response(meta_, std::move(choices), usage, truncation_);
    }

  private:
    // The first chunk of a stream also says how the prompt was truncated.
    void append(json chunk, std::string& out) {
        if (!sent_chunk_ && truncation_.happened())
            chunk["prompt_truncation"] = truncation_json(truncation_);
        sent_chunk_ = true;
        append_sse_event(out, dump(chunk));
    }

    ResponseMeta meta_;
    Truncation truncation_;
    bool include_usage_;
    uint32_t n_choices_;
    bool sent_chunk_ = false;
};

}  // namespace

std::unique_ptr<Wire> openai_wire(const ResponseMeta& meta, const Truncation& truncation,
                                  bool include_usage, uint32_t n_choices) {
    return std::make_unique<OpenAiWire>(meta, truncation, include_usage, n_choices);
}

}  // namespace headroom::server
