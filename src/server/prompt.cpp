#include "server/prompt.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace headroom::server {

namespace {

// Most prompt tokens that leave room for max_tokens (or one token).
uint32_t fit_limit(const PromptLimits& l) {
    const uint64_t reserve = l.max_tokens.value_or(1);
    return reserve >= l.max_model_len ? 0 : l.max_model_len - static_cast<uint32_t>(reserve);
}

// Where truncation aims: room for max_tokens, or for a reply of
// min(256, max_model_len / 4) tokens; at most truncate_prompt_tokens.
uint32_t truncation_target(const PromptLimits& l) {
    const uint64_t reserve =
        l.max_tokens ? *l.max_tokens : std::clamp<uint32_t>(l.max_model_len / 4, 1, 256);
    uint32_t target =
        reserve >= l.max_model_len ? 0 : l.max_model_len - static_cast<uint32_t>(reserve);
    if (l.truncate_prompt_tokens) target = std::min(target, *l.truncate_prompt_tokens);
    return target;
}

bool truncation_on(const PromptLimits& l) {
    return l.truncate_history || l.truncate_prompt_tokens.has_value();
}

bool needs_truncation(size_t n_tokens, const PromptLimits& l) {
    return n_tokens > fit_limit(l) ||
           (l.truncate_prompt_tokens && n_tokens > *l.truncate_prompt_tokens);
}

ApiError too_long(const GenerationSpec& spec, size_t n_prompt, const PromptLimits& l,
                  bool tried_truncation) {
    ApiError e;
    e.param = spec.endpoint == Endpoint::Chat ? "messages" : "prompt";
    e.code = "context_length_exceeded";
    const std::string how =
        tried_truncation
            ? "it does not fit even with only the system messages and the last turn"
            : "shorten it, or let the server drop the oldest turns with the request field "
              "truncate_prompt_tokens or the server flag --truncate-history";
    if (l.max_tokens)
        e.message = fmt::format(
            "the request needs {} tokens ({} in the prompt + max_tokens {}) but max_model_len is "
            "{}: {}",
            n_prompt + *l.max_tokens, n_prompt, *l.max_tokens, l.max_model_len, how);
    else
        e.message = fmt::format(
            "the prompt has {} tokens but max_model_len is {}, which leaves no room for a "
            "completion: {}",
            n_prompt, l.max_model_len, how);
    return e;
}

// Indices where each droppable turn starts: a turn is a user message and
// the non-system messages after it; system messages are never dropped.
std::vector<size_t> turn_starts(const std::vector<ChatMessage>& messages) {
    std::vector<size_t> starts;
    for (size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].role == "system") continue;
        if (starts.empty() || messages[i].role == "user") starts.push_back(i);
    }
    return starts;
}

class ChatRenderer {
  public:
    ChatRenderer(const GenerationSpec& spec, const ChatTemplate& tmpl, const Tokenizer& tokenizer)
        : messages_(spec.messages),
          tmpl_(tmpl),
          tokenizer_(tokenizer),
          starts_(turn_starts(spec.messages)),
          format_(detect_tool_format(tmpl.text())) {
        options_.add_generation_prompt = true;
        options_.extra_context = spec.template_kwargs;
        // tool_choice "none" leaves the tools out of the prompt, as vLLM does.
        if (spec.tool_choice.mode != ToolChoiceMode::None) tools_ = spec.tools;
        if (!tools_.empty() && format_ != ToolFormat::Generic)
            options_.extra_context["tools"] = tools_json(tools_);
    }

    size_t n_droppable() const { return starts_.empty() ? 0 : starts_.size() - 1; }

    // Renders the conversation without its first `n_turns` turns. Throws
    // headroom::Error for a template error.
    std::vector<int32_t> render(size_t n_turns, uint32_t* n_messages_dropped) const {
        std::vector<ChatMessage> kept;
        const size_t cut = n_turns == 0 ? 0 : starts_[n_turns];
        uint32_t n_dropped = 0;
        for (size_t i = 0; i < messages_.size(); ++i) {
            if (i < cut && messages_[i].role != "system") {
                ++n_dropped;
                continue;
            }
            kept.push_back(messages_[i]);
        }
        if (n_messages_dropped) *n_messages_dropped = n_dropped;
        kept = messages_for_template(format_, std::move(kept), tools_);
        return tokenizer_.encode(tmpl_.apply(kept, options_), false, true);
    }

  private:
    const std::vector<ChatMessage>& messages_;
    const ChatTemplate& tmpl_;
    const Tokenizer& tokenizer_;
    std::vector<size_t> starts_;
    ToolFormat format_;
    std::vector<Tool> tools_;
    ChatTemplateOptions options_;
};

std::optional<ApiError> build_chat(const GenerationSpec& spec, const ChatTemplate& tmpl,
                                   const Tokenizer& tokenizer, const PromptLimits& l, Prompt& out) {
    const ChatRenderer renderer(spec, tmpl, tokenizer);
    try {
        out.tokens = renderer.render(0, nullptr);
        if (!needs_truncation(out.tokens.size(), l) || !truncation_on(l) ||
            renderer.n_droppable() == 0)
            return std::nullopt;
        const size_t n_full = out.tokens.size();
        const uint32_t target = truncation_target(l);
        // Fewest dropped turns that reach the target; dropping more never
        // lengthens the prompt, so bisect.
        size_t lo = 1, hi = renderer.n_droppable();
        while (lo < hi) {
            const size_t mid = lo + (hi - lo) / 2;
            if (renderer.render(mid, nullptr).size() <= target)
                hi = mid;
            else
                lo = mid + 1;
        }
        out.tokens = renderer.render(lo, &out.truncation.n_dropped_messages);
        out.truncation.n_dropped_tokens =
            n_full > out.tokens.size() ? static_cast<uint32_t>(n_full - out.tokens.size()) : 0;
    } catch (const Error& e) {
        return bad_request("messages", fmt::format("the chat template failed: {}", e.what()));
    }
    return std::nullopt;
}

void truncate_tokens(std::vector<int32_t>& tokens, uint32_t target, int32_t bos,
                     Truncation& truncation) {
    if (tokens.size() <= target) return;
    // Keep a leading BOS: the model has only seen text after one.
    const size_t n_head = bos >= 0 && !tokens.empty() && tokens[0] == bos && target > 1 ? 1 : 0;
    const size_t n_drop = tokens.size() - target;
    tokens.erase(tokens.begin() + static_cast<ptrdiff_t>(n_head),
                 tokens.begin() + static_cast<ptrdiff_t>(n_head + n_drop));
    truncation.n_dropped_tokens = static_cast<uint32_t>(n_drop);
}

}  // namespace

std::optional<ApiError> build_prompt(const GenerationSpec& spec, const ChatTemplate& tmpl,
                                     const Tokenizer& tokenizer, const PromptLimits& l,
                                     Prompt& out) {
    if (l.max_tokens && *l.max_tokens >= l.max_model_len) {
        ApiError e = bad_request("max_tokens",
                                 fmt::format("{} leaves no room for a prompt: max_model_len is {}",
                                             *l.max_tokens, l.max_model_len));
        e.code = "context_length_exceeded";
        return e;
    }
    if (spec.endpoint == Endpoint::Chat) {
        if (auto e = build_chat(spec, tmpl, tokenizer, l, out)) return e;
    } else {
        out.tokens =
            spec.prompt_is_ids ? spec.prompt_ids : tokenizer.encode(spec.prompt_text, true, true);
        if (truncation_on(l) && needs_truncation(out.tokens.size(), l))
            truncate_tokens(out.tokens, truncation_target(l), tokenizer.bos_id(), out.truncation);
    }
    if (out.tokens.empty())
        return bad_request(spec.endpoint == Endpoint::Chat ? "messages" : "prompt",
                           "the prompt is empty: at least one token is needed");
    if (out.tokens.size() > fit_limit(l))
        return too_long(spec, out.tokens.size(), l, truncation_on(l));
    return std::nullopt;
}

}  // namespace headroom::server
